"""Pass: place ``__syncthreads()`` between tile-level statements that hand shared memory between threads.

Tile ops are block-cooperative: after ``T.copy(A[...], A_s)`` any thread may read any element of ``A_s``, so a
barrier must separate it from the ``T.gemm`` that reads ``A_s`` (read-after-write), and the next iteration's copy
from that gemm (write-after-read). This pass runs on the tile-level program (before the ops are lowered), walks it
in order keeping the shared tiles read and written since the last barrier, and inserts one exactly where a
statement would conflict with them. Loops are walked to a fixed point so a conflict between the end of one
iteration and the start of the next gets its barrier too. Asynchronous producer copies of a software-pipelined
loop are left out: ``tl.PipelineCUDA`` already placed their waits and barriers. TVM's own ``ThreadSync`` pass is
not used: it cannot see through the pointers our gemm and copy templates take.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language.loops import PARALLEL_ATTR
from ..common.rewriter import const_int, tile_op_name
from .common import is_shared, is_sync, loads_in, sync_stmt

_State = tuple[frozenset, frozenset]  # (written, read) since the last barrier, as buffer handles
_EMPTY: _State = (frozenset(), frozenset())


def _key(buf: Any) -> Any:
    return buf  # buffer Vars hash and compare by identity


# device functions that only read the shared memory they are handed (a pointer is otherwise assumed written too):
# the k-steps of tl.DequantFragmentsCUDA's gemm read A in turn, with no barrier between them
READ_ONLY_TEMPLATES = ("tl::gemm_rb_step<",)


def _accesses(s: Any) -> tuple[set[Any], set[Any]]:
    """(reads, writes) of shared buffers by a leaf statement (a tile op, a T.Parallel nest, a store ...)."""
    reads: set[Any] = set()
    writes: set[Any] = set()
    if _call_name(s).startswith(READ_ONLY_TEMPLATES):
        return {ld.source for ld in loads_in(s) if is_shared(ld.source)}, set()

    def tile(ev: Any) -> Any:
        name = tile_op_name(ev)
        if name is None:
            return ev
        args = list(ev.value.args)
        regions = [a.source for a in args if isinstance(a, tvm.ir.TensorRegion)]
        if name == "tl.copy":
            if len(args) > 2 and const_int(args[2]) == 1:
                return ev  # pipelined producer: ordered by tl.PipelineCUDA
            reads.add(args[0].source)
            writes.add(args[1].source)
        elif name in ("tl.fill",):
            writes.add(regions[0])
        elif name == "tl.gemm":
            reads.update(regions[:2])
            reads.add(regions[2])
            writes.add(regions[2])
        elif name == "tl.reduce":
            reads.add(regions[0])
            writes.add(regions[1])
            reads.add(regions[1])
        elif name == "tl.atomic_add":
            writes.add(regions[0])
            reads.update(regions)
        else:
            reads.update(regions)
        return ev

    def store(st: Any) -> Any:
        writes.add(st.buffer)
        return st

    def call(c: Any) -> Any:
        # a pointer handed to a device function: assume it is read and written
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) == "tirx.address_of":
            ld = c.args[0]
            reads.add(ld.source)
            writes.add(ld.source)
        return c

    if _is_pipeline_call(s):
        return set(), set()
    tvm_ffi.structural_map(s, [(tirx.Evaluate, tile), (tirx.BufferStore, store), (tvm.ir.Call, call)])
    reads.update(ld.source for ld in loads_in(s))
    return {b for b in reads if is_shared(b)}, {b for b in writes if is_shared(b)}


def _call_name(s: Any) -> str:
    """The device function an ``Evaluate(call_extern(...))`` calls ("" for any other statement)."""
    if not isinstance(s, tirx.Evaluate) or not isinstance(s.value, tvm.ir.Call) or not s.value.args:
        return ""
    name = s.value.args[0]
    return str(name.value) if isinstance(name, tvm.ir.StringImm) else ""


def _is_pipeline_call(s: Any) -> bool:
    """``tl::pipe_*`` template calls of a fused pipelined mainloop, and the TMA pipeline's mbarrier and TMA calls
    (sm90/tma.py), carry their own waits and barriers."""
    if not isinstance(s, tirx.Evaluate) or not isinstance(s.value, tvm.ir.Call) or not s.value.args:
        return False
    name = s.value.args[0]
    return isinstance(name, tvm.ir.StringImm) and str(name.value).startswith(
        ("tl::pipe_", "tl::mbar_", "tl::tma_", "tl::fence_proxy_async"))


def _union(a: _State, b: _State) -> _State:
    return (a[0] | b[0], a[1] | b[1])


def _proc(s: Any, st: _State) -> tuple[Any, _State]:
    if is_sync(s):
        return s, _EMPTY
    if isinstance(s, tirx.SeqStmt):
        out = []
        for x in s.seq:
            y, st = _proc(x, st)
            out.append(y)
        return tirx.SeqStmt(out, span=s.span), st
    if isinstance(s, tirx.For) and PARALLEL_ATTR not in s.annotations:
        if s.kind == tirx.ForKind.THREAD_BINDING:
            body, end = _proc(s.body, st)
        else:
            # a conflict with what came before the loop gets one barrier before it, not one per iteration
            reads, writes = _accesses(s.body)
            if (reads & st[0]) or (writes & (st[0] | st[1])):
                body, end = _proc(tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding,
                                           s.annotations, s.step, s.span), _EMPTY)
                return tirx.SeqStmt([sync_stmt(), body]), end
            entry = st
            for _ in range(4):
                _, end = _proc(s.body, entry)
                new_entry = _union(st, end)
                if new_entry == entry:
                    break
                entry = new_entry
            body, end = _proc(s.body, entry)
            end = _union(st, end)
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations, s.step,
                        s.span), end
    if isinstance(s, tirx.While):
        body, end = _proc(s.body, _union(st, _proc(s.body, st)[1]))
        return tirx.While(s.condition, body, span=s.span), _union(st, end)
    if isinstance(s, tirx.AttrStmt):
        body, end = _proc(s.body, st)
        return tirx.AttrStmt(s.node, s.attr_key, s.value, body, span=s.span), end
    if isinstance(s, tirx.IfThenElse):
        cond_reads = {ld.source for ld in loads_in(s.condition) if is_shared(ld.source)}
        pre = []
        if cond_reads & st[0]:
            pre, st = [sync_stmt()], _EMPTY
        st = (st[0], st[1] | frozenset(cond_reads))
        then, st1 = _proc(s.then_case, st)
        if s.else_case is not None:
            els, st2 = _proc(s.else_case, st)
        else:
            els, st2 = None, st
        out = tirx.IfThenElse(s.condition, then, els, span=s.span)
        return (tirx.SeqStmt([*pre, out]) if pre else out), _union(st1, st2)
    if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
        return s, st
    reads, writes = _accesses(s)
    w, r = st
    if (reads & w) or (writes & (r | w)):
        return tirx.SeqStmt([sync_stmt(), s]), (frozenset(writes), frozenset(reads))
    return s, (w | frozenset(writes), r | frozenset(reads))


def insert_syncs_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body, _ = _proc(func.body, _EMPTY)
    return func.with_body(body)

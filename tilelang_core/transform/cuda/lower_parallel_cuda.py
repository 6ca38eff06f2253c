"""Pass: lower ``T.Parallel`` nests to per-thread code on CUDA, then retire the fragment buffers.

A nest that touches a distributed fragment becomes a loop over the registers the fragment's layout gives this
thread: register ``r`` stands for element ``coords(threadIdx.x, r)``, so ``C[i, j] = max(C[i, j], 0)`` on an mma
accumulator is a handful of register operations, with no communication. Other fragments in the nest share that
layout (the layout pass made sure); replicated fragments are read from the thread's full copy. A nest that only
writes per-thread tiles runs whole in every thread, except that a nest updating a reducer (``T.alloc_reducer``)
gives each iteration to one thread, which combines into its replica (``reducers_cuda.py``). A nest over global or
shared memory alone is split over the threads in coalesced chunks of 16 bytes of its narrowest global tensor (the
``blocked`` layout of its iteration domain).

Global accesses are bounds-checked where a ragged shape can push them out of the tensor (loads give 0, stores are
skipped). When the whole nest provably stays inside, or a run-time check on the block says so, the nest takes an
unguarded path whose contiguous, aligned accesses are vectorised (``float4`` loads and stores), one chunk at a
time. A chunk is sized for the narrowest tensor, so it can span more than 16 bytes of a wider type (8 lanes of an
fp16 GEMV with an fp32 accumulator: 16 bytes of ``A``, 32 of ``acc`` and of the fp32 products). Such a chunk is
computed in vectors of at most 16 bytes of the widest type the body computes with (two ``float4`` halves), and
each narrower global or shared operand is moved in accesses of up to 16 bytes through a small register array
(``A`` loaded as one ``uint4`` before the halves; a narrow output stored as one after them). Where the tensors'
alignment does not allow the chunk's width, the widest power of two that it allows is used (element-wise code
where there is none). A nest over packed data — a load at ``j // c`` of its last dimension, as int4 weights two to
a byte, possibly with loads that are the same in every lane (a per-row scale) — is not vectorised by TVM (its
gathers of 8-bit lanes do not print as valid CUDA) but computed lane by lane from staged words: one 32-bit load of
4 packed bytes per 8 lanes, one 16-byte store of the 8 results (``packed_chunk``), where the element-wise code
loaded each byte twice and stored 2 bytes at a time (issue 17; docs/cuda.md). A scalar temporary of the body
(``t = (x[i, j] - mean[i]) * rstd[i]``) belongs to one iteration: in a vectorised chunk it gets one slot per lane,
since TVM's vectoriser would otherwise share one scalar among the lanes (every lane would read the last lane's
value).

Finally every remaining access to a replicated fragment becomes an access to its register array, ``T.alloc_var``
scalars become one-element register arrays, and the fragment allocations are dropped.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ...language.loops import PARALLEL_ATTR
from ..common.regions import in_bounds_conds, is_global
from ..common.rewriter import Rewriter, and_all, const_int, first_span, make_for, new_var, seq, with_span
from .common import (
    find_thread_var,
    is_fragment,
    is_shared,
    layouts_of,
    loads_in,
    locals_of,
    parallel_nest,
    substitute,
    thread_count,
)
from .layouts import FragmentLayout, dtype_bytes, flat_index
from .reducers_cuda import reducers_of

ForKind = tirx.ForKind
MAX_PY_UNROLL = 128


def _stores_in(node: Any) -> list[Any]:
    out: list[Any] = []

    def rec(s: Any) -> Any:
        out.append(s)
        return s

    tvm_ffi.structural_map(node, [(tirx.BufferStore, rec)])
    return out


def _has_calls(node: Any) -> bool:
    found = []

    def rec(c: Any) -> Any:
        if not (isinstance(c.op, tvm.ir.Op) and str(c.op.name) in ("tirx.if_then_else",)):
            found.append(c)
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, rec)])
    return bool(found)


PURE_OPS = {"tirx.if_then_else", "prim.if_then_else", "tirx.shift_left", "tirx.shift_right", "tirx.bitwise_and",
            "tirx.bitwise_or", "tirx.bitwise_xor", "tirx.bitwise_not", "tirx.reinterpret", "tirx.exp", "tirx.exp2",
            "tirx.log", "tirx.sqrt", "tirx.rsqrt", "tirx.fabs", "tirx.floor", "tirx.ceil", "tirx.round", "tirx.pow",
            "tirx.fma", "tirx.tanh", "tirx.sigmoid", "tirx.isnan", "tirx.call_pure_extern"}


def _impure_calls(node: Any) -> bool:
    """``node`` calls something other than a pure operator (a device function that may touch memory)."""
    found = []

    def rec(c: Any) -> Any:
        if not (isinstance(c.op, tvm.ir.Op) and str(c.op.name) in PURE_OPS):
            found.append(c)
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, rec)])
    return bool(found)


def _value_bytes(node: Any) -> int:
    """Bytes of the widest scalar type ``node`` loads, stores or computes with, index arithmetic left out: the
    lane type of the vectors a vectorised loop over it builds."""
    widest = 1

    def opaque(ld: Any) -> Any:  # a load's indices are addresses, not lane values
        return tvm.ir.Var("lane", dtype_of(ld))

    def value_only(st: Any) -> Any:
        return tirx.Evaluate(st.value)

    def note(e: Any) -> Any:
        nonlocal widest
        dt = dtype_of(e)
        if dt and dt != "handle":
            widest = max(widest, dtype_bytes(dt))
        return e

    flat = tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, opaque), (tirx.BufferStore, value_only)])
    tvm_ffi.structural_map(flat, [(tvm.ir.Expr, note)])
    return widest


def _free_vars(e: Any) -> list[Any]:
    out: list[Any] = []

    def rec(v: Any) -> Any:
        out.append(v)
        return v

    tvm_ffi.structural_map(e, [(tvm.ir.Var, rec)])
    return out


def _defined_in(node: Any) -> list[Any]:
    """Variables bound inside ``node`` (inner loops, ``Bind``)."""
    out: list[Any] = []

    def loop(s: Any) -> Any:
        out.append(s.loop_var)
        return s

    def bind(s: Any) -> Any:
        out.append(s.var)
        return s

    tvm_ffi.structural_map(node, [(tirx.For, loop), (tirx.Bind, bind)])
    return out


def _let_values(node: Any) -> list[tuple[Any, Any]]:
    """The scalar temporaries of ``node`` with their values, in order: a ``Bind`` (var, value) or a one-element
    local buffer allocated in ``node`` and stored once (buffer, value: what ``buf[0]`` reads). A temporary written
    twice, or whose value reads memory other than earlier temporaries, is left out."""
    binds: list[Any] = []
    allocated = _allocated_in(node)

    def bind(s: Any) -> Any:
        binds.append(s)
        return s

    tvm_ffi.structural_map(node, [(tirx.Bind, bind), (tirx.BufferStore, bind)])
    out: list[tuple[Any, Any]] = []
    seen: list[Any] = []
    for b in binds:
        if isinstance(b, tirx.Bind):
            key = b.var
        elif _contains(allocated, b.buffer) and len(b.buffer.shape) == 1 and const_int(b.buffer.shape[0]) == 1:
            key = b.buffer
        else:
            continue
        if any(key.same_as(v) for v in seen):
            out = [(k, v) for k, v in out if not k.same_as(key)]
            continue
        seen.append(key)
        value = _inline_lets(b.value, out)
        if any(not any(ld.source.same_as(k) for k, _ in out) for ld in loads_in(value)):
            continue
        out.append((key, value))
    return out


def _inline_lets(e: Any, lets: list[tuple[Any, Any]]) -> Any:
    """``e`` with the temporaries of :func:`_let_values` replaced by their values."""
    if not lets:
        return e
    vmap = {k: v for k, v in lets if not tirx.is_buffer_var(k)}
    bufs = [(k, v) for k, v in lets if tirx.is_buffer_var(k)]

    def load(ld: Any) -> Any:
        for k, v in bufs:
            if ld.source.same_as(k):
                return v
        return ld

    if bufs:
        e = tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])
    return substitute(e, vmap) if vmap else e


def _contains(bufs: list[Any], buf: Any) -> bool:
    return any(b.same_as(buf) for b in bufs)


def _allocated_in(node: Any) -> list[Any]:
    """Buffers allocated inside ``node``."""
    out: list[Any] = []

    def rec(s: Any) -> Any:
        out.append(s.buffer)
        return s

    tvm_ffi.structural_map(node, [(tirx.AllocBuffer, rec)])
    return out


def _lane_private(body: Any, lane: Any, lanes: int) -> tuple[Any, list[Any]] | None:
    """Give every buffer allocated inside ``body`` (a scalar temporary ``t = ...`` of the T.Parallel body) one slot
    per lane of the vectorised loop over ``lane`` (``lanes`` lanes); returns the new body and the allocations of
    the lane arrays, which go before the loop. None when some such buffer has a shape that is not constant.

    Why: TVM's ``VectorizeLoop`` keeps a buffer allocated inside a vectorised loop as one buffer shared by all
    lanes (it hoists the allocation unchanged): the store ``t[0] = v`` becomes a scatter of every lane's value to
    the same address, and the read ``t[0]`` a broadcast of whichever lane landed last. Each iteration of a
    T.Parallel body owns its temporaries, so each lane needs its own copy: element ``f`` of lane ``l`` lives at
    ``f * lanes + l``, a contiguous vector access for a constant ``f``."""
    remap: dict[Any, tuple[Any, tuple[int, ...]]] = {}
    for buf in _allocated_in(body):
        if buf in remap:
            continue
        shape = [const_int(x) for x in buf.shape]
        if None in shape:
            return None
        size = 1
        for e in shape:
            size *= e
        arr = tirx.decl_buffer((size * lanes,), str(buf.dtype), buf.name, scope="local")
        remap[buf] = (arr, tuple(shape))
    if not remap:
        return body, []

    def at(buf: Any, idx: list[Any]) -> tuple[Any, list[Any]] | None:
        hit = remap.get(buf)
        if hit is None:
            return None
        arr, shape = hit
        return arr, [flat_index(idx, shape) * lanes + lane]

    def load(ld: Any) -> Any:
        r = at(ld.source, list(ld.indices))
        return ld if r is None else tirx.BufferLoad(r[0], r[1])

    def store(st: Any) -> Any:
        r = at(st.buffer, list(st.indices))
        return st if r is None else tirx.BufferStore(r[0], st.value, r[1], span=st.span)

    def alloc(s: Any) -> Any:
        return tirx.Evaluate(tirx.IntImm("int32", 0)) if s.buffer in remap else s

    body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                         (tirx.AllocBuffer, alloc)])
    return body, [tirx.AllocBuffer(arr) for arr, _ in remap.values()]


class LowerParallelCUDA(Rewriter):
    pass_name = "tl.LowerParallelCUDA"

    def __init__(self, func: tirx.PrimFunc) -> None:
        super().__init__()
        self.tid = find_thread_var(func)
        self.threads = thread_count(func)
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.reducers = reducers_of(func)  # T.alloc_reducer buffers -> op
        self.bind_loop(self.tid, tirx.IntImm("int32", 0), tirx.IntImm("int32", self.threads))

    # -- fragment access rewriting --------------------------------------------------------------------------
    def map_fragments(self, body: Any, vs: list[Any], reg: Any, nest: FragmentLayout | None = None) -> Any:
        """Distributed fragment accesses at the nest's own indices -> register ``reg``; row values of an ``mma``
        nest (``m[i]`` with the ``mma_row`` layout of the nest) -> the thread's register for that row; replicated
        fragments -> the thread's full copy."""

        def is_identity(idx: list[Any]) -> bool:
            return len(idx) == len(vs) and all(i.same_as(v) for i, v in zip(idx, vs))

        def load(ld: Any) -> Any:
            buf = ld.source
            if not is_fragment(buf):
                return ld
            lay = self.layouts[buf]
            idx = list(ld.indices)
            if (lay.kind in ("mma_row", "wgmma_row") and nest is not None and nest.row_kind == lay.kind
                    and isinstance(reg, int)
                    and len(vs) == 2 and len(idx) == 1 and idx[0].same_as(vs[0]) and nest.row_layout() == lay):
                return tirx.BufferLoad(self.locals[buf], [tirx.IntImm("int32", nest.row_reg(reg))])
            if lay.distributed:
                if reg is None or not is_identity(list(ld.indices)):
                    self.error(None, f"fragment {buf.name} is distributed over threads and must be read as "
                                     f"{buf.name}[i, j] with the T.Parallel loop variables")
                    return ld
                return tirx.BufferLoad(self.locals[buf], [reg])
            return tirx.BufferLoad(self.locals[buf], [flat_index(list(ld.indices), lay.shape)])

        def store(st: Any) -> Any:
            buf = st.buffer
            if not is_fragment(buf):
                return st
            lay = self.layouts[buf]
            if lay.distributed:
                if reg is None or not is_identity(list(st.indices)):
                    self.error(st.span, f"fragment {buf.name} is distributed over threads and must be written as "
                                        f"{buf.name}[i, j] with the T.Parallel loop variables")
                    return st
                return tirx.BufferStore(self.locals[buf], st.value, [reg], span=st.span)
            return tirx.BufferStore(self.locals[buf], st.value, [flat_index(list(st.indices), lay.shape)],
                                    span=st.span)

        return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])

    # -- guards --------------------------------------------------------------------------------------------
    def guard_globals(self, body: Any) -> Any:
        """Bounds guards for global loads and stores the analyzer cannot prove in bounds."""

        def guard_value(e: Any) -> Any:
            def fix(ld: Any) -> Any:
                buf = ld.source
                if not (tirx.is_buffer_var(buf) and is_global(buf)):
                    return ld
                conds = in_bounds_conds(buf, list(ld.indices), self.ana)
                if not conds:
                    return ld
                return tirx.if_then_else(and_all(conds), ld, tirx.const(0, dtype_of(ld)))
            return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, fix)])

        def visit(s: Any) -> Any:
            if isinstance(s, tirx.SeqStmt):
                return tirx.SeqStmt([visit(x) for x in s.seq], span=s.span)
            if isinstance(s, tirx.For):
                self.bind_loop(s.loop_var, s.min, s.extent)
                return tirx.For(s.loop_var, s.min, s.extent, s.kind, visit(s.body), s.thread_binding, s.annotations,
                                s.step, s.span)
            if isinstance(s, tirx.IfThenElse):
                els = visit(s.else_case) if s.else_case is not None else None
                return tirx.IfThenElse(guard_value(s.condition), visit(s.then_case), els, span=s.span)
            if isinstance(s, tirx.Bind):
                return tirx.Bind(s.var, guard_value(s.value))
            if isinstance(s, tirx.BufferStore):
                st = tirx.BufferStore(s.buffer, guard_value(s.value), list(s.indices), span=s.span)
                if is_global(s.buffer):
                    conds = in_bounds_conds(s.buffer, list(s.indices), self.ana)
                    if conds:
                        return tirx.IfThenElse(and_all(conds), st, None, span=s.span)
                return st
            return s  # Evaluate (atomicAdd ...): guarded where it was lowered

        return visit(body)

    def nest_in_bounds(self, body: Any, vs: list[Any], exts: list[int]) -> list[Any]:
        """Run-time conditions under which every global access of the nest lies inside its tensor."""
        dom = {v: tvm.sym.IntervalSet(0, e - 1) for v, e in zip(vs, exts)}
        conds: list[Any] = []
        accesses = [(ld.source, list(ld.indices)) for ld in loads_in(body)]
        accesses += [(st.buffer, list(st.indices)) for st in _stores_in(body)]
        # the conditions are tested before the nest: indices through scalars bound in the body (row = by * bM + i)
        # are read through the bound values, and a condition still naming a body variable falls back to the guarded
        # path (it used to reach codegen as "Buffer row_idx is used before its definition")
        lets = _let_values(body)
        inner = _defined_in(body) + _allocated_in(body)
        for buf, idx in accesses:
            if not (tirx.is_buffer_var(buf) and is_global(buf)):
                continue
            idx = [_inline_lets(i, lets) for i in idx]
            if any(any(v.same_as(d) for d in inner) for i in idx for v in _free_vars(i)) or \
                    any(_contains(inner, ld.source) for i in idx for ld in loads_in(i)):
                return [tirx.const(False, "bool")]
            for i, n in zip(idx, buf.shape):
                try:
                    iset = self.ana.int_set(i, dom)
                    hi, lo = iset.max_value, iset.min_value
                except Exception:  # noqa: BLE001
                    return [tirx.const(False, "bool")]
                for c in (tirx.LT(hi, n), tirx.GE(lo, 0)):
                    if not self.prove(c):
                        c = self.ana.simplify(c)
                        if not any(c.same_as(x) for x in conds):
                            conds.append(c)
        return conds

    def vectorizable(self, body: Any, v: Any, vec: int, packed_ok: bool = False) -> bool:
        """Every global/shared access is contiguous in ``v`` along its last dimension and ``vec``-aligned.

        ``packed_ok``: a load may also read the same element in every lane (a per-row scale) or element ``v // c``
        of its last dimension, ``vec / c``-aligned (packed data: two int4 per byte), and at least one load must be
        packed; the chunk is then computed lane by lane from staged words (:meth:`packed_chunk`), never as a TVM
        vector gather."""
        loads = [(ld.source, list(ld.indices)) for ld in loads_in(body)]
        stores = [(st.buffer, list(st.indices)) for st in _stores_in(body)]
        mem = [(b, i, k < len(loads)) for k, (b, i) in enumerate(loads + stores)
               if tirx.is_buffer_var(b) and (is_global(b) or is_shared(b))]
        if not mem or (_impure_calls(body) if packed_ok else _has_calls(body)):
            return False
        kinds = []
        for buf, idx, is_load in mem:
            kind = self.lane_access(buf, idx, v, vec)
            if not (kind == 1 or (packed_ok and is_load and kind is not None)):
                return False
            kinds.append((kind, dtype_bytes(str(buf.dtype)) if is_load else 0))
        # the lane-by-lane path is for packed or 8-bit data (int4 / int8 / fp8 weights): a nest whose only odd loads
        # are broadcasts of wider data (a norm's per-row factor) keeps its old code
        return not packed_ok or any(k > 1 or es == 1 for k, es in kinds)

    def lane_access(self, buf: Any, idx: list[Any], v: Any, vec: int) -> int | None:
        """How an access of ``buf`` at ``idx`` moves with lane ``v`` of a ``vec``-lane chunk: 1 contiguous and
        ``vec``-aligned, 0 the same element in every lane, ``c`` > 1 element ``v // c`` of the last dimension
        (``vec / c``-aligned); None otherwise."""
        zero = tirx.IntImm("int32", 0)
        diffs = []
        for i in idx:
            base = self.ana.simplify(substitute(i, {v: zero}))
            diffs.append((base, self.ana.simplify(i - base)))
        if any(const_int(d) != 0 for _, d in diffs[:-1]):
            return None
        base, diff = diffs[-1]
        if const_int(diff) == 0 or all(self.prove(tirx.EQ(substitute(idx[-1], {v: tirx.IntImm("int32", lane)}), base))
                                       for lane in range(1, vec)):
            return 0  # the same element in every lane (a group scale: (k * bK + j) // 32 over an aligned chunk)
        last = const_int(buf.shape[-1])
        if isinstance(diff, tvm.ir.Var) and diff.same_as(v):
            c = 1
        elif (isinstance(diff, tirx.FloorDiv) and isinstance(diff.a, tvm.ir.Var) and diff.a.same_as(v)
              and (const_int(diff.b) or 0) > 1 and vec % const_int(diff.b) == 0):
            c = const_int(diff.b)
        else:
            return None
        width = vec // c
        if last is None or last % width or not self.prove(tirx.EQ(tirx.floormod(base, width), 0)):
            return None
        return c

    # -- nests ---------------------------------------------------------------------------------------------
    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if PARALLEL_ATTR not in s.annotations:
            return super().visit_For(s)
        vs, exts, body = parallel_nest(s, PARALLEL_ATTR)
        exts_c = [const_int(e) for e in exts]
        if None in exts_c:
            self.error(s.span, "T.Parallel extents must be compile-time constants on CUDA")
            return s
        for v, e in zip(vs, exts_c):
            self.bind_loop(v, tirx.IntImm("int32", 0), tirx.IntImm("int32", e))
        body = self.visit(body)
        accessed = [ld.source for ld in loads_in(body)] + [st.buffer for st in _stores_in(body)]
        dist = [b for b in accessed if is_fragment(b) and self.layouts[b].distributed]
        written = [st.buffer for st in _stores_in(body)]
        # a scalar allocated inside the nest (``q = ...`` in the loop body) is private to one iteration: it does
        # not make the nest sequential per-thread code
        private = _allocated_in(body)
        per_thread_written = [b for b in written if ((is_fragment(b) and not self.layouts[b].distributed)
                                                     or b.scope() in ("local", "local.var"))
                              and not any(b.same_as(p) for p in private)]
        # a reducer's replica is per-thread, but each iteration must run in one thread only (reducers_cuda.py)
        updates_reducer = any(_contains(per_thread_written, b) for b in self.reducers)
        per_thread_written = [b for b in per_thread_written if b not in self.reducers]
        if updates_reducer and per_thread_written:
            self.error(s.span, f"T.Parallel updates a reducer and also writes the per-thread tile "
                               f"{per_thread_written[0].name}; on CUDA a reducer's nest gives each iteration to one "
                               "thread, so split it into two T.Parallel loops")
            return s
        if dist:
            lay = self.layouts[dist[0]]
            for b in dist:  # the nest iterates over the 2-D layout; row fragments of it are read per row
                if self.layouts[b].kind not in ("mma_row", "wgmma_row"):
                    lay = self.layouts[b]
                    break
            for b in dist:
                bl = self.layouts[b]
                if bl != lay and not (lay.row_kind is not None and bl.kind == lay.row_kind
                                      and lay.row_layout() == bl):
                    self.error(s.span, f"T.Parallel combines fragments {dist[0].name} and {b.name} of different "
                                       "layouts")
                    return s
            if per_thread_written:
                self.error(s.span, f"T.Parallel writes per-thread tile {per_thread_written[0].name} while iterating "
                                   f"over the distributed fragment {dist[0].name}; split it into two T.Parallel loops")
                return s
            return self.lower_over_layout(s, vs, exts_c, body, lay, scalar=updates_reducer)
        span = first_span(body) or s.span  # the per-thread code keeps the user's line (source-line builds)
        if updates_reducer:  # split over the threads, one element at a time (lanes could combine into one slot)
            lay = FragmentLayout.blocked(exts_c, self.threads, 16)
            return with_span(self.lower_over_layout(s, vs, exts_c, body, lay, scalar=True), span)
        if per_thread_written:
            return with_span(self.lower_replicated(s, vs, exts_c, body), span)
        bufs = [b for b in accessed if tirx.is_buffer_var(b)]
        es = [dtype_bytes(str(b.dtype)) for b in bufs] or [4]
        gs = [dtype_bytes(str(b.dtype)) for b in bufs if is_global(b)]
        lay = FragmentLayout.blocked(exts_c, self.threads, min(gs) if gs else max(es))
        return with_span(self.lower_over_layout(s, vs, exts_c, body, lay), span)

    def lower_replicated(self, s: Any, vs: list[Any], exts: list[int], body: Any) -> Any:
        body = self.guard_globals(self.map_fragments(body, vs, None))
        total = 1
        for e in exts:
            total *= e
        kind = ForKind.UNROLLED if total <= 64 else ForKind.SERIAL
        for v, e in reversed(list(zip(vs, exts))):
            body = make_for(v, e, body, kind, s.span)
        return body

    def lower_over_layout(self, s: Any, vs: list[Any], exts: list[int], body: Any, lay: FragmentLayout,
                          scalar: bool = False) -> Any:
        vec = lay.vec if lay.kind == "blocked" and not scalar else 1
        n_regs = lay.num_regs
        force = lay.const_regs

        def elem(reg: Any, guarded: bool) -> Any:
            coords, valid = lay.coords(self.tid, reg, self.ana)
            b = substitute(self.map_fragments(body, vs, reg, lay), dict(zip(vs, coords)))
            if guarded:
                b = self.guard_globals(b)
            return tirx.IfThenElse(valid, b, None) if valid is not None else b

        def chunk(q: Any) -> Any:
            base = q * vec
            coords, valid = lay.coords(self.tid, base, self.ana)
            v = new_var("vec")
            self.bind_loop(v, tirx.IntImm("int32", 0), tirx.IntImm("int32", vec))
            lane_coords = coords[:-1] + [coords[-1] + v]
            b = substitute(self.map_fragments(body, vs, base + v), dict(zip(vs, lane_coords)))
            b, lane_allocs = _lane_private(b, v, vec)
            inner = self.packed_chunk(b, v, vec) if packed else self.vector_chunk(b, v, vec, width)
            loop = seq([*lane_allocs, inner])
            return tirx.IfThenElse(valid, loop, None) if valid is not None else loop

        def iterate(count: int, fn: Any) -> Any:
            if count <= MAX_PY_UNROLL or force:
                return seq([fn(q) for q in range(count)])
            q = new_var("r")
            self.bind_loop(q, tirx.IntImm("int32", 0), tirx.IntImm("int32", count))
            return make_for(q, count, fn(q))

        width = 1  # the widest vector access to global/shared memory the chunks allow (a divisor of vec)
        if vec > 1:
            probe_v = new_var("probe")
            self.bind_loop(probe_v, tirx.IntImm("int32", 0), tirx.IntImm("int32", vec))
            coords, _ = lay.coords(self.tid, 0, self.ana)
            probe = substitute(self.map_fragments(body, vs, probe_v), dict(zip(vs, coords[:-1] + [coords[-1] +
                                                                                                probe_v])))
            width = vec
            while width > 1 and not self.vectorizable(probe, probe_v, width):
                width //= 2
            # packed or broadcast loads (int4 weights, a per-row scale): lanes computed one by one from staged words
            packed = width == 1 and self.vectorizable(probe, probe_v, vec, packed_ok=True)
            width = vec if packed else width
        else:
            packed = False
        # temporaries of the body get one slot per lane (see _lane_private); one of unknown size keeps it scalar
        use_vec = width > 1 and _lane_private(body, vs[-1], vec) is not None
        tconds = self.nest_in_bounds(body, vs, exts)
        if use_vec:
            fast = iterate(n_regs // vec, chunk)
        else:
            fast = iterate(n_regs, lambda r: elem(r, False))
        if not tconds:
            return fast
        slow = iterate(n_regs, lambda r: elem(r, True))
        if len(tconds) == 1 and const_int(tconds[0]) == 0:
            return slow
        return tirx.IfThenElse(and_all(tconds), fast, slow, span=s.span)

    def vector_chunk(self, b: Any, v: Any, vec: int, width: int) -> Any:
        """The ``vec`` lanes ``v`` of one chunk of body ``b``, whose global/shared accesses are contiguous in ``v``
        and allow vectors of ``width`` lanes (a divisor of ``vec``).

        Vectors hold at most 16 bytes of the widest type ``b`` computes with (``sub`` lanes). When that is the
        whole chunk, the chunk is one vectorised loop. Otherwise each ``width``-lane group is computed ``sub``
        lanes at a time, and the group's narrower global/shared operands go through register arrays in accesses
        of up to 16 bytes (:meth:`stage`)."""
        sub = min(width, max(16 // _value_bytes(b), 1))
        if sub == vec:
            return make_for(v, vec, b, ForKind.VECTORIZED)
        out = []
        for g in range(vec // width):
            u = new_var("vec")
            self.bind_loop(u, tirx.IntImm("int32", 0), tirx.IntImm("int32", width))
            bg = substitute(b, {v: _offset(u, g * width)})
            pre: list[Any] = []
            post: list[Any] = []
            if sub < width:
                bg, pre, post = self.stage(bg, u, width, sub)
            out += pre
            for h in range(width // sub):
                w = new_var("vec")
                self.bind_loop(w, tirx.IntImm("int32", 0), tirx.IntImm("int32", sub))
                out.append(make_for(w, sub, substitute(bg, {u: _offset(w, h * sub)}), ForKind.VECTORIZED))
            out += post
        return seq(out)

    def packed_chunk(self, b: Any, v: Any, vec: int) -> Any:
        """The ``vec`` lanes ``v`` of one chunk of body ``b`` whose loads may be packed (element ``v // c``) or the
        same in every lane (see :meth:`vectorizable`), computed lane by lane: each contiguous or packed
        global/shared load is staged first into a register array with vector accesses of up to 16 bytes (a packed
        one moves ``vec / c`` elements: eight int4 weights are one 32-bit load), each top-level contiguous store
        goes through a register array stored after the lanes (one 16-byte store of eight fp16), and the lanes
        read the arrays at constant indices. Broadcast loads stay in the lanes (one address: the compiler keeps
        one load). Why: TVM's vectoriser would turn a packed load into a per-lane gather its CUDA printer does not
        emit correctly for 8-bit lanes, and the element-wise fallback loads every byte twice and stores 2 bytes at
        a time."""
        written = [st.buffer for st in _stores_in(b)]
        read = [ld.source for ld in loads_in(b)]
        inner = _defined_in(b)

        def index_ok(idx: list[Any]) -> bool:
            return not any(loads_in(i) for i in idx) and not any(
                _contains(inner, x) for i in idx for x in _free_vars(i))

        allocs: list[Any] = []
        pre: list[Any] = []
        post: list[Any] = []
        staged: list[tuple[Any, Any, int]] = []  # (load, register array, c)
        for ld in loads_in(b):
            buf = ld.source
            if not (tirx.is_buffer_var(buf) and (is_global(buf) or is_shared(buf))) or _contains(written, buf):
                continue
            if not index_ok(list(ld.indices)) or any(tvm_ffi.structural_equal(ld, x) for x, _, _ in staged):
                continue
            c = self.lane_access(buf, list(ld.indices), v, vec)
            if not c:
                continue
            arr = tirx.decl_buffer((vec // c,), dtype_of(ld), f"{buf.name}_vec", scope="local")
            allocs.append(tirx.AllocBuffer(arr))
            staged.append((ld, arr, c))
            pre += self.vector_load(ld, arr, v, c, vec // c)

        def from_array(ld: Any) -> Any:
            for x, arr, c in staged:
                if tvm_ffi.structural_equal(ld, x):
                    return tirx.BufferLoad(arr, [tirx.floordiv(v, c) if c > 1 else v])
            return ld

        if staged:
            b = tvm_ffi.structural_map(b, [(tvm.ir.TensorLoad, from_array)])
        items = list(b.seq) if isinstance(b, tirx.SeqStmt) else [b]
        for n, st in enumerate(items):
            if not (isinstance(st, tirx.BufferStore) and tirx.is_buffer_var(st.buffer)
                    and (is_global(st.buffer) or is_shared(st.buffer))):
                continue
            if _contains(read, st.buffer) or not index_ok(list(st.indices)):
                continue
            if self.lane_access(st.buffer, list(st.indices), v, vec) != 1:
                continue
            arr = tirx.decl_buffer((vec,), str(st.buffer.dtype), f"{st.buffer.name}_vec", scope="local")
            allocs.append(tirx.AllocBuffer(arr))
            items[n] = tirx.BufferStore(arr, st.value, [v], span=st.span)
            post += self.vector_store(st, arr, v, vec)
        if post:
            b = seq(items, b.span)
        lanes = [substitute(b, {v: tirx.IntImm("int32", lane)}) for lane in range(vec)]
        return seq(allocs + pre + lanes + post)

    def vector_load(self, ld: Any, arr: Any, v: Any, c: int, n: int) -> list[Any]:
        """Fill register array ``arr`` (``n`` elements) with elements ``0 .. n-1`` of load ``ld`` at lanes
        ``v = 0, c, 2c, ...`` (contiguous and aligned, see :meth:`lane_access`) with explicit vector (``Ramp``)
        indices of up to 16 bytes, swizzled once per chunk as :meth:`vector_store`'s."""
        lanes = _staged_lanes(dtype_of(ld), n)
        out = []
        for p in range(n // lanes):
            idx = [self.ana.simplify(substitute(i, {v: tirx.IntImm("int32", p * lanes * c)})) for i in ld.indices]
            dst = tirx.IntImm("int32", p * lanes)
            if lanes > 1:
                idx[-1] = tirx.Ramp(idx[-1], tirx.IntImm("int32", 1), lanes)
                dst = tirx.Ramp(dst, tirx.IntImm("int32", 1), lanes)
            out.append(tirx.BufferStore(arr, tirx.BufferLoad(ld.source, idx), [dst]))
        return out

    def vector_store(self, st: Any, arr: Any, v: Any, vec: int) -> list[Any]:
        """Store register array ``arr`` (lanes ``v`` of ``st``, contiguous and aligned) with explicit vector
        (``Ramp``) indices of up to 16 bytes: tl.LowerSharedMemoryCUDA swizzles a Ramp's base once, so a 16-byte
        chunk of a swizzled tile stays one store (a vectorised loop would become a scatter after the swizzle)."""
        lanes = _staged_lanes(str(st.buffer.dtype), vec)
        zero = tirx.IntImm("int32", 0)
        out = []
        for p in range(vec // lanes):
            idx = [self.ana.simplify(substitute(i, {v: tirx.IntImm("int32", p * lanes)})) for i in st.indices]
            if lanes > 1:
                idx[-1] = tirx.Ramp(idx[-1], tirx.IntImm("int32", 1), lanes)
                val = tirx.BufferLoad(arr, [tirx.Ramp(tirx.IntImm("int32", p * lanes), tirx.IntImm("int32", 1), lanes)])
            else:
                val = tirx.BufferLoad(arr, [tirx.IntImm("int32", p) if p else zero])
            out.append(tirx.BufferStore(st.buffer, val, idx, span=st.span))
        return out

    def stage(self, b: Any, u: Any, width: int, sub: int) -> tuple[Any, list[Any], list[Any]]:
        """Route the global/shared operands of ``b`` (lanes ``u`` of a ``width``-lane group, computed ``sub`` lanes
        at a time) that are narrower than its widest type through per-thread register arrays: a load is moved
        into its array before the group (``min(width, 16 / size)`` lanes per access) and read from it lane by
        lane; a store at the top level of ``b`` writes its array, which is stored after the group. Returns the
        new body and the statements that go before and after it.

        A load is hoisted only where that cannot change what it reads (the fast path's accesses are all in
        bounds): ``b`` must not write its buffer, and its index must not use values computed inside ``b``. A store
        is deferred only when ``b`` does not read its buffer and it is not under a condition or loop."""
        widest = _value_bytes(b)
        written = [st.buffer for st in _stores_in(b)]
        read = [ld.source for ld in loads_in(b)]
        inner = _defined_in(b)

        def lanes_of(buf: Any, dtype: str) -> int:
            """Lanes per access of a staged operand; 0: leave the access in the computation."""
            if not (tirx.is_buffer_var(buf) and (is_global(buf) or is_shared(buf))):
                return 0
            es = dtype_bytes(dtype)
            lanes = min(width, max(16 // es, 1))
            return lanes if es < widest and lanes > sub else 0

        def index_ok(idx: list[Any]) -> bool:
            return not any(loads_in(i) for i in idx) and not any(
                _contains(inner, x) for i in idx for x in _free_vars(i))

        def moves(lanes: int, fn: Any) -> list[Any]:
            """``width // lanes`` vectorised statements ``fn(lane var + first lane)`` of ``lanes`` lanes each."""
            out = []
            for p in range(width // lanes):
                x = new_var("vec")
                self.bind_loop(x, tirx.IntImm("int32", 0), tirx.IntImm("int32", lanes))
                out.append(make_for(x, lanes, fn(_offset(x, p * lanes)), ForKind.VECTORIZED))
            return out

        allocs: list[Any] = []
        pre: list[Any] = []
        post: list[Any] = []
        staged: list[tuple[Any, Any]] = []  # (load, register array)
        for ld in loads_in(b):
            lanes = lanes_of(ld.source, dtype_of(ld))
            if not lanes or _contains(written, ld.source) or not index_ok(list(ld.indices)):
                continue
            if any(tvm_ffi.structural_equal(ld, x) for x, _ in staged):
                continue
            arr = tirx.decl_buffer((width,), dtype_of(ld), f"{ld.source.name}_vec", scope="local")
            allocs.append(tirx.AllocBuffer(arr))
            staged.append((ld, arr))
            pre += moves(lanes, lambda lane, ld=ld, arr=arr: tirx.BufferStore(arr, substitute(ld, {u: lane}),
                                                                             [lane]))

        def from_array(ld: Any) -> Any:
            for x, arr in staged:
                if tvm_ffi.structural_equal(ld, x):
                    return tirx.BufferLoad(arr, [u])
            return ld

        if staged:
            b = tvm_ffi.structural_map(b, [(tvm.ir.TensorLoad, from_array)])
        items = list(b.seq) if isinstance(b, tirx.SeqStmt) else [b]
        for n, st in enumerate(items):
            if not isinstance(st, tirx.BufferStore):
                continue
            lanes = lanes_of(st.buffer, str(st.buffer.dtype))
            if not lanes or _contains(read, st.buffer) or not index_ok(list(st.indices)):
                continue
            arr = tirx.decl_buffer((width,), str(st.buffer.dtype), f"{st.buffer.name}_vec", scope="local")
            allocs.append(tirx.AllocBuffer(arr))
            items[n] = tirx.BufferStore(arr, st.value, [u], span=st.span)
            post += moves(lanes, lambda lane, st=st, arr=arr: tirx.BufferStore(
                st.buffer, tirx.BufferLoad(arr, [lane]), [substitute(i, {u: lane}) for i in st.indices],
                span=st.span))
        if post:
            b = seq(items, b.span)
        return b, allocs + pre, post


def _staged_lanes(dtype: str, n: int) -> int:
    """Lanes of one explicit vector access of ``dtype`` moving ``n`` elements: up to 16 bytes, at most 4 float8
    lanes (the widest float8 vector TVM's CUDA printer takes) and 8 of other 8-bit types, bool one at a time."""
    if dtype == "bool":
        return 1
    cap = 4 if "float8" in dtype else 8 if dtype_bytes(dtype) == 1 else 16 // dtype_bytes(dtype)
    lanes = max(1, min(n, cap))
    while n % lanes:
        lanes //= 2
    return lanes


def _offset(var: Any, first: int) -> Any:
    """``var + first`` (``var`` itself for 0)."""
    return var + first if first else var


def _retire_fragments(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Replicated-fragment accesses outside T.Parallel -> register arrays; alloc_var -> 1-element arrays."""
    layouts, locs = layouts_of(func), locals_of(func)
    var_remap: dict[Any, Any] = {}

    def collect(s: Any) -> Any:
        buf = s.buffer
        if buf.scope() == "local.var" and buf not in var_remap:
            var_remap[buf] = tirx.decl_buffer(list(buf.shape), str(buf.dtype), buf.name, scope="local")
        return s

    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, collect)])

    def ref(buf: Any, idx: list[Any]) -> tuple[Any, list[Any]] | None:
        if is_fragment(buf):
            lay = layouts[buf]
            return locs[buf], [flat_index(idx, lay.shape)]
        if buf in var_remap:
            return var_remap[buf], idx
        return None

    def load(ld: Any) -> Any:
        r = ref(ld.source, list(ld.indices))
        return ld if r is None else tirx.BufferLoad(r[0], r[1])

    def store(st: Any) -> Any:
        r = ref(st.buffer, list(st.indices))
        return st if r is None else tirx.BufferStore(r[0], st.value, r[1], span=st.span)

    def alloc(s: Any) -> Any:
        if is_fragment(s.buffer):
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        if s.buffer in var_remap:
            return tirx.AllocBuffer(var_remap[s.buffer])
        return s

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                              (tirx.AllocBuffer, alloc)])
    return func.with_body(body)


def lower_parallel_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    func = LowerParallelCUDA(func).run(func)
    return _retire_fragments(func)

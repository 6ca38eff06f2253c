"""Pass: software-pipeline ``T.Pipelined(n, num_stages=s)`` loops on CUDA.

The global-to-shared ``T.copy``s at the top level of the loop body are the *producers*; everything else is the
*consumer* part (typically ``T.gemm``). Each producer's shared tile gets ``s`` copies (a leading stage
dimension) and the loop becomes::

    prologue:  for j < s-1:  producers(k = j) -> stage j;  commit
    loop k:    wait until at most s-2 groups are pending;  __syncthreads()
               producers(k + s - 1) -> stage (k + s - 1) % s   (when k + s - 1 < n);  commit
               consumers(k) on stage k % s
    epilogue:  wait for all;  __syncthreads()

so ``s - 1`` tile loads are in flight while the tensor cores work on the current stage, with one barrier per
iteration (it also guarantees that the stage about to be overwritten has been consumed by every thread). The
producer copies are marked asynchronous: ``tl.LowerTileOpsCUDA`` turns them into ``cp.async`` (16-byte,
zero-filling the parts of a ragged tile outside the tensor) where alignment allows, and into ordinary loads and
stores otherwise — the schedule is correct either way. A loop the pattern does not fit (a producer's tile read
before it is written in the body, or used outside the loop) runs unpipelined, with the barriers
``tl.InsertSyncsCUDA`` places.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..language._ir import Region
from ..language.loops import STAGES_ATTR
from ._cuda_common import ATTR_SWIZZLE, extern, is_shared, loads_in, substitute, swizzles_of, sync_stmt
from ._regions import is_global
from ._rewriter import Rewriter, const_int, seq
from .validate_tile_ops import tile_op_name


def _flatten(s: Any) -> list[Any]:
    if isinstance(s, tirx.SeqStmt):
        out = []
        for x in s.seq:
            out.extend(_flatten(x))
        return out
    return [s]


def _buffers_touched(s: Any) -> list[Any]:
    """Every buffer a statement reads or writes (tile-op regions, loads, stores)."""
    found: list[Any] = []

    def region(r: Any) -> Any:
        found.append(r.source)
        return r

    def store(st: Any) -> Any:
        found.append(st.buffer)
        return st

    tvm_ffi.structural_map(s, [(tvm.ir.TensorRegion, region), (tirx.BufferStore, store)])
    found.extend(ld.source for ld in loads_in(s))
    return found


def _producer_dst(s: Any) -> Any:
    if not isinstance(s, tirx.Evaluate) or tile_op_name(s) != "tl.copy":
        return None
    src, dst = Region.of(s.value.args[0]), Region.of(s.value.args[1])
    if is_global(src.buffer) and is_shared(dst.buffer):
        return dst.buffer
    return None


def _with_stage(node: Any, remap: dict[Any, Any], stage: Any) -> Any:
    """Point every access to a multi-buffered tile at ``stage``."""

    def region(r: Any) -> Any:
        new = remap.get(r.source)
        if new is None:
            return r
        return tirx.BufferRegion(new, [tvm.ir.Range.from_min_extent(stage, 1), *r.region])

    def load(ld: Any) -> Any:
        new = remap.get(ld.source)
        return ld if new is None else tirx.BufferLoad(new, [stage, *ld.indices])

    def store(st: Any) -> Any:
        new = remap.get(st.buffer)
        return st if new is None else tirx.BufferStore(new, st.value, [stage, *st.indices], span=st.span)

    return tvm_ffi.structural_map(node, [(tvm.ir.TensorRegion, region), (tvm.ir.TensorLoad, load),
                                         (tirx.BufferStore, store)])


def _mark_async(s: Any) -> Any:
    call = s.value
    return tirx.Evaluate(tvm.ir.Call(call.op, [*call.args[:2], tirx.IntImm("int32", 1)], ret_ty="handle"),
                         span=s.span)


class PipelineCUDA(Rewriter):
    pass_name = "tl.PipelineCUDA"

    def __init__(self, uses: dict[Any, int]) -> None:
        super().__init__()
        self.uses = uses  # buffer -> number of statements touching it in the whole kernel
        self.remap: dict[Any, Any] = {}

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if STAGES_ATTR not in s.annotations:
            return super().visit_For(s)
        stages = int(s.annotations[STAGES_ATTR])
        self.bind_loop(s.loop_var, s.min, s.extent)
        body = self.visit(s.body)
        ann = {k: v for k, v in s.annotations.items() if k != STAGES_ATTR}
        plain = tirx.For(s.loop_var, s.min, s.extent, tirx.ForKind.SERIAL, body, None, ann or None, None, s.span)
        if stages < 2:
            return plain
        stmts = _flatten(body)
        prod_idx = [i for i, x in enumerate(stmts) if _producer_dst(x) is not None]
        if not prod_idx:
            return plain
        dsts = [_producer_dst(stmts[i]) for i in prod_idx]
        # every producer tile: written by exactly one producer, not touched before it, not used outside the loop
        for a in range(len(dsts)):
            if any(dsts[a].same_as(dsts[b]) for b in range(a)):
                return plain
        for i, x in enumerate(stmts):
            if i in prod_idx:
                continue
            touched = _buffers_touched(x)
            later = [d for p, d in zip(prod_idx, dsts) if p > i]
            if any(t.same_as(d) for t in touched for d in later):
                return plain
        inside = _count_uses(body)
        for d in dsts:
            if self.uses.get(d, 0) != inside.get(d, 0):
                return plain
        remap = {}
        for d in dsts:
            shape = [stages, *[int(x) for x in d.shape]]
            remap[d] = tirx.decl_buffer(shape, str(d.dtype), d.name, scope=d.scope())
        self.remap.update(remap)
        producers = [_mark_async(stmts[i]) for i in prod_idx]
        consumers = [x for i, x in enumerate(stmts) if i not in prod_idx]
        k, n = s.loop_var, s.extent
        k0 = k - s.min if const_int(s.min) != 0 else k
        commit = extern("tl::cp_async_commit")

        def produce(at_iter: Any, stage: Any) -> Any:
            # substitute the iteration first: the stage expression itself mentions k
            return seq([_with_stage(substitute(p, {k: at_iter}), remap, stage) for p in producers])

        prologue = []
        for j in range(stages - 1):
            issue = produce(s.min + j, tirx.IntImm("int32", j))
            nc = const_int(n)
            if nc is None:
                issue = tirx.IfThenElse(tirx.LT(tirx.IntImm("int32", j), n), issue, None)
            elif j >= nc:
                issue = None
            prologue += [x for x in (issue, commit) if x is not None]
        ahead = k0 + (stages - 1)
        issue = produce(k + (stages - 1), tirx.floormod(ahead, stages))
        cond = tirx.LT(ahead, n)
        if not self.prove(cond):
            issue = tirx.IfThenElse(self.ana.simplify(cond), issue, None)
        cons = [_with_stage(c, remap, tirx.floormod(k0, stages)) for c in consumers]
        loop_body = seq([extern(f"tl::cp_async_wait<{stages - 2}>"), sync_stmt(), issue, commit, *cons])
        loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, loop_body, None, ann or None, None, s.span)
        epilogue = [extern("tl::cp_async_wait<0>"), sync_stmt()]
        return seq([*prologue, loop, *epilogue], s.span)


def _count_uses(body: Any) -> dict[Any, int]:
    """Number of leaf statements touching each shared buffer."""
    counts: dict[Any, int] = {}

    def leaf(x: Any) -> None:
        for b in {id(b): b for b in _buffers_touched(x)}.values():
            if is_shared(b):
                counts[b] = counts.get(b, 0) + 1

    def walk(x: Any) -> None:
        if isinstance(x, tirx.SeqStmt):
            for y in x.seq:
                walk(y)
        elif isinstance(x, (tirx.For, tirx.While, tirx.AttrStmt)):
            walk(x.body)
        elif isinstance(x, tirx.IfThenElse):
            walk(x.then_case)
            if x.else_case is not None:
                walk(x.else_case)
        else:
            leaf(x)

    walk(body)
    return counts


def pipeline_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    pipe = PipelineCUDA(_count_uses(func.body))
    func = pipe.run(func)
    if not pipe.remap:
        return func
    remap = pipe.remap

    def swap_alloc(s: Any) -> Any:
        new = remap.get(s.buffer)
        return tirx.AllocBuffer(new) if new is not None else s

    func = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, swap_alloc)]))
    swz = swizzles_of(func)
    if swz:
        func = func.with_attr(ATTR_SWIZZLE, {remap.get(b, b): v for b, v in swz.items()})
    return func

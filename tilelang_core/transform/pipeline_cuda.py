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
stores otherwise — the schedule is correct either way. When the consumer part is a single tensor-core ``T.gemm``
on the pipelined tiles (the quickstart's loop), the loop body becomes one call of ``tl::pipe_gemm_step``, which
moves the wait and the barrier into the last k-step of each tile so that they, and the first ``ldmatrix`` of the
next tile, overlap tensor-core work (CUTLASS's multistage schedule; pass_configs ``tl.cuda.fused_gemm=False`` turns
it off). A loop the pattern does not fit (a producer's tile read before it is written in the body, or used outside
the loop) runs unpipelined, with the barriers ``tl.InsertSyncsCUDA`` places.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..language._ir import Region
from ..language.loops import STAGES_ATTR
from ..pass_config import DEFAULT, PassConfig, PassConfigKey
from ._cuda_common import (
    ATTR_SWIZZLE,
    extern,
    is_shared,
    layouts_of,
    loads_in,
    locals_of,
    substitute,
    swizzles_of,
    sync_stmt,
)
from ._cuda_layouts import MMA_DTYPES
from ._regions import is_global
from ._rewriter import Rewriter, const_int, seq
from .infer_fragment_layouts_cuda import gemm_operands, is_whole_tile
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

    def __init__(self, func: tirx.PrimFunc, uses: dict[Any, int], options: PassConfig = DEFAULT) -> None:
        super().__init__()
        self.options = options
        self.uses = uses  # buffer -> number of statements touching it in the whole kernel
        self.remap: dict[Any, Any] = {}
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.swizzle = swizzles_of(func)

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
        fused = self._fused_gemm(consumers, remap, stages)
        if fused is not None:
            tmpl, a_buf, b_buf, c_loc, frag = fused

            def ptr(buf: Any, stage: Any) -> Any:
                return tirx.address_of(tirx.BufferLoad(buf, [stage] + [tirx.IntImm("int32", 0)] * (len(buf.shape)
                                                                                                   - 1)))

            zero = tirx.IntImm("int32", 0)
            f0 = tirx.address_of(tirx.BufferLoad(frag, [zero]))
            prologue += [tirx.AllocBuffer(frag), extern(f"tl::cp_async_wait<{stages - 2}>"), sync_stmt(),
                         extern(f"tl::pipe_gemm_prefetch<{tmpl}>", ptr(a_buf, zero), ptr(b_buf, zero), f0)]
            cur, nxt = tirx.floormod(k0, stages), tirx.floormod(k0 + 1, stages)
            step = extern(f"tl::pipe_gemm_step<{tmpl}, {stages - 2}>", ptr(a_buf, cur), ptr(b_buf, cur),
                          ptr(a_buf, nxt), ptr(b_buf, nxt), tirx.address_of(tirx.BufferLoad(c_loc, [zero])), f0,
                          tirx.LT(k0 + 1, n))
            loop_body = seq([issue, commit, step])
            loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, loop_body, None, ann or None, None, s.span)
            epilogue = [extern("tl::cp_async_wait<0>"), sync_stmt()]
            return seq([*prologue, loop, *epilogue], s.span)
        cons = [_with_stage(c, remap, tirx.floormod(k0, stages)) for c in consumers]
        loop_body = seq([extern(f"tl::cp_async_wait<{stages - 2}>"), sync_stmt(), issue, commit, *cons])
        loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, loop_body, None, ann or None, None, s.span)
        epilogue = [extern("tl::cp_async_wait<0>"), sync_stmt()]
        return seq([*prologue, loop, *epilogue], s.span)


    def _fused_gemm(self, consumers: list[Any], remap: dict[Any, Any], stages: int) -> tuple | None:
        """When the consumer part is one tensor-core T.gemm on the pipelined tiles (the quickstart's loop), the
        parameters of the fused mainloop template; else None."""
        if not self.options[PassConfigKey.TL_CUDA_FUSED_GEMM]:
            return None
        if len(consumers) != 1 or not isinstance(consumers[0], tirx.Evaluate):
            return None
        if tile_op_name(consumers[0]) != "tl.gemm":
            return None
        ops = gemm_operands(consumers[0], self.ana)
        a, b, c = ops["a"].buffer, ops["b"].buffer, ops["c"].buffer
        lay = self.layouts.get(c)
        if lay is None or lay.kind != "mma" or str(c.dtype) != "float32" or ops["clear"]:
            return None
        if a not in remap or b not in remap or not (is_whole_tile(ops["a"]) and is_whole_tile(ops["b"])):
            return None
        if len(a.shape) != 2 or len(b.shape) != 2 or str(a.dtype) not in MMA_DTYPES or a.dtype != b.dtype:
            return None
        mt, nt = lay.mma_tiles
        frag = tirx.decl_buffer((mt * 4 + nt * 2,), "uint32", "mma_frag", scope="local")
        swa, swb = self.swizzle.get(a, 0), self.swizzle.get(b, 0)
        tmpl = (f"{ops['M']}, {ops['N']}, {ops['K']}, {lay.warp_m}, {lay.warp_n}, {int(ops['ta'])}, {int(ops['tb'])}, "
                f"{swa}, {swb}")
        return tmpl, remap[a], remap[b], self.locals[c], frag


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


def pipeline_cuda(func: tirx.PrimFunc, options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    pipe = PipelineCUDA(func, _count_uses(func.body), options)
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

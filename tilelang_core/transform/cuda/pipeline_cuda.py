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

**wgmma in flight** (sm_90a, pass_configs ``tl.cuda.wgmma_pipeline``, default on): when the consumer part is one
``T.gemm`` whose accumulator has the ``wgmma`` layout, on the pipelined A and B stages, without ``clear_accum``,
and ``s >= 3``, the gemm leaves its group in flight (``tl::wgmma_gemm_ss<..., 1>``: ``wgmma.wait_group 1``, so
when step k returns, step k-1's group is complete) and the loads go one stage less far ahead::

    prologue:  for j < s-2:  producers(k = j) -> stage j;  commit
    loop k:    wait until at most s-3 groups are pending;  __syncthreads()
               producers(k + s - 2) -> stage (k + s - 2) % s = (k - 2) % s   (when k + s - 2 < n);  commit
               wgmma(k) on stage k % s: fence, issue, commit, wait_group 1
    epilogue:  tl::wgmma_drain (wait_group 0: the accumulators are final);  wait for all;  __syncthreads()

Stage (k-2) % s was read by step k-2, whose group every thread retired in step k-1 (wait_group 1) before the
barrier at the top of step k; stage (k-1) % s, which step k-1's group may still read, is not written until step
k+1. So at any time one stage is read by the group in flight, one by the group being issued and ``s - 2`` are
loading. With ``s = 2`` nothing could be loaded ahead without a second barrier per step, so such loops (and
loops that are not pipelined, bodies with other statements that could touch the accumulator while a group is in
flight, ``clear_accum``) keep ``wait_group 0``; the reason is appended to ``tl.wgmma_notes``. With
``tl.cuda.wgmma_double_buffer`` (off by default) a body of ``T.Parallel`` nests writing shared tiles that only the
one wgmma gemm reads (the dequantised prefill's decode into ``B_s``) qualifies too: each such tile gets two copies,
step k's nests write copy ``k % 2``, and step k - 1's group, which read the other copy, is retired by every thread
before the barrier at the top of step k + 1, whose nests write it again.

**TMA and warp specialisation** (sm_90): when every producer is a whole 2-D tile into a wgmma-layout tile the loads
become TMA boxes completing on mbarriers (``sm90/tma.py``); when, in addition, the body is the loads plus one wgmma
``T.gemm`` and the loop is the kernel's only pipelined loop, a statement of its body, the loop becomes a producer
part and a consumer part (``sm90/warp_specialize.py``; ``tl.WarpSpecializeCUDA`` gives the block its producer
warpgroup later) and, with more output tiles than SMs, a persistent kernel. Why a loop is not specialised is noted.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import Region
from ...language.loops import PARALLEL_ATTR, STAGES_ATTR
from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.layout_annotations import user_layouts
from ..common.regions import is_global
from ..common.rewriter import Rewriter, const_int, location_of, seq, tile_op_name, with_span
from .common import (
    ATTR_LAUNCH,
    ATTR_SWIZZLE,
    ATTR_WGMMA_NOTES,
    WGMMA_PENDING_ATTR,
    buffers_touched,
    count_uses,
    eviction_of,
    extern,
    find_thread_var,
    gemm_operands,
    is_shared,
    is_whole_tile,
    layouts_of,
    locals_of,
    substitute,
    swizzles_of,
    sync_stmt,
)
from .layouts import MMA_DTYPES, WGMMA_SWIZZLE_BASE, dtype_bytes, is_wgmma_swizzle
from .sm90 import cluster, gemm_pingpong, overlap, tma
from .sm90 import warp_specialize as ws


def _flatten(s: Any) -> list[Any]:
    if isinstance(s, tirx.SeqStmt):
        out = []
        for x in s.seq:
            out.extend(_flatten(x))
        return out
    return [s]


ATTR_ALIGN_1024 = "tl.align_1024"  # shared tiles that must start on 1024 bytes (TMA SWIZZLE_128B destinations)


def _producer_dst(s: Any) -> Any:
    if not isinstance(s, tirx.Evaluate) or tile_op_name(s) != "tl.copy":
        return None
    src, dst = Region.of(s.value.args[0]), Region.of(s.value.args[1])
    if is_global(src.buffer) and is_shared(dst.buffer):
        return dst.buffer
    return None


def _mark_reduce_stages(node: Any, remap: dict[Any, Any]) -> Any:
    """Tell each ``T.reduce_*`` of a multi-buffered tile that its region is about to gain a leading stage
    dimension: the call gets two more arguments, the number of leading dimensions of its source and of its
    destination that are not the user's (1 for a staged tile, else 0; ``nan_propagate`` is made explicit first).
    Without them the lowering would read the stage dimension as the user's first one: ``dim`` would name the wrong
    axis and the result would be indexed with the source's other dimensions (wrong values, and writes past the
    destination's registers)."""

    def ev(e: Any) -> Any:
        if tile_op_name(e) != "tl.reduce":
            return e
        call = e.value
        lead = [int(any(Region.of(call.args[i]).buffer.same_as(b) for b in remap)) for i in (0, 1)]
        if not any(lead):
            return e
        args = list(call.args[:6])
        if len(args) == 5:
            args.append(tirx.IntImm("bool", False))
        args += [tirx.IntImm("int32", x) for x in lead]
        return tirx.Evaluate(tvm.ir.Call(call.op, args, ret_ty="handle"), span=e.span)

    return tvm_ffi.structural_map(node, [(tirx.Evaluate, ev)])


def _with_stage(node: Any, remap: dict[Any, Any], stage: Any) -> Any:
    """Point every access to a multi-buffered tile at ``stage`` (reductions are told, see above)."""
    node = _mark_reduce_stages(node, remap)

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

    out = tvm_ffi.structural_map(node, [(tvm.ir.TensorRegion, region), (tvm.ir.TensorLoad, load),
                                        (tirx.BufferStore, store)])
    return with_span(out, node.span)  # structural_map rebuilds the statement without the user's line


def _mark_async(s: Any) -> Any:
    call = s.value
    args = [*call.args[:2], tirx.IntImm("int32", 1), *call.args[3:]]  # keeps the copy's eviction_policy
    return tirx.Evaluate(tvm.ir.Call(call.op, args, ret_ty="handle"), span=s.span)




def prefetch_distance(stages: int, wgmma_in_flight: bool) -> int:
    """How many k-steps ahead the producers load: ``s - 1``, one less while a wgmma group stays in flight (the
    stage the previous step read is still busy)."""
    return stages - 2 if wgmma_in_flight else stages - 1


def _loads_in(e: Any) -> list[Any]:
    found: list[Any] = []

    def ld(x: Any) -> Any:
        found.append(x)
        return x

    tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, ld)])
    return found


def _bytes_1024(buf: Any) -> int:
    """A shared tile's bytes rounded up to 1024 (wgmma tiles sit on 1024-byte boundaries)."""
    n = dtype_bytes(str(buf.dtype))
    for d in buf.shape:
        n *= int(d)
    return -(-n // 1024) * 1024


def _stores_in(node: Any) -> list[Any]:
    found: list[Any] = []

    def st(x: Any) -> Any:
        found.append(x)
        return x

    tvm_ffi.structural_map(node, [(tirx.BufferStore, st)])
    return found


def _inline_scalars(node: Any, values: dict[Any, Any]) -> Any:
    """``node`` with every read of a scalar in ``values`` replaced by the expression it holds."""
    if not values:
        return node

    def ld(x: Any) -> Any:
        return values.get(x.source, x)

    out = tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, ld)])
    return with_span(out, node.span) if isinstance(node, tirx.Stmt) else out


def _scalars_before(stmts: list[Any], end: int) -> dict[Any, Any]:
    """Per-thread scalars (``name = expr`` in the body: a one-element local buffer stored once) that the first
    ``end`` statements set from the loop variable and values the loop does not change, mapped to that
    expression."""
    values: dict[Any, Any] = {}
    written: list[Any] = []

    def st(y: Any) -> Any:
        written.append(y.buffer)
        return y

    for y in stmts:
        tvm_ffi.structural_map(y, [(tirx.BufferStore, st)])
    for x in stmts[:end]:
        if isinstance(x, tirx.Bind):
            values[x.var] = substitute(x.value, {})
        if not isinstance(x, tirx.BufferStore) or x.buffer.scope() not in ("local", "local.var"):
            continue
        if [const_int(d) for d in x.buffer.shape] != [1]:
            continue
        value = _inline_scalars(x.value, values)
        stores = sum(1 for b in written if b.same_as(x.buffer))
        if stores == 1 and not any(any(ld.source.same_as(b) for b in written) for ld in _loads_in(value)):
            values[x.buffer] = value
    return values


def _gemms_in(stmts: list[Any]) -> list[Any]:
    found: list[Any] = []

    def ev(x: Any) -> Any:
        if tile_op_name(x) == "tl.gemm":
            found.append(x)
        return x

    for x in stmts:
        tvm_ffi.structural_map(x, [(tirx.Evaluate, ev)])
    return found


class PipelineCUDA(Rewriter):
    pass_name = "tl.PipelineCUDA"

    def __init__(self, func: tirx.PrimFunc, uses: dict[Any, int], options: PassConfig = DEFAULT,
                 arch: str = "sm_90") -> None:
        super().__init__()
        self.options = options
        self.arch = arch
        try:
            self.tid = find_thread_var(func)
        except ValueError:  # a kernel without a threadIdx loop: no TMA (its issuing thread is thread 0)
            self.tid = None
        self.tma_maps: list[tma.TmaMap] = []  # the kernel's tensor maps, in tl_tmaps order
        launch = func.attrs[ATTR_LAUNCH] if func.attrs is not None and ATTR_LAUNCH in func.attrs else None
        self.threads = int(launch["threads"]) if launch is not None else 0
        self.uses = uses  # buffer -> number of statements touching it in the whole kernel
        self.remap: dict[Any, Any] = {}
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.swizzle = swizzles_of(func)
        self.tma_aligned: list[Any] = []  # mma.sync tiles TMA fills (tl.cuda.tma_mma_tiles): on 1024 bytes
        self.index_tiles = frozenset(n for n, u in user_layouts(func).items() if u.kind == "index")
        self.notes: list[str] = []  # why a wgmma T.gemm keeps wait_group 0 (appended to tl.wgmma_notes)
        self.pipelined_depth = 0
        self.fused_notes: list[str] = []  # why an mma T.gemm's pipelined loop skips tl::pipe_gemm_step (tl.notes)
        self.ws_loop_var, self.ws_where = _ws_candidate(func)  # the loop that may be warp-specialised, or why none
        self.ws_applied = False
        self.ws_extent: Any = None  # the warp-specialised loop's trip count as its producer computes it
        self.ws_producers: list[Any] = []  # its loads, with the scalars set before the loop inlined
        loop = _thread_loop(func)
        self.body = loop.body if loop is not None else func.body  # what the thread loop's statements bind
        # tl.cuda.cluster: the shape asked for, the plan when the warp-specialised loop takes it, else why not
        self.cluster_shape = cluster.requested(options)
        self.cluster_plan: cluster.ClusterPlan | None = None
        self.cluster_why = ""
        self.block_vars, self.grid = cluster.block_vars_and_grid(func) if self.cluster_shape else ({}, {})

    def _is_wgmma(self, gemm: Any) -> bool:
        lay = self.layouts.get(Region.of(gemm.value.args[2]).buffer)
        return lay is not None and lay.kind == "wgmma"

    def _note(self, gemms: list[Any], why: str) -> None:
        for g in gemms:
            if self._is_wgmma(g):
                loc = location_of(g.span)
                where = f"line {loc.line}: " if loc is not None else ""
                self.notes.append(f"{where}T.gemm keeps wgmma.wait_group 0 (no group in flight across k-steps): "
                                  f"{why}")

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        if not self.pipelined_depth and tile_op_name(s) == "tl.gemm":
            self._note([s], "it is not in a T.Pipelined loop")
        return s

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if STAGES_ATTR not in s.annotations:
            return super().visit_For(s)
        stages = int(s.annotations[STAGES_ATTR])
        self.bind_loop(s.loop_var, s.min, s.extent)
        self.pipelined_depth += 1
        body = self.visit(s.body)
        self.pipelined_depth -= 1
        ann = {k: v for k, v in s.annotations.items() if k != STAGES_ATTR}
        plain = tirx.For(s.loop_var, s.min, s.extent, tirx.ForKind.SERIAL, body, None, ann or None, None, s.span)
        stmts = _flatten(body)

        def unpipelined(why: str) -> Any:
            self._note(_gemms_in(stmts), why)
            return plain

        if stages < 2:
            return unpipelined(f"num_stages={stages}: the loop is not software-pipelined")
        prod_idx = [i for i, x in enumerate(stmts) if _producer_dst(x) is not None]
        not_fit = "the loop does not fit the software pipeline (it runs unpipelined)"
        if not prod_idx:
            return unpipelined(not_fit)
        dsts = [_producer_dst(stmts[i]) for i in prod_idx]
        # every producer tile: written by exactly one producer, not touched before it, not used outside the loop
        for a in range(len(dsts)):
            if any(dsts[a].same_as(dsts[b]) for b in range(a)):
                return unpipelined(not_fit)
        for i, x in enumerate(stmts):
            if i in prod_idx:
                continue
            touched = buffers_touched(x)
            later = [d for p, d in zip(prod_idx, dsts) if p > i]
            if any(t.same_as(d) for t in touched for d in later):
                return unpipelined(not_fit)
        inside = count_uses(body)
        for d in dsts:
            if self.uses.get(d, 0) != inside.get(d, 0):
                return unpipelined(not_fit)
        remap = {}
        for d in dsts:
            shape = [stages, *[int(x) for x in d.shape]]
            remap[d] = tirx.decl_buffer(shape, str(d.dtype), d.name, scope=d.scope())
        self.remap.update(remap)
        # scalars the body computes before its loads (``kv0 = first + k * block_N``) are defined per iteration: a
        # load issued for another iteration, or in the prologue, reads their values for that iteration instead
        producers = [_mark_async(_inline_scalars(stmts[i], _scalars_before(stmts, max(prod_idx))))
                     for i in prod_idx]
        consumers = [x for i, x in enumerate(stmts) if i not in prod_idx]
        k, n = s.loop_var, s.extent
        k0 = k - s.min if const_int(s.min) != 0 else k
        commit = extern("tl::cp_async_commit")

        def produce(at_iter: Any, stage: Any) -> Any:
            # substitute the iteration first: the stage expression itself mentions k
            return seq([_with_stage(substitute(p, {k: at_iter}), remap, stage) for p in producers])

        copies = self._tma_copies(producers, consumers)
        in_flight = self._wgmma_in_flight(consumers, remap, stages, tma=copies is not None)
        dist = prefetch_distance(stages, in_flight is not None)
        if copies is None:
            self.cluster_why = self.cluster_why or "the loop's loads are not TMA boxes (cp.async, or not sm_90)"
        if copies is not None:
            single_gemm = len(consumers) == 1 and isinstance(consumers[0], tirx.Evaluate) and \
                tile_op_name(consumers[0]) == "tl.gemm" and self._is_wgmma(consumers[0])
            ws_why = self._ws_why(s, single_gemm, producers, k, consumers)
            if ws_why is None:
                return self._warp_specialized(s, k, k0, n, stages, producers, copies, remap, consumers, in_flight,
                                              general=not single_gemm)
            if ws_why:
                self.fused_notes.append(f"{_line(s)}T.Pipelined loop is not warp-specialised: {ws_why}")
            self.cluster_why = self.cluster_why or "the loop is not warp-specialised (the TMA pipeline without a " \
                "producer warpgroup has no multicast form)"
            release = None
            if single_gemm and self.threads and self.options[PassConfigKey.TL_CUDA_TMA_RELEASE]:
                release = "in_flight" if in_flight is not None else "wait0"
            prologue, head, tail, epilogue = tma.tma_loop(s, k, k0, n, stages, dist, producers, copies, remap,
                                                          consumers, self.tid, self.prove, self.ana.simplify,
                                                          release, self.threads)
            cons = [_with_stage(c, remap, tirx.floormod(k0, stages)) for c in consumers]
            if in_flight is not None:
                c_loc, nregs = in_flight
                cons = [tirx.AttrStmt(tirx.IntImm("int32", 0), WGMMA_PENDING_ATTR, tirx.IntImm("int32", 1),
                                      cons[0], span=cons[0].span)]
                zero = tirx.IntImm("int32", 0)
                epilogue = [extern(f"tl::wgmma_drain<{nregs}>", tirx.address_of(tirx.BufferLoad(c_loc, [zero]))),
                            *epilogue]
            loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, seq([*head, *cons, *tail]), None, ann or None, None,
                            s.span)
            return seq([*prologue, loop, *epilogue], s.span)
        prologue = []
        for j in range(dist):
            issue = produce(s.min + j, tirx.IntImm("int32", j))
            nc = const_int(n)
            if nc is None:
                issue = tirx.IfThenElse(tirx.LT(tirx.IntImm("int32", j), n), issue, None)
            elif j >= nc:
                issue = None
            prologue += [x for x in (issue, commit) if x is not None]
        ahead = k0 + dist
        issue = produce(k + dist, tirx.floormod(ahead, stages))
        cond = tirx.LT(ahead, n)
        if not self.prove(cond):
            issue = tirx.IfThenElse(self.ana.simplify(cond), issue, None)
        fused = self._fused_gemm(consumers, remap, stages) if in_flight is None else None
        if fused is not None:
            tmpl, a_buf, b_buf, c_loc, frag = fused

            def ptr(buf: Any, stage: Any) -> Any:
                return tirx.address_of(tirx.BufferLoad(buf, [stage] + [tirx.IntImm("int32", 0)] * (len(buf.shape)
                                                                                                   - 1)))

            zero = tirx.IntImm("int32", 0)
            f0 = tirx.address_of(tirx.BufferLoad(frag, [zero]))
            gemm_span = next((c.span for c in consumers if isinstance(c, tirx.Evaluate)
                              and tile_op_name(c) == "tl.gemm"), None)  # the user's T.gemm line
            prologue += [tirx.AllocBuffer(frag), extern(f"tl::cp_async_wait<{stages - 2}>"), sync_stmt(),
                         with_span(extern(f"tl::pipe_gemm_prefetch<{tmpl}>", ptr(a_buf, zero), ptr(b_buf, zero),
                                          f0), gemm_span)]
            cur, nxt = tirx.floormod(k0, stages), tirx.floormod(k0 + 1, stages)
            step = extern(f"tl::pipe_gemm_step<{tmpl}, {stages - 2}>", ptr(a_buf, cur), ptr(b_buf, cur),
                          ptr(a_buf, nxt), ptr(b_buf, nxt), tirx.address_of(tirx.BufferLoad(c_loc, [zero])), f0,
                          tirx.LT(k0 + 1, n))
            loop_body = seq([issue, commit, with_span(step, gemm_span)])
            loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, loop_body, None, ann or None, None, s.span)
            epilogue = [extern("tl::cp_async_wait<0>"), sync_stmt()]
            return seq([*prologue, loop, *epilogue], s.span)
        cons = [_with_stage(c, remap, tirx.floormod(k0, stages)) for c in consumers]
        epilogue = [extern("tl::cp_async_wait<0>"), sync_stmt()]
        if in_flight is not None:
            c_loc, nregs = in_flight
            if self.doubled:  # the written tiles alternate by k: step k writes one, step k-1's group reads the other
                cons = [_with_stage(c, self.doubled, tirx.floormod(k0, 2)) for c in cons]
            cons = [*cons[:-1], tirx.AttrStmt(tirx.IntImm("int32", 0), WGMMA_PENDING_ATTR, tirx.IntImm("int32", 1),
                                              cons[-1], span=cons[-1].span)]
            zero = tirx.IntImm("int32", 0)
            epilogue = [extern(f"tl::wgmma_drain<{nregs}>", tirx.address_of(tirx.BufferLoad(c_loc, [zero]))),
                        *epilogue]
        loop_body = seq([extern(f"tl::cp_async_wait<{dist - 1}>"), sync_stmt(), issue, commit, *cons])
        loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, loop_body, None, ann or None, None, s.span)
        return seq([*prologue, loop, *epilogue], s.span)

    def _ws_why(self, s: Any, single_gemm: bool, producers: list[Any], k: Any, consumers: list[Any]) -> str | None:
        """None when the TMA loop ``s`` becomes a producer warpgroup plus consumers; else why not ("" when
        switched off by pass_configs: nothing to report). A body of more than one wgmma ``T.gemm`` (attention:
        the scores' gemm, the softmax, the output's gemm) is warp-specialised when its gemms are all wgmma."""
        if self.options[PassConfigKey.TL_DISABLE_WARP_SPECIALIZED]:
            return ""
        if not single_gemm:
            gemms = _gemms_in(consumers)
            if not gemms or not all(self._is_wgmma(g) for g in gemms):
                return "its body has no wgmma T.gemm, or a T.gemm that keeps mma.sync"
            blocks = self._blocks_by_smem(s) if self.options[PassConfigKey.TL_CUDA_WS_KEEP_OCCUPANCY] else 1
            if blocks >= 2:
                return (f"its shared memory leaves room for {blocks} blocks per SM, and a producer warpgroup's "
                        "registers would leave room for one (larger tiles or more stages fill shared memory; "
                        "pass_configs tl.cuda.ws_keep_occupancy=False specialises it anyway)")
        if self.ws_loop_var is None or not self.ws_loop_var.same_as(s.loop_var):
            return self.ws_where or "the loop is not a statement of the kernel's body"
        if not self.threads or self.threads % 128 or self.threads + ws.PRODUCER_THREADS > 1024:
            return (f"threads={self.threads}: the consumers must be whole warpgroups (a multiple of 128) and leave "
                    f"room for a {ws.PRODUCER_THREADS}-thread producer warpgroup (1024 at most)")
        stmts = _flatten(self.body)
        at = next((i for i, x in enumerate(stmts) if isinstance(x, tirx.For) and x.loop_var.same_as(s.loop_var)),
                  len(stmts))
        # the producer runs none of the statements before the loop: a trip count the kernel stores in a scalar
        # there (attention's loop_range) is recomputed from that scalar's expression
        values = _scalars_before(stmts, at)
        self.ws_extent = _inline_scalars(s.extent, values)
        if _loads_in(self.ws_extent):
            return "its trip count is read from memory the kernel writes before the loop"
        # likewise the scalars the loads' coordinates read (a K/V offset set before the loop)
        self.ws_producers = [_inline_scalars(p, values) for p in producers]
        for p in self.ws_producers:
            local = [ld.source for ld in _loads_in(p) if not is_global(ld.source)]
            if local:
                return f"the loads read {local[0].name}, which the kernel computes in memory before the loop"
        shared = [b.var for b in ws.shared_binds(stmts[:at])]  # computed by both warpgroups before the split
        bound = [v for v in ws.bound_in(self.body) if not v.same_as(k) and not any(v.same_as(b) for b in shared)]
        for p in producers:
            for v in ws.free_vars(p):
                if any(v.same_as(b) for b in bound):
                    return f"the loads use {v.name}, which the kernel computes before the loop"
        return None

    def _blocks_by_smem(self, s: Any) -> int:
        """Blocks per SM the shared tiles used up to the end of the pipelined loop ``s`` leave room for (tiles
        used only after it may reuse the loop's bytes: tl.LowerSharedMemoryCUDA)."""
        stmts = _flatten(self.body)
        at = next((i for i, x in enumerate(stmts) if isinstance(x, tirx.For) and x.loop_var.same_as(s.loop_var)),
                  len(stmts) - 1)
        seen: list[Any] = []
        for x in stmts[:at + 1]:
            for b in buffers_touched(x):
                if is_shared(b) and not any(b.same_as(o) for o in seen):
                    seen.append(b)
        nbytes = sum(_bytes_1024(self.remap.get(o, o)) for o in seen)
        return SMEM_PER_SM // (nbytes + SMEM_RESERVED_PER_BLOCK)

    def _warp_specialized(self, s: Any, k: Any, k0: Any, n: Any, stages: int, producers: list[Any],
                          copies: list[tma.TmaCopy], remap: dict[Any, Any], consumers: list[Any], in_flight: Any,
                          general: bool = False) -> Any:
        base = tvm.ir.Var("ws_base", "int32")  # k-steps of the block's earlier tiles: 0 unless made persistent
        staged = [_with_stage(c, remap, tirx.floormod(k0 + base, stages)) for c in consumers]
        before, after_loop = [], []
        if general and self.options[PassConfigKey.TL_CUDA_PINGPONG]:
            turns = ws.pingpong(staged, self.tid, lambda c: isinstance(c, tirx.Evaluate) and
                                tile_op_name(c) == "tl.gemm") if self.threads == 256 else None
            if turns is None:
                self.fused_notes.append(f"{_line(s)}T.Pipelined loop has no ping-pong: it needs two consumer "
                                        "warpgroups (threads=256) and a T.gemm as a statement of the loop body")
            else:
                before, staged, after_loop = turns
        cons = seq(staged)
        drain = None
        if in_flight is not None:
            cons = tirx.AttrStmt(tirx.IntImm("int32", 0), WGMMA_PENDING_ATTR, tirx.IntImm("int32", 1), cons,
                                 span=cons.span)
            c_loc, nregs = in_flight  # the drain belongs to the consumers (the producer has no accumulator)
            drain = extern(f"tl::wgmma_drain<{nregs}>", tirx.address_of(tirx.BufferLoad(c_loc,
                                                                                         [tirx.IntImm("int32", 0)])))
        overlapped = None
        if general and self.options[PassConfigKey.TL_CUDA_ATTENTION_OVERLAP]:
            found = overlap.plan(consumers, self._is_wgmma)
            accs = None if isinstance(found, str) else [(self.locals.get(b), self.layouts.get(b)) for b in
                                                         (found.S, found.O)]
            if isinstance(found, str) or before or any(loc is None or lay is None for loc, lay in accs):
                why = found if isinstance(found, str) else \
                    "ping-pong is on" if before else "an accumulator has no register array"
                self.fused_notes.append(f"{_line(s)}T.Pipelined loop keeps each gemm's wait (no attention "
                                        f"overlap): {why}")
            else:
                (s_loc, s_lay), (o_loc, o_lay) = accs
                ov_plan = found  # its own name: the closure reads it when ws_loop calls it

                def overlapped(stage: Any, prev: Any, release: Any) -> tuple[list[Any], Any]:
                    return overlap.body(ov_plan, k0, stage, prev, lambda x, st: _with_stage(x, remap, st),
                                        (s_loc, s_lay.num_regs), (o_loc, o_lay.num_regs), release,
                                        lambda b: (self.locals.get(b), self.layouts.get(b)))
        if after_loop:
            drain = seq([drain, *after_loop]) if drain is not None else seq(after_loop)
        cplan = None  # the cluster plan (not "plan": the overlap closure above reads that name)
        if self.cluster_shape is not None and general:
            self.cluster_why = "the loop body is not one wgmma T.gemm (clusters are built for the GEMM mainloop)"
        elif self.cluster_shape is not None:
            stmts = _flatten(self.body)
            at = next((i for i, x in enumerate(stmts) if isinstance(x, tirx.For) and x.loop_var.same_as(k)),
                      len(stmts))

            def map_index(m: tma.TmaMap) -> int:
                if m not in self.tma_maps:
                    self.tma_maps.append(m)
                return self.tma_maps.index(m)

            cplan, why = cluster.plan(self.cluster_shape, self.ws_producers, copies, self.tma_maps,
                                     ws.shared_binds(stmts[:at]), self.block_vars, self.grid, map_index,
                                     lambda p: Region.of(p.value.args[0]))
            if cplan is None:
                self.cluster_why = why
            elif why:
                self.fused_notes.append(f"{_line(s)}tl.cuda.cluster: {why}")
            self.cluster_plan = cplan
        both, split = ws.ws_loop(s, k, k0, n, stages, self.ws_producers, copies, remap, cons, self.tid, self.threads,
                                 in_flight is not None, self.ana.simplify, base, drain, general, before,
                                 self.ws_extent, overlapped, cplan)
        self.ws_applied = (base, self.ws_extent)
        return seq([*both, split], s.span)

    def _tma_copies(self, producers: list[Any], consumers: list[Any] = ()) -> list[tma.TmaCopy] | None:
        """The producers as TMA copies (their maps recorded in ``self.tma_maps``), or None with the reason noted:
        on sm_90 with ``tl.disable_tma_lower`` off, when every producer is a whole 2-D tile into a wgmma layout
        (with ``tl.cuda.tma_plain_tiles``, or into a plain row-major tile, when one producer fills a wgmma tile)."""
        if self.options[PassConfigKey.TL_DISABLE_TMA_LOWER] or not self.arch.startswith("sm_90") or self.tid is None:
            return None
        plain = bool(self.options[PassConfigKey.TL_CUDA_TMA_PLAIN_TILES])  # plain tiles too (SWIZZLE_NONE boxes)
        written = tma.written_tiles(list(consumers)) if plain else frozenset()
        swizzle, as_128b = self.swizzle, []
        if self.options[PassConfigKey.TL_CUDA_TMA_MMA_TILES]:  # mma.sync tiles of 128-byte rows: SWIZZLE_128B boxes
            as_128b = [t for t in map(_producer_dst, producers) if t is not None
                       and tma.mma_tile_as_128b(t, self.swizzle.get(t, 0))]
            swizzle = {**self.swizzle, **{t: WGMMA_SWIZZLE_BASE + 128 for t in as_128b}}
        plans = [tma.plan_copy(p, swizzle, plain, self.index_tiles, written) for p in producers]
        if not any(is_wgmma_swizzle(swizzle.get(_producer_dst(p), 0)) for p in producers):
            return None  # no producer fills a wgmma tile (tiles for mma.sync or FMA): nothing to report
        hinted = [p for p in producers if eviction_of(p)]
        if hinted:  # neither carries the hint on sm_90: our TMA loads have none, cp.async's is miscompiled there
            from ..common.notes import at_line

            self.fused_notes.append(f"{at_line(hinted[0])}T.copy eviction_policy not applied to the T.Pipelined "
                                    "loads on sm_90: TMA loads carry no L2 hint here, and ptxas 13.0 can miscompile "
                                    "cp.async with one (docs/cuda.md, Steering tools)")
        why = next((w for m, w in plans if m is None), "")
        if why and as_128b:
            why += (" (tl.cuda.tma_mma_tiles takes mma.sync tiles of 128-byte rows only: "
                    f"{', '.join(t.name for t in as_128b)} qualified)")
        if why and not plain and not as_128b and any(
                m is None and not is_wgmma_swizzle(self.swizzle.get(_producer_dst(p), 0))
                for (m, _), p in zip(plans, producers)):
            why += " (pass_configs tl.cuda.tma_plain_tiles=True loads plain tiles by TMA too)"
        if why:
            self.fused_notes.append(f"T.Pipelined loads keep cp.async, not TMA: {why}")
            return None
        out = []
        self.tma_aligned += [t for t in as_128b if not any(t.same_as(x) for x in self.tma_aligned)]
        for (m, _), p in zip(plans, producers):
            if m not in self.tma_maps:
                self.tma_maps.append(m)
            ext = [int(x) for x in Region.of(p.value.args[1]).extents]  # a plain tile may be 1-D (one row)
            rows, cols = (ext[0] if len(ext) == 2 else 1), ext[-1]
            out.append(tma.TmaCopy(self.tma_maps.index(m), rows, cols, m.box[0],
                                   rows * cols * dtype_bytes(m.dtype), m.rank))
        return out

    def _wgmma_in_flight(self, consumers: list[Any], remap: dict[Any, Any], stages: int,
                         tma: bool = False) -> tuple | None:
        """(accumulator register array, its register count) when the loop's wgmma T.gemm may leave its group in
        flight across k-steps; else None, with the reason noted for every wgmma gemm of the body. With
        ``tl.cuda.wgmma_double_buffer``, ``self.doubled`` is then the tiles the body's nests write for the gemm,
        each given two copies (empty when the body is the loads and the gemm alone)."""
        self.doubled = {}
        gemms = [g for g in _gemms_in(consumers) if self._is_wgmma(g)]
        if not gemms:
            return None

        def keep(why: str) -> None:
            self.doubled = {}
            self._note(gemms, why)

        if not self.options[PassConfigKey.TL_CUDA_WGMMA_PIPELINE]:
            return keep("pass_configs 'tl.cuda.wgmma_pipeline' is False")
        if stages < 3:
            return keep(f"num_stages={stages} leaves no shared stage to load into while a group is in flight "
                        "(num_stages >= 3 does)")
        if len(consumers) != 1 or not isinstance(consumers[0], tirx.Evaluate) or len(gemms) != 1:
            why = self._double_buffer(consumers, gemms, tma)
            if why is not None:
                return keep("the loop body has statements besides the loads and this T.gemm (they could touch the "
                            f"accumulator or the stages while a group is in flight){why}")
        ops = gemm_operands(consumers[-1], self.ana)
        if ops["clear"]:
            return keep("clear_accum=True writes the accumulator in every k-step")
        staged = {**remap, **self.doubled}
        if ops["a"].buffer not in staged or ops["b"].buffer not in staged:
            return keep("A or B is not a tile the loop loads")
        c = ops["c"].buffer
        if c not in self.locals:
            return keep("the accumulator has no register array")
        self.remap.update(self.doubled)  # the written tiles' two copies replace their allocations
        return self.locals[c], self.layouts[c].num_regs


    def _double_buffer(self, consumers: list[Any], gemms: list[Any], tma: bool) -> str | None:
        """``tl.cuda.wgmma_double_buffer``: when the body after the loads is ``T.Parallel`` nests writing shared
        tiles the one wgmma ``T.gemm`` (the last statement) reads whole as A or B — the dequantised prefill's
        decode — set ``self.doubled`` to those tiles' two-copy twins and return None; else what to add to the
        caller's reason ("" when the key is off)."""
        if not self.options[PassConfigKey.TL_CUDA_WGMMA_DOUBLE_BUFFER]:
            return ""
        gemm = consumers[-1]
        nests = consumers[:-1]
        if len(gemms) != 1 or not gemm.same_as(gemms[0]) or not nests or not all(
                isinstance(x, tirx.For) and PARALLEL_ATTR in (x.annotations or {}) for x in nests):
            return "; tl.cuda.wgmma_double_buffer takes T.Parallel nests followed by the T.gemm only"
        if tma:
            return "; tl.cuda.wgmma_double_buffer: not with TMA loads (cp.async loops only)"
        ops = gemm_operands(gemm, self.ana)
        operands = [r for r in (ops["a"], ops["b"]) if is_shared(r.buffer)]
        written: list[Any] = []
        for x in nests:
            for st in _stores_in(x):
                b = st.buffer
                if b.scope() in ("local", "local.var"):
                    continue
                if not any(b.same_as(r.buffer) and is_whole_tile(r) for r in operands):
                    return (f"; tl.cuda.wgmma_double_buffer: a nest writes {b.name}, which is not a whole shared A "
                            "or B tile of the T.gemm")
                if not any(b.same_as(w) for w in written):
                    written.append(b)
        inside = count_uses(seq(consumers))
        for b in written:
            if self.uses.get(b, 0) != inside.get(b, 0):
                return f"; tl.cuda.wgmma_double_buffer: {b.name} is used outside the loop"
            if any(ld.source.same_as(b) for x in nests for ld in _loads_in(x)):
                return f"; tl.cuda.wgmma_double_buffer: a nest reads {b.name}, which it writes"
        if not written:
            return "; tl.cuda.wgmma_double_buffer: the nests write no tile of the T.gemm"
        extra = sum(_bytes_1024(b) for b in written)
        have = self._loop_smem_bytes()
        if have + extra > SMEM_BLOCK_LIMIT:
            return (f"; tl.cuda.wgmma_double_buffer: a second copy of {', '.join(b.name for b in written)} "
                    f"({extra // 1024} KB) does not fit the block's shared memory beside the loop's "
                    f"{have // 1024} KB")
        self.doubled = {b: tirx.decl_buffer([2, *[int(x) for x in b.shape]], str(b.dtype), b.name, scope=b.scope())
                        for b in written}  # allocated (self.remap) only when the group does stay in flight
        return None

    def _loop_smem_bytes(self) -> int:
        """Bytes of the shared tiles the kernel allocates, multi-buffered ones counted with their stages, each
        rounded up to 1024 (wgmma tiles' boundary): an upper bound of the loop's share."""
        seen: list[Any] = []

        def visit(a: Any) -> Any:
            if is_shared(a.buffer) and not any(a.buffer.same_as(o) for o in seen):
                seen.append(a.buffer)
            return a

        tvm_ffi.structural_map(self.body, [(tirx.AllocBuffer, visit)])
        return sum(_bytes_1024(self.remap.get(o, o)) for o in seen)

    def _fused_gemm(self, consumers: list[Any], remap: dict[Any, Any], stages: int) -> tuple | None:
        """When the consumer part is one tensor-core T.gemm on the pipelined tiles (the quickstart's loop), the
        parameters of the fused mainloop template; else None — then, for each mma.sync T.gemm of the loop, a note
        (``tl.notes``) saying which condition failed."""
        from ..common.notes import at_line

        mma = [g for g in _gemms_in(consumers)
               if getattr(self.layouts.get(Region.of(g.value.args[2]).buffer), "kind", None) == "mma"]

        def no(why: str) -> None:
            for g in mma:
                self.fused_notes.append(f"{at_line(g)}T.gemm does not take the fused pipelined mainloop "
                                        f"(tl::pipe_gemm_step): {why}")
            return None

        if not self.options[PassConfigKey.TL_CUDA_FUSED_GEMM]:
            return no("pass_configs 'tl.cuda.fused_gemm' is False")
        if len(consumers) != 1 or not isinstance(consumers[0], tirx.Evaluate) or \
                tile_op_name(consumers[0]) != "tl.gemm":
            return no("the loop body has statements besides the T.copy loads and one T.gemm")
        ops = gemm_operands(consumers[0], self.ana)
        a, b, c = ops["a"].buffer, ops["b"].buffer, ops["c"].buffer
        lay = self.layouts.get(c)
        if lay is None or lay.kind != "mma":
            return None  # not a tensor-core mma.sync gemm: no fused mainloop to miss
        if str(c.dtype) != "float32":
            return no(f"the accumulator {c.name} is {c.dtype}; the fused mainloop accumulates in float32")
        if ops["clear"]:
            return no("clear_accum=True")
        if a not in remap or b not in remap:
            return no("A or B is not a tile the loop loads with T.copy")
        if not (is_whole_tile(ops["a"]) and is_whole_tile(ops["b"])):
            return no("A or B is a part of a tile, not the whole tile")
        if len(a.shape) != 2 or len(b.shape) != 2 or str(a.dtype) not in MMA_DTYPES or a.dtype != b.dtype:
            return no(f"A ({a.dtype}) and B ({b.dtype}) are not 2-D tiles of one tensor-core dtype")
        mt, nt = lay.mma_tiles
        frag = tirx.decl_buffer((mt * 4 + nt * 2,), "uint32", "mma_frag", scope="local")
        swa, swb = self.swizzle.get(a, 0), self.swizzle.get(b, 0)
        tmpl = (f"{ops['M']}, {ops['N']}, {ops['K']}, {lay.warp_m}, {lay.warp_n}, {int(ops['ta'])}, {int(ops['tb'])}, "
                f"{swa}, {swb}")
        return tmpl, remap[a], remap[b], self.locals[c], frag


def _line(s: Any) -> str:
    loc = location_of(s.span)
    return f"line {loc.line}: " if loc is not None else ""


def _thread_loop(func: Any) -> Any:
    found: list[Any] = []

    def visit(x: Any) -> Any:
        if x.kind == tirx.ForKind.THREAD_BINDING and x.thread_binding is not None and \
                str(x.thread_binding.thread_tag) == "threadIdx.x":
            found.append(x)
        return x

    tvm_ffi.structural_map(func.body, [(tirx.For, visit)])
    return found[0] if len(found) == 1 else None


SMEM_PER_SM = 233472  # sm_90: 228 KiB of shared memory per SM ...
SMEM_BLOCK_LIMIT = 232448  # ... of which one block may have 227 KiB
SMEM_RESERVED_PER_BLOCK = 1024  # ... of which the driver keeps 1 KiB per resident block


def _ws_candidate(func: Any) -> tuple[Any, str]:
    """(the loop variable of the kernel's one T.Pipelined loop when it is a statement of the thread loop's body,
    else None; why not)."""
    loop = _thread_loop(func)
    pipelined: list[Any] = []

    def visit(x: Any) -> Any:
        if STAGES_ATTR in x.annotations:
            pipelined.append(x)
        return x

    tvm_ffi.structural_map(func.body, [(tirx.For, visit)])
    if len(pipelined) != 1:
        return None, f"the kernel has {len(pipelined)} T.Pipelined loops (one producer warpgroup serves one loop)"
    if loop is None or not any(isinstance(x, tirx.For) and x.loop_var.same_as(pipelined[0].loop_var)
                               for x in _flatten(loop.body)):
        return None, "the loop is inside another statement (a producer warpgroup runs a loop of the kernel's body)"
    return pipelined[0].loop_var, ""


def _persistent_ctas(options: PassConfig, arch: str) -> int | None:
    """How many blocks a persistent warp-specialised kernel launches (None: not persistent)."""
    value = options[PassConfigKey.TL_CUDA_PERSISTENT]
    if value < 0:
        return None
    return value or ws.SM_COUNT.get(arch)


def _split_thread_body(func: Any, guard: Any = None) -> Any:
    """Move the statements around the warp-specialised loop into its consumer part (see sm90/warp_specialize)."""

    def visit(x: Any) -> Any:
        if x.kind == tirx.ForKind.THREAD_BINDING and x.thread_binding is not None and \
                str(x.thread_binding.thread_tag) == "threadIdx.x":
            return tirx.For(x.loop_var, x.min, x.extent, x.kind, ws.split_thread_body(x.body, guard),
                            x.thread_binding,
                            x.annotations, x.step, x.span)
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, visit)]))


def pipeline_cuda(func: tirx.PrimFunc, options: PassConfig = DEFAULT, arch: str = "sm_90") -> tirx.PrimFunc:
    pipe = PipelineCUDA(func, count_uses(func.body), options, arch)
    func = pipe.run(func)
    if pipe.ws_applied:
        base, n = pipe.ws_applied
        guard = pipe.cluster_plan.guard() if pipe.cluster_plan is not None else None
        func = _split_thread_body(func, guard)
        ctas = _persistent_ctas(options, arch)
        if pipe.cluster_plan is not None:  # persistent clusters walk the tiles together (ws.persist)
            cp = pipe.cluster_plan
            func, pnote = ws.persist(func, base, n, ctas, (cp.cx, cp.cy, cp.rounded))
            func = cluster.finish(func, cp, persistent=bool(pnote))
            shared = [mc.axis for mc in cp.multicast if mc is not None]
            note = (f"cluster: {cp.cx}x{cp.cy} blocks, {len(shared)} of {len(cp.multicast)} tile loads multicast "
                    f"(each block loads 1/{max(mc.parts for mc in cp.multicast if mc is not None)} and writes it "
                    "into every block sharing the tile)")
            if pnote:
                pipe.fused_notes.append(pnote)
            elif ctas is not None and ctas % cp.size:
                note += f"; not persistent ({ctas} blocks are not whole clusters of {cp.size})"
        else:
            func, note = ws.persist(func, base, n, ctas)
        if note:
            pipe.fused_notes.append(note)
        if options[PassConfigKey.TL_CUDA_GEMM_PINGPONG]:  # two consumer warpgroups on alternate tiles
            func, pp_note = gemm_pingpong.lower(func, pipe.ws_loop_var, pipe.tid, pipe.threads, bool(note),
                                                pipe.cluster_plan is not None)  # tl.TmaStoreCUDA yields to it
            pipe.fused_notes.append(pp_note)
    elif options[PassConfigKey.TL_CUDA_GEMM_PINGPONG]:
        pipe.fused_notes.append("tl.cuda.gemm_pingpong not applied: the kernel has no warp-specialised TMA wgmma "
                                "GEMM loop (its other notes say why)")
    if pipe.cluster_shape is not None and pipe.cluster_plan is None:
        cx, cy, cz = pipe.cluster_shape
        pipe.fused_notes.append(f"tl.cuda.cluster ({cx}, {cy}, {cz}) not applied: "
                                f"{pipe.cluster_why or 'the kernel has no T.Pipelined TMA GEMM loop'}")
    if pipe.tma_maps:
        func = func.with_attr(tma.ATTR_TMA_MAPS, tma.encode_maps(pipe.tma_maps))
    if pipe.fused_notes:
        from ..common.notes import add_notes

        func = add_notes(func, pipe.fused_notes)
    if pipe.notes:
        old = func.attrs[ATTR_WGMMA_NOTES] if func.attrs is not None and ATTR_WGMMA_NOTES in func.attrs else []
        func = func.with_attr(ATTR_WGMMA_NOTES, [*[str(x) for x in old], *pipe.notes])
    if pipe.tma_aligned:  # tl.LowerSharedMemoryCUDA puts them on 1024 bytes (their multi-buffered twins)
        func = func.with_attr(ATTR_ALIGN_1024, [pipe.remap.get(b, b) for b in pipe.tma_aligned])
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

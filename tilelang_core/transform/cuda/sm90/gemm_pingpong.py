"""The ping-pong schedule of a persistent warp-specialised wgmma GEMM (pass_configs ``tl.cuda.gemm_pingpong``).

Why: in the warp-specialised persistent kernel (:mod:`.warp_specialize`) all consumer warpgroups work on one
output tile, so while they run its epilogue (the accumulators converted and stored) the tensor cores are idle —
the producer only loads ahead. Here the program's tile (``threads=128``: one warpgroup's worth) is given to each
of *two* consumer warpgroups, each with its own accumulator: warpgroup ``w`` takes tiles ``t = w, w + 2, ...`` of
the block's walk, and the two take turns at the mainloop, so one's epilogue runs while the other's wgmma keeps
the tensor cores busy (CUTLASS's "ping-pong" kernel). The producer is unchanged: it loads the stages of every tile
in walk order, so the stage ring's phases keep following the block's global k-step count ``g = t * n + k``::

    launch:      2 x 128 consumer threads + the 128-thread producer;  wg = threadIdx.x / 128 (consumers)
    consumer wg: (every use of threadIdx.x in its code reads threadIdx.x % 128: it is the program's 128 threads)
                 wg == 1: pass the turn to warpgroup 0                      (bar.arrive 2, 256)
                 for i < (count - wg + 1) / 2:  t = 2 i + wg
                     (the statements before the k loop: the accumulator cleared)
                     wait for the turn                                      (bar.sync 2 + wg, 256)
                     for k < n: wait full[g % s]; wgmma; release the stage  (g = t n + k, as now)
                     pass the turn to the other warpgroup                   (bar.arrive 3 - wg, 256)
                     drain; release the last stage; the epilogue (register stores) -- under the other's mainloop
                 count % 2 == wg: wait for the turn once more               (every arrival is matched)

``count`` is the block's tile count; the mainloops run in tile order (0, 1, 2, ... alternating warpgroups), which
is the order the producer fills the ring in, so a consumer never waits on a stage a later tile's load holds. The
empty barriers keep one arrival per consumer warp of *one* warpgroup (the program's 4): each stage is read by one
warpgroup. A ``__syncthreads`` left in a consumer's code (the per-tile meeting of :func:`.warp_specialize.persist`
is dropped) becomes a named barrier of that warpgroup alone (``bar.sync 4 + wg, 128``). The turn barriers are
``tl::pingpong_wait`` / ``tl::pingpong_pass`` of the attention ping-pong (named barriers 2 and 3).

:func:`apply` rewrites the kernel after ``persist`` (``tl.PipelineCUDA``), marking the consumer part (its
attribute's node is the warpgroup variable); :func:`finish` is called by ``tl.WarpSpecializeCUDA`` once every
tile op is lowered, to read the thread index modulo 128 and bind the warpgroup. Where it does not apply the kernel
keeps the cooperative schedule and :func:`apply` says why (a kernel note). ``tl::wgmma_gemm_ss`` finds its
warpgroup's part of the tile from ``threadIdx.x / 128``; :func:`finish` gives the consumers' calls ``OWN_TILE = 1``
(each warpgroup computes the whole tile of its own call).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...common.rewriter import seq
from ..common import buffers_touched, extern, extern_name, is_shared, is_sync, substitute
from .warp_specialize import ATTR_CONSUMER, ATTR_SPLIT

GROUPS = 2  # consumer warpgroups taking turns
GROUP_THREADS = 128
OWN_BARRIER = 4  # named barrier 4 + wg: one warpgroup's __syncthreads (1: the consumers', 2 and 3: the turns)


def _find(s: Any, pred: Any) -> list[Any]:
    found: list[Any] = []

    def visit(x: Any) -> Any:
        if pred(x):
            found.append(x)
        return x

    tvm_ffi.structural_map(s, [(tirx.AttrStmt, visit), (tirx.For, visit)])
    return found


def why_not(func: Any, k: Any, threads: int, persistent: bool) -> str:
    """Why the ping-pong does not apply to ``func`` (after ``persist``), or ""."""
    splits = _find(func.body, lambda x: isinstance(x, tirx.AttrStmt) and str(x.attr_key) == ATTR_SPLIT)
    if len(splits) != 1:
        return "the kernel has no warp-specialised GEMM loop"
    producer, consumer = splits[0].body.seq
    if int(producer.value):
        return "the loop body is not one wgmma T.gemm (attention has tl.cuda.pingpong)"
    if threads != GROUP_THREADS:
        return (f"threads={threads}: each consumer warpgroup takes the program's tile, so the program must be one "
                "warpgroup (threads=128; 2 x 128 consumers and the producer are launched)")
    if not persistent:
        return ("the kernel is not persistent (tl.cuda.persistent=-1, or no more output tiles than blocks): the "
                "warpgroups take turns over a block's walk of tiles")
    tiles = consumer.body
    loops = _find(tiles.body, lambda x: isinstance(x, tirx.For) and x.loop_var.same_as(k)) \
        if isinstance(tiles, tirx.For) else []
    if len(loops) != 1:
        return "the consumers' tile walk has an unexpected form"
    mainloop = [b for b in buffers_touched(loops[0]) if is_shared(b)]
    shared = [b for b in buffers_touched(tiles.body) if is_shared(b) and str(b.dtype) != "uint64" and
              not any(b.same_as(m) for m in mainloop)]
    if shared:
        return (f"the statements around the mainloop use the shared tile {shared[0].name} (each warpgroup would "
                "need its own copy)")
    return ""


def apply(func: Any, k: Any, tid: Any) -> Any:
    """The kernel with the ping-pong consumer part (see the module docstring); ``k`` is the mainloop's variable,
    ``tid`` the thread index. Call only where :func:`why_not` is ""."""
    wg = tvm.ir.Var("pp_wg", "int32")

    def split(s: Any) -> Any:
        if str(s.attr_key) != ATTR_SPLIT:
            return s
        producer, consumer = s.body.seq
        tiles = consumer.body
        t, count = tiles.loop_var, tiles.extent
        i = tvm.ir.Var("pp_iter", "int32")
        stmts = list(tiles.body.seq) if isinstance(tiles.body, tirx.SeqStmt) else [tiles.body]
        if stmts and is_sync(stmts[0]):  # persist's per-tile meeting: each warpgroup's tile is its own
            stmts = stmts[1:]

        def turn(x: Any) -> Any:
            if not x.loop_var.same_as(k):
                return x
            return seq([extern("tl::pingpong_wait", wg), x, extern("tl::pingpong_pass", wg)])

        body = seq([tirx.Bind(t, 2 * i + wg), tvm_ffi.structural_map(seq(stmts), [(tirx.For, turn)])])
        one, zero = tirx.IntImm("int32", 1), tirx.IntImm("int32", 0)
        walk = tirx.For(i, zero, tirx.floordiv(count - wg + 1, 2), tirx.ForKind.SERIAL, body)
        part = seq([  # wg stays free until finish binds it: the passes between see 128 threads (tid / 128 = 0)
            tirx.IfThenElse(tirx.EQ(wg, one), extern("tl::pingpong_pass", one), None),
            walk,
            tirx.IfThenElse(tirx.EQ(tirx.floormod(count, 2), wg), extern("tl::pingpong_wait", wg), None)])
        new_consumer = tirx.AttrStmt(wg, ATTR_CONSUMER, tirx.IntImm("int32", GROUPS), part)
        return tirx.AttrStmt(s.node, ATTR_SPLIT, tirx.IntImm("int32", GROUPS * GROUP_THREADS),
                             seq([producer, new_consumer]), span=s.span)

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, split)]))


def is_pingpong(consumer: Any) -> bool:
    """Whether a ``tl.ws_consumer`` attribute is :func:`apply`'s."""
    return isinstance(consumer.node, tvm.ir.Var) and int(consumer.value) == GROUPS


def finish(consumer: Any, tid: Any) -> Any:
    """The consumer part of :func:`apply`'s kernel as ``tl.WarpSpecializeCUDA`` emits it: each warpgroup's code
    reads ``threadIdx.x % 128``, the warpgroup index is ``threadIdx.x / 128``, and a ``__syncthreads`` is a named
    barrier of the warpgroup."""
    wg = consumer.node
    body = substitute(consumer.body, {tid: tirx.floormod(tid, GROUP_THREADS)})

    own = tirx.IfThenElse(tirx.EQ(wg, tirx.IntImm("int32", 0)),
                          extern(f"tl::named_barrier_sync<{OWN_BARRIER}, {GROUP_THREADS}>"),
                          extern(f"tl::named_barrier_sync<{OWN_BARRIER + 1}, {GROUP_THREADS}>"))

    def ev(e: Any) -> Any:
        return own if is_sync(e) else e

    def call(c: Any) -> Any:  # wgmma_gemm_ss reads its warpgroup from threadIdx.x: OWN_TILE makes it 0
        name = extern_name(c) if str(c.op.name) == "tirx.call_extern" else None
        if name is None or not name.startswith("tl::wgmma_gemm_ss<"):
            return c
        params = name[name.index("<") + 1:-1].split(",")
        tail = {10: ", 0, 1", 11: ", 1"}.get(len(params))
        if tail is None:
            raise ValueError(f"gemm ping-pong: unexpected {name}")
        return tirx.call_extern(str(c.ty.dtype), name[:-1] + tail + ">", *c.args[1:])

    body = tvm_ffi.structural_map(body, [(tirx.Evaluate, ev), (tvm.ir.Call, call)])
    return seq([tirx.Bind(wg, tirx.floordiv(tid, GROUP_THREADS)), body])


def lower(func: Any, k: Any, tid: Any, threads: int, persistent: bool, clustered: bool) -> tuple[Any, str]:
    """``tl.PipelineCUDA``'s entry, after ``persist``: (the kernel, its note). The epilogue keeps its register
    stores: ``tl.TmaStoreCUDA`` yields when ``tl.cuda.gemm_pingpong`` is on (both warpgroups would share its ring)."""
    why = "tl.cuda.cluster is on (clustered kernels are not built persistent here)" if clustered else \
        why_not(func, k, threads, persistent)
    if why:
        return func, f"tl.cuda.gemm_pingpong not applied: {why}"
    return apply(func, k, tid), ("gemm ping-pong: 2 consumer warpgroups of the program's 128 threads take "
                                 "alternate tiles of the block's walk and turns at the mainloop (named barriers 2 "
                                 "and 3), one's epilogue under the other's wgmma")

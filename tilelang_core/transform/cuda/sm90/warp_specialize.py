"""The warp-specialised form of a TMA-fed wgmma ``T.Pipelined`` loop on sm_90: a producer warpgroup and the
program's warpgroups as consumers, handing stages over on full/empty mbarriers.

Why: in the TMA pipeline of :mod:`.tma` one of the consumer threads issues the loads, and every k-step the whole
block meets at a ``__syncthreads`` (the stage about to be reloaded must be free). The loading thread's warp stalls
on the loads and the barrier, and all warpgroups wait for the slowest. Here a separate warpgroup (128 threads
added to the program's ``threads``; one of its threads issues) runs ahead of the consumers as far as the ring of
``s`` stages allows, and the consumers never meet in the loop::

    both:       thread 0: init full[j] (1 arrival + the stage's bytes), empty[j] (one arrival per consumer warp)
                __syncthreads()
    producer:   for k < n:  k >= s: wait empty[k % s], parity (k / s + 1) & 1     # tile k - s was consumed
                            expect_tx(full[k % s], bytes);  TMA boxes of tile k -> stage k % s
    consumers:  (the statements before the loop)
                for k < n:  wait full[k % s], parity (k / s) & 1               # tile k has landed
                            wgmma of tile k (one group left in flight: wait_group 1)
                            k >= 1, lane 0 of each warp: arrive empty[(k - 1) % s]   # step k-1's group retired
                (drain; the statements after the loop)

With ``wait_group 0`` in the step (``tl.cuda.wgmma_pipeline`` off or ``s < 3``) a step releases its own stage. The
loop is emitted at ``tl.PipelineCUDA`` as an attribute ``tl.ws_split`` over the producer part and the consumer
part (this module's :func:`ws_loop`), and :func:`split_thread_body` moves the statements around the loop into the
consumer part; ``tl.WarpSpecializeCUDA`` (``transform/cuda/warp_specialize_cuda.py``), after every barrier has been
placed, turns the attribute into the branch on ``threadIdx.x``, consumer barriers into named barriers and the
launch into ``threads + 128`` threads (with ``setmaxnreg`` rebalancing).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ....language._ir import Region, dtype_of
from ...common.rewriter import const_int, seq
from ..common import extern, loads_in, substitute, sync_stmt
from .tma import TmaCopy, box_loads

ATTR_SPLIT = "tl.ws_split"  # value: the consumer threads; body: Seq[producer attr, consumer attr]
ATTR_PRODUCER = "tl.ws_producer"
ATTR_CONSUMER = "tl.ws_consumer"
ATTR_BOTH = "tl.ws_both"  # the barriers' initialisation, run by every thread before the split
PRODUCER_THREADS = 128
SM_COUNT = {"sm_90": 132, "sm_90a": 132}  # H100 / H200 SXM: the blocks of a persistent kernel


def ws_loop(s: Any, k: Any, k0: Any, n: Any, stages: int, producers: list[Any], copies: list[TmaCopy],
            remap: dict[Any, Any], consumer: Any, tid: Any, threads: int, in_flight: bool, simplify: Any,
            base: Any, drain: Any = None, general: bool = False,
            before: list[Any] | None = None, n_producer: Any = None,
            overlapped: Any = None, cluster: Any = None) -> tuple[list[Any], Any]:
    """(statements every thread runs first, the ``tl.ws_split`` attribute) for the loop ``s``; ``consumer`` is the
    consumer part of one iteration (the wgmma ``T.gemm`` on stage ``(base + k0) % stages``), ``drain`` what the
    consumers run after the loop. ``base``: the k-steps of earlier output tiles of this block (0 unless
    :func:`persist` makes the block persistent), so stages and barrier phases run on across tiles.

    ``general``: the consumer part is any body (an attention step: two gemms and the softmax between them), not
    one wgmma ``T.gemm``. Its reads of the stage may be any instructions, so each warp meets at ``__syncwarp``
    before its lane 0 releases the stage; and the producer is marked (``tl.ws_producer`` = 1) for the register
    split of :func:`register_split`'s ``general`` form.
    ``before``: what the consumers run before their loop (the ping-pong's first turn). ``n_producer``: the trip
    count as the producer computes it (``n`` with the scalars the consumers set before the loop inlined; the
    producer runs none of those statements). ``cluster``: a :class:`.cluster.ClusterPlan` (thread-block clusters
    with multicast loads: its module docstring), or None."""
    n_producer = n if n_producer is None else n_producer
    # ``overlapped``: a function (this iteration's stage, the previous one's, release(stage)) -> (the iteration's
    # statements, after(n, last stage)) building a body that releases stages itself (sm90/overlap.py)
    full = tirx.decl_buffer((stages,), "uint64", "tma_bar", scope="shared")
    empty = tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared")
    stage_bytes = sum(c.nbytes for c in copies)
    zero = tirx.IntImm("int32", 0)

    def ptr(bar: Any, stage: Any) -> Any:
        return tirx.address_of(tirx.BufferLoad(bar, [stage]))

    def parity(e: Any) -> Any:
        return tirx.Cast("uint32", simplify(tirx.floormod(e, 2)))

    init = [extern("tl::mbar_init", ptr(full, tirx.IntImm("int32", j)), tirx.IntImm("uint32", 1))
            for j in range(stages)]
    blocks = 1 if cluster is None else cluster.size  # a stage is free once every block's consumers released it
    init += [extern("tl::mbar_init", ptr(empty, tirx.IntImm("int32", j)),
                    tirx.IntImm("uint32", threads // 32 * blocks)) for j in range(stages)]
    both = [tirx.AllocBuffer(full), tirx.AllocBuffer(empty),
            tirx.AttrStmt(zero, ATTR_BOTH, zero, seq([
                tirx.IfThenElse(tirx.EQ(tid, zero), seq([*init, extern("tl::mbar_fence_init")]), None),
                sync_stmt(), *([extern("tl::cluster_sync")] if cluster is not None else [])]))]

    def arrive(bar: Any) -> Any:
        return extern("tl::mbar_arrive", bar) if cluster is None else cluster.arrive(bar)

    # the producer: its own loop variable (the consumer loop keeps the program's)
    kp = tvm.ir.Var(f"{k.name}_load", dtype_of(k) or "int32")
    kp0 = kp - s.min if const_int(s.min) != 0 else kp
    g = kp0 + base  # this block's k-step count so far
    stage = simplify(tirx.floormod(g, stages))
    body = []
    free = extern("tl::mbar_wait", ptr(empty, stage), parity(tirx.floordiv(g, stages) + 1))
    if const_int(base) != 0 or const_int(n_producer) is None or const_int(n_producer) > stages:
        body.append(tirx.IfThenElse(simplify(tirx.GE(g, stages)), free, None))
    body.append(extern("tl::mbar_expect_tx", ptr(full, stage), tirx.IntImm("uint32", stage_bytes)))
    for i, (p, c) in enumerate(zip(producers, copies)):
        span = p.span  # the user's T.copy line, kept on its TMA loads (source-line builds)
        p = substitute(p, {k: kp})
        src, dst = Region.of(p.value.args[0]), Region.of(p.value.args[1])
        if cluster is not None and cluster.multicast[i] is not None:  # this block's slice, to every block sharing it
            body += cluster.loads(i, list(src.mins), remap[dst.buffer], stage, ptr(full, stage), simplify, span)
        else:
            body += box_loads(c, c.rank, list(src.mins), remap[dst.buffer], stage, ptr(full, stage), simplify, span)
    producer = tirx.For(kp, s.min, n_producer, tirx.ForKind.SERIAL, seq(body), None, None, None, s.span)

    g = k0 + base
    cstage = simplify(tirx.floormod(g, stages))
    wait = extern("tl::mbar_wait", ptr(full, cstage), parity(tirx.floordiv(g, stages)))
    lane0 = tirx.EQ(tirx.floormod(tid, 32), zero)
    after = [drain] if drain is not None else []
    if in_flight:  # step k's wait_group 1 retired step k-1's group: its stage is free
        release = tirx.IfThenElse(tirx.And(simplify(tirx.GE(k0, 1)), lane0),
                                  arrive(ptr(empty, simplify(tirx.floormod(g - 1, stages)))),
                                  None)
        # the last step's stage, once the drain has retired its group (the next tile's loads wait for it)
        after.append(tirx.IfThenElse(lane0, arrive(ptr(empty, simplify(
            tirx.floormod(base + n - 1, stages)))), None))
    else:
        release = tirx.IfThenElse(lane0, arrive(ptr(empty, cstage)), None)
        if general:  # every lane of the warp is done with the stage before lane 0 says so
            release = seq([extern("__syncwarp"), release])
    if overlapped is not None:
        def release_of(st: Any) -> list[Any]:
            return [extern("__syncwarp"), tirx.IfThenElse(lane0, extern("tl::mbar_arrive", ptr(empty, st)), None)]

        prev = simplify(tirx.floormod(g - 1 + stages, stages))
        stmts, finish = overlapped(cstage, prev, release_of)
        consumer, release = seq(stmts), None
        after.append(finish(n, simplify(tirx.floormod(base + n - 1 + stages, stages))))
    loop = tirx.For(k, s.min, n, tirx.ForKind.SERIAL, seq([wait, consumer, release]), None, None, None, s.span)
    split = tirx.AttrStmt(zero, ATTR_SPLIT, tirx.IntImm("int32", threads), seq([
        # the producer's mark for the register split: 1 general, 2 a cluster's GEMM producer, 0 otherwise
        tirx.AttrStmt(zero, ATTR_PRODUCER, tirx.IntImm("int32", 1 if general else 2 if cluster is not None else 0),
                      producer),
        tirx.AttrStmt(zero, ATTR_CONSUMER, zero, seq([*(before or []), loop, *after]))]), span=s.span)
    return both, split


def pingpong(consumers: list[Any], tid: Any, is_gemm: Any) -> tuple[list[Any], list[Any], list[Any]] | None:
    """(before the loop, the iteration's statements, after the loop) with two consumer warpgroups taking turns at
    the iteration's first ``T.gemm`` (``is_gemm``), or None when that gemm is not a statement of the body itself.

    Warpgroup 0 goes first: warpgroup 1 passes it the turn before the loop, each passes it back after its gemm,
    and warpgroup 0 takes the last pass after the loop, so every arrival at the two named barriers is matched."""
    at = next((i for i, c in enumerate(consumers) if is_gemm(c)), None)
    if at is None:
        return None
    wg = tirx.floordiv(tid, 128)
    one = tirx.IntImm("int32", 1)
    body = [extern("tl::pingpong_wait", wg), *consumers[:at + 1], extern("tl::pingpong_pass", wg),
            *consumers[at + 1:]]
    first = tirx.IfThenElse(tirx.EQ(wg, one), extern("tl::pingpong_pass", one), None)
    last = tirx.IfThenElse(tirx.EQ(wg, tirx.IntImm("int32", 0)), extern("tl::pingpong_wait",
                                                                        tirx.IntImm("int32", 0)), None)
    return [first], body, [last]


def _flatten(s: Any) -> list[Any]:
    if isinstance(s, tirx.SeqStmt):
        return [y for x in s.seq for y in _flatten(x)]
    return [s]


def _is_attr(s: Any, key: str) -> bool:
    return isinstance(s, tirx.AttrStmt) and str(s.attr_key) == key


def shared_binds(stmts: list[Any]) -> list[Any]:
    """The let bindings among ``stmts`` (the thread body's statements before the loop) that both warpgroups can
    compute: of index expressions (no memory reads) of variables bound outside or by earlier such bindings —
    ``T.use_swizzle``'s rasterised block indices, offsets of the block's tile."""
    local = bound_in(seq(stmts)) if stmts else set()
    out: list[Any] = []
    for x in stmts:
        if not isinstance(x, tirx.Bind):
            continue
        reads = loads_in(x.value)
        deps = [v for v in free_vars(x.value) if any(v.same_as(b) for b in local)]
        if not reads and all(any(v.same_as(b.var) for b in out) for v in deps):
            out.append(x)
    return out


def split_thread_body(body: Any, guard: Any = None) -> Any:
    """The thread loop's body with the statements before and after the ``tl.ws_split`` (other than allocations,
    which move to the top, the barriers' initialisation and :func:`shared_binds`, which stay before the split)
    moved into its consumer part, so the producer warpgroup runs nothing but its loop. ``guard``: a condition on
    the block indices the statements after the loop (the epilogue) run under (a cluster's grid rounded up: the
    extra blocks load and compute, for their peers' sake, but store nothing)."""
    stmts = _flatten(body)
    at = next(i for i, x in enumerate(stmts) if _is_attr(x, ATTR_SPLIT))
    binds = shared_binds(stmts[:at])
    allocs = [x for x in stmts if isinstance(x, (tirx.AllocBuffer, tirx.DeclBuffer))]
    both = [x for x in stmts if _is_attr(x, ATTR_BOTH)]

    def kept(x: Any) -> bool:
        return isinstance(x, (tirx.AllocBuffer, tirx.DeclBuffer)) or _is_attr(x, ATTR_BOTH) or \
            any(x.same_as(b) for b in binds)

    rest = [x for x in stmts if not kept(x)]
    j = next(i for i, x in enumerate(rest) if _is_attr(x, ATTR_SPLIT))
    split = rest[j]
    producer, consumer = split.body.seq
    after = rest[j + 1:]
    if guard is not None and after:
        after = [tirx.IfThenElse(guard, seq(after), None)]
    consumer = tirx.AttrStmt(consumer.node, ATTR_CONSUMER, consumer.value,
                             seq([*rest[:j], consumer.body, *after]))
    new_split = tirx.AttrStmt(split.node, ATTR_SPLIT, split.value, seq([producer, consumer]), span=split.span)
    return seq([*allocs, *binds, *both, new_split])


def bound_in(body: Any) -> set[Any]:
    """Variables the statements of ``body`` bind (let bindings, loop variables)."""
    out: set[Any] = set()

    def bind(x: Any) -> Any:
        out.add(x.var)
        return x

    def loop(x: Any) -> Any:
        out.add(x.loop_var)
        return x

    tvm_ffi.structural_map(body, [(tirx.Bind, bind), (tirx.For, loop)])
    return out


def free_vars(node: Any) -> list[Any]:
    found: list[Any] = []

    def var(v: Any) -> Any:
        found.append(v)
        return v

    tvm_ffi.structural_map(node, [(tvm.ir.Var, var)])
    return found


def block_loops(func: Any) -> tuple[list[Any], Any]:
    """(the blockIdx loops around the thread loop, outermost first; the thread loop)."""
    loops: list[Any] = []
    s = func.body
    while isinstance(s, (tirx.For, tirx.AttrStmt)) and not (
            isinstance(s, tirx.For) and s.thread_binding is not None and
            str(s.thread_binding.thread_tag) == "threadIdx.x"):
        if isinstance(s, tirx.For) and s.thread_binding is not None and \
                str(s.thread_binding.thread_tag).startswith("blockIdx."):
            loops.append(s)
        s = s.body
    return loops, (s if isinstance(s, tirx.For) else None)


def persist(func: Any, base: Any, n: Any, ctas: int | None,
            cluster: tuple[int, int, dict[str, int]] | None = None) -> tuple[Any, str]:
    """Make the warp-specialised kernel persistent: ``ctas`` blocks (one per SM) walk the output tiles in order,
    ``tile = blockIdx.x + t * ctas``, each tile's (bx, by) decoded from it (through ``T.use_swizzle``'s
    rasterisation when the program has one), the stages and barrier phases running on across tiles (``base =
    t * n``), so the producer loads the next tile while the consumers run this tile's epilogue. Otherwise (no
    count, a grid that is not a constant 1-D or 2-D one, or no more tiles than blocks) ``base`` is 0. Returns the
    kernel and a note ("" when not persistent).

    ``cluster``: (cx, cy, the grid extents rounded up to multiples of them) for a kernel launched in thread-block
    clusters (sm90/cluster.py): the ``ctas`` blocks form clusters of ``cx * cy`` consecutive blocks (the launch's
    cluster shape becomes ``(cx * cy, 1, 1)``), and each cluster walks the grid's ``cx x cy`` tiles together,
    ``cluster tile = blockIdx.x / C + t * (ctas / C)``, its block of rank ``r = blockIdx.x % C`` taking tile
    ``(r % cx, r / cx)`` of it (so ``blockIdx % cx`` and ``/ cx`` of the decoded indices are the rank's, as the
    multicast masks assume), every block of a cluster walking the same number of tiles."""
    from .. import common as cuda_common

    loops, tloop = block_loops(func)
    grid = [const_int(lp.extent) for lp in loops]
    launch = func.attrs[cuda_common.ATTR_LAUNCH]
    plain = func.with_body(substitute(func.body, {base: tirx.IntImm("int32", 0)}))
    names = [str(lp.thread_binding.thread_tag) for lp in loops]
    if ctas is None or tloop is None or None in grid or not 1 <= len(loops) <= 2 or names[0] != "blockIdx.x" or \
            (len(loops) == 2 and names[1] != "blockIdx.y"):
        return plain, ""
    if any(v.same_as(lp.loop_var) for v in free_vars(n) for lp in loops):
        # base = t * n counts every earlier tile's k-steps only when all tiles have the same count (causal: not)
        return plain, ""
    cx, cy, rounded = cluster if cluster is not None else (1, 1, {})
    size = cx * cy
    gx = rounded.get("blockIdx.x", grid[0])
    gy = rounded.get("blockIdx.y", grid[1] if len(grid) == 2 else 1)
    tiles = gx * gy
    if tiles <= ctas or ctas % size:
        return plain, ""
    groups, gxc = ctas // size, gx // cx  # clusters launched; cluster tiles along x
    stmts = _flatten(tloop.body)
    at = next(i for i, x in enumerate(stmts) if _is_attr(x, ATTR_SPLIT))
    x = loops[0].loop_var
    kept = [y for y in stmts[:at] if not isinstance(y, tirx.Bind)]
    split = stmts[at]
    producer, consumer = split.body.seq
    if size == 1:
        count = tirx.floordiv(tirx.IntImm("int32", tiles - 1) - x, ctas) + 1
    else:  # every block of a cluster walks its cluster's tiles
        count = tirx.floordiv(tirx.IntImm("int32", tiles // size - 1) - tirx.floordiv(x, size), groups) + 1

    def over_tiles(part: Any, first: list[Any]) -> Any:
        t = tvm.ir.Var("tile_iter", "int32")  # one per part: a variable is bound once
        if size == 1:
            lin = x + t * ctas
            bx, by = tirx.floormod(lin, gx), tirx.floordiv(lin, gx)
        else:
            lin = tirx.floordiv(x, size) + t * groups
            rank = tirx.floormod(x, size)
            bx = tirx.floormod(lin, gxc) * cx + tirx.floormod(rank, cx)
            by = tirx.floordiv(lin, gxc) * cy + tirx.floordiv(rank, cx)
        vmap: dict[Any, Any] = {x: bx, base: t * n}
        if len(loops) == 2:
            vmap[loops[1].loop_var] = by
        for b in stmts[:at]:  # the shared let bindings (rasterised block indices): inlined into both parts
            if isinstance(b, tirx.Bind):
                vmap[b.var] = substitute(b.value, vmap)
        body = seq([*first, substitute(part.body, vmap)])
        return tirx.AttrStmt(part.node, str(part.attr_key), part.value,
                             tirx.For(t, tirx.IntImm("int32", 0), count, tirx.ForKind.SERIAL, body))

    # the consumers meet once per tile (a tile's epilogue may use shared memory the next tile's writes again)
    split = tirx.AttrStmt(split.node, ATTR_SPLIT, split.value,
                          seq([over_tiles(producer, []), over_tiles(consumer, [sync_stmt()])]), span=split.span)
    tloop = tirx.For(tloop.loop_var, tloop.min, tloop.extent, tloop.kind, seq([*kept, *stmts[at + 1:], split])
                     if stmts[at + 1:] else seq([*kept, split]), tloop.thread_binding, tloop.annotations,
                     tloop.step, tloop.span)
    body: Any = tloop
    for i, lp in reversed(list(enumerate(loops))):
        ext = ctas if i == 0 else 1
        iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, ext), lp.loop_var, tirx.IterVar.ThreadIndex,
                          str(lp.thread_binding.thread_tag))
        body = tirx.For(lp.loop_var, lp.min, tirx.IntImm("int32", ext), lp.kind, body, iv, lp.annotations, lp.step,
                        lp.span)
    out = func.with_body(_rewrap(func.body, loops[0], body))
    out = out.with_attr(cuda_common.ATTR_LAUNCH, {"grid": [ctas, 1, 1], "threads": int(launch["threads"])})
    if size > 1:
        return out, f"persistent: {ctas} blocks in clusters of {size} walk the {tiles} output tiles, {cx}x{cy} at " \
                    "a time (a producer loads the next tile's stages during this tile's epilogue)"
    return out, f"persistent: {ctas} blocks walk the {tiles} output tiles (a producer loads the next tile's stages " \
                "during this tile's epilogue)"


def _rewrap(s: Any, old: Any, new: Any) -> Any:
    """``s`` with the statement ``old`` (reached through loops and attributes) replaced by ``new``."""
    if s.same_as(old):
        return new
    if isinstance(s, tirx.For):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, _rewrap(s.body, old, new), s.thread_binding,
                        s.annotations, s.step, s.span)
    if isinstance(s, tirx.AttrStmt):
        return tirx.AttrStmt(s.node, s.attr_key, s.value, _rewrap(s.body, old, new), span=s.span)
    raise ValueError(f"persist: unexpected {type(s).__name__} around the kernel's block loops")

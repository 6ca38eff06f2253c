"""Thread-block clusters with TMA multicast for the warp-specialised wgmma GEMM on sm_90a (pass_configs
``tl.cuda.cluster``, default ``(1, 1, 1)``: off).

Why: in a GEMM grid ``(N / bN, M / bM)`` the blocks of one row (same ``by``) all load the same A tiles and the
blocks of one column the same B tiles, each from L2 on its own. A cluster of ``(cx, cy)`` blocks (launched together,
on SMs of one GPC, sharing their shared memories) can load such a tile once: each block's producer loads a
``1 / cx`` slice of the shared A tile (rows of the box) with ``.multicast::cluster``, which writes the slice into the
same shared offset of every block in the mask and completes its bytes on the mbarrier at the same offset in each of
them. That halves (2 blocks) or quarters the L2 -> SM traffic of that operand. What has to change in the
warp-specialised schedule of :mod:`.warp_specialize` (the rest stays)::

    init:       empty[j] counts the consumer warps of every block of the cluster (warps x blocks);
                __syncthreads; barrier.cluster (a peer's multicast or remote arrival reaches initialised barriers)
    producer:   wait empty[g % s] (now: every block of the cluster has released tile g - s of the stage)
                expect_tx(full[g % s], bytes of the whole stage)        # own slices + the peers' slices
                shared tiles: its slice, multicast to the blocks sharing it; other tiles: whole, own block
    consumers:  release = lane 0 of each warp arrives on empty[stage] of every block of the cluster
                (mapa + mbarrier.arrive.release.cluster.shared::cluster)
    exit:       barrier.cluster (no block exits while a peer may still arrive on its barriers)

Which tiles are shared follows from the loads' coordinates: a load whose coordinates do not use ``blockIdx.x`` (after
inlining the let bindings the thread body makes before the loop) is the same for the ``cx`` blocks of a cluster row,
one without ``blockIdx.y`` for the ``cy`` blocks of a column, one with neither for all of them. Cluster ranks are
``x + y * cx`` with ``x = blockIdx.x % cx``, ``y = blockIdx.y % cy`` (clusters tile the grid). The launch is
``__cluster_dims__(cx, cy, 1)`` (codegen, from the ``tl.cluster_dims`` attribute), so the grid must be a multiple of
the cluster: a grid extent that is not is rounded up (noted) and the extra blocks take part in the loads (their
peers need their slices; their own tiles lie outside the tensors, zero-filled by TMA) and the mainloop but run
the epilogue under a test of the block index, storing nothing; a grid smaller than the cluster is refused (noted;
a TMA store epilogue under that test keeps register stores, noted by tl.TmaStoreCUDA). Also refused, with a note: a loop
that is not warp-specialised (the TMA pipeline without a producer warpgroup, cp.async, mma.sync), a body that is not
one wgmma ``T.gemm`` (attention), a slice that is not whole 8-row swizzle atoms, a map of rank > 2, no shared tile.
Persistent blocks (``tl.cuda.persistent``) with clusters: the persistent blocks form 1-D clusters of ``cx * cy``
consecutive blocks (``__cluster_dims__(cx * cy, 1, 1)``), and each cluster walks the grid's ``cx x cy`` tiles
together (warp_specialize.persist); a block count that is not whole clusters keeps one block per tile (noted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tvm_ffi
from tvm import tirx

from ...common.rewriter import const_int, with_span
from ..common import extern, substitute
from .tma import TmaCopy, TmaMap

ATTR_CLUSTER = "tl.cluster_dims"  # [x, y, z]: the compile-time cluster shape (codegen adds __cluster_dims__)
SWIZZLE_ROWS = 8  # a 128/64/32-byte swizzle pattern repeats every 8 rows: a slice starts on a whole pattern


@dataclass(frozen=True)
class Multicast:
    """One producer copy loaded as slices: ``parts`` blocks each load ``copy.rows`` rows (``copy`` is the slice's
    TMA copy, through a map whose box has that many rows), shared along ``axis`` ("x", "y" or "xy")."""

    copy: TmaCopy
    axis: str
    parts: int


@dataclass
class ClusterPlan:
    """The cluster shape, the hardware block indices and, per producer copy, its multicast (None: a whole tile of
    the block's own)."""

    cx: int
    cy: int
    bx: Any
    by: Any
    multicast: list[Multicast | None]
    grid: dict[str, int] = field(default_factory=dict)  # the program's blockIdx.x / .y extents
    rounded: dict[str, int] = field(default_factory=dict)  # those the cluster does not divide, rounded up

    def guard(self) -> Any:
        """The condition under which a block of the rounded grid is one of the program's (None: not rounded)."""
        conds = [tirx.LT(self.bx if tag == "blockIdx.x" else self.by, tirx.IntImm("int32", self.grid[tag]))
                 for tag in sorted(self.rounded)]
        if not conds:
            return None
        return conds[0] if len(conds) == 1 else tirx.And(conds[0], conds[1])

    @property
    def size(self) -> int:
        return self.cx * self.cy

    def arrive(self, bar: Any) -> Any:
        """One arrival on ``bar``'s offset in every block of the cluster (a consumer warp releasing a stage)."""
        return extern(f"tl::mbar_arrive_cluster<{self.size}>", bar)

    def _rank_xy(self) -> tuple[Any, Any]:
        rx = tirx.floormod(self.bx, self.cx) if self.cx > 1 else tirx.IntImm("int32", 0)
        ry = tirx.floormod(self.by, self.cy) if self.cy > 1 and self.by is not None else tirx.IntImm("int32", 0)
        return rx, ry

    def slice_and_mask(self, axis: str) -> tuple[Any, Any]:
        """(which slice this block loads, the ranks its multicast writes) for a tile shared along ``axis``."""
        rx, ry = self._rank_xy()
        if axis == "x":  # the cx blocks of this block's cluster row
            return rx, _table(ry, [((1 << self.cx) - 1) << (y * self.cx) for y in range(self.cy)])
        if axis == "y":  # the cy blocks of this block's cluster column
            column = sum(1 << (y * self.cx) for y in range(self.cy))
            return ry, _table(rx, [column << x for x in range(self.cx)])
        return rx + ry * self.cx, tirx.IntImm("int32", (1 << self.size) - 1)

    def loads(self, i: int, src_mins: list[Any], tile: Any, stage: Any, bar: Any, simplify: Any,
              span: Any) -> list[Any]:
        """The multicast TMA loads of this block's slice of producer copy ``i`` into ``tile[stage]`` (every column
        block of the tile: one box of the slice's rows each)."""
        mc = self.multicast[i]
        c = mc.copy
        part, mask = self.slice_and_mask(mc.axis)
        row0 = simplify(part * c.rows)
        out = []
        for cb in range(c.cols // c.atom):
            col = tirx.IntImm("int32", cb * c.atom)
            ptr = tirx.address_of(tirx.BufferLoad(tile, [stage, row0, col]))
            coords = [simplify(src_mins[-1] + cb * c.atom), simplify(src_mins[-2] + row0)]
            out.append(with_span(extern(f"tl::tma_load_2d_multicast<{c.map_index}>", ptr, bar, simplify(mask),
                                        *coords), span))
        return out


def _table(index: Any, values: list[int]) -> Any:
    """``values[index]`` as an expression (a chain of selects over the few cluster positions)."""
    out: Any = tirx.IntImm("int32", values[-1])
    for j in range(len(values) - 2, -1, -1):
        out = tirx.Select(tirx.EQ(index, j), tirx.IntImm("int32", values[j]), out)
    return out


def requested(options: Any) -> tuple[int, int, int] | None:
    """The cluster shape pass_configs ask for, or None when off ((1, 1, 1))."""
    from ....pass_config import PassConfigKey

    shape = tuple(int(x) for x in options[PassConfigKey.TL_CUDA_CLUSTER])
    return None if shape == (1, 1, 1) else shape  # type: ignore[return-value]


def _free_vars(node: Any) -> list[Any]:
    found: list[Any] = []

    def var(v: Any) -> Any:
        found.append(v)
        return v

    import tvm

    tvm_ffi.structural_map(node, [(tvm.ir.Var, var)])
    return found


def plan(shape: tuple[int, int, int], producers: list[Any], copies: list[TmaCopy], maps: list[TmaMap],
         binds: list[Any], block_vars: dict[str, Any], grid: dict[str, int | None],
         map_index: Callable[[TmaMap], int], region_of: Callable[[Any], Any]) -> tuple[ClusterPlan | None, str]:
    """The cluster plan for a warp-specialised GEMM loop whose loads are ``producers`` (TMA ``copies`` through
    ``maps``), or (None, why not). ``binds``: the let bindings the thread body makes before the loop (inlined to see
    which block indices a load's coordinates use); ``block_vars`` / ``grid``: the blockIdx.x / .y variables and
    extents; ``map_index`` registers a tensor map (the slices' boxes) and returns its index."""
    cx, cy, cz = shape
    if cz != 1:
        return None, f"a cluster of {cx}x{cy}x{cz}: the GEMM grid is 2-D (z must be 1)"
    rounded: dict[str, int] = {}
    for tag, c in (("blockIdx.x", cx), ("blockIdx.y", cy)):
        extent = grid.get(tag, 1)
        if c > 1 and tag not in block_vars:
            return None, f"a cluster of {c} along {tag[-1]}: the grid has no {tag}"
        if extent is None:
            return None, f"the grid's {tag} extent is not a constant (a cluster must tile it)"
        if extent < c:
            return None, f"the grid's {tag} extent {extent} is smaller than the cluster's {c}"
        if extent % c:  # rounded up: the extra blocks load their peers' slices and compute, but store nothing
            rounded[tag] = -(-extent // c) * c
    values: dict[Any, Any] = {}
    for b in binds:
        values[b.var] = substitute(b.value, values) if values else b.value
    bx, by = block_vars.get("blockIdx.x"), block_vars.get("blockIdx.y")
    out: list[Multicast | None] = []
    why: list[str] = []
    for p, c in zip(producers, copies):
        src = region_of(p)
        mins = [substitute(m, values) if values else m for m in src.mins]
        used = [v for m in mins for v in _free_vars(m)]
        on_x = bx is not None and any(v.same_as(bx) for v in used)
        on_y = by is not None and any(v.same_as(by) for v in used)
        axis = ("xy" if cx > 1 and cy > 1 and not on_x and not on_y else
                "x" if cx > 1 and not on_x else "y" if cy > 1 and not on_y else "")
        name = maps[c.map_index].param
        if not axis:
            out.append(None)
            continue
        parts = {"x": cx, "y": cy, "xy": cx * cy}[axis]
        m = maps[c.map_index]
        if m.rank != 2:
            why.append(f"{name}'s tensor map is {m.rank}-D (multicast slices are built for 2-D maps): each block "
                       "loads its whole tile")
            out.append(None)
            continue
        if c.rows % parts or (c.rows // parts) % SWIZZLE_ROWS:
            why.append(f"{name}'s tile of {c.rows} rows does not split into {parts} slices of whole "
                       f"{SWIZZLE_ROWS}-row swizzle patterns: each block loads its whole tile")
            out.append(None)
            continue
        rows = c.rows // parts
        sliced = TmaMap(m.param, m.dtype, m.dims, (m.box[0], rows), m.swizzle)
        idx = map_index(sliced)
        sc = TmaCopy(idx, rows, c.cols, c.atom, c.nbytes // parts, 2)
        out.append(Multicast(sc, axis, parts))
    if not any(out):
        detail = f" ({'; '.join(why)})" if why else ""
        return None, f"no load of the loop is shared by the blocks of a {cx}x{cy} cluster{detail}"
    for tag, r in sorted(rounded.items()):
        why.append(f"the grid's {tag} extent {grid[tag]} is rounded up to {r}, a multiple of the cluster's "
                   f"{cx if tag == 'blockIdx.x' else cy} (the extra blocks load and compute for their peers but "
                   "store nothing: the epilogue runs under a test of the block index)")
    return ClusterPlan(cx, cy, bx, by, out, {t: int(grid[t] or 1) for t in grid}, rounded), "; ".join(why)


def block_vars_and_grid(func: Any) -> tuple[dict[str, Any], dict[str, int | None]]:
    """The kernel's blockIdx.* variables and their extents (None: not constant)."""
    from .warp_specialize import block_loops

    loops, _ = block_loops(func)
    tags = [str(lp.thread_binding.thread_tag) for lp in loops]
    return ({t: lp.loop_var for t, lp in zip(tags, loops)},
            {t: const_int(lp.extent) for t, lp in zip(tags, loops)})


def finish(func: Any, cp: ClusterPlan, persistent: bool = False) -> Any:
    """The kernel launched in clusters (``tl.cluster_dims``) with every thread meeting at a cluster barrier at the
    end of its body (after the warp-specialised split: producer and consumers alike), its grid rounded up where
    the plan says (the epilogue's guard is :meth:`ClusterPlan.guard`, placed by the split). ``persistent``: the
    kernel was made persistent with the cluster (warp_specialize.persist: 1-D clusters of ``cx * cy`` blocks walking
    the rounded grid's tiles), so the launch is its ``(ctas, 1, 1)`` in clusters of ``(cx * cy, 1, 1)``."""
    import tvm

    from ..common import ATTR_LAUNCH

    def visit(x: Any) -> Any:
        if x.kind != tirx.ForKind.THREAD_BINDING or x.thread_binding is None:
            return x
        tag = str(x.thread_binding.thread_tag)
        if tag == "threadIdx.x":
            body = tirx.SeqStmt([x.body, extern("tl::cluster_sync")])
            return tirx.For(x.loop_var, x.min, x.extent, x.kind, body, x.thread_binding, x.annotations, x.step,
                            x.span)
        if tag in cp.rounded and not persistent:
            ext = tirx.IntImm("int32", cp.rounded[tag])
            iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, ext), x.loop_var, tirx.IterVar.ThreadIndex, tag)
            return tirx.For(x.loop_var, x.min, ext, x.kind, x.body, iv, x.annotations, x.step, x.span)
        return x

    func = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, visit)]))
    if persistent:
        return func.with_attr(ATTR_CLUSTER, [cp.size, 1, 1])
    if cp.rounded:
        launch = func.attrs[ATTR_LAUNCH]
        grid = list(launch["grid"])
        for d, tag in enumerate(("blockIdx.x", "blockIdx.y")):
            if tag in cp.rounded:
                grid[d] = cp.rounded[tag]
        func = func.with_attr(ATTR_LAUNCH, {"grid": grid, "threads": int(launch["threads"])})
    return func.with_attr(ATTR_CLUSTER, [cp.cx, cp.cy, 1])

"""Pass: choose one thread/register layout per fragment, consistently across T.gemm, T.Parallel and T.copy.

A fragment is a tile spread over the block's threads; every op touching it must agree on which thread holds
which element. Constraints are collected over the whole kernel and solved with a union-find:

* fragments accessed together at the loop's own indices inside one ``T.Parallel`` nest (``C[i, j] = A[i, j]``)
  and the two sides of a fragment-to-fragment ``T.copy`` must share a layout (same class);
* the accumulator of a tensor-core ``T.gemm`` fixes its class to the ``mma`` layout of the chosen warp grid
  (``GemmWarpPolicy``); an FMA-fallback gemm leaves it ``blocked``;
* a 1-D fragment that holds one value per row of an ``mma`` accumulator — written by a row reduction of it
  (``T.reduce_max(acc, m, dim=1)``) and/or read as ``m[i]`` in a ``T.Parallel(i, j)`` nest over it — gets the
  ``mma_row`` layout of that accumulator (each thread keeps only its rows; flash attention's online softmax);
* a fragment read at other indices (``row_max[i]`` inside a 2-D ``T.Parallel`` over a non-mma tile), touched
  outside ``T.Parallel`` and tile ops, or written by ``T.reduce_*`` is ``replicated`` (every thread holds all of
  it), unless its class holds a gemm accumulator (then a reduction writes each thread's share);
* any other class is ``blocked`` (coalesced 16-byte chunks along the last dimension).

On ``sm_90a`` (with ``pass_configs`` ``tl.cuda.wgmma`` on) a tensor-core gemm whose A and B are whole shared tiles
written only by ``T.copy`` and whose accumulator is not read by row reductions / row broadcasts takes the
``wgmma`` accumulator layout (warpgroups over the tile) and its A/B tiles the wgmma swizzled layouts; any other
gemm keeps ``mma.sync``, with the reason recorded as a one-line note in the function attribute
``tl.wgmma_notes`` (shown in the compile trace).

A ``blocked`` class's chunk width is 16 bytes of the narrowest *global* tensor its ``T.Parallel`` nests and
``T.copy``s touch (8 elements for fp16 inputs), whatever the fragment's own type: registers have no access width,
so an fp32 accumulator beside fp16 inputs holds 8-float chunks and the fp16 loads are 16 bytes wide
(``tl.LowerParallelCUDA`` and ``tl.LowerTileOpsCUDA`` split the 32-byte fp32 side into legal accesses). A class
that meets no global tensor sizes its chunks by its widest fragment type. Either way the width is capped by the
largest power of two dividing the tile's last dimension.

Each fragment gets a per-thread register array of the layout's size (allocated beside it); the layouts, the
arrays and the swizzle of the shared tiles the tensor cores read are recorded as function attributes.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ...language._ir import Region
from ...language.loops import PARALLEL_ATTR
from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.regions import is_global
from ..common.rewriter import Rewriter, const_int, location_of, tile_op_name
from .common import (
    ATTR_LAYOUTS,
    ATTR_LOCALS,
    ATTR_SWIZZLE,
    ATTR_WGMMA_NOTES,
    gemm_operands,
    is_fragment,
    is_shared,
    is_whole_tile,
    loads_in,
    parallel_nest,
    thread_count,
)
from .layouts import (
    WGMMA_SWIZZLE_BASE,
    FragmentLayout,
    GemmPlan,
    dtype_bytes,
    plan_gemm,
    plan_wgmma,
    swizzle_shift,
    wgmma_swizzle_bytes,
)


def plan_for(ops: dict[str, Any], threads: int) -> GemmPlan:
    a, b, c = ops["a"], ops["b"], ops["c"]
    c_ok = is_fragment(c.buffer) and len(c.buffer.shape) == 2 and is_whole_tile(c)
    if not c_ok:
        return GemmPlan("fma")
    return plan_gemm(ops["M"], ops["N"], ops["K"], str(a.buffer.dtype), str(b.buffer.dtype), str(c.buffer.dtype),
                     threads, ops["policy"], ops["a_whole"], ops["b_whole"])



def wgmma_plan_for(ops: dict[str, Any], threads: int) -> tuple[GemmPlan | None, str]:
    """The wgmma plan of a gemm (shape and dtype conditions only), or (None, why not)."""
    a, b, c = ops["a"], ops["b"], ops["c"]
    if not (is_fragment(c.buffer) and len(c.buffer.shape) == 2 and is_whole_tile(c)):
        return None, "the accumulator is not a whole 2-D fragment"
    a_regs = is_fragment(a.buffer)
    if a_regs and not (len(a.buffer.shape) == 2 and is_whole_tile(a)):
        return None, "A is a part of a fragment (register-A wgmma reads a whole 2-D fragment)"

    def stored(r: Region) -> tuple[int, int] | None:
        if not is_shared(r.buffer) or not is_whole_tile(r):
            return None
        shape = [const_int(x) for x in r.buffer.shape]
        return (shape[-2], shape[-1]) if None not in shape[-2:] else None

    return plan_wgmma(ops["M"], ops["N"], ops["K"], str(a.buffer.dtype), str(b.buffer.dtype), str(c.buffer.dtype),
                      threads, ops["policy"], None if a_regs else stored(a), stored(b), bool(ops["ta"]),
                      bool(ops["tb"]), a_regs=a_regs)


class _Collect(Rewriter):
    pass_name = "tl.InferFragmentLayoutsCUDA"

    def __init__(self, threads: int) -> None:
        super().__init__()
        self.threads = threads
        # wgmma candidates: (span, ops, plan or None, why not) per gemm; shared tiles written by something other
        # than T.copy (a T.Parallel nest, a fill): those keep the mma.sync path (the dequant fusion reads them)
        self.gemms: list[tuple[Any, dict[str, Any], GemmPlan | None, str]] = []
        self.other_writes: set[Any] = set()
        self.frags: list[Any] = []
        self.parent: dict[Any, Any] = {}
        self.needs_rep: dict[Any, Any] = {}  # buffer -> span of the access that needs it
        self.nonid_write: dict[Any, Any] = {}
        self.reduce_dst: set[Any] = set()
        self.reduce_srcs: dict[Any, list[tuple[Any, int]]] = {}  # dst -> [(source region, dim)]
        self.row_reads: dict[Any, list[str]] = {}  # 1-D fragment -> keys of 2-D nests reading it as X[i]
        self.gemm_plans: dict[Any, list[GemmPlan]] = {}
        self.swizzle: dict[Any, int] = {}
        self.par: list[tuple[list[Any], list[Any], str]] = []
        self.n_nests = 0
        self.nest_globals: dict[str, set[int]] = {}  # T.Parallel nest key -> element sizes of its global tensors
        self.copy_globals: dict[Any, set[int]] = {}  # fragment -> sizes of global tensors T.copy moves it from/to

    # -- union-find ----------------------------------------------------------------------------------------
    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while not self._is(self.parent[x], x):
            self.parent[x] = self.parent.setdefault(self.parent[x], self.parent[x])
            x = self.parent[x]
        return x

    @staticmethod
    def _is(a: Any, b: Any) -> bool:
        if isinstance(a, str) or isinstance(b, str):
            return isinstance(a, str) and isinstance(b, str) and a == b
        return a.same_as(b)

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if not self._is(ra, rb):
            self.parent[ra] = rb

    # -- walking -------------------------------------------------------------------------------------------
    def visit_AllocBuffer(self, s: Any) -> Any:  # noqa: N802
        if is_fragment(s.buffer):
            self.frags.append(s.buffer)
            self.find(s.buffer)
        return s

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        self.exprs(s.extent, s.span)
        if PARALLEL_ATTR in s.annotations:
            vs, exts, body = parallel_nest(s, PARALLEL_ATTR)
            for v, e in zip(vs, exts):
                self.bind_loop(v, 0, e)
            if self.par:  # a nest inside a nest: the inner vars extend the outer ones
                ovs, oexts, key = self.par[-1]
                self.par.append((ovs + vs, oexts + exts, key + "+"))
            else:
                self.n_nests += 1
                self.par.append((vs, exts, f"parallel#{self.n_nests}"))
            self.visit(body)
            self.par.pop()
            return s
        return super().visit_For(s)

    def visit_IfThenElse(self, s: Any) -> Any:  # noqa: N802
        self.exprs(s.condition, s.span)
        return super().visit_IfThenElse(s)

    def visit_Bind(self, s: Any) -> Any:  # noqa: N802
        self.exprs(s.value, s.span)
        return super().visit_Bind(s)

    def visit_BufferStore(self, s: Any) -> Any:  # noqa: N802
        if is_shared(s.buffer):
            self.other_writes.add(s.buffer)
        self.access(s.buffer, list(s.indices), True, s.span)
        self.exprs(s.value, s.span)
        for i in s.indices:
            self.exprs(i, s.span)
        return s

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        name = tile_op_name(s)
        if name is None:
            self.exprs(s.value, s.span)
            return s
        args = list(s.value.args)
        if name == "tl.copy":
            src, dst = Region.of(args[0]), Region.of(args[1])
            for frag, other in ((src.buffer, dst.buffer), (dst.buffer, src.buffer)):
                if is_fragment(frag) and is_global(other):
                    self.copy_globals.setdefault(frag, set()).add(dtype_bytes(str(other.dtype)))
            if is_fragment(src.buffer) and is_fragment(dst.buffer):
                if [const_int(x) for x in src.buffer.shape] == [const_int(x) for x in dst.buffer.shape]:
                    self.union(src.buffer, dst.buffer)
                else:
                    self.needs_rep.setdefault(dst.buffer, s.span)
            for r in (src, dst):
                for m in r.mins:
                    self.exprs(m, s.span)
        elif name == "tl.gemm":
            ops = gemm_operands(s, self.ana)
            plan = plan_for(ops, self.threads)
            c = ops["c"].buffer
            if is_fragment(c):
                self.gemm_plans.setdefault(c, []).append(plan)
            self.gemms.append((s.span, ops, *wgmma_plan_for(ops, self.threads)))
            if plan.kind == "mma":
                for key in ("a", "b"):
                    buf = ops[key].buffer
                    if is_shared(buf):
                        shape = [const_int(x) for x in buf.shape]
                        self.swizzle[buf] = swizzle_shift(shape[-1], shape[-2], str(buf.dtype))
        elif name in ("tl.fill", "tl.atomic_add") and is_shared(Region.of(args[0]).buffer):
            self.other_writes.add(Region.of(args[0]).buffer)
        elif name == "tl.reduce":
            dst = Region.of(args[1]).buffer
            if is_shared(dst):
                self.other_writes.add(dst)
            if is_fragment(dst):
                self.reduce_dst.add(dst)
                self.reduce_srcs.setdefault(dst, []).append((Region.of(args[0]), const_int(args[3])))
        elif name == "tl.atomic_add":
            if not isinstance(args[1], tvm.ir.TensorRegion):
                self.exprs(args[1], s.span)
        elif name == "tl.finalize_reducer":  # every thread keeps a replica of a reducer (reducers_cuda.py)
            self.needs_rep.setdefault(Region.of(args[0]).buffer, s.span)
        elif name == "tl.print":
            if isinstance(args[0], tvm.ir.TensorRegion):
                buf = Region.of(args[0]).buffer
                if is_fragment(buf):
                    self.needs_rep.setdefault(buf, s.span)
            else:
                self.exprs(args[0], s.span)
        return s

    def exprs(self, e: Any, span: Any) -> None:
        for ld in loads_in(e):
            self.access(ld.source, list(ld.indices), False, span)

    def access(self, buf: Any, idx: list[Any], write: bool, span: Any) -> None:
        if tirx.is_buffer_var(buf) and is_global(buf):
            for _, _, key in self.par:  # an inner nest's tensors are the enclosing nests' too
                self.nest_globals.setdefault(key, set()).add(dtype_bytes(str(buf.dtype)))
            return
        if not is_fragment(buf):
            return
        if not self.par:
            self.needs_rep.setdefault(buf, span)
            return
        vs, exts, key = self.par[-1]
        shape = [const_int(x) for x in buf.shape]
        identity = (len(idx) == len(vs) and all(i.same_as(v) for i, v in zip(idx, vs))
                    and shape == [const_int(e) for e in exts])
        if identity:
            self.union(buf, key)
        elif (not write and len(idx) == 1 and len(vs) == 2 and idx[0].same_as(vs[0])
              and shape == [const_int(exts[0])]):
            self.row_reads.setdefault(buf, []).append(key)  # X[i] in T.Parallel(i, j): maybe a row layout
        else:
            self.needs_rep.setdefault(buf, span)
            if write:
                self.nonid_write.setdefault(buf, span)


def _row_candidate(col: _Collect, members: list[Any]) -> bool:
    """A class of 1-D fragments that only needs other threads' elements through row broadcasts / row reductions."""
    if any(len(m.shape) != 1 or m in col.needs_rep for m in members):
        return False
    return any(m in col.row_reads or m in col.reduce_srcs for m in members)


def _row_layout(col: _Collect, members: list[Any], root_layout: list[tuple[Any, FragmentLayout]],
                threads: int) -> FragmentLayout | None:
    """The ``mma_row`` layout every row broadcast and row reduction of the class agrees on, or None."""
    rows = const_int(members[0].shape[0])
    wanted: set[FragmentLayout] = set()
    for m in members:
        for key in col.row_reads.get(m, []):
            lay = _layout_of_root(col, col.find(key), root_layout)
            if lay is None or lay.row_kind is None or lay.shape[0] != rows:
                return None
            wanted.add(lay.row_layout())
        for src, dim in col.reduce_srcs.get(m, []):
            lay = (_layout_of_root(col, col.find(src.buffer), root_layout)
                   if is_fragment(src.buffer) else None)
            if (lay is None or lay.row_kind is None or dim != 1 or lay.shape[0] != rows
                    or not is_whole_tile(src) or len(src.buffer.shape) != 2):
                return None
            wanted.add(lay.row_layout())
    if len(wanted) != 1:
        return None
    return next(iter(wanted))


def _chunk_elem_bytes(col: _Collect, root: Any, members: list[Any]) -> int:
    """The element size a ``blocked`` class's chunks are sized for: the narrowest global tensor that its
    ``T.Parallel`` nests and its ``T.copy``s access, else its widest fragment type."""
    sizes = [b for m in members for b in col.copy_globals.get(m, ())]
    for key, bs in col.nest_globals.items():
        if col._is(col.find(key), root):
            sizes += bs
    return min(sizes) if sizes else max(dtype_bytes(str(m.dtype)) for m in members)


def _layout_of_root(col: _Collect, root: Any, root_layout: list[tuple[Any, FragmentLayout]]) -> Any:
    """The layout already chosen for the union-find class ``root`` (None if not chosen yet)."""
    for r, lay in root_layout:
        if col._is(r, root):
            return lay
    return None


def _assign(layouts: dict[Any, FragmentLayout], members: list[Any], shape: list[Any], lay: FragmentLayout) -> None:
    """Give every member of a class the layout (all members must have the class's constant shape)."""
    for m in members:
        if [const_int(x) for x in m.shape] != shape or None in shape:
            raise _err(f"fragment {m.name} must have a constant shape equal to the fragments it is combined "
                       "with", None)
        layouts[m] = lay


def _err(msg: str, span: Any) -> TileLangCompileError:
    return TileLangCompileError(msg, location_of(span), stage="tl.InferFragmentLayoutsCUDA")


def _wgmma_choice(col: _Collect, classes: list[tuple[Any, list[Any]]], arch: str,
                  options: PassConfig) -> tuple[list[tuple[Any, GemmPlan]], dict[Any, int], list[str]]:
    """Which accumulator classes take wgmma (root, plan), the wgmma layouts of their shared A/B tiles, and a note
    for every gemm that keeps mma.sync on sm_90a."""
    if arch != "sm_90a" or not col.gemms:
        return [], {}, []
    off = not options[PassConfigKey.TL_CUDA_WGMMA]
    written_ok = bool(options[PassConfigKey.TL_CUDA_WGMMA_WRITTEN_TILES])
    why: dict[int, str] = {}  # gemm index -> reason it keeps mma.sync
    for n, (_, ops, plan, reason) in enumerate(col.gemms):
        if off:
            why[n] = "pass_configs 'tl.cuda.wgmma' is False"
        elif plan is None:
            why[n] = reason
        else:
            for key in ("a", "b"):
                if ops[key].buffer in col.other_writes and not written_ok:
                    why[n] = (f"the shared {key.upper()} tile {ops[key].buffer.name} is written by something other "
                              "than T.copy (a T.Parallel nest or tile op; the dequant fusion reads it with mma.sync)")
    row_fed = set()
    for srcs in col.reduce_srcs.values():
        row_fed |= {src.buffer for src, _ in srcs if is_fragment(src.buffer)}
    row_nests = {key for keys in col.row_reads.values() for key in keys}

    def root_of(n: int) -> Any:
        return col.find(col.gemms[n][1]["c"].buffer)

    def plan_of(n: int) -> tuple[int, int] | None:
        plan = col.gemms[n][2]
        return (plan.warp_m, plan.warp_n) if plan is not None else None

    for root, members in classes:
        idx = [n for n in range(len(col.gemms)) if col._is(root_of(n), root)]
        if not idx:
            continue
        grids = {plan_of(n) for n in idx if plan_of(n)}
        rows_needed = (any(m in row_fed for m in members) or any(col._is(col.find(k), root) for k in row_nests))
        if len(grids) > 1:
            reason = "the gemms into this accumulator need different warpgroup grids"
        elif rows_needed and any(g[1] != 1 for g in grids):
            reason = ("the accumulator's rows are reduced or combined with per-row values (T.reduce_*, X[i] in "
                      "T.Parallel) and its warpgroups would split N (wgmma rows need warpgroups along M only)")
        else:
            reason = next((why[n] for n in idx if n in why), "")
        if reason:
            for n in idx:
                why.setdefault(n, reason)

    def class_of(buf: Any) -> list[int]:
        r = col.find(buf)
        return [n for n in range(len(col.gemms)) if col._is(root_of(n), r)]

    while True:
        changed = False
        # a shared tile read by a gemm that keeps mma.sync keeps the mma.sync swizzle for all its readers
        mma_bufs = [col.gemms[n][1][k].buffer for n in why for k in ("a", "b")]
        for n, (_, ops, _, _) in enumerate(col.gemms):
            if n not in why and any(ops[k].buffer.same_as(b) for k in ("a", "b") for b in mma_bufs
                                    if is_shared(b)):
                why[n] = "its shared A or B tile is also read by a gemm that keeps mma.sync"
                changed = True
        # register-A wgmma reads A in the wgmma layout: A's class must be the accumulator of a wgmma gemm of the
        # same warpgroup grid
        for n, (_, ops, _, _) in enumerate(col.gemms):
            a = ops["a"].buffer
            if n in why or not is_fragment(a):
                continue
            producers = class_of(a)
            ok = bool(producers) and all(p not in why and plan_of(p) == plan_of(n) for p in producers)
            if not ok:
                why[n] = (f"A is the fragment {a.name}, which is not the accumulator of a wgmma gemm with the same "
                          "warpgroups (register-A wgmma reads A in that layout)")
                changed = True
        # every gemm into one accumulator takes the same path
        for root, _ in classes:
            idx = [n for n in range(len(col.gemms)) if col._is(root_of(n), root)]
            first = next((why[n] for n in idx if n in why), None)
            if first is not None:
                for n in idx:
                    if n not in why:
                        why[n] = first
                        changed = True
        if not changed:
            break
    chosen: list[tuple[Any, GemmPlan]] = []
    codes: dict[Any, int] = {}
    notes = []
    for n, (span, ops, plan, _) in enumerate(col.gemms):
        if n in why:
            loc = location_of(span)
            where = f"line {loc.line}: " if loc is not None else ""
            path = "mma.sync" if plan_for(ops, col.threads).kind == "mma" else "FMA loops"  # fp8: no mma.sync
            also = ""  # a tensor-core dtype on FMA loops: mma.sync found no warp grid either
            dts = {str(ops[k].buffer.dtype) for k in ("a", "b")}
            if path == "FMA loops" and len(dts) == 1 and dts <= {"float16", "bfloat16"} and is_fragment(
                    ops["c"].buffer) and col.threads and ops["K"] % 16 == 0:
                also = (f"; nor mma.sync: no grid of the {col.threads // 32} warps tiles {ops['M']}x{ops['N']} "
                        "in 16x8 steps (another thread count may)")
            notes.append(f"{where}T.gemm {ops['M']}x{ops['N']}x{ops['K']} uses {path}, not wgmma: {why[n]}{also}")
            continue
        root = root_of(n)
        if not any(col._is(r, root) for r, _ in chosen):
            chosen.append((root, plan))
        for key in ("a", "b"):
            buf = ops[key].buffer
            if not is_shared(buf):  # register-A wgmma: A keeps its fragment layout
                continue
            shape = [const_int(x) for x in buf.shape]
            codes[buf] = WGMMA_SWIZZLE_BASE + wgmma_swizzle_bytes(shape[-2], shape[-1], str(buf.dtype))
    return chosen, codes, notes


def infer_fragment_layouts_cuda(func: tirx.PrimFunc, arch: str = "sm_90",
                                options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    threads = thread_count(func)
    col = _Collect(threads)
    col.visit(func.body)
    col.raise_collected()
    classes: list[tuple[Any, list[Any]]] = []
    for f in col.frags:
        root = col.find(f)
        for r, members in classes:
            if col._is(r, root):
                members.append(f)
                break
        else:
            classes.append((root, [f]))
    wg_chosen, wg_codes, wg_notes = _wgmma_choice(col, classes, arch, options)
    col.swizzle.update(wg_codes)
    layouts: dict[Any, FragmentLayout] = {}
    root_layout: list[tuple[Any, FragmentLayout]] = []
    deferred: list[list[Any]] = []
    for root, members in classes:
        plans = [p for m in members for p in col.gemm_plans.get(m, [])]
        if not plans and _row_candidate(col, members):
            deferred.append(members)
            continue
        shape = [const_int(x) for x in members[0].shape]
        ebytes = _chunk_elem_bytes(col, root, members)
        rep_members = [m for m in members if m in col.needs_rep]
        if plans:
            mma = {(p.warp_m, p.warp_n) for p in plans if p.kind == "mma"}
            wg = next((p for r, p in wg_chosen if col._is(r, root)), None)
            if wg is not None:
                lay = FragmentLayout.wgmma(shape, threads, wg.warp_m, wg.warp_n)
            elif len(mma) == 1 and all(p.kind == "mma" for p in plans):
                wm, wn = next(iter(mma))
                lay = FragmentLayout.mma(shape, threads, wm, wn)
            else:
                lay = FragmentLayout.blocked(shape, threads, ebytes)
            if rep_members:
                m = rep_members[0]
                raise _err(f"fragment {m.name} is the accumulator of a T.gemm (or shares its layout) and is also "
                           "accessed at other indices or outside T.Parallel; on CUDA each thread holds only its "
                           "share of it — access it as X[i, j] inside `for i, j in T.Parallel(...)` or copy it to "
                           "shared memory first", col.needs_rep[m])
        elif rep_members or any(m in col.reduce_dst for m in members):
            lay = FragmentLayout.replicated(shape, threads)
        else:
            lay = FragmentLayout.blocked(shape, threads, ebytes)
        if lay.distributed:
            for m in members:
                if m in col.nonid_write:
                    raise _err(f"fragment {m.name} is written at indices other than the T.Parallel loop variables; "
                               "write a fragment as X[i, j] with the loop's own variables", col.nonid_write[m])
        _assign(layouts, members, shape, lay)
        root_layout.append((root, lay))
    for members in deferred:
        shape = [const_int(x) for x in members[0].shape]
        lay = _row_layout(col, members, root_layout, threads)
        if lay is None:
            lay = FragmentLayout.replicated(shape, threads)
        _assign(layouts, members, shape, lay)
    locals_map: dict[Any, Any] = {}
    for f, lay in layouts.items():
        locals_map[f] = tirx.decl_buffer((lay.num_regs,), str(f.dtype), f.name, scope="local")

    def swap_alloc(s: Any) -> Any:
        new = locals_map.get(s.buffer)
        # the fragment's own allocation stays until tl.LowerParallelCUDA has rewritten its last use
        return tirx.SeqStmt([s, tirx.AllocBuffer(new)]) if new is not None else s

    body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, swap_alloc)])
    func = func.with_body(body)
    func = func.with_attr(ATTR_LAYOUTS, {f: lay.spec() for f, lay in layouts.items()})
    func = func.with_attr(ATTR_LOCALS, locals_map)
    if wg_notes:
        func = func.with_attr(ATTR_WGMMA_NOTES, wg_notes)
    return func.with_attr(ATTR_SWIZZLE, dict(col.swizzle))

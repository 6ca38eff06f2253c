"""Pass: turn ``T.Kernel`` into a CUDA launch — grid from the ``blockIdx`` loops, one ``threadIdx.x`` loop.

``T.Kernel(gx, gy, threads=t)`` already opened ``blockIdx.x/y/z`` thread-binding loops; this pass adds the
``threadIdx.x`` binding of ``threads`` threads (a list of thread counts is flattened: tile ops index threads
linearly) around the kernel body, and records the launch configuration as the function attribute
``tl.cuda_launch`` for the later passes and the artifact. ``T.use_swizzle(panel_size, order)`` is applied here:
the hardware block index is remapped so that consecutive blocks walk a panel of ``panel_size`` columns (or rows)
of the grid, which keeps their shared operand tiles in L2.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ...language.kernel import KERNEL_ATTR
from ..common.rewriter import const_int, location_of, tile_op_name
from .common import ATTR_LAUNCH


def _thread_loop(extent: int, body: Any, tx: Any = None) -> tuple[Any, Any]:
    tx = tvm.ir.Var("threadIdx_x", "int32") if tx is None else tx
    iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, extent), tx, tirx.IterVar.ThreadIndex, "threadIdx.x")
    loop = tirx.For(tx, tirx.IntImm("int32", 0), tirx.IntImm("int32", extent), tirx.ForKind.THREAD_BINDING, body,
                    iv, None, None, None)
    return tx, loop


def _bind_thread_index(body: Any, tx: Any, ts: list[int]) -> Any:
    """``T.get_thread_binding(d)`` (``tl.thread_binding(d)``) -> dimension d of the flattened ``threads=(x, y, z)``."""
    from ...language.threads import thread_binding_dim

    def index(call: Any) -> Any:
        d = thread_binding_dim(call)
        if d is None:
            return call
        if d >= len(ts):
            return tirx.IntImm("int32", 0)
        inner = 1
        for t in ts[:d]:
            inner *= t
        e = tirx.floordiv(tx, inner) if inner > 1 else tx
        return tirx.floormod(e, ts[d]) if d < len(ts) - 1 else e

    return tvm_ffi.structural_map(body, [(tvm.ir.Call, index)])


def _signature_vars(func: Any) -> list[Any]:
    """The variables a call fixes: scalar parameters and the symbolic sizes of tensor parameters' shapes."""
    out = []
    for p in func.params:
        if tirx.is_buffer_var(p):
            for d in p.shape:
                out.extend(tirx.analysis.undefined_vars(d))
        else:
            out.append(p)
    return out


def _take_swizzle(body: Any) -> tuple[Any, tuple[int, str] | None]:
    """Remove ``tl.use_swizzle`` statements at the top of the kernel body; return the (last) request."""
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    req = None
    keep = []
    for s in stmts:
        if isinstance(s, tirx.Evaluate) and tile_op_name(s) == "tl.use_swizzle":
            req = (int(s.value.args[0].value), str(s.value.args[1].value))
            continue
        keep.append(s)
    if req is None:
        return body, None
    if not keep:
        keep = [tirx.Evaluate(tirx.IntImm("int32", 0))]
    return (keep[0] if len(keep) == 1 else tirx.SeqStmt(keep)), req


def _rasterize(loops: list[Any], body: Any, panel: int, order: str) -> tuple[list[Any], Any]:
    """New block-index loop vars and a body that first recovers the user's (bx, by) from them."""
    gx, gy = int(loops[0].extent), int(loops[1].extent)
    nbx, nby = tvm.ir.Var("bx_hw", "int32"), tvm.ir.Var("by_hw", "int32")
    lin = nby * gx + nbx
    if order == "row":  # panels of `panel` columns; walk down each panel row by row
        p_blocks = panel * gy
        p = tirx.floordiv(lin, p_blocks)
        within = tirx.floormod(lin, p_blocks)
        width = tirx.min(tirx.IntImm("int32", panel), gx - p * panel)
        bx_v = p * panel + tirx.floormod(within, width)
        by_v = tirx.floordiv(within, width)
    else:  # panels of `panel` rows; walk across each panel column by column
        p_blocks = panel * gx
        p = tirx.floordiv(lin, p_blocks)
        within = tirx.floormod(lin, p_blocks)
        height = tirx.min(tirx.IntImm("int32", panel), gy - p * panel)
        by_v = p * panel + tirx.floormod(within, height)
        bx_v = tirx.floordiv(within, height)
    binds = [tirx.Bind(loops[0].loop_var, bx_v), tirx.Bind(loops[1].loop_var, by_v)]
    return [nbx, nby], tirx.SeqStmt([*binds, body])


def _refuse_unsupported(func: tirx.PrimFunc) -> None:
    """Located errors for what the CUDA backend cannot build: ``T.reshape`` / ``T.view`` of fragments and
    per-thread tiles (docs/compat.md; ``T.alloc_global``: tl.LowerGlobalWorkspacesCUDA)."""

    def walk(st: Any, span: Any) -> None:
        if isinstance(st, tirx.DeclBuffer) and st.buffer.scope() not in ("global", "", "shared"):
            # shared views: tl.LowerTileViewsCUDA; a fragment's layout cannot be seen in another shape
            raise TileLangCompileError(
                f"T.reshape / T.view of a {st.buffer.scope()} tile is not supported on CUDA (it is on the CPU; a "
                "fragment's elements are spread over the threads by a layout chosen for its shape); allocate the "
                "tile in the shape you need, view a shared tile or the global tensor instead (see docs/compat.md)",
                location_of(st.span or span), stage="tl.LowerKernelLaunchCUDA")
        if isinstance(st, tirx.SeqStmt):
            items = list(st.seq)
            for i, x in enumerate(items):
                # a statement without a span (a view) is reported at the next statement that has one
                nxt = next((y.span for y in items[i:] if getattr(y, "span", None) is not None), span)
                walk(x, nxt)
            return
        for child in _children(st):
            walk(child, getattr(st, "span", None) or span)

    walk(func.body, None)


def lower_kernel_launch_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    _refuse_unsupported(func)
    kernels: list[Any] = []

    def find(s: Any) -> None:
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.THREAD_BINDING and KERNEL_ATTR in s.annotations:
            kernels.append(s)
            return
        for child in _children(s):
            find(child)

    find(func.body)
    if not kernels:
        raise TileLangCompileError("a CUDA kernel needs a `with T.Kernel(...)` block", stage="tl.LowerKernelLaunchCUDA")
    if len(kernels) > 1:
        raise TileLangCompileError("only one T.Kernel per program is supported on CUDA",
                                   location_of(kernels[1].span), stage="tl.LowerKernelLaunchCUDA")
    outer = kernels[0]
    loops = [outer]
    while isinstance(loops[-1].body, tirx.For) and loops[-1].body.kind == tirx.ForKind.THREAD_BINDING:
        loops.append(loops[-1].body)
    grid = []
    sig = _signature_vars(func)
    for lp in loops:
        g = const_int(lp.extent)
        if g is None and all(any(v.same_as(x) for x in sig) for v in tirx.analysis.undefined_vars(lp.extent)):
            g = lp.extent  # a symbolic grid (T.ceildiv(m, block_M)): the launcher evaluates it per call
        if g is None:
            raise TileLangCompileError(f"T.Kernel grid extent {lp.extent} must be a compile-time constant",
                                       location_of(outer.span), stage="tl.LowerKernelLaunchCUDA")
        grid.append(g)
    ts = [int(t) for t in outer.annotations[KERNEL_ATTR]]
    threads = 1
    for t in ts:
        threads *= t
    if (threads > 32 and threads % 32) or threads > 1024:  # under a warp (threads=1 ...) is fine: one partial warp
        raise TileLangCompileError(f"T.Kernel threads={threads}: the CUDA backend needs 1 to 32 threads or a multiple "
                                   "of 32, at most 1024", location_of(outer.span), stage="tl.LowerKernelLaunchCUDA")
    body, swz = _take_swizzle(loops[-1].body)
    new_vars = [lp.loop_var for lp in loops]
    if swz is not None and len(loops) >= 2 and all(isinstance(g, int) for g in grid[:2]):  # a hint: not symbolic
        nv, body = _rasterize(loops, body, *swz)
        new_vars[:2] = nv
    tx, _ = _thread_loop(threads, body)
    body = _bind_thread_index(body, tx, ts)
    _, inner = _thread_loop(threads, body, tx)
    for lp, v in reversed(list(zip(loops, new_vars))):
        tb = tirx.IterVar(lp.thread_binding.dom, v, tirx.IterVar.ThreadIndex, str(lp.thread_binding.thread_tag))
        ann = None if lp is not outer else {k: val for k, val in lp.annotations.items() if k != KERNEL_ATTR}
        inner = tirx.For(v, lp.min, lp.extent, lp.kind, inner, tb, ann or None, None, lp.span)
    new_body = _replace(func.body, outer, inner)
    grid += [1] * (3 - len(grid))
    return func.with_body(new_body).with_attr(ATTR_LAUNCH, {"grid": grid, "threads": threads})


def _children(s: Any) -> list[Any]:
    if isinstance(s, tirx.SeqStmt):
        return list(s.seq)
    if isinstance(s, (tirx.For, tirx.AttrStmt, tirx.While)):
        return [s.body]
    if isinstance(s, tirx.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


def _replace(s: Any, old: Any, new: Any) -> Any:
    if s.same_as(old):
        return new
    if isinstance(s, tirx.SeqStmt):
        return tirx.SeqStmt([_replace(x, old, new) for x in s.seq], span=s.span)
    if isinstance(s, tirx.For):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, _replace(s.body, old, new), s.thread_binding,
                        s.annotations, s.step, s.span)
    if isinstance(s, tirx.AttrStmt):
        return tirx.AttrStmt(s.node, s.attr_key, s.value, _replace(s.body, old, new), span=s.span)
    if isinstance(s, tirx.IfThenElse):
        els = _replace(s.else_case, old, new) if s.else_case is not None else None
        return tirx.IfThenElse(s.condition, _replace(s.then_case, old, new), els, span=s.span)
    return s

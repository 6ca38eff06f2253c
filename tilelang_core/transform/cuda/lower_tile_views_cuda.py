"""Pass: ``T.reshape`` / ``T.view`` of a **shared** tile on CUDA — every access of the view becomes an access of
the tile it views, before layout inference.

A view is a buffer declared on the tile's data pointer (``language/views.py``): the same bytes, another shape and
possibly another dtype of the same width. The CUDA passes after this one place, swizzle, multi-buffer and lower
shared tiles one allocation at a time and do not follow such aliases, so this pass removes them: element
``idx`` of a view of shape ``S_v`` is element ``unflatten(flatten(idx, S_v), S_b)`` of its base of shape ``S_b``
(row-major, as on the CPU), read through ``reinterpret`` when the dtypes differ. A ``T.copy`` or ``T.fill`` whose
region is a view becomes the equivalent ``T.Parallel`` nest on those element accesses (split over the threads like
any nest over shared/global memory, global accesses bounds-checked); other tile ops on a view (``T.gemm``,
``T.reduce_*``, ...) are a located error naming the alternative (copy the view into a tile of its shape). Because
every access now names the base tile, whatever layout the base gets (a swizzle for the tensor cores, a stage
dimension in a pipelined loop) applies to the view's accesses too (``tl.LowerSharedMemoryCUDA`` rewrites every
access of a tile to its physical offset), so a viewed tile needs no "keep it unswizzled" rule; the price is that
the view's accesses are element by element, through index arithmetic (not vectorised).

A view of another element width (a float16 tile as float32) is a located error: one element of the view would be
two of the base. Views of fragments and per-thread tiles stay refused in ``tl.LowerKernelLaunchCUDA``: a fragment's
elements are spread over the threads by a layout inferred from its shape, and a view with another shape would need
each thread to hold elements another thread has.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ...language._ir import Region
from ...language.loops import PARALLEL_ATTR
from ..common.regions import indices_at, squeezed
from ..common.rewriter import const_int, location_of, make_for, new_var, tile_op_name, with_span
from .common import is_shared

STAGE = "tl.LowerTileViewsCUDA"


def _flat(idx: list[Any], shape: list[Any]) -> Any:
    out: Any = tirx.IntImm("int32", 0)
    for i, n in zip(idx, shape):
        out = out * n + i
    return out


def _unflat(flat: Any, shape: list[Any]) -> list[Any]:
    if len(shape) == 1:
        return [flat]
    out = []
    stride = 1
    for k in range(len(shape) - 1, -1, -1):
        e = tirx.floordiv(flat, stride) if stride != 1 else flat
        out.append(tirx.floormod(e, shape[k]) if k else e)
        stride = stride * shape[k]
    return list(reversed(out))


class _Views:
    """The shared views of a function (view buffer -> base tile) and the rewrite of their uses."""

    def __init__(self, func: tirx.PrimFunc) -> None:
        self.bases: list[Any] = []
        self.views: list[tuple[Any, Any]] = []
        self.problems: list[tuple[str, Any]] = []
        self.ana = tvm.sym.Analyzer()

        def alloc(s: Any) -> Any:
            if is_shared(s.buffer):
                self.bases.append(s.buffer)
            return s

        def decl(s: Any) -> Any:
            if is_shared(s.buffer):
                # the view is declared on buffer_data(src): src is the tile, or a view of it
                src = s.data.args[0] if isinstance(s.data, tvm.ir.Call) and s.data.args else None
                base = next((b for b in self.bases if src is not None and b.same_as(src)), None)
                if base is None and src is not None:
                    base = self.base_of(src)
                self.views.append((s.buffer, base))
            return s

        tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, alloc)])
        tvm_ffi.structural_map(func.body, [(tirx.DeclBuffer, decl)])

    def base_of(self, buf: Any) -> Any:
        return next((b for v, b in self.views if v.same_as(buf)), None)

    def problem(self, msg: str, span: Any) -> None:
        self.problems.append((msg, span))

    def check(self, view: Any, base: Any, span: Any) -> bool:
        if base is None:
            self.problem(f"T.reshape / T.view {view.name}: the shared tile it views is not allocated in this kernel "
                         "(see docs/compat.md)", span)
            return False
        vb, bb = tvm.DataType(str(view.dtype)).bits, tvm.DataType(str(base.dtype)).bits
        if vb != bb:
            self.problem(f"T.view of shared tile {base.name} ({base.dtype}) as {view.dtype}: on CUDA a view of a "
                         "shared tile must keep the element width (one element of the view would be several of the "
                         f"tile); allocate the tile as {view.dtype}, or view the global tensor (see docs/compat.md)",
                         span)
            return False
        if any(const_int(x) is None for x in list(view.shape) + list(base.shape)):
            self.problem(f"T.reshape / T.view of shared tile {base.name}: shapes must be compile-time constants on "
                         "CUDA", span)
            return False
        return True

    def element(self, view: Any, base: Any, idx: list[Any]) -> list[Any]:
        flat = _flat(list(idx), [const_int(x) for x in view.shape])
        return [self.ana.simplify(x) for x in _unflat(flat, [const_int(x) for x in base.shape])]

    def load(self, ld: Any, span: Any) -> Any:
        base = self.base_of(ld.source)
        if base is None or not self.check(ld.source, base, span):
            return ld
        out = tirx.BufferLoad(base, self.element(ld.source, base, list(ld.indices)))
        return out if str(base.dtype) == str(ld.source.dtype) else tirx.reinterpret(str(ld.source.dtype), out)

    def store(self, st: Any) -> Any:
        base = self.base_of(st.buffer)
        if base is None or not self.check(st.buffer, base, st.span):
            return st
        value = st.value
        if str(base.dtype) != str(st.buffer.dtype):
            value = tirx.reinterpret(str(base.dtype), value)
        return tirx.BufferStore(base, value, self.element(st.buffer, base, list(st.indices)), span=st.span)

    def rewrite_exprs(self, node: Any, span: Any) -> Any:
        return tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, lambda ld: self.load(ld, span)),
                                             (tirx.BufferStore, self.store)])

    def tile_op(self, s: Any) -> Any:
        """A tile op on a view: T.copy / T.fill as a T.Parallel nest of element accesses, others refused."""
        name = tile_op_name(s)
        args = list(s.value.args)
        regions = [Region.of(a) for a in args if isinstance(a, tvm.ir.TensorRegion)]
        viewed = [r for r in regions if self.base_of(r.buffer) is not None]
        if not viewed:
            return self.rewrite_exprs(s, s.span)
        if name == "tl.copy":
            src, dst = Region.of(args[0]), Region.of(args[1])
            sd, dd = squeezed(src, self.ana), squeezed(dst, self.ana)
            exts = [const_int(src.extents[d]) for d in sd]
            if len(sd) != len(dd) or None in exts or exts != [const_int(dst.extents[d]) for d in dd]:
                self.problem(f"T.copy between {src.buffer.name} and {dst.buffer.name}: a copy through a view of a "
                             "shared tile needs regions of the same constant extents", s.span)
                return s
            vs = [new_var("ijklmn"[d % 6]) for d in range(len(exts))]
            val = tirx.BufferLoad(src.buffer, indices_at(src, sd, vs))
            if str(src.buffer.dtype) != str(dst.buffer.dtype):
                val = tirx.Cast(str(dst.buffer.dtype), val)
            body: Any = tirx.BufferStore(dst.buffer, val, indices_at(dst, dd, vs), span=s.span)
        elif name == "tl.fill":
            r = Region.of(args[0])
            dims = squeezed(r, self.ana)
            exts = [const_int(r.extents[d]) for d in dims]
            if None in exts:
                self.problem(f"T.fill of view {r.buffer.name}: extents must be compile-time constants", s.span)
                return s
            vs = [new_var("ijklmn"[d % 6]) for d in range(len(exts))]
            body = tirx.BufferStore(r.buffer, tirx.Cast(str(r.buffer.dtype), args[1]), indices_at(r, dims, vs),
                                    span=s.span)
        else:
            v = viewed[0].buffer
            self.problem(f"{name} of a T.reshape / T.view of shared tile {self.base_of(v).name}: not supported on "
                         "CUDA (T.copy and T.fill of a view are, and element accesses); T.copy the view into a tile "
                         "of its shape first (see docs/compat.md)", s.span)
            return s
        if not exts:
            exts, vs = [1], [new_var("i")]
        body = self.rewrite_exprs(body, s.span)
        for var, e in reversed(list(zip(vs, exts))):
            body = make_for(var, e, body, tirx.ForKind.PARALLEL, s.span, {PARALLEL_ATTR: 1})
        return with_span(body, s.span)


def lower_tile_views_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    views = _Views(func)
    if not views.views:
        return func

    def visit(s: Any) -> Any:
        if isinstance(s, tirx.DeclBuffer):
            if views.base_of(s.buffer) is not None or is_shared(s.buffer):
                return tirx.Evaluate(tirx.IntImm("int32", 0))
            return s
        if isinstance(s, tirx.Evaluate):
            if tile_op_name(s) is not None:
                return views.tile_op(s)
            return views.rewrite_exprs(s, s.span)
        if isinstance(s, tirx.BufferStore):
            return views.rewrite_exprs(s, s.span)
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([visit(x) for x in s.seq], span=s.span)
        if isinstance(s, tirx.For):
            return tirx.For(s.loop_var, views.rewrite_exprs(s.min, s.span), views.rewrite_exprs(s.extent, s.span),
                            s.kind, visit(s.body), s.thread_binding, s.annotations, s.step, s.span)
        if isinstance(s, tirx.IfThenElse):
            els = visit(s.else_case) if s.else_case is not None else None
            return tirx.IfThenElse(views.rewrite_exprs(s.condition, s.span), visit(s.then_case), els, span=s.span)
        if isinstance(s, tirx.AttrStmt):
            return tirx.AttrStmt(s.node, s.attr_key, s.value, visit(s.body), span=s.span)
        if isinstance(s, tirx.While):
            return tirx.While(views.rewrite_exprs(s.condition, s.span), visit(s.body), span=s.span)
        if isinstance(s, tirx.Bind):
            return tirx.Bind(s.var, views.rewrite_exprs(s.value, s.span), span=s.span)
        return s

    body = visit(func.body)
    if views.problems:
        msg, span = views.problems[0]
        raise TileLangCompileError(msg, location_of(span), stage=STAGE)
    return func.with_body(body)


__all__ = ["lower_tile_views_cuda"]

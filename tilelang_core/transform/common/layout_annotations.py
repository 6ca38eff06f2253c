"""Passes: honour ``T.annotate_layout`` — collect the annotations, then permute the physical index of annotated tiles.

Why two steps: the annotation is a statement where the user wrote it, but what it asks for applies to every access
of the tile, including those the tile ops only produce when they are lowered. ``tl.CollectLayoutAnnotations``
(first, on both targets) removes the statements and records them in the function attribute ``tl.user_layouts``,
keyed by the tile's *name* (the CUDA pipeline replaces a multi-buffered tile by a staged one of the same name, with
a leading stage dimension: the annotation still applies to each stage). ``tl.ApplyIndexLayouts`` runs once every
tile op and ``T.Parallel`` nest is plain loads and stores (CPU: after ``tl.LowerParallelCPU``; CUDA: before
``tl.LowerSharedMemoryCUDA``) and gives each allocated tile with a user index map a flat physical buffer: element
``idx`` of the tile (trailing dimensions; leading ones select a slab) lives at the row-major offset of
``forward_fn(idx)`` in the layout's physical extents. Indices in the program stay logical, so results are those
of the program without the annotation; only the generated index expressions change.

Kinds (the statement's second argument, see language/hints.py): ``index`` (a ``Layout`` or a function: permuted
here), ``swizzle`` (the CUDA shared swizzle: ``tl.ApplyLayoutAnnotationsCUDA``; the CPU keeps tiles row-major),
``fragment`` (accepted, not honoured). Tiles not allocated in the kernel (its tensor parameters) keep the
caller's memory layout: an index map there would change what the caller reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import SourceLocation, TileLangCompileError
from .notes import add_notes
from .rewriter import const_int, location_of, tile_op_name

ATTR_USER_LAYOUTS = "tl.user_layouts"  # {tile name: [kind, file, line, column, *kind's arguments]}


@dataclass
class UserLayout:
    """One ``T.annotate_layout`` entry, decoded."""

    kind: str  # "index" | "swizzle" | "fragment"
    shape: tuple[int, ...]  # the annotated tile's shape
    scope: str
    location: SourceLocation | None
    ctor: str = ""  # swizzle: the tilelang.layout constructor's name
    run: int = 1  # index: contiguous run of the last dimension (1..16)
    index_vars: tuple[Any, ...] = ()
    outs: tuple[Any, ...] = ()
    extents: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        return f"line {self.location.line}: " if self.location is not None and self.location.line > 0 else ""

    def physical(self, idx: list[Any]) -> Any:
        """Row-major offset, in the physical extents, of the layout's image of ``idx`` (the tile's dimensions)."""
        vmap = dict(zip(self.index_vars, idx))

        def swap(v: Any) -> Any:
            return vmap.get(v, v)

        off: Any = tirx.IntImm("int32", 0)
        for o, e in zip(self.outs, self.extents):
            off = off * e + tvm_ffi.structural_map(o, [(tvm.ir.Var, swap)])
        return off

    @property
    def size(self) -> int:
        n = 1
        for e in self.extents:
            n *= e
        return n


def _str(x: Any) -> str:
    return str(x.value) if isinstance(x, tvm.ir.StringImm) else str(x)


def user_layouts(func: Any) -> dict[str, UserLayout]:
    """The annotations :func:`collect_layout_annotations` recorded on ``func``, by tile name."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or ATTR_USER_LAYOUTS not in attrs:
        return {}
    out = {}
    for name, v in attrs[ATTR_USER_LAYOUTS].items():
        kind, file, line, col, shape, scope = (_str(v[0]), _str(v[1]), int(v[2]), int(v[3]),
                                               tuple(int(x) for x in v[4]), _str(v[5]))
        loc = SourceLocation(file, line, col) if file else None
        lay = UserLayout(kind, shape, scope, loc)
        rest = list(v[6:])
        if kind == "swizzle":
            lay.ctor = _str(rest[0])
        elif kind == "index":
            m, run = int(rest[0]), int(rest[1])
            n = len(shape)
            lay.run = run
            lay.index_vars = tuple(rest[2:2 + n])
            lay.outs = tuple(rest[2 + n:2 + n + m])
            lay.extents = tuple(int(x) for x in rest[2 + n + m:2 + n + 2 * m])
        out[str(name)] = lay
    return out


def collect_layout_annotations(func: tirx.PrimFunc) -> tirx.PrimFunc:
    found: dict[str, list[Any]] = {}

    def ev(s: Any) -> Any:
        if tile_op_name(s) != "tl.annotate_layout":
            return s
        record(s)
        return tirx.Evaluate(tirx.IntImm("int32", 0), span=s.span)

    def loop(f: Any) -> Any:  # an index map's statement sits in a loop nest binding its variables
        inner = f
        while isinstance(inner, tirx.For):
            inner = inner.body
        if isinstance(inner, tirx.Evaluate) and tile_op_name(inner) == "tl.annotate_layout":
            record(inner)
            return tirx.Evaluate(tirx.IntImm("int32", 0), span=inner.span)
        return f

    def record(s: Any) -> None:
        args = list(s.value.args)
        buf = args[0].source
        loc = location_of(s.span)
        shape = [int(x) if isinstance(x, tirx.IntImm) else -1 for x in buf.shape]
        found[str(buf.name)] = [args[1], tvm.ir.StringImm(loc.file if loc else ""),
                                tirx.IntImm("int32", loc.line if loc else 0),
                                tirx.IntImm("int32", loc.column if loc else 0), shape,
                                tvm.ir.StringImm(str(buf.scope())), *args[2:]]

    body = tvm_ffi.structural_map(func.body, [(tirx.For, loop), (tirx.Evaluate, ev)])
    if not found:
        return func
    return func.with_body(body).with_attr(ATTR_USER_LAYOUTS, found)


INDEXED_SCOPES = ("shared", "shared.dyn", "local", "global")


def apply_index_layouts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Give every allocated tile with a user index map its flat, permuted physical buffer (module doc)."""
    lays = {n: u for n, u in user_layouts(func).items() if u.kind == "index"}
    if not lays:
        return func
    new: dict[Any, tuple[Any, UserLayout, int]] = {}  # old buffer -> (flat buffer, layout, leading dims)

    def alloc(s: Any) -> Any:
        b = s.buffer
        u = lays.get(str(b.name))
        if u is None or str(b.scope()) not in INDEXED_SCOPES:
            return s
        shape = [int(x) for x in b.shape]
        lead = len(shape) - len(u.shape)
        if lead < 0 or tuple(shape[lead:]) != u.shape:
            return s
        slabs = 1
        for x in shape[:lead]:
            slabs *= x
        flat = tirx.decl_buffer((slabs * u.size,), str(b.dtype), str(b.name), scope=str(b.scope()))
        new[b] = (flat, u, lead)
        return tirx.AllocBuffer(flat, annotations=s.annotations) if s.annotations else tirx.AllocBuffer(flat)

    body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, alloc)])
    placed = {str(b.name) for b in new}
    notes = [f"{u.where}T.annotate_layout layout_map[{n}]: {n} is not a tile the kernel allocates (a kernel "
             "parameter keeps the caller's memory layout); the layout is not applied"
             for n, u in lays.items() if n not in placed]
    if not new:
        return add_notes(func, notes)

    ana = tvm.sym.Analyzer()

    def index(b: Any, idx: list[Any]) -> tuple[Any, list[Any]]:
        flat, u, lead = new[b]
        slab: Any = tirx.IntImm("int32", 0)
        for i, s in zip(idx[:lead], [int(x) for x in b.shape[:lead]]):
            slab = slab * s + i
        last, lanes = idx[-1], 0
        if isinstance(last, tirx.Ramp):  # a vector access: one contiguous run of the layout, or refused
            lanes = int(last.lanes)
            aligned = ana.can_prove(tirx.EQ(tirx.floormod(last.base, lanes), 0))
            if const_int(last.stride) != 1 or lanes > u.run or not aligned:
                raise layout_error(u, f"T.annotate_layout layout_map[{b.name}]: a {lanes}-lane access of the tile "
                                      f"is not inside one run of {u.run} contiguous elements of the layout; give "
                                      "a layout that keeps runs of the last dimension together (or no annotation)",
                                   "tl.ApplyIndexLayouts")
            idx = idx[:-1] + [last.base]
        off = u.physical(list(idx[lead:]))
        off = slab * u.size + off if lead else off
        return flat, [tirx.Ramp(off, 1, lanes) if lanes else off]

    def load(ld: Any) -> Any:
        if ld.source not in new:
            return ld
        flat, idx = index(ld.source, list(ld.indices))
        return tirx.BufferLoad(flat, idx)

    def store(st: Any) -> Any:
        if st.buffer not in new:
            return st
        flat, idx = index(st.buffer, list(st.indices))
        return tirx.BufferStore(flat, st.value, idx, span=st.span)

    body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    return add_notes(func.with_body(body), notes)


def layout_error(u: UserLayout, message: str, stage: str) -> TileLangCompileError:
    return TileLangCompileError(message, u.location, stage=stage)

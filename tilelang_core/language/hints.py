"""Scheduling hints TileLang programs give that do not change what a program computes.

``T.annotate_layout`` asks for a physical layout of a tile; ``T.disable_warp_group_reg_alloc`` stops TileLang's
Hopper warp-specialised kernels from moving registers between warp groups (accepted, nothing to do here).

Each entry of ``T.annotate_layout`` becomes a ``tl.annotate_layout`` statement that the compiler honours
(``transform/common/layout_annotations.py``, docs/compat.md): a swizzled layout (``make_swizzled_layout`` ...)
sets the CUDA shared swizzle of the tile, a user ``Layout(shape, forward_fn)`` (or a plain function of the
indices) permutes the physical index of an allocated tile on the CPU and CUDA, a ``Fragment`` is accepted and not
honoured (the CUDA backend infers fragment layouts itself). Indices in a program stay logical, so results are
those of the program without the annotation. The index map is checked here, where the user's function is at hand:
it is enumerated over the tile and must be one-to-one (padding, a larger physical tile, is allowed); its
expressions over fresh index variables travel in the statement, so the layout is part of the program (and of the
cache key).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ._ir import describe, emit, int_or_expr, is_buffer, to_region


def annotate_layout(layout_map: Any) -> None:
    """Ask for the physical layout of tiles: ``T.annotate_layout({A_shared: make_swizzled_layout(A_shared)})``."""
    if not isinstance(layout_map, dict):
        raise TypeError(f"T.annotate_layout layout_map: expected a dict {{buffer: layout}}, got "
                        f"{type(layout_map).__name__}")
    for buf, layout in layout_map.items():
        if not is_buffer(buf):
            raise TypeError(f"T.annotate_layout layout_map: expected buffers as keys, got {describe(buf)}")
        if layout is None:
            raise TypeError(f"T.annotate_layout layout_map[{buf.name}]: expected a layout (a Layout, a Fragment "
                            "or a function of the indices), got None")
        _emit_annotation(buf, layout)


def _emit_annotation(buf: Any, layout: Any) -> None:
    """Emit the ``tl.annotate_layout`` statement: [whole-tile region, kind, ...] (kinds in layout_annotations.py).
    An index map's expressions are over the variables of a loop nest around the statement (the program must stay
    well-formed); ``tl.CollectLayoutAnnotations`` removes the nest."""
    from tvm.script import tirx as _T

    from ..layout import Fragment, Layout, SwizzledLayout

    region = to_region(buf, None, f"T.annotate_layout layout_map[{buf.name}]")
    if isinstance(layout, SwizzledLayout):
        emit("tl.annotate_layout", [region, tvm.ir.StringImm("swizzle"), tvm.ir.StringImm(layout.kind)])
        return
    if isinstance(layout, Fragment):
        emit("tl.annotate_layout", [region, tvm.ir.StringImm("fragment")])
        return
    if not isinstance(layout, Layout):
        if not callable(layout):
            raise TypeError(f"T.annotate_layout layout_map[{buf.name}]: expected a layout (a Layout, a Fragment "
                            f"or a function of the indices), got {type(layout).__name__}")
        layout = Layout(buf, layout)
    shape, run, extents = _check_index_map(buf, layout)
    with _T.grid(*shape) as vs:
        vs = list(vs) if len(shape) > 1 else [vs]
        outs = [tirx.IntImm("int32", o) if isinstance(o, int) else o
                for o in _as_tuple(layout.map_forward_index(vs))]
        if len(outs) != len(extents):
            raise ValueError(f"T.annotate_layout layout_map[{buf.name}]: the layout gives {len(outs)} indices for "
                             f"index variables but {len(extents)} for integers")
        emit("tl.annotate_layout", [region, tvm.ir.StringImm("index"), tirx.IntImm("int32", len(outs)),
                                    tirx.IntImm("int32", run), *vs, *outs,
                                    *(tirx.IntImm("int32", e) for e in extents)])


def _check_index_map(buf: Any, layout: Any) -> tuple[list[int], int, list[int]]:
    """(tile shape, contiguous run, physical extents) of a user index map, checked one-to-one over the tile."""
    what = f"T.annotate_layout layout_map[{buf.name}]"
    shape = [int_or_expr(x) for x in buf.shape]
    if not all(isinstance(x, int) for x in shape):
        raise TypeError(f"{what}: a Layout needs a tile of constant shape, {buf.name} has {shape}")
    lshape = [int_or_expr(x) for x in layout.shape]
    if lshape != shape:
        raise ValueError(f"{what}: the Layout's shape {lshape} is not the tile's shape {shape}")
    n = 1
    for x in shape:
        n *= x
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for flat in range(n):
        idx = tuple(_unravel(flat, shape))
        out = _as_tuple(layout.map_forward_index(list(idx)))
        try:
            key = tuple(int(o) for o in out)
        except TypeError:
            raise TypeError(f"{what}: the layout function must give integer indices for integer inputs, got "
                            f"{out!r} at {list(idx)}") from None
        if any(k < 0 for k in key):
            raise ValueError(f"{what}: the layout maps {list(idx)} to {list(key)}, a negative index")
        if key in seen:
            raise ValueError(f"{what}: the layout is not one-to-one: {list(seen[key])} and {list(idx)} both map to "
                             f"{list(key)}")
        seen[key] = idx
    extents = [max(k[d] for k in seen) + 1 for d in range(len(next(iter(seen))))] if seen else [1]
    return shape, _contiguous_run(seen, shape, extents), extents


def _contiguous_run(phys_of: dict[tuple[int, ...], tuple[int, ...]], shape: list[int], extents: list[int]) -> int:
    """The largest power of two ``L`` (at most 16) such that every ``L``-aligned run of the last logical dimension
    is ``L`` consecutive physical elements (what vector and 16-byte accesses of the tile need)."""
    flat_of = {}
    for key, idx in phys_of.items():
        f = 0
        for k, e in zip(key, extents):
            f = f * e + k
        flat_of[idx] = f
    run = 1
    while run * 2 <= 16 and shape[-1] % (run * 2) == 0:
        cand = run * 2
        if all(flat_of[idx[:-1] + (idx[-1] + k,)] == flat_of[idx] + k
               for idx in flat_of if idx[-1] % cand == 0 for k in range(1, cand)):
            run = cand
        else:
            break
    return run


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _unravel(f: int, shape: list[int]) -> list[int]:
    out = []
    for s in reversed(shape):
        out.append(f % s)
        f //= s
    return list(reversed(out))


def disable_warp_group_reg_alloc() -> None:
    """Accepted as a no-op: there is no warp-group register reallocation to disable here."""
    return None

"""Scheduling hints TileLang programs give that do not change what a program computes.

``T.annotate_layout`` asks for a physical layout of a tile (a swizzled shared tile, a permuted global
accumulator); ``T.disable_warp_group_reg_alloc`` stops TileLang's Hopper warp-specialised kernels from moving
registers between warp groups. Both are about where data lives or how registers are shared, never about the values
a program computes: our backends choose their own layouts (the CUDA backend swizzles shared tiles itself) and
do no warp specialisation. We accept them, check their arguments, and emit nothing (docs/compat.md).
"""

from __future__ import annotations

from typing import Any

from ._ir import describe, is_buffer


def annotate_layout(layout_map: Any) -> None:
    """Accepted and checked; the layout itself is not applied (our backends pick their own layouts).

    Indices in a program are logical, so a layout only changes where an element is stored. For a global tensor
    that means its memory holds the identity layout here (TileLang's programs that annotate a global accumulator
    also read it back through the same annotation, which is then the identity too)."""
    if not isinstance(layout_map, dict):
        raise TypeError(f"T.annotate_layout layout_map: expected a dict {{buffer: layout}}, got "
                        f"{type(layout_map).__name__}")
    for buf, layout in layout_map.items():
        if not is_buffer(buf):
            raise TypeError(f"T.annotate_layout layout_map: expected buffers as keys, got {describe(buf)}")
        if layout is None:
            raise TypeError(f"T.annotate_layout layout_map[{buf.name}]: expected a layout (a Layout, a Fragment "
                            "or a function of the indices), got None")


def disable_warp_group_reg_alloc() -> None:
    """Accepted as a no-op: there is no warp-group register reallocation to disable here."""
    return None

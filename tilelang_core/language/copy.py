"""``T.copy``, ``T.fill`` and ``T.clear``: moving and initialising tiles.

Operands may be whole buffers, TileLang's start-index form (``A[by * bM, k * bK]``, extents taken from the
other operand) or explicit slices. Extent agreement is checked when the op is lowered, where symbolic
extents can be proven equal; bounds against the tensor are the compiler's job (ragged shapes are legal).
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ._ir import dtype_of, emit, shape_of, to_region


def copy(src: Any, dst: Any, **_ignored: Any) -> None:
    """Copy a tile: ``T.copy(A[by * bM, k * bK], A_shared)``."""
    src_shape, dst_shape = shape_of(src), shape_of(dst)
    if src_shape is None and dst_shape is None:
        raise TypeError("T.copy: both src and dst use the start-index form A[i, j]; at least one side must be a "
                        "whole buffer or an explicit slice so the tile extents are known")
    emit("tl.copy", [to_region(src, dst_shape, "T.copy src"), to_region(dst, src_shape, "T.copy dst")])


def fill(buffer: Any, value: Any) -> None:
    """Set every element of a tile to ``value``."""
    region = to_region(buffer, None, "T.fill")
    dt = region.source.dtype
    if isinstance(value, (int, float, bool)):
        value = tirx.const(value, dt)
    elif dtype_of(value) is None:
        raise TypeError(f"T.fill value: expected a number or a scalar expression, got {value!r}")
    elif dtype_of(value) != dt:
        value = tirx.Cast(dt, value)
    emit("tl.fill", [region, value])


def clear(buffer: Any) -> None:
    """Set every element of a tile to zero."""
    fill(buffer, 0)

"""``T.any_of`` / ``T.all_of``: whether any / all elements of a small tile are true (nonzero), as one boolean
expression.

The expression is the ``||`` / ``&&`` of the elements, unrolled (TileLang's intrinsic also reads a contiguous run
of elements): meant for masks of a few dozen elements, as block-sparse kernels use them. A region may be
strided only in its last dimension, as in TileLang.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.ir import TensorRegion

from ._ir import describe, is_buffer

MAX_ELEMENTS = 1024


def const_extent(e: Any) -> int | None:
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _elements(x: Any, what: str) -> list[Any]:
    if is_buffer(x):
        buf, mins, exts = x, [0] * len(x.shape), list(x.shape)
    elif isinstance(x, TensorRegion):
        buf, mins, exts = x.source, [r.min for r in x.region], [r.extent for r in x.region]
    else:
        raise TypeError(f"{what}: expected a buffer or a slice A[i, a:b], got {describe(x)}")
    sizes = [const_extent(e) for e in exts]
    if None in sizes:
        raise ValueError(f"{what}: the extents of {describe(x)} must be compile-time constants")
    total = 1
    for s in sizes:
        total *= s
    if total > MAX_ELEMENTS:
        raise ValueError(f"{what}: {describe(x)} has {total} elements; at most {MAX_ELEMENTS} are supported "
                         "(reduce a larger mask with T.reduce_max / T.reduce_sum instead)")
    out = []

    def walk(d: int, idx: list[Any]) -> None:
        if d == len(sizes):
            v = tirx.BufferLoad(buf, idx)
            out.append(v if str(buf.dtype) == "bool" else tirx.NE(v, tirx.const(0, str(buf.dtype))))
            return
        for i in range(sizes[d]):
            walk(d + 1, idx + [mins[d] + i])

    walk(0, [])
    return out


def any_of(buffer: Any) -> Any:
    """True when at least one element of ``buffer`` is true (nonzero)."""
    es = _elements(buffer, "T.any_of")
    r = es[0]
    for e in es[1:]:
        r = tirx.Or(r, e)
    return r


def all_of(buffer: Any) -> Any:
    """True when every element of ``buffer`` is true (nonzero)."""
    es = _elements(buffer, "T.all_of")
    r = es[0]
    for e in es[1:]:
        r = tirx.And(r, e)
    return r

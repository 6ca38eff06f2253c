"""``T.reshape`` and ``T.view``: another shape (and, for ``T.view``, another dtype) over a buffer's memory.

No copy is made: the view is a buffer declared on the same data pointer and in the same scope, so writes through
either are seen through the other. The total size in bits must agree (checked when the shapes are constants).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm.script import tirx as _T

from ._ir import describe, int_or_expr, is_buffer
from .dtypes import canonical_dtype


def _bits(shape: list[Any], dtype: str) -> Any:
    total: Any = tvm.DataType(dtype).bits * tvm.DataType(dtype).lanes
    for e in shape:
        total = total * int_or_expr(e)
    return total


def _view(src: Any, shape: Any, dtype: Any, what: str) -> Any:
    from ._sizes import shape_value

    if not is_buffer(src):
        raise TypeError(f"{what} src: expected a buffer (T.alloc_* or a kernel parameter), got {describe(src)}")
    new_shape = list(shape_value(shape, f"{what} shape")) if shape is not None else list(src.shape)
    dt = canonical_dtype(dtype, f"{what} dtype") if dtype is not None else str(src.dtype)
    want, have = _bits(new_shape, dt), _bits(list(src.shape), str(src.dtype))
    if isinstance(want, int) and isinstance(have, int) and want != have:
        raise ValueError(f"{what}: the view must cover the same memory: {src.name} is {list(src.shape)} "
                         f"{src.dtype} ({have} bits), the view {new_shape} {dt} would be {want} bits")
    if not isinstance(want, int) or not isinstance(have, int):
        ana = tvm.sym.Analyzer()
        if not ana.can_prove_equal(want, have):
            raise ValueError(f"{what}: cannot prove that the view {new_shape} {dt} covers the same memory as "
                             f"{src.name} {list(src.shape)} {src.dtype}")
    return _T.decl_buffer(new_shape, dt, data=src.data, scope=src.scope() or "global")


def reshape(src: Any, shape: Any) -> Any:
    """``src`` seen with another shape (same dtype, same number of elements)."""
    return _view(src, shape, None, "T.reshape")


def view(src: Any, shape: Any = None, dtype: Any = None) -> Any:
    """``src`` seen with another shape and/or dtype (same size in bits)."""
    return _view(src, shape, dtype, "T.view")

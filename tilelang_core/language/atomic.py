"""``T.atomic_max`` / ``T.atomic_min`` and the vectorised adds ``T.atomic_addx2`` / ``T.atomic_addx4``.

``atomic_max``/``atomic_min`` are ``tl.atomic_add`` statements with a trailing kind (``"max"``/``"min"``), so every
pass that treats an atomic as a side effect (the CPU grid runs serially, CUDA updates once per element) treats
these the same way. A NaN value is skipped, as in the reductions (docs/design.md). ``atomic_addx2/x4(dst, value)``
add 2 / 4 consecutive elements starting at ``dst`` and ``value`` (TileLang takes their addresses); they become
that many element atomics, which CUDA guarantees per element anyway (the vector instruction is a speed matter).

``memory_order``: our atomics are relaxed (CUDA's ``atomicAdd``/``atomicMax``); ``None`` and ``"relaxed"`` are
accepted, a stronger order is refused rather than silently weakened. ``return_prev=True`` (the old value as an
expression) is not supported: the atomics are statements here.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion

from ._ir import describe, dtype_of, emit, is_buffer, shape_of, to_region

MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def check_options(what: str, memory_order: Any, return_prev: Any) -> None:
    if memory_order is not None and memory_order not in MEMORY_ORDERS:
        raise ValueError(f"{what} memory_order: expected one of {MEMORY_ORDERS}, got {memory_order!r}")
    if memory_order not in (None, "relaxed"):
        raise ValueError(f"{what} memory_order={memory_order!r}: only relaxed atomics are supported here (see "
                         "docs/compat.md); order the accesses with a barrier (T.sync_threads) or a separate kernel")
    if return_prev:
        raise ValueError(f"{what} return_prev=True: returning the previous value is not supported (see "
                         "docs/compat.md); the atomic is a statement here")


def _atomic(kind: str, dst: Any, value: Any) -> None:
    what = f"T.atomic_{kind}"
    tile_value = is_buffer(value) or isinstance(value, TensorRegion)
    if isinstance(dst, TensorLoad) and not tile_value:
        if dtype_of(value) is None and not isinstance(value, (int, float)):
            raise TypeError(f"{what} value: expected a scalar expression, got {describe(value)}")
        val = tirx.const(value, dst.source.dtype) if isinstance(value, (int, float)) else value
        emit("tl.atomic_add", [to_region(dst, [1] * len(dst.indices), f"{what} dst"), val, _string(kind)])
        return
    region = to_region(dst, shape_of(value), f"{what} dst")
    emit("tl.atomic_add", [region, to_region(value, [r.extent for r in region.region], f"{what} value"),
                           _string(kind)])


def _string(s: str) -> Any:
    return tvm.ir.StringImm(s)


def atomic_max(dst: Any, value: Any, memory_order: Any = None, return_prev: bool = False, **_ignored: Any) -> None:
    """``dst = max(dst, value)`` atomically (an element or a tile); a NaN value is skipped."""
    check_options("T.atomic_max", memory_order, return_prev)
    _atomic("max", dst, value)


def atomic_min(dst: Any, value: Any, memory_order: Any = None, return_prev: bool = False, **_ignored: Any) -> None:
    """``dst = min(dst, value)`` atomically (an element or a tile); a NaN value is skipped."""
    check_options("T.atomic_min", memory_order, return_prev)
    _atomic("min", dst, value)


def _vector_add(lanes: int, dst: Any, value: Any, return_prev: bool) -> None:
    from .misc import atomic_add

    what = f"T.atomic_addx{lanes}"
    check_options(what, None, return_prev)
    if not isinstance(dst, TensorLoad):
        raise TypeError(f"{what} dst: expected the first element A[i, j] of {lanes} consecutive ones, got "
                        f"{describe(dst)}")
    if isinstance(value, TensorLoad):
        vbuf, vidx = value.source, list(value.indices)
        for lane in range(lanes):
            atomic_add(tirx.BufferLoad(dst.source, list(dst.indices[:-1]) + [dst.indices[-1] + lane]),
                       tirx.BufferLoad(vbuf, vidx[:-1] + [vidx[-1] + lane]))
        return
    if is_buffer(value) or isinstance(value, TensorRegion):
        ext = shape_of(value)
        if ext is not None and ext[-1] is not None and int(ext[-1]) != lanes:
            raise ValueError(f"{what} value: expected {lanes} elements along the last dimension, got "
                             f"{describe(value)}")
        atomic_add(dst, value)
        return
    raise TypeError(f"{what} value: expected the first element B[i, j] of {lanes} consecutive ones (or a "
                    f"{lanes}-element slice), got {describe(value)}")


def atomic_addx2(dst: Any, value: Any, return_prev: bool = False) -> None:
    """Add the 2 consecutive elements starting at ``value`` into those starting at ``dst``, atomically."""
    _vector_add(2, dst, value, return_prev)


def atomic_addx4(dst: Any, value: Any, return_prev: bool = False) -> None:
    """Add the 4 consecutive elements starting at ``value`` into those starting at ``dst``, atomically."""
    _vector_add(4, dst, value, return_prev)

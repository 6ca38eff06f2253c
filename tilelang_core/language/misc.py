"""Odds and ends of the language: ``T.atomic_add``, ``T.print``, ``T.use_swizzle``, ``T.let``."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.ir import TensorLoad, TensorRegion
from tvm.tirx.script.builder.ir import LetAnnotation

from ._ir import describe, dtype_of, emit, is_buffer, shape_of, to_region


def atomic_add(dst: Any, value: Any, **_ignored: Any) -> None:
    """``dst += value`` safely when several blocks update the same element or tile."""
    tile_value = is_buffer(value) or isinstance(value, TensorRegion)
    if isinstance(dst, TensorLoad) and not tile_value:
        if dtype_of(value) is None and not isinstance(value, (int, float)):
            raise TypeError(f"T.atomic_add value: expected a scalar expression, got {describe(value)}")
        val = tirx.const(value, dst.source.dtype) if isinstance(value, (int, float)) else value
        region = to_region(dst, [1] * len(dst.indices), "T.atomic_add dst")
        emit("tl.atomic_add", [region, val])
        return
    src_shape = shape_of(value)
    region = to_region(dst, src_shape, "T.atomic_add dst")
    emit("tl.atomic_add", [region, to_region(value, [r.extent for r in region.region], "T.atomic_add value")])


def print(obj: Any, msg: str = "") -> None:  # noqa: A001
    """Print a scalar expression or a whole tile (debugging; CPU backend)."""
    if is_buffer(obj):
        emit("tl.print", [to_region(obj, None, "T.print"), tvm.ir.StringImm(msg)])
    elif dtype_of(obj) is not None:
        emit("tl.print", [obj, tvm.ir.StringImm(msg)])
    else:
        raise TypeError(f"T.print: expected a buffer or a scalar expression, got {describe(obj)}")


def use_swizzle(panel_size: int = 8, order: str = "row", enable: bool = True) -> None:
    """Block rasterisation hint for L2 reuse on GPUs. Accepted everywhere; the CPU backend ignores it."""
    if not isinstance(panel_size, int) or panel_size <= 0:
        raise ValueError(f"T.use_swizzle panel_size: expected a positive int, got {panel_size!r}")
    if order not in ("row", "col"):
        raise ValueError(f"T.use_swizzle order: expected 'row' or 'col', got {order!r}")
    if enable:
        emit("tl.use_swizzle", [tirx.IntImm("int32", panel_size), tvm.ir.StringImm(order)])


class _Let(LetAnnotation):
    """``T.let``: TVMScript's let annotation (``x: T.let = e``, ``x: T.let[T.int32] = e``) that can also be called
    as TileLang's ``T.let(v, value)`` (bind a variable made with ``v = T.int32()`` for the statements that follow)
    and ``T.let(v, value, body)`` (a let expression)."""

    def __call__(self, v: Any, value: Any, body: Any = None) -> Any:
        from tvm.script import tirx as _T

        if not isinstance(v, tvm.ir.Var) or is_buffer(v):
            raise TypeError(f"T.let v: expected a variable (v = T.int32()), got {describe(v)}")
        vdt = dtype_of(v)
        if isinstance(value, (bool, int, float)):
            value = tirx.const(value, vdt)
        elif dtype_of(value) is None:
            raise TypeError(f"T.let value: expected a scalar expression, got {describe(value)}")
        elif dtype_of(value) != vdt:
            value = tirx.Cast(vdt, value)
        if body is not None:
            return tirx.Let(v, value, body)
        _T.bind(value, var=v)
        return v


let = _Let()

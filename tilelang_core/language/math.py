"""Scalar math usable inside kernels, with Python-number friendly signatures.

``T.max(x, 0)`` must work when ``x`` is a float32 expression and ``0`` a Python int, and ``T.ceildiv`` on two
Python ints must stay a Python int (grid sizes are computed from it), so these wrap TVM's ops.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ._ir import dtype_of
from .dtypes import canonical_dtype

_Number = (int, float, bool)


def _is_expr(x: Any) -> bool:
    return dtype_of(x) is not None and not isinstance(x, _Number)


def _pair(a: Any, b: Any) -> tuple[Any, Any]:
    if _is_expr(a) and isinstance(b, _Number):
        b = tirx.const(b, dtype_of(a))
    elif _is_expr(b) and isinstance(a, _Number):
        a = tirx.const(a, dtype_of(b))
    return a, b


def ceildiv(a: Any, b: Any) -> Any:
    """Ceiling division; stays a Python int on Python ints."""
    from ._sizes import size_value

    a, b = size_value(a, "T.ceildiv: first operand"), size_value(b, "T.ceildiv: second operand")
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("T.ceildiv: division by zero")
        return -(-a // b)
    return tirx.ceildiv(a, b)


def max(a: Any, b: Any) -> Any:  # noqa: A001
    if isinstance(a, _Number) and isinstance(b, _Number):
        return a if a >= b else b
    return tirx.max(*_pair(a, b))


def min(a: Any, b: Any) -> Any:  # noqa: A001
    if isinstance(a, _Number) and isinstance(b, _Number):
        return a if a <= b else b
    return tirx.min(*_pair(a, b))


def clamp(x: Any, min_val: Any, max_val: Any) -> Any:
    """``x`` limited to ``[min_val, max_val]``: ``T.min(T.max(x, min_val), max_val)`` (TileLang's order, so a
    NaN ``x`` follows ``T.max``/``T.min``)."""
    return min(max(x, min_val), max_val)


def align_up(x: Any, y: Any) -> Any:
    """``x`` rounded up to a multiple of ``y``; stays a Python int on Python ints (like ``T.ceildiv``)."""
    q = ceildiv(x, y)
    return q * y


def cast(value: Any, dtype: Any) -> Any:
    """Convert ``value`` to ``dtype`` (TileLang argument order)."""
    dt = canonical_dtype(dtype, "T.cast dtype")
    if isinstance(value, _Number):
        return tirx.const(value, dt)
    return value if dtype_of(value) == dt else tirx.Cast(dt, value)


def if_then_else(cond: Any, t: Any, f: Any) -> Any:
    """Select ``t`` where ``cond`` holds, else ``f``."""
    t, f = _pair(t, f)
    return tirx.if_then_else(cond, t, f)


def infinity(dtype: Any) -> Any:
    """+inf of a float ``dtype`` (TVM's own ``infinity`` knows only float16/32/64; bfloat16 and float8_e5m2 have
    one too; float8_e4m3fn has none: an error names its largest finite value)."""
    dt = canonical_dtype(dtype, "T.infinity dtype")
    if dt == "float8_e4m3fn":
        raise ValueError("T.infinity dtype: float8_e4m3fn has no infinity (its largest finite value is 448; "
                         "use T.max_value('float8_e4m3fn') or compute in float32)")
    if dt in ("bfloat16", "float8_e5m2"):
        return tirx.const(float("inf"), dt)
    return tirx.infinity(dt)


def _unary(name: str) -> Any:
    op = getattr(tirx, name)

    def f(x: Any) -> Any:
        if isinstance(x, _Number):
            x = tirx.const(float(x), "float32")
        return op(x)

    f.__name__ = name
    f.__doc__ = f"Element-wise {name}."
    return f


abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
floor = _unary("floor")
ceil = _unary("ceil")

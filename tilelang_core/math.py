"""TileLang's ``tilelang.math`` helpers on Python ints (also ``tilelang.cdiv``): host-side sizes for grids."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints (``b > 0``)."""
    if b == 0:
        raise ZeroDivisionError("cdiv: b must not be 0")
    return (a + b - 1) // b


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= ``x`` (1 for ``x <= 1``)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


__all__ = ["cdiv", "next_power_of_2"]

"""Symbolic (dynamic) sizes: ``m = T.symbolic("m")`` (also spelled ``T.dynamic("m")``).

A symbolic size is a TIR integer variable used where a program would otherwise write a number: a tensor's shape
(``A: T.Tensor((m, 64), dtype)``), a grid extent (``T.ceildiv(m, block_M)``), a bound in a condition. One compiled
kernel then serves every value of ``m``: the runtime reads it off the shape of the first tensor argument that has
``m`` as a whole dimension, checks every other use of ``m`` against it, and passes it to the kernel (see
``runtime.exported.bind_arguments``). Tile sizes (``T.alloc_*`` shapes, ``T.Parallel`` extents of a tile) stay
compile-time numbers.
"""

from __future__ import annotations

import keyword
from typing import Any

import tvm

_INT_DTYPES = ("int32", "int64")


def symbolic(name: str, dtype: str = "int32") -> Any:
    """A symbolic size called ``name`` (a TIR ``Var`` of ``dtype``, int32 by default, as in TileLang)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise TypeError(f"T.symbolic name: expected a Python identifier such as \"m\", got {name!r}")
    dt = str(dtype)
    if dt not in _INT_DTYPES:
        raise ValueError(f"T.symbolic dtype: a size is an integer; expected one of {', '.join(_INT_DTYPES)}, got "
                         f"{dtype!r}")
    return tvm.ir.Var(name, dt)


def dynamic(name: str, dtype: str = "int32") -> Any:
    """TileLang's other spelling of :func:`symbolic`."""
    return symbolic(name, dtype)

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
    """A symbolic size called ``name``: a TIR ``Var`` of int32 (``dtype`` "int32" or "int64": see below)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise TypeError(f"T.symbolic name: expected a Python identifier such as \"m\", got {name!r}")
    dt = str(dtype)
    if dt not in _INT_DTYPES:
        raise ValueError(f"T.symbolic dtype: a size is an integer; expected one of {', '.join(_INT_DTYPES)}, got "
                         f"{dtype!r}")
    # An int64 size is accepted (TileLang's spelling) and made int32 like the default: our lowering builds per-dimension
    # loop, grid and guard arithmetic in int32, every dimension of a call is checked to be below 2**31 (see
    # runtime.exported.bind_arguments), and offsets into a tensor with symbolic sizes are 64-bit whatever the symbol's
    # dtype (tl.PromoteIndexInt64), so nothing a call can pass wraps. (An int64 var made the CPU and CUDA lowering
    # mix int32 and int64 operands: an internal TVM error.)
    return tvm.ir.Var(name, "int32")


def dynamic(name: str, dtype: str = "int32") -> Any:
    """TileLang's other spelling of :func:`symbolic`."""
    return symbolic(name, dtype)

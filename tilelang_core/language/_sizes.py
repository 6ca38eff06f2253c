"""Checking the sizes a kernel program is spelled with (shapes, extents, ``T.ceildiv`` operands).

A factory argument that is not an integer (``None``, ``32.0``, a string) used to reach TVM as is: ``None`` in
``T.ceildiv`` segfaulted inside TVM, a float gave a TVM check failure. Here each size is an ``int``, a numpy
integer (turned into an ``int``, so ``np.int64(64)`` behaves as ``64``) or an integer TIR expression (a symbolic
dimension, a loop variable); anything else is a ``TypeError`` naming what was given and where it went.
"""

from __future__ import annotations

import operator
from typing import Any

import tvm

from ._ir import dtype_of


def size_value(v: Any, what: str) -> Any:
    """``v`` as an ``int`` or an integer expression, or a ``TypeError`` naming ``what``."""
    if isinstance(v, bool):
        raise TypeError(f"{what}: expected an integer, got {v!r} (bool)")
    if isinstance(v, int):
        return v
    if isinstance(v, tvm.ir.Expr):
        dt = str(dtype_of(v))
        if dt.startswith(("int", "uint")):
            return v
        raise TypeError(f"{what}: expected an integer, got an expression of dtype {dt}: {v}")
    if not isinstance(v, (float, complex, str, bytes)) and v is not None:
        try:
            return operator.index(v)  # numpy / torch integer scalars
        except TypeError:
            pass
    names = _user_names_for(v)
    src = f", the value of {' / '.join(names)}" if names else ""
    hint = " (a factory argument left as None?)" if v is None and not names else (
        " (use an int: sizes are counted in elements)" if isinstance(v, float) else "")
    raise TypeError(f"{what}: expected an integer, got {v!r} ({type(v).__name__}){src}{hint}")


def _user_names_for(v: Any) -> list[str]:
    """Names in the nearest user frame (the factory building the program) bound to exactly this value: the
    factory argument the bad size came from, for the message. Best effort; [] when none is found."""
    import os
    import sys

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tvm_dir = os.path.dirname(os.path.abspath(tvm.__file__))
    frame = sys._getframe(2)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith((pkg, tvm_dir)) and not fname.startswith("<"):
            return [k for k, x in frame.f_locals.items()
                    if not k.startswith("_") and type(x) is type(v) and (x is v or x == v)][:3]
        frame = frame.f_back
    return []


def shape_value(shape: Any, what: str) -> tuple:
    """A shape as a tuple of checked, positive sizes (``what`` names it in errors: ``"T.Tensor shape"``)."""
    if isinstance(shape, (list, tuple)):
        dims = tuple(shape)
    else:
        dims = (shape,)
    out = []
    for i, s in enumerate(dims):
        s = size_value(s, f"{what}: dimension {i}")
        if isinstance(s, int) and s <= 0:
            raise ValueError(f"{what}: dimension {i} must be positive, got {s} in shape {tuple(dims)}")
        out.append(s)
    return tuple(out)

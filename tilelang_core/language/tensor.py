"""Tensor spellings beyond the call form ``T.Tensor(shape, dtype)`` (``kernel.TensorAnnotation``).

* the subscript form ``T.Tensor[(M, N), dtype]``, and TileLang's shape-only ``T.Tensor[(M, N)]`` / ``T.Tensor[M, N]``
  (float32): :func:`split_subscript`;
* with a data pointer, ``T.Tensor(shape, dtype, A.data)`` in a kernel body: a view of another buffer's memory (a
  parameter reshaped, another dtype over it). TVMScript's ``T.Buffer`` there makes a buffer that is never
  declared, and the program failed TVM's well-formedness check ("Program is not well-formed") pointing at the
  decorator; a view is a ``DeclBuffer`` on the same data (:func:`view_of`), which both backends lower like any
  buffer;
* ``T.StridedTensor(shape, strides, dtype)``: accepted when the strides are the contiguous (row-major) ones; other
  strides are refused at the user's line, because the runtime passes and checks contiguous tensors only.
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as _T


def _is_dtype(x: Any) -> bool:
    return isinstance(x, str) or hasattr(x, "bits") or type(x).__module__.startswith(("tvm", "torch"))


def split_subscript(key: Any, what: str) -> tuple:
    """``T.Tensor[key]`` as the arguments of the call form: ``(shape, dtype)`` or ``(shape,)``."""
    if not isinstance(key, tuple):
        return (key,)  # T.Tensor[shape] / T.Tensor[M]
    if len(key) >= 2 and _is_dtype(key[-1]) and (len(key) == 2 or not isinstance(key[0], (tuple, list))):
        shape = key[0] if len(key) == 2 else key[:-1]
        return (shape, key[-1])  # T.Tensor[(M, N), dtype] / T.Tensor[M, N, dtype]
    if any(isinstance(k, (tuple, list)) for k in key):
        raise TypeError(f"{what}[...]: expected [shape, dtype] or [shape], got {key!r}")
    return (key,)  # T.Tensor[M, N]


def view_of(shape: Any, dtype: Any, data: Any, what: str) -> Any:
    """A buffer declared over ``data`` (another buffer's ``.data``): a view, no copy."""
    from ._ir import is_buffer
    from ._sizes import shape_value
    from .dtypes import canonical_dtype

    if is_buffer(data):
        raise TypeError(f"{what} data: expected a data pointer such as {data.name}.data, got the buffer "
                        f"{data.name} itself")
    dt = getattr(getattr(data, "ty", None), "dtype", None)
    if dt is not None and str(dt) != "handle":
        raise TypeError(f"{what} data: expected a data pointer (a buffer's .data), got an expression of dtype {dt}")
    return _T.decl_buffer(shape_value(shape, f"{what} shape"), canonical_dtype(dtype, f"{what} dtype"), data=data)


def _row_major(shape: tuple) -> list[Any]:
    strides: list[Any] = [1]
    for d in reversed(shape[1:]):
        strides.insert(0, strides[0] * d)
    return strides


def StridedTensor(shape: Any, strides: Any = None, dtype: Any = "float32") -> Any:  # noqa: N802 (TileLang spelling)
    """A tensor parameter with explicit strides; only the contiguous strides are supported here."""
    import tvm

    from ._sizes import shape_value
    from .kernel import Tensor

    shape_t = shape_value(shape, "T.StridedTensor shape")
    if strides is not None:
        given = list(strides) if isinstance(strides, (list, tuple)) else [strides]
        if len(given) != len(shape_t):
            raise ValueError(f"T.StridedTensor strides: expected {len(shape_t)} strides for shape {list(shape_t)}, "
                             f"got {given}")
        want = _row_major(shape_t)
        ana = tvm.sym.Analyzer()
        for g, w in zip(given, want):
            ok = g == w if isinstance(g, int) and isinstance(w, int) else ana.can_prove_equal(g, w)
            if not ok:
                msg = (f"T.StridedTensor strides {given}: only the contiguous (row-major) strides {want} are "
                       "supported here (the runtime passes contiguous tensors; see docs/compat.md); pass a "
                       "contiguous tensor and index it as the strides would")
                from .dtypes import ANNOTATION_ERRORS

                ANNOTATION_ERRORS.last = (msg, "StridedTensor(")  # reported at its line under PEP 563 (see jit)
                raise ValueError(msg)
    return Tensor(shape_t, dtype)

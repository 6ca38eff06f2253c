"""Tensor spellings beyond the call form ``T.Tensor(shape, dtype)`` (``kernel.TensorAnnotation``).

* the subscript form ``T.Tensor[(M, N), dtype]``, and TileLang's shape-only ``T.Tensor[(M, N)]`` / ``T.Tensor[M, N]``
  (float32): :func:`split_subscript`;
* with a data pointer, ``T.Tensor(shape, dtype, A.data)`` in a kernel body: a view of another buffer's memory (a
  parameter reshaped, another dtype over it). TVMScript's ``T.Buffer`` there makes a buffer that is never
  declared, and the program failed TVM's well-formedness check ("Program is not well-formed") pointing at the
  decorator; a view is a ``DeclBuffer`` on the same data (:func:`view_of`), which both backends lower like any
  buffer;
* ``T.StridedTensor(shape, strides, dtype)``: a parameter in a given memory layout (a column slice ``x[:, :64]``,
  a transpose ``x.t()``), read and written in place. Constant positive strides: the buffer carries them, TVM's
  flattening builds every offset from them, the runtime checks that a call's tensor has exactly these strides and
  allocates ``out_idx`` outputs in that layout. The contiguous strides give a plain ``T.Tensor``. CPU only for now
  (the CUDA lowering's vectorised and tensor-core paths assume row-major tensors: a compile error there); symbolic
  strides are refused at the user's line.
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
    """A tensor parameter with explicit element strides (constant positive ints; see the module docstring)."""
    import tvm

    from ._sizes import shape_value
    from .kernel import Tensor

    shape_t = shape_value(shape, "T.StridedTensor shape")
    if strides is None:
        return Tensor(shape_t, dtype)

    def refuse(msg: str) -> None:
        from .dtypes import ANNOTATION_ERRORS

        ANNOTATION_ERRORS.last = (msg, "StridedTensor(")  # reported at its line under PEP 563 (see jit)
        raise ValueError(msg)

    given = list(strides) if isinstance(strides, (list, tuple)) else [strides]
    if len(given) != len(shape_t):
        refuse(f"T.StridedTensor strides: expected {len(shape_t)} strides for shape {list(shape_t)}, got {given}")
    want = _row_major(shape_t)
    ana = tvm.sym.Analyzer()
    if all((g == w) if isinstance(g, int) and isinstance(w, int) else ana.can_prove_equal(g, w)
           for g, w in zip(given, want)):
        return Tensor(shape_t, dtype)  # the contiguous layout: a plain tensor
    ints = []
    for g in given:
        try:
            v = int(g)  # an int or an integer constant
        except TypeError:
            v = None
        if v is None or isinstance(g, bool) or v <= 0:
            refuse(f"T.StridedTensor strides {given}: expected constant positive ints (symbolic strides are not "
                   f"supported here; see docs/compat.md), got {g!r}")
        ints.append(v)
    return Tensor(shape_t, dtype, strides=tuple(ints))

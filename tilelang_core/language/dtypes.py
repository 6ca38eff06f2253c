"""The dtypes a kernel may use, and the ``T.Tensor`` / ``T.Buffer`` parameter annotations.

Checking dtypes here (instead of deep inside TVM) gives the user a message that names the bad dtype and the
accepted ones, at the line that wrote it.
"""

from __future__ import annotations

import threading
from typing import Any

from tvm.script import tirx as _T

# The last parameter-annotation error, per thread. TVMScript's parser swallows an exception raised while it
# evaluates a string annotation (``from __future__ import annotations``) and reports an unrelated type error
# instead; jit consults this record to report ours.
ANNOTATION_ERRORS = threading.local()

SUPPORTED_DTYPES = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool",
)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "bf16": "bfloat16",
            "fp16": "float16", "fp32": "float32"}


def canonical_dtype(dtype: Any, what: str = "dtype") -> str:
    """Return the canonical dtype string or raise ValueError naming the argument."""
    name = dtype if isinstance(dtype, str) else getattr(dtype, "dtype", None) or str(dtype)
    if not isinstance(name, str):
        name = str(name)
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    if name not in SUPPORTED_DTYPES:
        raise ValueError(f"{what}: unknown dtype {dtype!r}; expected one of {', '.join(SUPPORTED_DTYPES)}")
    return name


def Tensor(shape: Any, dtype: Any = "float32", *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (TileLang spelling)
    """A kernel parameter: a tensor of ``shape`` and ``dtype`` in global memory."""
    from ._sizes import shape_value

    try:
        shape = shape_value(shape, "T.Tensor shape")
    except (TypeError, ValueError) as e:
        ANNOTATION_ERRORS.last = (str(e), "Tensor(")  # located at the first annotation line (see jit)
        raise
    try:
        dt = canonical_dtype(dtype, "T.Tensor dtype")
    except ValueError as e:
        ANNOTATION_ERRORS.last = (str(e), repr(dtype))
        raise
    # the kernel accepts any contiguous tensor, whatever its start address (numpy arrays are 16-byte aligned,
    # torch views can start anywhere): promise LLVM only element alignment, never TVM's default of 64 bytes
    kwargs.setdefault("align", _elem_bytes(dt))
    return _T.Buffer(tuple(shape), dt, *args, **kwargs)


def _elem_bytes(dtype: str) -> int:
    import tvm

    return max(tvm.DataType(dtype).bits // 8, 1)


Buffer = Tensor

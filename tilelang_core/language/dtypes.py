"""The dtypes a kernel may use: TileLang's dtype objects (``T.float16`` ...), and the ``T.Tensor`` annotations.

``T.float16``, ``T.bfloat16``, ``T.float8_e4m3fn``, ``T.int8`` ... are :class:`dtype` objects, as in TileLang: a
``str`` (``T.float16 == "float16"``, ``getattr(torch, T.float16)``, dict keys, f-strings) that TVM's FFI takes as
a dtype, and that is also callable where TVMScript expects its dtype constructors inside a ``@T.prim_func`` body
(``T.float32(0)`` a constant, ``T.int32(x)`` a cast, ``n: T.int32`` a scalar). ``T.dtype(x)`` accepts a string,
a torch or numpy dtype or ``bool``/``int``/``float``. Checking dtypes here (instead of deep inside TVM) gives the
user a message that names the bad dtype and the accepted ones, at the line that wrote it.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import tvm_ffi
from tvm.script import tirx as _T

# The last parameter-annotation error, per thread. TVMScript's parser swallows an exception raised while it
# evaluates a string annotation (``from __future__ import annotations``) and reports an unrelated type error
# instead; jit consults this record to report ours.
ANNOTATION_ERRORS = threading.local()

SUPPORTED_DTYPES = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool",
    "float8_e4m3fn", "float8_e5m2",
)
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "bf16": "bfloat16",
            "fp16": "float16", "fp32": "float32", "short": "int16", "long": "int64", "uint": "uint32",
            "ulong": "uint64",
            # TileLang's tf32 dtype: float32 storage whose GEMMs may round inputs to TF32 on tensor cores. Here it
            # is float32 throughout (never less precise than TF32); see docs/compat.md#dtypes.
            "tfloat32": "float32", "custom[tfloat32]": "float32"}
_PYTHON_TYPES = {bool: "bool", int: "int32", float: "float32"}
# Known to TVM but not a storage/compute dtype of this compiler: the reason, shown when one is used.
_UNSUPPORTED_WHY = {
    "int4": "int4 tensors and tiles are not supported by this compiler; pack two 4-bit values per int8/uint8 byte "
            "and unpack with shifts (examples/dequant_gemm.py)",
    "float8_e4m3": "TVM's float8_e4m3 (with infinities) has no torch dtype; use float8_e4m3fn (torch.float8_e4m3fn)",
}
COMPAT_DOC = "docs/compat.md#dtypes"


def _dtype_name(value: Any) -> str:
    """The dtype string spelt by ``value``: a str (aliases resolved), a torch or numpy dtype, a Python type."""
    if isinstance(value, str):
        name = str.__str__(value)
    elif isinstance(value, type) and value in _PYTHON_TYPES:
        name = _PYTHON_TYPES[value]
    else:
        inner = getattr(value, "_dtype_str", None)  # TVMScript's DtypeConstructor (tvm.script.tirx.float32)
        if isinstance(inner, str):
            name = inner
        else:
            name = str(value)
            numpy_type = isinstance(value, type) and value.__module__ == "numpy"
            if numpy_type or type(value).__module__.startswith("numpy"):
                import numpy as np

                name = str(np.dtype(value))
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _ALIASES.get(name, name)


class dtype(tvm_ffi.dtype):  # noqa: N801 (TileLang's name)
    """A dtype object, as ``T.float16`` ... in TileLang: a ``str`` that TVM takes as a dtype, and callable.

    ``dtype("float16") == "float16"``; ``dtype(torch.float16)``, ``dtype(float)`` and aliases (``"half"``,
    ``"float"``, ``"int"`` ...) give the canonical name. Calling it builds TIR the way TVMScript's constructors
    do: ``T.float32(0)`` a constant, ``T.float32(x)`` a cast, ``T.float32()`` (an annotation ``n: T.int32``) a
    variable, ``T.float16x2(a, b)`` a vector. ``.bits``, ``.bytes``, ``.lanes``, ``.as_torch()``.
    """

    __slots__ = ()

    def __new__(cls, value: Any = "float32") -> dtype:
        if type(value) is cls:
            return value
        name = _dtype_name(value)
        try:
            if _SCALAR_OF.sub("", name) not in _SCALARS:
                raise ValueError(name)
            return super().__new__(cls, name)
        except (ValueError, TypeError):
            raise TypeError(f"T.dtype: unknown dtype {value!r}; expected a dtype name such as "
                            f"{', '.join(SUPPORTED_DTYPES)}, a torch or numpy dtype, or bool/int/float") from None

    @property
    def bytes(self) -> int:
        """Bytes per element (1 for sub-byte dtypes such as int4)."""
        return max(self.itemsize, 1)

    def as_torch(self) -> Any:
        """The torch dtype that stores this dtype (``torch.int8`` for int4, as TileLang does)."""
        import torch

        name = str.__str__(self)
        if name == "int4":
            return torch.int8
        value = getattr(torch, name, None)
        if not isinstance(value, torch.dtype):
            raise TypeError(f"dtype {name!r} has no torch dtype")
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tvm import tirx

        if len(args) > 1:  # T.float16x2(a, b): the scalars packed into one vector
            return tirx.Shuffle(list(args), list(range(len(args))))
        ctor = getattr(_T, str.__str__(self), None)
        if ctor is not None and callable(ctor) and not isinstance(ctor, dtype):
            return ctor(*args, **kwargs)  # TVMScript's own constructor: constants, casts, annotation variables
        expr = args[0] if args else kwargs.get("expr")
        if expr is None:
            return tirx.Var("v", str.__str__(self))
        if isinstance(expr, (int, float)):
            return tirx.const(expr, str.__str__(self))
        return tirx.Cast(str.__str__(self), expr)

    def __repr__(self) -> str:
        # the repr of the plain string: a factory called with T.float16 or with "float16" builds the same kernel
        # (the JIT keys configurations by repr) and an exported configuration reads back as a string
        return repr(str.__str__(self))

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (dtype, (str.__str__(self),))

    def __copy__(self) -> dtype:
        return self

    def __deepcopy__(self, memo: Any) -> dtype:
        return self


_SCALARS = ("bool", "int4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
            "float32", "float64", "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
            "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
            "float6_e3m2fn", "float4_e2m1fn", "handle")
_SCALAR_OF = re.compile(r"x\d+$")  # float16x2 -> float16


def _dtype_table() -> dict[str, dtype]:
    """TileLang's dtype names (``T.float16``, ``T.float``, ``T.int4``, ``T.float8_e4m3fn``, ``T.float16x2`` ...)."""
    table: dict[str, dtype] = {}
    for name in _SCALARS[:-1]:
        table[name] = dtype(name)
        if name not in ("bool", "int4") and not name.startswith(("float6", "float4")):
            for lanes in (2, 4, 8, 16, 32, 64):
                if name == "bfloat16" and lanes > 2:
                    continue
                table[f"{name}x{lanes}"] = dtype(f"{name}x{lanes}")
    for alias in ("float", "half", "double", "int", "uint", "short", "long"):
        table[alias] = dtype(alias)
    table["tfloat32"] = dtype("tfloat32")
    return table


DTYPES: dict[str, dtype] = _dtype_table()


def __getattr__(name: str) -> Any:
    """``tilelang_core.dtypes.float16`` (TileLang's ``tilelang.dtypes``) is ``T.float16``."""
    if name in DTYPES:
        return DTYPES[name]
    raise AttributeError(f"module 'tilelang_core.language.dtypes' has no attribute {name!r}")


def is_float8(value: Any) -> bool:
    """Whether ``value`` (a dtype name or object, or a torch dtype) is one of the 8-bit float dtypes."""
    return _dtype_name(value).startswith("float8")


def canonical_dtype(dtype: Any, what: str = "dtype") -> str:  # noqa: F811 (the parameter shadows the class here)
    """Return the canonical dtype string (a plain ``str``) or raise ValueError naming the argument."""
    try:
        name = _dtype_name(dtype)
    except Exception:  # noqa: BLE001 - an object numpy cannot read as a dtype: reported below
        name = repr(dtype)
    if name not in SUPPORTED_DTYPES:
        why = _UNSUPPORTED_WHY.get(name)
        if why is not None:
            raise ValueError(f"{what}: {why} (see {COMPAT_DOC})")
        raise ValueError(f"{what}: unknown dtype {dtype!r}; expected one of {', '.join(SUPPORTED_DTYPES)} "
                         f"(see {COMPAT_DOC})")
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

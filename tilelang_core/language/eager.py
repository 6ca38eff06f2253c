"""The names of TileLang's *eager* spelling: ``T.const``, ``T.empty``, ``T.annotate_pass_configs``,
``T.annotate_compile_flags``.

In the eager spelling the body of the ``@tilelang.jit`` function is the kernel itself (no inner ``@T.prim_func``):
``M, N = T.const("M, N")`` declares compile-time sizes that are read off the tensors a call passes,
``A: T.Tensor((M, N), dtype)`` makes the parameter ``A`` a tensor of that shape, and ``C = T.empty((M, N), dtype)``
declares an output the kernel allocates and returns (``return C``). ``tilelang_core.jit.eager`` turns such a
function into a program; these helpers only describe what the function declares.

``T.annotate_pass_configs`` / ``T.annotate_compile_flags`` record compiler options from the body.

``T.const`` needs to know which phase of that build it runs in (finding which tensor dimension each size is, or
building the program for known values), so it reads a per-thread context that the builder sets. The language must
not import the jit layer, hence the context lives here and the builder fills it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

# The eager build running on this thread (set by tilelang_core.jit.eager while it runs the function's declarations).
EAGER_BUILD = threading.local()

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class EagerContext:
    """What ``T.const`` answers during one run of an eager function's declarations.

    ``values`` is None while the builder looks for the tensor dimension each size is (``T.const`` then gives a
    fresh symbolic variable per name, recorded in ``declared``); afterwards it maps each name to its int."""

    values: dict[str, int] | None = None
    declared: dict[str, Any] = field(default_factory=dict)
    pass_configs: dict[str, Any] | None = None   # T.annotate_pass_configs
    compile_flags: list[str] | None = None       # T.annotate_compile_flags


def _split_names(names: Any, what: str) -> list[str]:
    if not isinstance(names, str):
        raise TypeError(f"{what}: expected a string of names such as \"M, N\", got {names!r}")
    parts = [p for p in re.split(r"[\s,]+", names.strip()) if p]
    if not parts:
        raise ValueError(f"{what}: expected at least one name, got {names!r}")
    for p in parts:
        if not _NAME_RE.match(p):
            raise ValueError(f"{what}: {p!r} is not a valid name (in {names!r})")
    if len(set(parts)) != len(parts):
        raise ValueError(f"{what}: a name is repeated in {names!r}")
    return parts


def const(names: str, dtype: Any = "int32") -> Any:
    """Compile-time sizes of an eager ``@tilelang.jit`` function: ``M, N, K = T.const("M, N, K")``.

    Each name must be a dimension of some tensor parameter's annotation (``A: T.Tensor((M, K), dtype)``): a call
    reads its value from the tensor it passes (or from a keyword ``M=...``) and the kernel is specialised on it,
    one compile per distinct value, as in TileLang. One name gives one value, several names a tuple."""
    parts = _split_names(names, "T.const")
    from .dtypes import canonical_dtype

    dt = canonical_dtype(dtype, "T.const dtype")
    if not dt.startswith(("int", "uint")):
        raise ValueError(f"T.const dtype: sizes are integers; expected an integer dtype, got {dtype!r}")
    ctx: EagerContext | None = getattr(EAGER_BUILD, "current", None)
    if ctx is None:
        raise TypeError("T.const(...) is only meaningful in the body of an eager @tilelang.jit function (one "
                        "without an inner @T.prim_func); in the classic spelling pass sizes as factory arguments")
    out = []
    for p in parts:
        if ctx.values is None:
            from tvm import tirx

            var = ctx.declared.get(p)
            if var is None:
                var = ctx.declared[p] = tirx.Var(p, dt)
            out.append(var)
        else:
            if p not in ctx.values:
                raise ValueError(f"T.const: no value for {p!r}")
            out.append(ctx.values[p])
    return out[0] if len(out) == 1 else tuple(out)


@dataclass(frozen=True)
class EmptyTensor:
    """An output declared with ``T.empty``: the kernel gets it as a parameter, the call allocates and returns it."""

    shape: tuple
    dtype: str

    def annotation(self) -> Any:
        """The ``T.Tensor`` parameter this output becomes."""
        from .dtypes import Tensor

        return Tensor(self.shape, self.dtype)


def empty(*shape: Any, dtype: Any = "float32") -> EmptyTensor:
    """Declare an output of an eager ``@tilelang.jit`` function: ``C = T.empty((M, N), dtype)``, then
    ``return C``. Spellings as in TileLang: ``T.empty((M, N), dtype)``, ``T.empty((M, N), dtype=...)``,
    ``T.empty(M, N, dtype=...)``."""
    if len(shape) == 2 and isinstance(shape[0], (tuple, list)) and not isinstance(shape[1], (tuple, list, int)):
        shape, dtype = tuple(shape[0]), shape[1]
    elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    from ._sizes import shape_value
    from .dtypes import canonical_dtype

    dims = shape_value(shape, "T.empty shape")
    return EmptyTensor(dims, canonical_dtype(dtype, "T.empty dtype"))


def _context(what: str) -> EagerContext:
    ctx: EagerContext | None = getattr(EAGER_BUILD, "current", None)
    if ctx is None:
        raise TypeError(f"{what}(...) is only meaningful in the body of an eager @tilelang.jit function (one "
                        "without an inner @T.prim_func); in the classic spelling pass it to @tilelang.jit")
    return ctx


def annotate_pass_configs(configs: Any) -> None:
    """Compiler options of an eager function, from its body: ``T.annotate_pass_configs({"tl.cuda.split_k": 1})``.
    As in TileLang, the decorator's ``pass_configs`` take precedence over these; both are validated."""
    ctx = _context("T.annotate_pass_configs")
    if not isinstance(configs, dict):
        raise TypeError(f"T.annotate_pass_configs: expected a dict of pass-config keys to values, got {configs!r}")
    ctx.pass_configs = dict(configs)


def annotate_compile_flags(flags: Any) -> None:
    """Extra nvcc/NVRTC flags of an eager function, from its body (added after the decorator's
    ``compile_flags``): ``T.annotate_compile_flags(["-lineinfo"])`` or a string."""
    ctx = _context("T.annotate_compile_flags")
    if isinstance(flags, str):
        flags = [flags]
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise TypeError(f"T.annotate_compile_flags: expected a str or a list of str, got {flags!r}")
    ctx.compile_flags = list(flags)

"""tilelang_core: a TileLang-compatible tile language compiled through Apache TVM.

``import tilelang_core as tilelang`` then ``@tilelang.jit(out_idx=[-1])`` on a kernel factory. The language is
``tilelang_core.language`` (``import tilelang_core.language as T``). Heavy modules (TVM, torch) are imported on
first use, so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Profiler": ("tilelang_core.profiler", "Profiler"),
    "language": ("tilelang_core.language", None),
    "trace": ("tilelang_core.trace", None),  # a package you can also call: tilelang_core.trace(kernel)
    "autotune": ("tilelang_core.autotune", None),  # likewise: @tilelang_core.autotune(configs=...)
    "machine": ("tilelang_core.machine", None),
    "PassConfigKey": ("tilelang_core.pass_config", "PassConfigKey"),
}

from .errors import (  # noqa: E402  (light)
    TileLangCheckError,
    TileLangCompileError,
    TileLangError,
    TileLangRuntimeError,
)

# Eager and light (no TVM, no torch at import): binding ``jit`` here also keeps the name pointing at the decorator
# rather than at the ``tilelang_core.jit`` subpackage, which importing the subpackage would otherwise set.
from .jit import JITKernel, cache_stats, compile, jit, without_disk_cache  # noqa: E402,A004

__all__ = ["__version__", "TileLangError", "TileLangCompileError", "TileLangCheckError", "TileLangRuntimeError",
           "jit", "compile", "cache_stats", "without_disk_cache", "JITKernel", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(mod_name)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tilelang_core' has no attribute {name!r}")

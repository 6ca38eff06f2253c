"""tilelang_core: a TileLang-compatible tile language compiled through Apache TVM.

``import tilelang_core as tilelang`` then ``@tilelang.jit(out_idx=[-1])`` on a kernel factory. The language is
``tilelang_core.language`` (``import tilelang_core.language as T``). Heavy modules (TVM, torch) are imported on
first use, so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "jit": ("tilelang_core.jit", "jit"),
    "compile": ("tilelang_core.jit", "compile"),
    "cache_stats": ("tilelang_core.jit", "cache_stats"),
    "JITKernel": ("tilelang_core.jit.kernel", "JITKernel"),
    "Profiler": ("tilelang_core.profiler", "Profiler"),
    "language": ("tilelang_core.language", None),
}

from .errors import TileLangCompileError, TileLangError, TileLangRuntimeError  # noqa: E402  (light)

__all__ = ["__version__", "TileLangError", "TileLangCompileError", "TileLangRuntimeError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(mod_name)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tilelang_core' has no attribute {name!r}")

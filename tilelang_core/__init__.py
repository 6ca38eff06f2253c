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
    # TileLang's module-level API (docs/compat.md, "Modules and top-level API")
    "profiler": ("tilelang_core.profiler", None),
    "testing": ("tilelang_core.testing", None),
    "autotuner": ("tilelang_core.autotuner", None),
    "utils": ("tilelang_core.utils", None),
    "layout": ("tilelang_core.layout", None),
    "tvm": ("tilelang_core.tvm", None),
    "transform": ("tilelang_core.transform", None),  # our passes; TileLang's spelling tilelang.transform.PassConfigKey
    "math": ("tilelang_core.math", None),
    "dtypes": ("tilelang_core.language.dtypes", None),
    "DataType": ("tilelang_core.language.dtypes", "dtype"),
    "TensorSupplyType": ("tilelang_core.utils.tensor", "TensorSupplyType"),
    "deprecated": ("tilelang_core.utils", "deprecated"),
    "Layout": ("tilelang_core.layout", "Layout"),
    "Fragment": ("tilelang_core.layout", "Fragment"),
    "cdiv": ("tilelang_core.math", "cdiv"),
    "next_power_of_2": ("tilelang_core.math", "next_power_of_2"),
    "par_compile": ("tilelang_core.parallel_compile", "par_compile"),
    "disable_cache": ("tilelang_core.cache_control", "disable_cache"),
    "enable_cache": ("tilelang_core.cache_control", "enable_cache"),
    "is_cache_enabled": ("tilelang_core.cache_control", "is_cache_enabled"),
}

# TileLang top-level names with no counterpart here: the reason, raised as an AttributeError pointing to the docs.
_COMPILER_INTERNALS = "a part of TileLang's own compiler with no counterpart in tilelang_core"
UNSUPPORTED = {
    "lower": "TileLang's lowering entry point; use tilelang_core.compile(prim_func) (kernel.trace shows every "
             "stage) or factory.get_program(...) for the program as written",
    "register_cuda_postproc": "hooks that rewrite generated CUDA source are not exposed (the source is in "
                              "kernel.get_kernel_source(); compile flags go in compile_flags=)",
    "register_hip_postproc": "there is no HIP/ROCm backend",
    "register_c_postproc": "hooks that rewrite generated C source are not exposed",
    "env": "TileLang's settings object; tilelang_core reads a few TILELANG_CORE_* variables (README) and takes "
           "compiler options as pass_configs",
    "build_date": "tilelang_core has no native build (see tilelang_core.__version__)",
    "get_windows_runtime_dll_dirs": "Windows DLL search helpers; tilelang_core loads no native library of its own "
                                    "and runs on Linux",
    "prepend_dll_search_path": "Windows DLL search helpers; tilelang_core loads no native library of its own",
    "rocm": "there is no ROCm backend", "metal": "there is no Metal backend", "webgpu": "there is no WebGPU backend",
    "cuda": "TileLang's CUDA intrinsics package is not ported; T.* tile ops compile for CUDA (target='cuda')",
    "cpu": "TileLang's CPU backend package; our CPU backend is internal (target='cpu')",
    "carver": "TileLang's template-based tuner (carver) is not ported; use tilelang_core.autotune",
    "cache": "TileLang's cache package; use tilelang_core.cache_stats(), disable_cache() and enable_cache()",
    **{n: _COMPILER_INTERNALS for n in ("analysis", "engine", "tools", "ir", "tileop", "contrib", "libinfo",
                                        "autodd", "instrumentation")},
}

import logging as _logging  # noqa: E402  (light)

logger = _logging.getLogger(__name__)


def set_log_level(level: Any) -> None:
    """Set the ``tilelang_core`` logger's level: a name (``"INFO"``, ``"debug"``) or a ``logging`` constant."""
    if isinstance(level, str):
        value = getattr(_logging, level.upper(), None)
        if not isinstance(value, int):
            raise ValueError(f"set_log_level: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
        level = value
    logger.setLevel(level)

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
           "jit", "compile", "cache_stats", "set_log_level", "logger", "without_disk_cache", "JITKernel", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(mod_name)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    if name in UNSUPPORTED:
        raise AttributeError(f"tilelang_core.{name} is not supported: {UNSUPPORTED[name]} (see docs/compat.md"
                             "#modules-and-top-level-api)")
    raise AttributeError(f"module 'tilelang_core' has no attribute {name!r}")

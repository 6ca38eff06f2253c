"""Compile traces: how a tile program is lowered, as data.

Why this package exists: users debug kernels by watching the lowering, and the workbench renders it, so the core
exposes it as objects instead of printouts::

    from tilelang_core.trace import Trace, Stage, diff_kernels

    kernel = matmul(128, 128, 128, 64, 64, 32)
    tr = kernel.trace                  # computed on first access, then cached on the kernel
    tr.names()                         # ['input', 'tl.ValidateTileOps', ..., 'tirx.LowerIntrin', 'codegen']
    tr.diff("tl.LowerTileOpsCPU", "tl.LowerParallelCPU")
    diff_kernels(k64, k128, stage="input")
    kernel.sources["asm"].text         # labelled generated code, with the exact command behind it

``tilelang_core.trace(kernel_or_factory_or_prim_func, ...)`` is a shortcut for the same. The command line is
``python -m tilelang_core.trace path/to/kernel.py:factory --args M=256 ...`` (see :mod:`.cli`). Importing this
package does not import TVM; capturing a trace does.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..errors import FailureReport, SourceLocation
from .model import GeneratedCode, Stage, Trace, diff_kernels, sources_of, unified_diff


def capture(program: Any, **kwargs: Any) -> Trace:
    """The trace of a ``@T.prim_func`` (see :func:`tilelang_core.trace.recorder.capture`)."""
    from .recorder import capture as _capture

    return _capture(program, **kwargs)


def trace(obj: Any, *args: Any, **kwargs: Any) -> Trace:
    """The trace of a compiled kernel, of a ``@jit`` factory called with ``args``/``kwargs``, or of a
    ``@T.prim_func``."""
    if hasattr(obj, "trace") and hasattr(obj, "artifact"):
        return obj.trace
    if getattr(obj, "eager", False):  # an eager @jit function: calling it runs the kernel; compile() gives it
        return obj.compile(*args, **kwargs).trace
    if hasattr(obj, "get_program") and hasattr(obj, "factory"):
        return obj(*args, **kwargs).trace
    if type(obj).__name__ == "PrimFunc":
        return capture(obj, **kwargs)
    raise TypeError(f"trace: expected a compiled kernel, a @jit factory or a @T.prim_func, got {type(obj).__name__}")


class _CallableModule(types.ModuleType):
    """Lets ``tilelang_core.trace(...)`` be called while ``tilelang_core.trace`` stays a package."""

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Trace:
        return trace(obj, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Trace", "Stage", "GeneratedCode", "SourceLocation", "FailureReport", "diff_kernels", "capture",
           "trace", "sources_of", "unified_diff"]

"""Pass: a ``T.call_extern`` the CPU build cannot resolve is an error at the user's line, before LLVM sees it.

Why: the CPU build links the kernel into a shared library whose undefined symbols are resolved when it is loaded;
a name nothing defines (a CUDA ``__device__`` function given to ``T.import_source``) would fail there, far from
the program, with the loader's message. Here every ``call_extern`` / ``call_pure_extern`` of the user's program
(our own CPU passes add theirs later) is looked up in the running process — the C library, libm and what Python
has loaded, the symbols the kernel library will see — and a name not found is reported with the line and what to
do: run on target="cuda", or write the function in TIR. ``T.import_source`` code is CUDA only (docs/compat.md).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..common.imported_sources import imported_sources
from ..common.rewriter import Rewriter

EXTERN_OPS = ("tirx.call_extern", "tirx.call_pure_extern", "tir.call_extern", "tir.call_pure_extern")


@functools.cache
def _resolvable(name: str) -> bool:
    try:
        getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return False
    return True


def _extern_names(node: Any) -> list[str]:
    names: list[str] = []

    def call(c: Any) -> Any:
        op = getattr(c, "op", None)
        if isinstance(op, tvm.ir.Op) and str(op.name) in EXTERN_OPS and c.args and \
                isinstance(c.args[0], tvm.ir.StringImm):
            names.append(str(c.args[0].value))
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, call)])
    return names


class CheckExternCallsCPU(Rewriter):
    pass_name = "tl.CheckExternCallsCPU"

    def __init__(self, imported: bool) -> None:
        super().__init__()
        self.imported = imported

    def _check(self, s: Any, node: Any) -> Any:
        for name in _extern_names(node):
            if not _resolvable(name):
                where = (" (T.import_source code is CUDA device code, compiled only for target=\"cuda\")"
                         if self.imported else "")
                self.error(s.span, f"T.call_extern({name!r}): no CPU definition of {name!r}{where}; run this "
                                   "kernel with target=\"cuda\", or write the function in the program for the CPU")
                break
        return s

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        return self._check(s, s.value)

    def visit_BufferStore(self, s: Any) -> Any:  # noqa: N802
        return self._check(s, s)

    def visit_Bind(self, s: Any) -> Any:  # noqa: N802
        self._check(s, s.value)
        return super().visit_Bind(s)

    def visit_IfThenElse(self, s: Any) -> Any:  # noqa: N802
        self._check(s, s.condition)
        return super().visit_IfThenElse(s)


def check_extern_calls_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    CheckExternCallsCPU(bool(imported_sources(func))).run(func)
    return func

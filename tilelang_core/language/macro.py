"""``T.macro``: a helper whose body is inlined, as TIR, at every call inside a kernel.

TVMScript's own hygienic macro resolves the names its body uses when it is defined, and binds its parameters
next to them; a parameter that shares its name with a global of the defining module (``Q``, ``K``, ``acc_s``
are common names in a notebook namespace and in TileLang's examples) is then "already defined" and the kernel
fails to parse. Python scoping says a parameter shadows the global, so this wrapper drops the parameter names
from the captured names before handing the macro to TVMScript.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tvm.script.parser._core import scan_macro, utils
from tvm.tirx.script.parser.entry import TIRMacro


def macro(*args: Any, hygienic: bool = True) -> Any:
    """Decorate a helper used inside ``@T.prim_func`` bodies: ``@T.macro`` or ``@T.macro(hygienic=False)``."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        source, closure_vars = scan_macro(func, utils.inspect_function_capture(func))
        params = set(inspect.signature(func).parameters)
        closure_vars = {k: v for k, v in closure_vars.items() if k not in params}
        obj = TIRMacro(source, closure_vars, func, hygienic)

        def wrapper(*a: Any, **kw: Any) -> Any:
            return obj(*a, **kw)

        wrapper.__name__ = func.__name__
        wrapper.__doc__ = func.__doc__
        return wrapper

    if not args:
        return decorate
    if len(args) == 1 and inspect.isfunction(args[0]):
        return decorate(args[0])
    raise ValueError("T.macro: use it as @T.macro or @T.macro(hygienic=...)")


macro.dispatch_token = "tir.macro"  # type: ignore[attr-defined]  # what TVMScript's parser looks for

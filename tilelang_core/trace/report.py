"""Filling in a compile error's :class:`~tilelang_core.errors.FailureReport` as it travels up.

Why this module exists: a failed compile is only useful to someone else if it says exactly what was tried. The
layers that know each part call in here: ``compile`` (target, shapes, the failing stage and the IR after the last
stage that succeeded — found by capturing the trace up to the failure, which costs nothing on the success path),
and ``@jit`` / the CLI (the factory, its arguments as Python expressions, and its source file's text). This module
imports no TVM itself; only :func:`describe_compile_failure` does, through :mod:`.recorder`.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import types
from pathlib import Path
from typing import Any

from ..errors import FailureReport, TileLangCheckError, TileLangCompileError

# Environment variables that change how a kernel is compiled or linked (recorded in reports, applied by repros).
COMPILER_ENV = ("CC", "CXX", "CFLAGS", "LDFLAGS", "TILELANG_CORE_DISABLE_CACHE")


def compiler_environment() -> dict[str, str]:
    return {k: os.environ[k] for k in COMPILER_ENV if k in os.environ}


def _versions() -> dict[str, str]:
    try:
        from ..jit.cache import versions

        return versions()
    except Exception:  # noqa: BLE001 - informational only
        from .. import __version__

        return {"tilelang_core": __version__}


def describe_compile_failure(err: TileLangCompileError, program: Any, *, target: Any, resolved_target: Any,
                             out_idx: Any, specs: list[Any], name: str | None = None,
                             config: dict[str, Any] | None = None, pass_configs: Any = None) -> None:
    """Add the compile-level facts to ``err.report`` and attach ``err.trace`` (the trace up to the failure)."""
    rep = err.ensure_report()
    rep.fill(target=target, resolved_target=resolved_target, out_idx=out_idx, params=[str(p) for p in specs],
             versions=_versions(), environment=compiler_environment(), pass_configs=_explicit(pass_configs))
    try:
        from .recorder import capture

        trace = capture(program, allow_failure=True, name=name or "main", config=config, pass_configs=pass_configs)
    except Exception:  # noqa: BLE001 - a report must never hide the original error
        return
    err.trace = trace
    if trace.failed_stage and rep.stage in (None, "", "codegen", "lowering"):
        rep.stage = trace.failed_stage  # the exact TVM pass, where the backend only knew "codegen"
    if trace.stages:
        last = trace.stages[-1]
        rep.fill(last_good_stage=last.name, last_good_ir=last.text)


def _expression(value: Any, namespace: dict[str, Any]) -> str:
    """A Python expression that evaluates to ``value`` in the factory's module (a literal, or a name there)."""
    text = repr(value)
    try:
        if ast.literal_eval(text) == value:
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    for name, obj in namespace.items():
        if obj is value and not name.startswith("__"):
            return name
    for name, obj in namespace.items():
        if isinstance(obj, types.ModuleType) and not name.startswith("__"):
            for attr in dir(obj):
                try:
                    if getattr(obj, attr) is value:
                        return f"{name}.{attr}"
                except Exception:  # noqa: BLE001 - lazy module attributes may raise
                    continue
    return text


def source_text(file: str) -> str:
    """The text of a source file: linecache first (notebook cells live there), else the file itself."""
    lines = linecache.getlines(file)
    if lines:
        return "".join(lines)
    try:
        return Path(file).read_text()
    except OSError:
        return ""


def _explicit(pass_configs: Any) -> dict[str, Any]:
    """The options of ``pass_configs`` (a PassConfig, a dict or None) that differ from the defaults."""
    if pass_configs is None:
        return {}
    from ..pass_config import resolve

    return resolve(pass_configs).explicit()


def describe_factory(err: TileLangCompileError, factory: Any, config: dict[str, Any], *, out_idx: Any,
                     target: Any, jit: bool, pass_configs: Any = None) -> None:
    """Add the factory, its arguments (defaults applied), its source file and the compiler options to
    ``err.report``."""
    rep = err.ensure_report()
    fill_factory(rep, factory, config, out_idx=out_idx, target=target, jit=jit)
    rep.fill(pass_configs=_explicit(pass_configs))


def fill_factory(rep: FailureReport, factory: Any, config: dict[str, Any], *, out_idx: Any, target: Any,
                 jit: bool) -> None:
    fn = inspect.unwrap(factory)
    try:
        file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except TypeError:
        file = getattr(getattr(fn, "__code__", None), "co_filename", None)
    namespace = getattr(fn, "__globals__", {})
    rep.fill(factory=getattr(fn, "__qualname__", getattr(fn, "__name__", None)), module=getattr(fn, "__module__", None),
             source_file=file, source=source_text(file) if file else None,
             args={k: _expression(v, namespace) for k, v in config.items()}, out_idx=out_idx, target=target,
             versions=_versions(), environment=compiler_environment())
    rep.jit = jit


def check_failure(message: str, kernel: Any, reference: Any, *, rtol: float, atol: float, seed: int | None,
                  inputs_given: bool) -> TileLangCheckError:
    """The :class:`TileLangCheckError` for a kernel whose output differs from ``reference``, with its report."""
    rep = FailureReport(message=message, kind="check", stage="check", resolved_target=dict(kernel.target),
                        out_idx=kernel.out_idx, params=[str(p) for p in kernel.params], versions=_versions(),
                        environment=compiler_environment())
    jf = getattr(kernel, "factory", None)
    namespace: dict[str, Any] = {}
    if jf is not None and hasattr(jf, "factory"):
        fill_factory(rep, jf.factory, kernel.config, out_idx=jf.out_idx, target=jf.target, jit=True)
        rep.fill(pass_configs=_explicit(getattr(kernel, "pass_configs", None)))
        namespace = getattr(inspect.unwrap(jf.factory), "__globals__", {})
    expr = _expression(reference, namespace)
    try:
        resolvable = eval(expr, dict(namespace)) is reference  # noqa: S307 - our own expression
    except Exception:  # noqa: BLE001
        resolvable = False
    rep.check = {"reference": expr, "reference_resolvable": resolvable, "rtol": rtol, "atol": atol, "seed": seed,
                 "inputs": "caller's tensors" if inputs_given else "profiler's seeded random tensors"}
    return TileLangCheckError(message, report=rep)

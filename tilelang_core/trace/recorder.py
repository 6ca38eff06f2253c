"""Capturing a compile trace: re-run a program's lowering with every stage recorded.

Why this module exists: the trace must cost nothing when nobody asks for it, so compiling never records
anything; a trace is captured on request (``kernel.trace``) by running the same pipeline again — our passes
through :func:`tilelang_core.backend.cpu.lower`'s ``record`` hook, TVM's passes through a
``tvm.ir.instrument.pass_instrument`` inside :func:`tilelang_core.backend.cpu.codegen` (the very function the
compile uses, so the trace cannot drift from the real pipeline). Linking is not repeated; LLVM code generation is,
so the last stage's time is real. The same machinery finds the failing pass of a broken compile
(``allow_failure=True``): it is the pass that was running when the exception came.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ..errors import SourceLocation, TileLangCompileError
from ..target import resolve_target
from .model import Stage, Trace

# Passes that only run other passes: their children are the stages.
WRAPPER_PASSES = frozenset({"sequential", "_pipeline"})
# Bookkeeping that is not a lowering step (tvm.tirx.build splits host and device functions with two Filters;
# on the CPU the host half is the whole module and the device half is empty).
SKIPPED_PASSES = frozenset({"tirx.Filter"})


class _StageBuilder:
    """Accumulates stages, naming repeats ``#2``, ``#3`` and marking stages whose text did not change."""

    def __init__(self) -> None:
        self.stages: list[Stage] = []
        self.counts: dict[str, int] = {}

    def add(self, pass_name: str, module: Any, seconds: float, origin: str, text: str | None = None) -> Stage:
        text = module.script() if text is None else text
        n = self.counts.get(pass_name, 0) + 1
        self.counts[pass_name] = n
        name = pass_name if n == 1 else f"{pass_name}#{n}"
        changed = not self.stages or text != self.stages[-1].text
        st = Stage(name=name, text=text, seconds=seconds, changed=changed, origin=origin, index=len(self.stages),
                   pass_name=pass_name, module=module)
        self.stages.append(st)
        return st


def _backend(backend: str, target: Any, options: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """``(lower, codegen, exact target)`` for a backend: ``lower(func, record)`` runs our passes calling
    ``record(name, func, seconds)`` after each; ``codegen(mod, instruments)`` runs TVM's pipeline and code generation
    under a PassContext with those instruments — the same functions the compile uses."""
    if backend == "cpu":
        from ..backend import cpu

        return cpu.lower, cpu.codegen, cpu.host_target()
    if backend == "cuda":
        from ..backend.cuda import codegen as cuda_codegen
        from ..target import cuda_target

        tgt = cuda_target(target)
        arch = str(tgt.get("arch", "sm_90"))
        return ((lambda f, record: cuda_codegen.lower(f, record=record, arch=arch, options=options)),
                (lambda mod, instruments: cuda_codegen.generate(mod, arch, instruments, options)), tgt)
    raise NotImplementedError(f"trace: capturing a {backend} trace is not supported")


def _recorder(builder: _StageBuilder) -> Any:
    """A TVM pass instrument that adds a stage after every (non-wrapper) pass, timing each pass's own work."""
    from tvm.ir.instrument import pass_instrument

    @pass_instrument
    class TraceRecorder:
        def __init__(self) -> None:
            self.stack: list[list[Any]] = []  # [name, start, entered, time spent in nested passes]
            self.last_end = time.perf_counter()

        def run_before_pass(self, mod: Any, info: Any) -> None:
            entered = time.perf_counter()
            self.stack.append([str(info.name), 0.0, entered, 0.0])
            self.stack[-1][1] = time.perf_counter()

        def run_after_pass(self, mod: Any, info: Any) -> None:
            t = time.perf_counter()
            name, start, entered, nested = self.stack.pop()
            if name not in WRAPPER_PASSES and name not in SKIPPED_PASSES:
                builder.add(name, mod, max(t - start - nested, 0.0), "tvm")
            end = time.perf_counter()
            if self.stack:
                self.stack[-1][3] += end - entered
            self.last_end = end

        def running(self) -> str | None:
            """The innermost pass still running (after an exception: the one that failed)."""
            for name, *_ in reversed(self.stack):
                if name not in WRAPPER_PASSES:
                    return name
            return None

    return TraceRecorder()


def capture(program: Any, *, target: Any = None, name: str = "main", config: dict[str, Any] | None = None,
            allow_failure: bool = False, pass_configs: Any = None) -> Trace:
    """The compile trace of a ``@T.prim_func`` (TIR with tile ops) for ``target`` (host CPU or a CUDA arch).

    Stages: ``input`` (the program as written), our passes (``tl.*``), TVM's passes (``tirx.*``, ``s_tir.*``),
    and ``codegen`` (the module handed to LLVM, timed with the code generation). A failure raises the
    :class:`TileLangCompileError`, or with ``allow_failure=True`` returns the trace up to the last stage that
    succeeded with ``failed_stage`` and ``error`` set. ``pass_configs``: the options the compile used.
    """
    import tvm

    from ..pass_config import resolve

    options = resolve(pass_configs)
    backend = resolve_target("auto" if target is None else target)
    lower, codegen, resolved = _backend(backend, target, options)
    b = _StageBuilder()
    failed: str | None = None
    error: BaseException | None = None
    b.add("input", tvm.IRModule({"main": program}), 0.0, "input")
    try:
        mod = lower(program, record=lambda n, f, s: b.add(n, tvm.IRModule({"main": f}), s, "tilelang"))
    except TileLangCompileError as e:
        failed, error = e.stage or "lowering", e
    else:
        rec = _recorder(b)
        try:
            codegen(mod, instruments=[rec])
        except TileLangCompileError as e:
            failed, error = rec.running() or "codegen", e
        else:
            last = b.stages[-1]
            b.add("codegen", last.module, time.perf_counter() - rec.last_end, "codegen", text=last.text)
    trace = Trace(b.stages, name=name, config=config, target=resolved, failed_stage=failed, error=error)
    trace.pass_configs = options
    if error is not None and not allow_failure:
        raise error
    return trace


# -- source locations ----------------------------------------------------------------------------------------
# The printer declares a statement's free buffers and variables first (``A = T.Buffer(...)``, ``k = T.int32()``).
_FREE_VAR_DECL = re.compile(r"^\w+ = T\.(Buffer\(.*|\w+\(\))$")


def _summary(stmt: Any, limit: int = 100) -> str:
    """The first line of a statement's TVMScript (a loop header, an op call, a store ...)."""
    try:
        text = stmt.script()
    except Exception:  # noqa: BLE001 - printing is best effort
        text = str(stmt)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
                 and not _FREE_VAR_DECL.match(ln.strip())), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def statement_locations(module: Any) -> list[tuple[str, SourceLocation]]:
    """``(statement summary, user's file:line)`` for every statement of ``module`` that kept a source span, in
    program order — the same span-to-location mapping our passes use for their diagnostics."""
    import tvm_ffi
    from tvm import tirx

    from ..transform.common.rewriter import location_of

    found: list[tuple[str, SourceLocation]] = []

    def visit(s: Any) -> None:
        loc = location_of(getattr(s, "span", None))
        if loc is not None and loc.line > 0 and not isinstance(s, tirx.SeqStmt):
            found.append((_summary(s), loc))

    items = sorted(module.functions.items(), key=lambda kv: str(kv[0].name_hint))
    for _gv, func in items:
        body = getattr(func, "body", None)
        if body is not None:
            tvm_ffi.structural_walk(body, [(tirx.Stmt, visit)], order="pre")
    return found

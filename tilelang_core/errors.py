"""Errors raised by tilelang_core.

Every error a user can trigger derives from :class:`TileLangError`, so callers can catch one class.
Compile-time problems carry the user's source location (file, line, column) when it is known, and render
it in ``str(err)`` as ``file:line:col: message`` followed by the offending source line. A compile error raised
through ``@jit`` also carries a :class:`FailureReport` (``err.report``): everything needed to reproduce it, and
``err.save_repro(path)`` writes that as a self-contained script.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

_NO_ATTRIBUTE = re.compile(r"has no attribute '([A-Za-z_][A-Za-z0-9_]*)'")


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's Python source."""

    file: str
    line: int
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def source_line(self) -> str:
        """The text of the line, or '' when the file is not readable."""
        return linecache.getline(self.file, self.line).rstrip("\n")

    def on_attribute(self, message: str) -> SourceLocation:
        """For a "... has no attribute 'NAME'" message: the same place moved onto ``.NAME`` in the source line (at
        or after this column), so the caret marks the misspelt name, not the start of the expression; else self."""
        found = _NO_ATTRIBUTE.search(message)
        line = self.source_line()
        if found is None or not line:
            return self
        hit = re.search(rf"\.\s*({re.escape(found[1])})\b", line[max(self.column - 1, 0):])
        if hit is None:
            return self
        return SourceLocation(self.file, self.line, max(self.column - 1, 0) + hit.start(1) + 1)


@dataclass
class FailureReport:
    """What a person needs to reproduce a failed compile: the exact configuration tried, and where it broke.

    Filled in layer by layer as the error travels up (backend: compiler command and output; ``compile``: target,
    shapes, failing stage and the IR after the last stage that succeeded; ``@jit``: the factory, its arguments
    and its source file's text). :meth:`fill` only sets fields that are still empty, so the innermost (most
    precise) layer wins.
    """

    message: str = ""
    kind: str = "compile"  # "compile" | "check"
    stage: str | None = None  # the step that failed: "parse", a pass name ("tl.ValidateTileOps", "tirx.X"), "link"
    last_good_stage: str | None = None  # the last stage that succeeded ("input" when none did)
    last_good_ir: str | None = None  # TVMScript after that stage
    factory: str | None = None  # the factory's name in its module
    jit: bool = True  # factory is a @jit factory (else a plain function returning a @T.prim_func)
    module: str | None = None  # the factory's module name
    source_file: str | None = None
    source: str | None = None  # the full text of the factory's source file
    args: dict[str, str] = field(default_factory=dict)  # factory argument -> repr (defaults applied)
    out_idx: Any = None
    target: Any = None  # the target as requested
    resolved_target: dict[str, Any] | None = None  # the exact target compiled for
    params: list[str] = field(default_factory=list)  # "A: float32[128, 128]" when the program was built
    command: str | None = None  # compiler command line (link step, nvcc ...)
    command_output: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # compiler-affecting environment variables
    pass_configs: dict[str, Any] = field(default_factory=dict)  # the compiler options that differ from the defaults
    check: dict[str, Any] = field(default_factory=dict)  # a failed check: reference, rtol, atol, seed, errors

    def fill(self, **values: Any) -> FailureReport:
        """Set the given fields that are still empty (None, "" or empty containers); returns self."""
        for k, v in values.items():
            cur = getattr(self, k)
            if cur is None or cur == "" or (isinstance(cur, (dict, list)) and not cur):
                setattr(self, k, v)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def render(self, ir_lines: int = 30) -> str:
        """A human-readable summary (the IR is cut to its first ``ir_lines`` lines)."""
        first = self.message.splitlines()[0] if self.message else ""
        out = [f"tilelang_core {self.kind} failure", f"  error:     {first}"]
        if self.factory:
            args = ", ".join(f"{k}={v}" for k, v in self.args.items())
            out.append(f"  kernel:    {self.factory}({args})  [{self.source_file}]")
        if self.params:
            out.append(f"  params:    {', '.join(self.params)}")
        out.append(f"  target:    {self.resolved_target or self.target}  (out_idx={self.out_idx})")
        if self.pass_configs:
            out.append(f"  options:   pass_configs={self.pass_configs!r}")
        if self.kind == "compile":
            good = self.last_good_stage or "none (the program was not built)"
            out.append(f"  stage:     {self.stage} failed; last good stage: {good}")
        if self.check:
            out.append("  check:     " + ", ".join(f"{k}={v}" for k, v in self.check.items()))
        if self.command:
            out.append(f"  command:   {self.command}")
        if self.command_output:
            out.append("  output:\n" + "\n".join("    " + ln for ln in self.command_output.splitlines()))
        if self.versions:
            out.append("  versions:  " + ", ".join(f"{k} {v}" for k, v in self.versions.items()))
        if self.last_good_ir:
            lines = self.last_good_ir.splitlines()
            while lines and (not lines[0].strip() or lines[0].startswith("# from ")):
                lines.pop(0)  # the printer's import comments
            more = f"\n    ... ({len(lines) - ir_lines} more lines)" if len(lines) > ir_lines else ""
            out.append(f"  IR after {self.last_good_stage}:\n" + "\n".join("    " + ln for ln in lines[:ir_lines])
                       + more)
        return "\n".join(out)


class TileLangError(Exception):
    """Base class of all tilelang_core errors."""


class TileLangCompileError(TileLangError):
    """A kernel program is invalid or failed to compile.

    ``location`` points at the user's line when known; ``stage`` names the step that failed
    (``parse``, a pass name, or ``codegen``). ``report`` (a :class:`FailureReport`, set when the error passes
    through ``compile``/``@jit``) holds what is needed to reproduce it; :meth:`save_repro` writes it as a script.
    """

    def __init__(self, message: str, location: SourceLocation | None = None, stage: str | None = None,
                 report: FailureReport | None = None):
        if location is not None and stage == "parse":
            location = location.on_attribute(message)  # T.alloc_fragmnt: the caret under the misspelt name
        self.message = message
        self.location = location
        self.stage = stage
        self.report = report
        self.trace: Any = None  # the compile trace up to the failure, when it was captured (a Trace)
        super().__init__(self._render())

    def ensure_report(self) -> FailureReport:
        """The error's report, created (with the message and stage) when it has none yet."""
        if self.report is None:
            self.report = FailureReport()
        return self.report.fill(message=str(self), stage=self.stage)

    def save_repro(self, path: str | Path) -> Path:
        """Write a self-contained Python script that, run anywhere tilelang_core is installed, rebuilds the same
        kernel with the same configuration and re-raises this error. Returns the path written."""
        from .trace.repro import write_repro

        return write_repro(self, path)

    def _render(self) -> str:
        if self.location is None:
            return self.message
        text = f"{self.location}: {self.message}"
        line = self.location.source_line()
        if line:
            caret = " " * max(self.location.column - 1, 0) + "^"
            text += f"\n    {line}\n    {caret}"
        return text


class TileLangCheckError(TileLangError, AssertionError):
    """A compiled kernel's output differs from its reference (``Profiler.assert_allclose``).

    An ``AssertionError`` too, so test code that expects one keeps working. ``report`` (kind ``"check"``) records
    the kernel's configuration, the reference, the tolerances and the seed of the inputs; :meth:`save_repro`
    writes a script that rebuilds the kernel and repeats the check on the same inputs.
    """

    def __init__(self, message: str, report: FailureReport | None = None):
        self.message = message
        self.report = report
        super().__init__(message)

    def save_repro(self, path: str | Path) -> Path:
        from .trace.repro import write_repro

        return write_repro(self, path)


class TileLangRuntimeError(TileLangError):
    """A compiled kernel could not be loaded or launched."""

"""Exceptions the ``%%tilekernel`` magic raises, rendered as a short diagnostic at the cell's line.

Why this module exists: a failed compile or check must stop "Run All", papermill and nbclient (so the magic raises
instead of printing and carrying on), yet the user should see *our* diagnostic pointing at the cell line, not a
wall of TVM internals. IPython asks an exception for ``_render_traceback_()`` before formatting a traceback; ours
returns the message, the cell line numbers and a caret. The original exception stays reachable as ``__cause__``
(``%tb`` or ``err.__cause__`` show it in full).
"""

from __future__ import annotations

import linecache
import re
import traceback
from dataclasses import dataclass
from typing import Any

from .cell import CellDefinitionError, CellSource

MAX_MESSAGE_LINES = 12
_DIAG_LOC = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")
_RED, _BOLD, _DIM, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[2m", "\x1b[0m"


@dataclass(frozen=True)
class Where:
    """A place to point at: a line of the cell (``cell`` set) or of some other file."""

    file: str
    line: int
    column: int | None = None
    cell: CellSource | None = None

    def describe(self) -> str:
        col = f", column {self.column}" if self.column else ""
        if self.cell is not None:
            return f"cell line {self.cell.cell_line(self.line)}{col}"
        return f"{self.file}:{self.line}{col}"

    def snippet(self, context: int = 2) -> list[str]:
        """The line with ``context`` lines before it, numbered as in the cell, and a caret under the column."""
        get = self.cell.line if self.cell is not None else (lambda n: linecache.getline(self.file, n).rstrip("\n"))
        number = self.cell.cell_line if self.cell is not None else (lambda n: n)
        out = []
        for n in range(max(1, self.line - context), self.line + 1):
            text = get(n)
            if not text and n != self.line:
                continue
            mark = "---->" if n == self.line else "     "
            out.append(f"{mark} {number(n):4d} | {text}")
        if self.column and out:
            out.append(" " * (5 + 1 + 4 + 3) + " " * (self.column - 1) + "^")
        return out


class TileKernelError(Exception):
    """Base class: a ``%%tilekernel`` cell failed; ``str()`` is the plain diagnostic."""

    def __init__(self, message: str, *, kernel: str, headline: str, where: Where | None = None,
                 stage: str | None = None, hint: str | None = None):
        self.message = message
        self.kernel = kernel
        self.headline = headline
        self.where = where
        self.stage = stage
        self.hint = hint
        super().__init__(self.text())

    @property
    def cell_line(self) -> int | None:
        """The notebook cell line the error points at, when it is in the cell."""
        if self.where is None or self.where.cell is None:
            return None
        return self.where.cell.cell_line(self.where.line)

    def _lines(self) -> list[str]:
        msg = self.message.strip().splitlines() or [""]
        if len(msg) > MAX_MESSAGE_LINES:
            hidden = len(msg) - MAX_MESSAGE_LINES
            msg = msg[:MAX_MESSAGE_LINES] + [f"... ({hidden} more lines: run %tb, or read err.__cause__)"]
        lines = []
        if self.where is not None:
            lines.append(f"{self.where.describe()}: {msg[0]}")
            lines.extend(msg[1:])
            lines.extend(self.where.snippet())
        else:
            lines.extend(msg)
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return lines

    def text(self) -> str:
        return "\n".join([self.headline, *self._lines()])

    def _render_traceback_(self) -> list[str]:
        """What IPython (and so Jupyter, nbclient, papermill) shows instead of a Python traceback."""
        head = f"{_RED}{_BOLD}{type(self).__name__}{_RESET}{_BOLD}: {self.headline}{_RESET}"
        body = []
        for ln in self._lines():
            body.append(f"{_RED}{ln}{_RESET}" if ln.startswith("---->") or ln.strip() == "^" else ln)
        return [head, *body]


class TileKernelCompileError(TileKernelError):
    """The cell did not produce a kernel: Python error in the cell, TVMScript diagnostic, pass or codegen failure."""


class TileKernelCheckError(TileKernelError):
    """The kernel compiled but its outputs do not match the reference (or the reference failed)."""


def _cell_frame(exc: BaseException, cell: CellSource) -> Where | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == cell.filename]
    if not frames:
        return None
    f = frames[-1]
    col = (f.colno + 1) if getattr(f, "colno", None) is not None else None
    if col and isinstance(exc, AttributeError):  # T.ceildivv(...): the caret under the misspelt name
        from tilelang_core.errors import SourceLocation

        col = SourceLocation(cell.filename, f.lineno or 1, col).on_attribute(str(exc)).column
    return Where(cell.filename, f.lineno or 1, col, cell)


def _where(file: str, line: int, column: int | None, cell: CellSource) -> Where:
    return Where(file, line, column or None, cell if file == cell.filename else None)


def compile_error(exc: BaseException, cell: CellSource, kernel: str) -> TileKernelCompileError:
    """Turn whatever the cell or the compiler raised into a diagnostic at the cell line."""
    headline = f"{kernel}: the kernel did not compile"
    loc = getattr(exc, "location", None)
    if hasattr(exc, "message") and hasattr(exc, "stage"):  # tilelang_core.TileLangCompileError (and friends)
        stage = getattr(exc, "stage", None)
        where = _where(loc.file, loc.line, loc.column, cell) if loc is not None else _cell_frame(exc, cell)
        if stage:
            headline += f" (stage {stage})"
        return TileKernelCompileError(str(exc.message), kernel=kernel, headline=headline, where=where, stage=stage)
    if isinstance(exc, SyntaxError):
        where = _where(exc.filename or "", exc.lineno or 1, exc.offset, cell) if exc.lineno else None
        return TileKernelCompileError(f"SyntaxError: {exc.msg}", kernel=kernel, headline=headline, where=where,
                                      stage="python")
    if type(exc).__name__ == "DiagnosticError":  # TVMScript parser error raised while the cell itself ran
        text = str(exc)
        m = _DIAG_LOC.search(text)
        msg = next((ln.strip()[len("error:"):].strip() for ln in text.splitlines()
                    if ln.strip().startswith("error:")), text.strip())
        where = _where(m["file"], int(m["line"]), int(m["col"]), cell) if m else _cell_frame(exc, cell)
        return TileKernelCompileError(msg, kernel=kernel, headline=headline, where=where, stage="parse")
    if isinstance(exc, CellDefinitionError):
        return TileKernelCompileError(str(exc), kernel=kernel, headline=headline)
    where = _cell_frame(exc, cell)
    return TileKernelCompileError(f"{type(exc).__name__}: {exc}", kernel=kernel, headline=headline, where=where,
                                  stage="python")


def check_error(message: str, kernel: str, hint: str | None = None, cause: Any = None,
                headline: str | None = None) -> TileKernelCheckError:
    """A mismatch against the reference, a failing reference expression, or a kernel that failed to run."""
    err = TileKernelCheckError(message, kernel=kernel, hint=hint,
                               headline=headline or f"{kernel}: the kernel does not match the reference")
    err.__cause__ = cause
    return err


def is_argument_error(exc: BaseException) -> bool:
    """Whether a kernel call failed tilelang_core's argument check (wrong count, dtype, shape, device ...) rather
    than inside the kernel."""
    return isinstance(exc, (TypeError, ValueError)) and str(exc).startswith(("argument '", "kernel "))


def argument_error(kernel: str, exc: BaseException, caller: Any, inputs: list[Any],
                   outputs: list[Any]) -> BaseException:
    """The same exception type and message, rendered in Jupyter as our message at the caller's line only: the
    frames inside the workbench and the runtime say nothing the message does not (``err.__cause__`` keeps them)."""
    try:
        err = type(exc)(f"{kernel}: {exc}")
    except Exception:  # noqa: BLE001 - an exception class with another constructor: keep the original
        return exc
    err.__cause__ = exc
    err.__suppress_context__ = True
    file, line = caller.f_code.co_filename, caller.f_lineno
    where = f"{file}, line {line}"
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and hasattr(shell, "compile") and hasattr(shell.compile, "format_code_name"):
            named = shell.compile.format_code_name(file)  # ("Cell", "In[4]") for a notebook cell
            if named:
                where = f"{named[0]} {named[1]}, line {line}"
    except Exception:  # noqa: BLE001 - naming the cell is a nicety
        pass
    text = linecache.getline(file, line).rstrip("\n")
    signature = ", ".join(str(p) for p in inputs) + (" (and returns " + ", ".join(str(p) for p in outputs)
                                                      + ", or writes them when passed too)" if outputs else "")
    lines = [f"{_RED}{_BOLD}{type(exc).__name__}{_RESET}{_BOLD}: {kernel}: {exc}{_RESET}", where]
    if text:
        lines.append(f"{_RED}----> {line} {text.strip()}{_RESET}")
    lines.append(f"hint: {kernel} takes {signature}")
    err._render_traceback_ = lambda: list(lines)  # type: ignore[attr-defined]
    return err

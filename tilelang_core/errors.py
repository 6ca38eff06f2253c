"""Errors raised by tilelang_core.

Every error a user can trigger derives from :class:`TileLangError`, so callers can catch one class.
Compile-time problems carry the user's source location (file, line, column) when it is known, and render
it in ``str(err)`` as ``file:line:col: message`` followed by the offending source line.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


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


class TileLangError(Exception):
    """Base class of all tilelang_core errors."""


class TileLangCompileError(TileLangError):
    """A kernel program is invalid or failed to compile.

    ``location`` points at the user's line when known; ``stage`` names the step that failed
    (``parse``, a pass name, or ``codegen``).
    """

    def __init__(self, message: str, location: SourceLocation | None = None, stage: str | None = None):
        self.message = message
        self.location = location
        self.stage = stage
        super().__init__(self._render())

    def _render(self) -> str:
        if self.location is None:
            return self.message
        text = f"{self.location}: {self.message}"
        line = self.location.source_line()
        if line:
            caret = " " * max(self.location.column - 1, 0) + "^"
            text += f"\n    {line}\n    {caret}"
        return text


class TileLangRuntimeError(TileLangError):
    """A compiled kernel could not be loaded or launched."""

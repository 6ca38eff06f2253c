"""Syntax-highlighted HTML for code panes (pygments, inline styles).

Why this module exists: every view shows code (the cell, TVMScript stages, LLVM IR, assembly, diffs) the same way:
highlighted with pygments' ``HtmlFormatter(noclasses=True)`` so the HTML carries its own colours (an
``ipywidgets.HTML`` value has no stylesheet), inside a box that scrolls both ways so a long line scrolls inside its
pane instead of widening the notebook. Huge texts are cut to a line budget: a megabyte of highlighted LLVM IR
freezes a browser tab, and the full text stays one attribute away (``kernel.sources[kind].text``).
"""

from __future__ import annotations

import html
from functools import lru_cache
from typing import Any

MAX_LINES = 3000
PANE_HEIGHT = "480px"
LEXERS = {"tvmscript": "python", "python": "python", "tir": "python", "llvm": "llvm", "asm": "gas",
          "cuda": "cuda", "ptx": "ptx", "sass": "text", "diff": "diff", "text": "text"}
_BOX = ("overflow:auto; max-height:{height}; border:1px solid #ddd; border-radius:3px; margin:0; "
        "font-size:12px; line-height:1.35; background:#f8f8f8;")


@lru_cache(maxsize=16)
def _lexer(name: str) -> Any:
    from pygments.lexers import get_lexer_by_name

    try:
        return get_lexer_by_name(LEXERS.get(name, name))
    except Exception:  # noqa: BLE001 - pygments raises ClassNotFound; fall back to plain text
        return get_lexer_by_name("text")


def clip(text: str, max_lines: int = MAX_LINES) -> tuple[str, int]:
    """``text`` cut to ``max_lines`` lines, and how many lines were cut."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text, 0
    return "\n".join(lines[:max_lines]) + "\n", len(lines) - max_lines


def code_html(text: str, language: str, max_lines: int = MAX_LINES, height: str = PANE_HEIGHT) -> str:
    """Highlighted, self-styled HTML for ``text`` in a scrolling pane."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    body, cut = clip(text, max_lines)
    fmt = HtmlFormatter(noclasses=True, nowrap=True)
    code = highlight(body, _lexer(language), fmt) if body else ""
    note = (f'<div style="color:#a00; font-size:11px;">... {cut} more lines not shown (the full text is in '
            "kernel.sources / kernel.trace)</div>") if cut else ""
    box = _BOX.format(height=height)
    return f'<pre style="{box} padding:6px; white-space:pre;">{code}</pre>{note}'


def message_html(text: str, color: str = "#666") -> str:
    """A small note in place of a pane (nothing to show, errors)."""
    return f'<div style="color:{color}; font-style:italic; padding:4px;">{html.escape(text)}</div>'

"""Notes a kernel carries about the fast paths it did not take, at the user's line.

Why this module exists: a specialised lowering (the W4A16 dequant-GEMM fusion and its split-K, the fused pipelined
GEMM mainloop, wgmma) applies only when its conditions hold; when one does not, the kernel still compiles — the
generic way — and silently runs slower. A pass that declines a fast path the program could plausibly have taken
appends one line here saying which condition failed; the notes travel as the PrimFunc attribute ``tl.notes``
(the wgmma passes keep theirs in ``tl.wgmma_notes``: :func:`read_notes` returns both) into the artifact's
``meta.json`` and from there to ``kernel.notes``, the compile trace and the workbench summary. Passes only note
skips of a fast path the program's shape asks for, so ordinary kernels carry none.
"""

from __future__ import annotations

from typing import Any

ATTR_NOTES = "tl.notes"  # list of str: fast paths declined, one line each ("line 12: T.gemm ... : why")
ATTR_WGMMA_NOTES = "tl.wgmma_notes"  # kept by tl.InferFragmentLayoutsCUDA / tl.PipelineCUDA


def at_line(node: Any) -> str:
    """``"line N: "`` for a statement (or span) that kept the user's source line, else ``""``."""
    from .rewriter import location_of

    span = getattr(node, "span", node)
    loc = location_of(span)
    return f"line {loc.line}: " if loc is not None and loc.line > 0 else ""


def _attr_list(func: Any, key: str) -> list[str]:
    attrs = getattr(func, "attrs", None)
    if attrs is None or key not in attrs:
        return []
    return [str(x) for x in attrs[key]]


def add_notes(func: Any, notes: list[str]) -> Any:
    """``func`` with ``notes`` appended to its ``tl.notes`` (duplicates dropped, order kept)."""
    if not notes:
        return func
    old = _attr_list(func, ATTR_NOTES)
    merged = list(dict.fromkeys([*old, *notes]))
    return func.with_attr(ATTR_NOTES, merged)


def read_notes(func: Any) -> list[str]:
    """Every fast-path note of ``func`` (a PrimFunc, or an IRModule's functions): ``tl.notes`` then
    ``tl.wgmma_notes``, duplicates dropped."""
    funcs = [f for _gv, f in sorted(func.functions.items(), key=lambda kv: str(kv[0].name_hint))] \
        if hasattr(func, "functions") else [func]
    out: list[str] = []
    for f in funcs:
        out += _attr_list(f, ATTR_NOTES) + _attr_list(f, ATTR_WGMMA_NOTES)
    return list(dict.fromkeys(out))

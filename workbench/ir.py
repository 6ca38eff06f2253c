"""What the views read from a compiled kernel: its IR stages and its generated code, through the public API.

Why this module exists: the IR, Code and Compare views (widgets and plain text) all need the same few facts —
the list of stages with labels, the text of one stage, a diff, the generated code with its compiler command — from
``kernel.trace`` and ``kernel.sources``. Keeping those reads here means the views never touch a Trace's internals,
and a kernel without a trace (loaded from an artifact) still shows what it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CODE_LANGUAGES = {"llvm": "llvm", "asm": "asm", "cuda": "cuda", "ptx": "ptx", "sass": "sass", "tir": "tir"}


@dataclass(frozen=True)
class StageInfo:
    """One IR stage as the views show it."""

    index: int
    name: str
    origin: str
    seconds: float
    changed: bool
    text: str

    @property
    def label(self) -> str:
        mark = "" if self.changed else " (unchanged)"
        return f"{self.index:02d} {self.name} [{self.origin}, {self.seconds * 1e3:.1f} ms]{mark}"


@dataclass(frozen=True)
class CodeInfo:
    """One piece of generated code with the command that produced it."""

    kind: str
    label: str
    text: str
    command: str

    @property
    def language(self) -> str:
        return CODE_LANGUAGES.get(self.kind, "text")


def stages(kernel: Any) -> list[StageInfo]:
    """Every stage of the kernel's compile trace (the program as written first)."""
    trace = getattr(kernel, "trace", None)
    if trace is None:
        program = getattr(kernel, "program", None)
        text = program.script() if program is not None else ""
        return [StageInfo(0, "input", "input", 0.0, True, text)]
    return [StageInfo(s.index, s.name, s.origin, float(s.seconds), bool(s.changed), s.text) for s in trace.stages]


def visible_stages(all_stages: list[StageInfo], show_unchanged: bool) -> list[StageInfo]:
    """The stages a picker offers: by default only those that changed the IR (the input always counts)."""
    return [s for s in all_stages if show_unchanged or s.changed or s.index == 0]


def diff(a: StageInfo, b: StageInfo, a_label: str | None = None, b_label: str | None = None,
         context: int = 3) -> str:
    """Unified diff between two stages ('' when equal); every line ends with a newline, the last one too (without
    it difflib glues the final ``-`` line and the ``+`` line after it into one)."""
    from tilelang_core.trace import unified_diff

    return unified_diff(a.text, b.text, a_label or f"{a.index}:{a.name}", b_label or f"{b.index}:{b.name}",
                        context=context)


def _command_text(command: Any) -> str:
    if isinstance(command, (list, tuple)):
        return " ".join(str(c) for c in command)
    return str(command or "")


# labels of the kinds that ``kernel.sources`` does not label itself (read through ``kernel.get_kernel_source``)
EXTRA_LABELS = {"tir": "lowered TIR (the input of TVM's codegen)", "llvm": "LLVM IR", "asm": "assembly",
                "cuda": "CUDA C", "ptx": "PTX", "sass": "SASS"}


def source_kinds(kernel: Any) -> list[str]:
    """Every kind of generated code the kernel offers: those ``kernel.sources`` labels first, in its order, then
    any other in ``kernel.source_kinds`` (on a CUDA kernel: ``cuda``, then e.g. ``ptx``, ``sass``, ``tir``), so
    a kind the core starts storing appears in the views without a change here."""
    sources = getattr(kernel, "sources", None) or {}
    kinds = list(sources)
    for k in getattr(kernel, "source_kinds", None) or ():
        if k not in kinds:
            kinds.append(k)
    return kinds


def generated_code(kernel: Any) -> list[CodeInfo]:
    """The kernel's generated code (CPU: LLVM IR, assembly; CUDA: CUDA C, PTX, SASS, lowered TIR), labelled,
    each with its compiler command where the core recorded one."""
    sources = getattr(kernel, "sources", None) or {}
    kinds = source_kinds(kernel) or ["llvm", "asm"]
    out = []
    for kind in kinds:
        c = sources.get(kind)
        if c is not None:
            out.append(CodeInfo(c.kind, c.label, c.text, _command_text(c.command)))
            continue
        try:
            text = kernel.get_kernel_source(kind)
        except Exception:  # noqa: BLE001 - listed but unreadable (a file missing, a tool absent): leave it out
            continue
        out.append(CodeInfo(kind, EXTRA_LABELS.get(kind, kind), text, ""))
    return out


def config_label(config: dict[str, Any], other: dict[str, Any] | None = None) -> str:
    """``k=v, ...``; given ``other``, only the entries that differ (all when none differ)."""
    items = list(config.items())
    if other is not None:
        missing = object()
        items = [(k, v) for k, v in items if other.get(k, missing) != v] or items
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in items)

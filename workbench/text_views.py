"""The plain-text summary, for terminal IPython and anywhere widgets cannot render.

Why this module exists: ``%%tilekernel`` also runs in terminal IPython, in ``ipython -c``, in papermill logs and in
static notebook renderers, where widgets are a useless ``Tab(...)`` repr. There the summary is text: the status
line, the compile stages that changed the IR, the generated code with its compiler command, and how to get at the
rest from Python.
"""

from __future__ import annotations

from typing import Any

from .ir import generated_code, stages
from .status import status_parts


def status_line(wk: Any) -> str:
    return " | ".join(p.text for p in status_parts(wk))


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + ln for ln in text.splitlines())


def kernel_facts(kernel: Any) -> list[str]:
    """The compiler options set for the kernel (``kernel.pass_configs``, when any differ from the defaults), its
    notes on fast paths not taken (``kernel.notes``) and its resources (CUDA: ``kernel.resources()``), one line
    each; empty for a plain CPU kernel."""
    lines = []
    cfg = getattr(kernel, "pass_configs", None)
    given = cfg.explicit() if cfg is not None and hasattr(cfg, "explicit") else {}
    if given:
        lines.append("pass_configs: {" + ", ".join(f"{k!r}: {v!r}" for k, v in given.items()) + "}")
    notes = list(getattr(kernel, "notes", None) or [])
    if notes:
        lines.append("fast paths not taken (kernel.notes):")
        lines += [f"    {n}" for n in notes]
    from .resources import summary_line

    res = summary_line(kernel)  # CUDA: registers, spills, shared memory, occupancy
    if res:
        lines += res.split("\n")
    return lines


def summary_text(wk: Any, show_unchanged: bool = False) -> str:
    """Status line, stage table, generated-code list and pointers to the full texts."""
    lines = [f"{wk.name}: {status_line(wk)}"]
    lines += kernel_facts(wk.kernel)
    try:
        all_stages = stages(wk.kernel)
    except Exception as e:  # noqa: BLE001 - a trace that cannot be captured must not hide the summary
        all_stages = []
        lines.append(f"IR stages: unavailable ({type(e).__name__}: {e})")
    if all_stages:
        shown = [s for s in all_stages if show_unchanged or s.changed]
        hidden = len(all_stages) - len(shown)
        lines.append(f"IR stages ({len(shown)} changed the IR" + (f", {hidden} unchanged hidden" if hidden else "")
                     + f"; {wk.name}.trace.stage(NAME).text for one, {wk.name}.trace.diff(A, B) for a diff):")
        for s in shown:
            lines.append(f"    {s.label}")
    try:
        code = generated_code(wk.kernel)
    except Exception as e:  # noqa: BLE001
        code = []
        lines.append(f"generated code: unavailable ({type(e).__name__}: {e})")
    if code:
        lines.append(f"generated code ({wk.name}.sources[KIND].text):")
        shown_commands: set[str] = set()
        for c in code:
            lines.append(f"    {c.kind}: {c.label}, {c.text.count(chr(10)) + 1} lines")
            if c.command and c.command not in shown_commands:
                lines.append(_indent(c.command, "        "))
                shown_commands.add(c.command)
            elif c.command:
                lines.append("        (same command as above)")
    lines.append(f"export: {wk.name}.export('my_kernels/{wk.name}.py')")
    return "\n".join(lines)

"""The SASS / PTX view by source line: pick a line of the kernel, see the machine instructions it became.

Why this module exists: what a ``T.gemm`` or a ``T.copy`` turned into (HGMMA or HMMA, LDGSTS or UTMALDG, shared
loads, spills) is what a kernel engineer checks first on a GPU, and reading 600 lines of SASS without knowing
which statement each came from is slow. The view compiles the kernel once more as a source-line build
(``pass_configs={"tl.cuda.lineinfo": True}``, same code plus a line table; through the kernel cache) and uses
``JITKernel.code_by_line`` from the core's public API. It shows:

- the kernel's lines (a list: clicking one selects it), each with its instruction count and tile op;
- the SASS (or PTX) with the selected line's instructions highlighted, each instruction tagged with its cell line;
- the instruction mix per line (HGMMA/HMMA, LDGSTS/UTMALDG, LDS/STS, LDG/STG, FFMA, spills, barriers).

CPU kernels have no SASS: the view says so. Tests drive it by setting ``.lines.value``.
"""

from __future__ import annotations

import html
import linecache
import re
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as W

from .highlight import message_html
from .views import Panel

MIX_COLUMNS = ("HGMMA", "HMMA", "LDGSTS", "UTMALDG", "LDS/STS", "LDG/STG", "FFMA", "spills", "BAR")
MAX_INSTRUCTIONS = 6000  # the pane shows at most this many (the full listing is on .listing)
_HIGHLIGHT = "#fff1a8"


def lined_build(kernel: Any) -> Any:
    """The same program compiled as a source-line build (the kernel's own pass_configs plus
    ``tl.cuda.lineinfo``); the kernel itself when it is one already."""
    import tilelang_core

    if kernel.pass_configs.get("tl.cuda.lineinfo"):
        return kernel
    if kernel.program is None:
        raise ValueError(f"kernel {kernel.name}: no program to rebuild with line info (loaded from an artifact)")
    opts = {**kernel.pass_configs.explicit(), "tl.cuda.lineinfo": True}
    return tilelang_core.compile(kernel.program, out_idx=kernel.out_idx, target=kernel.target, pass_configs=opts,
                                 name=kernel.name, config=kernel.config)


@dataclass
class SourceLine:
    """One line of the user's kernel that machine code maps to: where it is (``number``: the notebook cell's
    line for a cell, else the file's), its text, the tile op on it, its instructions (indices into the listing)
    and their mix."""

    file: str
    line: int
    number: int
    text: str
    op: str
    indices: list[int] = field(default_factory=list)
    mix: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.number:4d} | {self.text.strip()[:70]}  [{len(self.indices)} instr]"


def tile_op(text: str) -> str:
    """The ``T.*`` call a line makes (``T.gemm``), or ``statement``."""
    m = re.search(r"\bT\.(\w+)", text)
    return f"T.{m.group(1)}" if m else "statement"


def source_lines(listing: Any, cell: Any = None) -> list[SourceLine]:
    """The user's lines of a listing in order; lines of ``cell`` (a ``CellSource``) numbered as the notebook cell
    numbers them, lines of files as the files do."""
    from tilelang_core.backend.cuda.source_lines import instruction_mix

    out = []
    for (file, line), idx in sorted(listing.by_line.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if cell is not None and file == cell.filename:
            text, number = cell.line(line), cell.cell_line(line)
        else:
            text, number = linecache.getline(file, line).rstrip("\n"), line
        insns = [listing.instructions[i] for i in idx]
        out.append(SourceLine(file, line, number, text, tile_op(text), list(idx), instruction_mix(insns)))
    return out


def code_html(listing: Any, lines: list[SourceLine], selected: SourceLine | None) -> str:
    """The listing as a scrolling pane: each instruction tagged with its user line; the selected line's
    instructions highlighted (``wb-hl``)."""
    numbers = {(s.file, s.line): s.number for s in lines}
    chosen = set(selected.indices) if selected is not None else set()
    rows = []
    for i, ins in enumerate(listing.instructions[:MAX_INSTRUCTIONS]):
        tag = f"{numbers[ins.user]:4d}" if ins.user in numbers else "    "
        text = html.escape(f"{tag} | {ins.text}")
        if i in chosen:
            rows.append(f'<span class="wb-hl" style="background:{_HIGHLIGHT};">{text}</span>')
        else:
            rows.append(text)
    more = len(listing.instructions) - MAX_INSTRUCTIONS
    if more > 0:
        rows.append(html.escape(f"... {more} more instructions (the full listing: view.listing.instructions)"))
    return ('<pre class="wb-sass" style="font-size:11px;line-height:1.3;max-height:520px;overflow:auto;margin:0;'
            'background:#fafafa;padding:4px;">' + "\n".join(rows) + "</pre>")


def mix_html(lines: list[SourceLine], selected: SourceLine | None = None) -> str:
    """The instruction mix per line as a small table (the selected line bold)."""
    head = "".join(f"<th style='padding:1px 5px;text-align:right;'>{html.escape(c)}</th>" for c in MIX_COLUMNS)
    body = []
    for s in lines:
        style = f"font-weight:bold;background:{_HIGHLIGHT};" if selected is not None and s is selected else ""
        cells = ""
        for c in MIX_COLUMNS:
            red = "color:#b00;" if c == "spills" and s.mix.get(c) else ""
            cells += f"<td style='padding:1px 5px;text-align:right;{red}'>{s.mix.get(c, 0) or ''}</td>"
        body.append(f"<tr style='{style}'><td style='padding:1px 5px;'>{s.number}</td>"
                    f"<td style='padding:1px 5px;'>{html.escape(s.op)}</td>"
                    f"<td style='padding:1px 5px;text-align:right;'>{s.mix.get('total', 0)}</td>{cells}</tr>")
    # its own scroll box (never clipped on a narrow page) and the table's own line height: a widget's HTML inherits
    # the 28 px line height of a widget row, which made each table row as tall as a button
    return ("<div class='wb-mix-box' style='max-width:100%;overflow-x:auto;'>"
            "<table class='wb-mix' style='font-family:monospace;font-size:11px;line-height:1.35;"
            "border-collapse:collapse;white-space:nowrap;'>"
            "<tr><th style='padding:1px 5px;'>line</th><th style='padding:1px 5px;'>op</th>"
            f"<th style='padding:1px 5px;text-align:right;'>instr</th>{head}</tr>" + "".join(body) + "</table></div>")


class MachineCodeView(Panel):
    """SASS or PTX by the kernel's lines, with the per-line instruction mix and the kernel's resources."""

    def __init__(self, wk: Any):
        super().__init__()
        self._wk = wk
        self.kernel: Any = None  # the source-line build
        self.listing: Any = None
        self._pending: Any = None
        self.rows: list[SourceLine] = []
        self.kind = W.ToggleButtons(options=[("SASS", "sass"), ("PTX", "ptx")], value="sass", description="code")
        self.note = W.HTML(message_html("loading the source-line build ..."))
        self.lines = W.Select(options=[], rows=12, description="line", layout=W.Layout(width="100%"),
                              style={"description_width": "40px"})
        self.lines.add_class("wb-sass-lines")
        self.mix = W.HTML()
        self.pane = W.HTML()
        # the mix table spans the view's width above the list and the pane: in the list's half-width column its
        # twelve columns were cut off after FFMA at JupyterLab's default width (spills and barriers not shown)
        self.widget = W.VBox([self.kind, self.note, self.mix,
                              W.HBox([W.VBox([self.lines], layout=W.Layout(width="44%")),
                                      W.VBox([self.pane], layout=W.Layout(width="56%"))])])
        self.kind.observe(lambda _c: self._load_kind(), names="value")
        self.lines.observe(lambda _c: self.refresh(), names="value")

    def load(self) -> None:
        kernel = self._wk.kernel
        if kernel.target.get("kind") != "cuda":
            self.note.value = message_html(f"{self._wk.name} is a CPU kernel: SASS and PTX by line are for CUDA "
                                           "kernels (--target cuda; compiling needs no GPU)")
            return
        self._submit(lambda: self._build(kernel))

    def _submit(self, fn: Any) -> None:
        """Compiling and disassembling run on the workbench's background thread (in order), not the notebook's."""
        from .jobs import compile_executor

        self._pending = compile_executor().submit(fn)

    def wait(self, timeout: float | None = 300) -> bool:
        """Block until the build and listing requested last are shown; False on timeout."""
        from concurrent import futures

        fut = self._pending
        if fut is None:
            return True
        try:
            fut.result(timeout)
        except futures.TimeoutError:
            return False
        return True

    def _build(self, kernel: Any) -> None:
        try:
            self.kernel = lined_build(kernel)
        except Exception as e:  # noqa: BLE001 - say why, keep the summary working
            self.note.value = message_html(f"no source-line build: {type(e).__name__}: {e}", "#a00")
            return
        self._list()

    def _load_kind(self) -> None:
        if self.kernel is not None:
            self._submit(self._list)

    def _list(self) -> None:
        kind = self.kind.value
        try:
            listing = self.kernel.code_by_line(kind)
        except Exception as e:  # noqa: BLE001 - e.g. no nvdisasm here: PTX still works
            self.listing, self.rows = None, []
            self.lines.options = []
            self.note.value = message_html(f"{kind.upper()} by line unavailable: {e}", "#a00")
            self.pane.value = self.mix.value = ""
            return
        rows = source_lines(listing, getattr(self._wk, "cell", None))
        self.listing, self.rows = listing, rows
        mapped = sum(len(s.indices) for s in rows)
        self.note.value = message_html(f"{len(listing.instructions)} {kind.upper()} instructions, {mapped} mapped "
                                       f"to {len(rows)} line(s) of {self._wk.name}; pick a line to highlight its "
                                       "instructions")
        prev = self.lines.value
        self.lines.options = [(s.label, s.number) for s in rows]
        numbers = [s.number for s in rows]
        heaviest = max(rows, key=lambda s: len(s.indices)).number if rows else None
        self.lines.value = prev if prev in numbers else heaviest
        self.refresh()

    def selected(self) -> SourceLine | None:
        return next((s for s in self.rows if s.number == self.lines.value), None)

    def refresh(self) -> None:
        if self.listing is None:
            return
        sel = self.selected()
        self.mix.value = mix_html(self.rows, sel)
        self.pane.value = code_html(self.listing, self.rows, sel)


__all__ = ["MachineCodeView", "SourceLine", "lined_build", "source_lines", "code_html", "mix_html", "tile_op"]

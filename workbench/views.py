"""The Source, IR and Code panels of the summary (ipywidgets).

Why this module exists: reading what the compiler did is the point of the workbench. The IR panel offers two stage
pickers shown side by side, or as a unified diff when the diff toggle is on; stages that did not change the IR are
hidden unless asked for. The Code panel shows each piece of generated code under the exact command that produced
it. Panels fill themselves on first view (``activate``): highlighting a large LLVM module costs real time, and most
summaries are never opened that far.

Tests drive these panels the way a user does, by setting ``.value`` on their widgets.
"""

from __future__ import annotations

import html
from contextlib import contextmanager
from typing import Any

import ipywidgets as W

from . import ir
from .highlight import code_html, message_html

HALF = W.Layout(flex="1 1 0", min_width="0", overflow="hidden")


def pane_title(text: str) -> str:
    return f'<div style="font-weight:bold; font-family:monospace; padding:2px 0;">{html.escape(text)}</div>'


class Panel:
    """A tab body that renders lazily: ``activate()`` fills it once."""

    widget: W.Widget

    def __init__(self) -> None:
        self.active = False

    def activate(self) -> None:
        if not self.active:
            self.active = True
            self.load()

    def load(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class SourceView(Panel):
    """The cell as written, and the configuration it was compiled with."""

    def __init__(self, wk: Any):
        super().__init__()
        self._wk = wk
        self.config = W.HTML()
        self.pane = W.HTML()
        self.widget = W.VBox([self.config, self.pane])
        self.activate()

    def load(self) -> None:
        cfg = ir.config_label(self._wk.config) or "(no factory arguments)"
        params = ", ".join(str(p) for p in self._wk.params)
        line = f"%%tilekernel {self._wk.options.line}".rstrip()
        self.config.value = (f'<div style="font-family:monospace; font-size:12px;">{html.escape(line)}'
                             f"<br>config: {html.escape(cfg)}<br>params: {html.escape(params)}</div>")
        self.pane.value = code_html(self._wk.source, "python")


class IRView(Panel):
    """Two stages side by side, or their diff; unchanged stages hidden unless ``show_unchanged`` is ticked."""

    def __init__(self, kernel: Any):
        super().__init__()
        self._kernel = kernel
        self._stages: list[ir.StageInfo] = []
        self._quiet = False
        self.left = W.Dropdown(description="left", layout=W.Layout(width="48%"))
        self.right = W.Dropdown(description="right", layout=W.Layout(width="48%"))
        self.diff = W.ToggleButton(value=False, description="diff", tooltip="unified diff of left -> right")
        self.show_unchanged = W.Checkbox(value=False, description="show unchanged stages", indent=False)
        self.left_title, self.right_title = W.HTML(), W.HTML()
        self.left_pane, self.right_pane = W.HTML(), W.HTML()
        self.diff_pane = W.HTML()
        self.side_by_side = W.HBox([W.VBox([self.left_title, self.left_pane], layout=HALF),
                                    W.VBox([self.right_title, self.right_pane], layout=HALF)])
        self.body = W.VBox([W.HTML(message_html("loading the compile trace ..."))])
        self.widget = W.VBox([W.HBox([self.left, self.right]), W.HBox([self.diff, self.show_unchanged]),
                              self.body])
        for w in (self.left, self.right, self.diff):
            w.observe(self._changed, names="value")
        self.show_unchanged.observe(self._filter_changed, names="value")

    @contextmanager
    def _batch(self) -> Any:
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def load(self) -> None:
        try:
            self._stages = ir.stages(self._kernel)
        except Exception as e:  # noqa: BLE001 - show why instead of breaking the summary
            self.body.children = [W.HTML(message_html(f"no compile trace: {type(e).__name__}: {e}", "#a00"))]
            return
        with self._batch():
            self._set_options()
            visible = self._visible()
            self.left.value = visible[0].index
            self.right.value = visible[-1].index
        self.refresh()

    def _visible(self) -> list[ir.StageInfo]:
        return ir.visible_stages(self._stages, self.show_unchanged.value)

    def _set_options(self) -> None:
        old = (self.left.value, self.right.value)
        options = [(s.label, s.index) for s in self._visible()]
        indices = [i for _, i in options]
        self.left.options = options
        self.right.options = options
        for dd, prev in ((self.left, old[0]), (self.right, old[1])):
            if prev in indices:
                dd.value = prev
            elif prev is not None and indices:  # a hidden stage was selected: take the nearest earlier one shown
                dd.value = max([i for i in indices if i <= prev] or indices[:1])

    def _filter_changed(self, _change: Any) -> None:
        if not self._stages:
            return
        with self._batch():
            self._set_options()
        self.refresh()

    def _changed(self, _change: Any) -> None:
        if not self._quiet and self._stages:
            self.refresh()

    def stage(self, index: int | None) -> ir.StageInfo | None:
        return next((s for s in self._stages if s.index == index), None)

    def refresh(self) -> None:
        a, b = self.stage(self.left.value), self.stage(self.right.value)
        if a is None or b is None:
            return
        if self.diff.value:
            text = ir.diff(a, b)
            self.diff_pane.value = (code_html(text, "diff") if text else
                                    message_html(f"{a.name} and {b.name} are identical"))
            self.body.children = [self.diff_pane]
        else:
            self.left_title.value = pane_title(a.label)
            self.right_title.value = pane_title(b.label)
            self.left_pane.value = code_html(a.text, "tvmscript")
            self.right_pane.value = code_html(b.text, "tvmscript")
            self.body.children = [self.side_by_side]


class CodeView(Panel):
    """Generated code, one kind at a time, under the command that produced it."""

    def __init__(self, kernel: Any):
        super().__init__()
        self._kernel = kernel
        self._code: dict[str, ir.CodeInfo] = {}
        self._html: dict[str, str] = {}
        self.kind = W.ToggleButtons(options=[], description="code")
        self.command = W.HTML()
        self.pane = W.HTML(message_html("loading generated code ..."))
        self.widget = W.VBox([self.kind, self.command, self.pane])
        self.kind.observe(lambda _c: self.refresh(), names="value")

    def load(self) -> None:
        try:
            self._code = {c.kind: c for c in ir.generated_code(self._kernel)}
        except Exception as e:  # noqa: BLE001
            self.pane.value = message_html(f"no generated code: {type(e).__name__}: {e}", "#a00")
            return
        self.kind.options = [(c.label, k) for k, c in self._code.items()]
        if self._code:
            self.kind.value = next(iter(self._code))
        self.refresh()

    def refresh(self) -> None:
        c = self._code.get(self.kind.value)
        if c is None:
            return
        self.command.value = ('<pre style="font-size:11px; color:#333; background:#eef; padding:4px; margin:2px 0; '
                              f'white-space:pre-wrap;">{html.escape(c.command or "(command not recorded)")}</pre>')
        if c.kind not in self._html:
            self._html[c.kind] = code_html(c.text, c.language)
        self.pane.value = self._html[c.kind]

"""The summary widget a ``%%tilekernel`` cell displays: status line, export bar, and the Source/IR/Code/Compare tabs.

Why this module exists: it assembles the panels of :mod:`workbench.views` and :mod:`workbench.compare` under one
header and wires the two actions that belong to the kernel as a whole — opening a tab (panels fill lazily) and
exporting the kernel as a standalone module.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W

from .compare import CompareView
from .config_diff import ConfigDiffView
from .profile_view import ProfileView
from .sass_view import MachineCodeView
from .status import BAD, OK, status_parts
from .text_views import kernel_facts
from .views import CodeView, IRView, Panel, SourceView

TAB_TITLES = ("Source", "IR", "Code", "Compare", "SASS by line", "Diff")
_TONES = {OK: "#070", BAD: "#b00"}


def status_html(wk: Any) -> str:
    """The status line with pass in green and failure in red."""
    spans = []
    for p in status_parts(wk):
        color = _TONES.get(p.tone)
        style = f"color:{color}; font-weight:bold;" if color else ""
        spans.append(f'<span style="{style}">{html.escape(p.text)}</span>')
    sep = ' <span style="color:#999;">&middot;</span> '
    facts = "".join(f'<div style="color:#555;">{html.escape(line)}</div>' for line in kernel_facts(wk.kernel))
    return (f'<div style="font-family:monospace; font-size:12px; padding:4px 0;"><b>{html.escape(wk.name)}</b>: '
            + sep.join(spans) + facts + "</div>")


class SummaryView:
    """The whole summary; ``.widget`` is what gets displayed, the panels are attributes for code and tests."""

    def __init__(self, wk: Any):
        self.wk = wk
        self.header = W.HTML(status_html(wk))
        self.export_path = W.Text(value=f"my_kernels/{wk.name}.py", description="export to",
                                  layout=W.Layout(width="420px"))
        self.export_button = W.Button(description="Export", icon="download",
                                      tooltip="write a standalone Python module holding the compiled kernel")
        self.export_status = W.HTML()
        self.export_button.on_click(lambda _b: self.export())
        self.source = SourceView(wk)
        self.ir = IRView(wk.kernel)
        self.code = CodeView(wk.kernel)
        self.compare = CompareView(wk)
        self.machine_code = MachineCodeView(wk)  # SASS / PTX by source line (CUDA)
        self.config_diff = ConfigDiffView(wk)  # two configurations at any stage
        self.panels: list[Panel] = [self.source, self.ir, self.code, self.compare, self.machine_code,
                                    self.config_diff]
        self.tabs = W.Tab(children=[p.widget for p in self.panels], titles=TAB_TITLES)
        self.tabs.observe(self._tab_changed, names="selected_index")
        self.report_button = W.Button(description="Report", icon="file-text",
                                      tooltip="write the tuning session (configurations, timings, plots, the best "
                                              "kernel) as one self-contained HTML file next to the export path")
        self.report_button.on_click(lambda _b: self.report())
        self.profile = ProfileView(wk)
        self.widget = W.VBox([self.header, W.HBox([self.export_path, self.export_button, self.report_button,
                                                   self.export_status]), self.profile.widget, self.tabs])

    def _tab_changed(self, change: Any) -> None:
        index = change["new"]
        if index is not None and 0 <= index < len(self.panels):
            self.panels[index].activate()

    def select(self, title: str) -> Panel:
        """Open a tab by title (as a click would) and return its panel."""
        index = TAB_TITLES.index(title)
        self.tabs.selected_index = index
        self.panels[index].activate()
        return self.panels[index]

    def export(self) -> Any:
        """Export to the path in the text box; the result (or the error) shows next to the button."""
        try:
            path = self.wk.export(self.export_path.value)
        except Exception as e:  # noqa: BLE001 - report, do not break the widget
            self.export_status.value = f'<span style="color:#b00;">{html.escape(f"{type(e).__name__}: {e}")}</span>'
            return None
        size = path.stat().st_size / 1024
        self.export_status.value = (f'<span style="color:#070;">wrote {html.escape(str(path))} ({size:.0f} KiB); '
                                    f"import it and call .kernel(...)</span>")
        return path

    def report(self) -> Any:
        """Write the session report (:func:`workbench.report.export_report`) beside the export path
        (``NAME.report.html``); the result (or the error) shows next to the buttons."""
        from pathlib import Path

        from .report import export_report

        target = Path(self.export_path.value).with_suffix(".report.html")
        try:
            path = export_report(self.wk, target)
        except Exception as e:  # noqa: BLE001 - report, do not break the widget
            self.export_status.value = f'<span style="color:#b00;">{html.escape(f"{type(e).__name__}: {e}")}</span>'
            return None
        self.export_status.value = (f'<span style="color:#070;">wrote {html.escape(str(path))} '
                                    f"({path.stat().st_size / 1024:.0f} KiB): open it in any browser</span>")
        return path

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        from .display import widget_bundle
        from .text_views import summary_text

        return widget_bundle(self.widget, summary_text(self.wk))

"""The "Profile" button: one launch of the current kernel under Nsight Compute, shown as throughput against peak
(SM, tensor pipes, DRAM, L2), the top warp-stall reasons and the occupancy next to the theoretical one.

Why this module exists: a timing says a configuration is slow; counters say whether it is bound by memory,
by the tensor pipes or by stalls (waiting on a barrier, on shared memory, on a long scoreboard). The work is the
core's (:func:`tilelang_core.ncu.profile`: ncu in a child process, its CSV parsed); this module is the button, a
background job (profiling replays the launch many times: seconds) and the rendering. Where ncu or a GPU is missing
(this CPU machine), the button is disabled and the view says why.
"""

from __future__ import annotations

import html
from concurrent.futures import Future
from typing import Any

import ipywidgets as W

from .highlight import message_html


def report_html(report: Any, resources: Any = None) -> str:
    """Bars of throughput (% of peak), a table of the top stall reasons, occupancy achieved vs theoretical (and
    the occupancy the compiler's resources allow)."""
    bars = []
    for label, pct in report.throughput.items():
        width = max(0.0, min(100.0, pct))
        color = "#2ca02c" if pct >= 60 else "#f2b01e" if pct >= 30 else "#d62728"
        bars.append(f"<tr><td style='padding:1px 6px;'>{html.escape(label)}</td><td style='width:260px;'>"
                    f"<div style='background:#eee;width:250px;height:12px;'><div class='wb-bar' "
                    f"style='background:{color};width:{width * 2.5:.0f}px;height:12px;'></div></div></td>"
                    f"<td style='padding:1px 6px;text-align:right;'>{pct:.1f}%</td></tr>")
    stalls = "".join(f"<tr><td style='padding:1px 6px;'>{html.escape(r.replace('_', ' '))}</td>"
                     f"<td style='padding:1px 6px;text-align:right;'>{v:.2f}</td></tr>"
                     for r, v in report.top_stalls(6))
    occ = ", ".join(f"{k} {v:.1f}%" for k, v in report.occupancy.items())
    if resources is not None:
        occ += (f"; the compiler's resources allow {resources.occupancy.fraction:.0%} "
                f"(limited by {resources.occupancy.limiter})")
    return (f"<div style='font-family:monospace;font-size:12px;'><b>{html.escape(report.kernel)}</b> under "
            "Nsight Compute<table class='wb-ncu-throughput'><tr><th colspan=3 style='text-align:left;'>throughput "
            f"vs peak</th></tr>{''.join(bars) or '<tr><td>(no throughput metrics)</td></tr>'}</table>"
            "<table class='wb-ncu-stalls'><tr><th colspan=2 style='text-align:left;'>top stall reasons (cycles per "
            f"issued instruction)</th></tr>{stalls or '<tr><td>(no stall metrics)</td></tr>'}</table>"
            f"<div>occupancy: {html.escape(occ or 'not reported')}</div>"
            f"<div style='color:#777;font-size:10px;'>{html.escape(report.command)}</div></div>")


class ProfileView:
    """``.widget``: the Profile button and its output; ``profile()`` runs it (returns a future)."""

    def __init__(self, wk: Any):
        from tilelang_core import ncu

        self._wk = wk
        self.button = W.Button(description="Profile (ncu)", icon="tachometer",
                               tooltip="run the kernel once under Nsight Compute: throughput vs peak, stalls, "
                                       "occupancy")
        self.button.add_class("wb-profile")
        self.output = W.HTML()
        self.report: Any = None
        cuda = wk.kernel.target.get("kind") == "cuda"
        ok, why = ncu.available() if cuda else (False, f"{wk.name} is a CPU kernel: Nsight Compute profiles CUDA "
                                                        "kernels")
        self.available, self.reason = ok, why
        self.button.disabled = not ok
        if not ok:
            self.output.value = message_html(f"profile: not available here: {why}", "#777")
        self.button.on_click(lambda _b: self.profile())
        # a CPU kernel's summary shows no Profile button at all (ncu is for CUDA kernels)
        self.widget = W.VBox([self.button, self.output] if cuda else [])

    def profile(self) -> Future:
        """Profile on the workbench's background thread; the output shows the report or why there is none."""
        from .jobs import compile_executor

        done: Future = Future()
        if not self.available:
            self.output.value = message_html(f"profile: not available here: {self.reason}", "#a00")
            done.set_result(None)
            return done
        self.button.disabled = True
        self.output.value = message_html("profiling under ncu (the launch is replayed once per counter pass) ...")

        def work() -> Any:
            from tilelang_core import ncu

            from .resources import kernel_resources

            try:
                self.report = ncu.profile(self._wk.kernel)
                self.output.value = report_html(self.report, kernel_resources(self._wk.kernel))
            except Exception as e:  # noqa: BLE001 - shown, not raised into the widget
                self.output.value = message_html(f"profile failed: {type(e).__name__}: {e}", "#a00")
            finally:
                self.button.disabled = False
            return self.report

        return compile_executor().submit(work)


__all__ = ["ProfileView", "report_html"]

"""The Compare panel: the same IR stage for two configurations, side by side or as a diff.

Why this module exists: the question after "what did the compiler do" is "what changes if I use 128-wide tiles".
The panel compiles a variant of the cell's factory (config overrides typed as ``block_M=128, block_K=64``) or
takes the previous run of the cell, and shows one stage of both. Compiling happens off the main thread (one
worker; a newer request cancels a queued one, and a finished stale one does not steal the selection), so the
notebook stays responsive; the text box only fires on Enter (``continuous_update=False``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import ipywidgets as W

from . import ir
from .highlight import code_html, message_html
from .jobs import compile_executor as executor  # one background compile thread, shared with the tuning panel
from .options import parse_assignments
from .views import HALF, Panel, pane_title


class CompareView(Panel):
    """``other`` picks what to compare with; ``stage`` the stage; ``diff`` switches to a unified diff."""

    def __init__(self, wk: Any):
        super().__init__()
        self._wk = wk
        self._others: dict[str, Any] = {}
        self._generation = 0
        self._pending: Future | None = None
        self._lock = threading.Lock()
        self.overrides = W.Text(description="variant", placeholder="block_M=128, block_K=64  (Enter compiles)",
                                continuous_update=False, layout=W.Layout(width="420px"))
        self.compile_button = W.Button(description="Compile variant", icon="cogs")
        self.other = W.Dropdown(description="vs", options=[], layout=W.Layout(width="60%"))
        self.stage = W.Dropdown(description="stage", options=[], layout=W.Layout(width="38%"))
        self.diff = W.ToggleButton(value=True, description="diff")
        self.status = W.HTML()
        self.left_title, self.right_title = W.HTML(), W.HTML()
        self.left_pane, self.right_pane, self.diff_pane = W.HTML(), W.HTML(), W.HTML()
        self.side_by_side = W.HBox([W.VBox([self.left_title, self.left_pane], layout=HALF),
                                    W.VBox([self.right_title, self.right_pane], layout=HALF)])
        self.body = W.VBox([])
        self.widget = W.VBox([W.HBox([self.overrides, self.compile_button]), W.HBox([self.other, self.stage]),
                              W.HBox([self.diff, self.status]), self.body])
        self.overrides.observe(lambda c: self.request(c["new"]), names="value")
        self.compile_button.on_click(lambda _b: self.request(self.overrides.value))
        for w in (self.other, self.stage, self.diff):
            w.observe(lambda _c: self.refresh(), names="value")

    def load(self) -> None:
        try:
            names = [s.name for s in ir.stages(self._wk.kernel)]
        except Exception as e:  # noqa: BLE001
            self.status.value = message_html(f"no compile trace: {type(e).__name__}: {e}", "#a00")
            return
        self.stage.options = names
        self.stage.value = names[0] if names else None
        prev = self._wk.previous
        if prev is not None:
            self._add_other(f"previous run ({ir.config_label(prev.config, self._wk.config)})", prev, select=True)
        for label, v in self._wk.variants.items():
            self._add_other(f"variant {label}", v, select=self.other.value is None)
        if self.other.value is None:
            self.body.children = [W.HTML(message_html(
                "type factory arguments to change (e.g. block_M=128) and press Enter to compile a variant"))]

    def _add_other(self, label: str, wk: Any, select: bool) -> None:
        self._others[label] = wk
        self.other.options = list(self._others)
        if select:
            self.other.value = label
        self.refresh()

    def request(self, text: str) -> Future:
        """Compile the variant ``text`` (``"block_M=128, block_K=64"``) in the background; returns the future.

        The future resolves after the panel has been updated (or the error shown in ``status``).
        """
        with self._lock:
            self._generation += 1
            gen = self._generation
            if self._pending is not None:
                self._pending.cancel()  # still queued: a newer request replaces it
        if not text.strip():
            done: Future = Future()
            done.set_result(None)
            return done
        self.status.value = message_html(f"compiling {text.strip()} ...")
        fut = executor().submit(self._compile, text, gen)
        self._pending = fut
        return fut

    def _compile(self, text: str, gen: int) -> Any:
        try:
            overrides = parse_assignments(text, "variant")
            variant = self._wk.variant(**overrides)
        except Exception as e:  # noqa: BLE001 - UsageError, compile errors ...: show them, keep the panel alive
            if gen == self._generation:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                self.status.value = message_html(f"{type(e).__name__}: {msg}", "#a00")
            return None
        stale = gen != self._generation
        label = f"variant {ir.config_label(overrides)}"
        self._add_other(label, variant, select=not stale)
        if not stale:
            self.status.value = message_html(f"compiled {label} ({variant.status}, {variant.build.seconds:.2f} s)",
                                             "#070")
        return variant

    def refresh(self) -> None:
        other = self._others.get(self.other.value)
        if other is None or self.stage.value is None:
            return
        try:
            a = next(s for s in ir.stages(self._wk.kernel) if s.name == self.stage.value)
            b = next((s for s in ir.stages(other.kernel) if s.name == self.stage.value), None)
        except Exception as e:  # noqa: BLE001
            self.body.children = [W.HTML(message_html(f"{type(e).__name__}: {e}", "#a00"))]
            return
        if b is None:
            self.body.children = [W.HTML(message_html(f"the other kernel has no stage {self.stage.value}"))]
            return
        mine = f"this ({ir.config_label(self._wk.config, other.config)}) [{a.name}]"
        theirs = f"{self.other.value} [{b.name}]"
        if self.diff.value:
            text = ir.diff(a, b, mine, theirs)
            self.diff_pane.value = code_html(text, "diff") if text else message_html(
                f"stage {a.name} is identical in both")
            self.body.children = [self.diff_pane]
        else:
            self.left_title.value = pane_title(mine)
            self.right_title.value = pane_title(theirs)
            self.left_pane.value = code_html(a.text, "tvmscript")
            self.right_pane.value = code_html(b.text, "tvmscript")
            self.body.children = [self.side_by_side]

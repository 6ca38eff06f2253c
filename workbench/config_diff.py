"""Diff two configurations of a kernel at any stage: an IR stage, the generated code (CUDA C / PTX / SASS, or LLVM
IR / assembly), the resources, the timings — side by side with the changes highlighted.

Why this module exists: "why is 128x128 slower than 128x64" is answered by putting the two side by side — the
schedule in the IR, the shared-memory size in the CUDA C, the register count and spills, the SASS's HGMMA shape,
the timing spread. The two sides are configurations: the cell's own, a tuning-panel position measured in this
session, or an entry of the tuning database (so yesterday's best can be diffed against today's try). Each side is
compiled as a variant of the cell's factory (the session cache, then tilelang_core's disk cache answers repeats);
its timings come from the measurement it was picked from.

``config_diff(wk, a, b, stage)`` returns the unified diff as text; :class:`ConfigDiffView` is the widget (a tab of
the summary). The side-by-side table is ``difflib.HtmlDiff``'s, styled inline.
"""

from __future__ import annotations

import difflib
import html
import json
import threading
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from . import ir
from .highlight import message_html
from .views import Panel

CODE_STAGES = ("cuda", "ptx", "sass", "llvm", "asm")
RESOURCES, TIMINGS = "resources", "timings"
_STYLE = """<style>
.wb-diff table.diff {font-family:monospace;font-size:11px;line-height:1.35;border-collapse:collapse;width:100%;}
.wb-diff td {padding:0 4px;white-space:pre-wrap;vertical-align:top;line-height:1.35;height:auto;}
.wb-diff .diff_header {color:#888;text-align:right;}
.wb-diff .diff_next {display:none;}
.wb-diff .diff_add {background:#d7f5d7;}
.wb-diff .diff_chg {background:#fff1a8;}
.wb-diff .diff_sub {background:#f8d0d0;}
</style>"""


@dataclass
class Side:
    """One side of a diff: a configuration (factory arguments), where it came from, and its measurement (timings,
    resources) when it was picked from one."""

    label: str
    config: dict[str, Any]
    measurement: Any = None


def sides(wk: Any, db: Any = True) -> list[Side]:
    """The configurations a diff can pick from: the cell's own, this session's panel measurements, and the tuning
    database's entries for the same kernel source, shapes and target (newest per configuration)."""
    out = [Side(f"cell: {ir.config_label(wk.config) or 'as written'}", dict(wk.config))]
    seen = {json.dumps(out[0].config, sort_keys=True, default=repr)}
    panel = getattr(wk, "last_panel", None)
    session = list(panel.explorer.measurements()) if panel is not None else []
    rows: list[Any] = []
    if db is not None and db is not False and getattr(wk.program, "function", None) is not None:
        try:
            from tilelang_core.autotune import TuningDB, kernel_identity
            from tilelang_core.machine import target_kind

            handle = TuningDB() if db is True else db
            name, _module, digest = kernel_identity(wk.program.function, wk.name)
            rows = list(reversed(handle.query(name, source_hash=digest, shapes=[list(p.shape) for p in wk.params],
                                              target=target_kind(wk.kernel.target), device=None)))
        except Exception:  # noqa: BLE001 - an unreadable database leaves the session's configurations
            rows = []
    for origin, ms in (("panel", session), ("tuning db", rows)):
        for m in ms:
            if m.status == "compile_error":
                continue
            key = json.dumps(m.config, sort_keys=True, default=repr)
            if key in seen:
                continue
            seen.add(key)
            when = f" #{m.id}" if origin == "tuning db" and m.id is not None else ""
            lat = f" {m.latency_ms:.3f} ms" if m.latency_ms is not None else ""
            out.append(Side(f"{origin}{when}: {ir.config_label(m.config)}{lat}", dict(m.config), m))
    return out


def stages_of(wk: Any) -> list[str]:
    """Every stage a diff can show: the IR stages (``ir:NAME``), the generated code kinds, resources, timings."""
    names = []
    try:
        names = [f"ir:{s.name}" for s in ir.stages(wk.kernel)]
    except Exception:  # noqa: BLE001 - no trace: the code kinds remain
        pass
    kinds = [k for k in CODE_STAGES if k in set(getattr(wk.kernel, "source_kinds", []) or [])]
    return [*names, *kinds, RESOURCES, TIMINGS]


def _variant(wk: Any, config: dict[str, Any]) -> Any:
    import inspect

    if getattr(wk.program, "function", None) is None:  # a @T.prim_func cell: one configuration only
        return wk
    params = inspect.signature(wk.program.function).parameters
    overrides = {k: v for k, v in config.items() if k in params and wk.config.get(k) != v}
    return wk.variant(**overrides) if overrides else wk


def _resources_text(kernel: Any, measurement: Any) -> str:
    from .resources import kernel_resources

    r = kernel_resources(kernel)
    record = r.to_dict() if r is not None else (getattr(measurement, "resources", None) or {})
    if not record:
        return "(no resources: a CPU kernel, or a CUDA build without a cubin)"
    return "\n".join(f"{k}: {v}" for k, v in record.items())


def _timings_text(side: Side) -> str:
    m = side.measurement
    head = f"configuration: {ir.config_label(side.config)}"
    if m is None or m.latency_ms is None:
        return head + "\n(not timed: pick a configuration measured in the panel or the tuning database)"
    lines = [head, f"median: {m.latency_ms:.4f} ms"]
    if m.p20_ms is not None:
        lines.append(f"p20 / p80: {m.p20_ms:.4f} / {m.p80_ms:.4f} ms (spread {m.p80_ms - m.p20_ms:.4f} ms)")
    if m.min_ms is not None:
        lines.append(f"min: {m.min_ms:.4f} ms over {m.runs} runs")
    rate = m.rate()
    if rate is not None:
        lines.append(f"rate: {rate:.1f} {m.unit}")
    if m.max_rel is not None:
        lines.append(f"max rel err: {m.max_rel:.2e}, max abs err: {m.max_abs:.2e}")
    lines.append(f"status: {m.status}, device: {m.device}")
    return "\n".join(lines)


def stage_text(wk: Any, side: Side, stage: str) -> str:
    """The text of ``stage`` for one side (compiling its variant when needed)."""
    if stage == TIMINGS:
        return _timings_text(side)
    k = _variant(wk, side.config).kernel
    if stage == RESOURCES:
        return _resources_text(k, side.measurement)
    if stage.startswith("ir:"):
        return k.trace.stage(stage[3:]).text
    if stage in CODE_STAGES:
        return k.get_kernel_source(stage)
    raise ValueError(f"stage: expected one of ir:NAME, {', '.join(CODE_STAGES)}, {RESOURCES} or {TIMINGS}; "
                     f"got {stage!r}")


def _as_side(wk: Any, x: Side | dict[str, Any]) -> Side:
    if isinstance(x, Side):
        return x
    if isinstance(x, dict):
        return Side(ir.config_label(x) or "cell", {**wk.config, **x})
    raise TypeError(f"config_diff: a side must be a dict of factory arguments or a Side, got {type(x).__name__}")


def config_diff(wk: Any, a: Side | dict[str, Any], b: Side | dict[str, Any], stage: str = "cuda",
                context: int = 3) -> str:
    """Unified diff of ``stage`` between two configurations (dicts of factory arguments that differ from the cell,
    or :class:`Side` objects from :func:`sides`); '' when equal."""
    sa, sb = _as_side(wk, a), _as_side(wk, b)
    ta, tb = stage_text(wk, sa, stage), stage_text(wk, sb, stage)
    lines = difflib.unified_diff(ta.splitlines(), tb.splitlines(), f"{sa.label} [{stage}]", f"{sb.label} [{stage}]",
                                 n=context, lineterm="")
    return "\n".join(lines)


def side_by_side_html(a: str, b: str, a_label: str, b_label: str, context: bool = True) -> str:
    """Two texts side by side, changed lines highlighted (added green, changed yellow, removed red); only the
    changes and ``context`` lines around them unless ``context`` is False."""
    if a == b:
        return message_html("the two are identical at this stage")
    table = difflib.HtmlDiff(tabsize=4, wrapcolumn=80).make_table(
        a.splitlines(), b.splitlines(), html.escape(a_label), html.escape(b_label), context=context, numlines=3)
    return (_STYLE + '<div class="wb-diff" style="max-height:560px;overflow:auto;">' + table + "</div>")


class ConfigDiffView(Panel):
    """Pick two configurations (``left``/``right``: the cell, panel positions, tuning-database entries) and a
    stage; the pane shows them side by side with changes highlighted. ``refresh_sides()`` re-reads the panel and
    the database."""

    def __init__(self, wk: Any, db: Any = True):
        super().__init__()
        self._wk = wk
        self._db = db
        self._sides: list[Side] = []
        self.left = W.Dropdown(description="left", options=[], layout=W.Layout(width="48%"))
        self.right = W.Dropdown(description="right", options=[], layout=W.Layout(width="48%"))
        self.stage = W.Dropdown(description="stage", options=[], layout=W.Layout(width="48%"))
        self.reload = W.Button(description="Reload configurations", icon="refresh",
                               tooltip="read the tuning panel's and the tuning database's configurations again")
        self.status = W.HTML()
        self.pane = W.HTML()
        self.pane.add_class("wb-config-diff")
        self.widget = W.VBox([W.HBox([self.left, self.right]), W.HBox([self.stage, self.reload]), self.status,
                              self.pane])
        self.reload.on_click(lambda _b: self.refresh_sides())
        for w in (self.left, self.right, self.stage):
            w.observe(lambda _c: self.refresh(), names="value")
        self._quiet = False
        self._lock = threading.Lock()
        self._generation = 0
        self._pending: Future | None = None

    def load(self) -> None:
        self._quiet = True
        try:
            self.stage.options = stages_of(self._wk)
            code = [s for s in self.stage.options if s in CODE_STAGES]
            self.stage.value = code[0] if code else self.stage.options[0]
        finally:
            self._quiet = False
        self.refresh_sides()

    def refresh_sides(self) -> None:
        self._sides = sides(self._wk, self._db)
        options = [(s.label, i) for i, s in enumerate(self._sides)]
        self._quiet = True
        try:
            self.left.options = options
            self.right.options = options
            self.left.value = 0
            self.right.value = 1 if len(options) > 1 else 0
        finally:
            self._quiet = False
        self.refresh()

    def add(self, config: dict[str, Any], label: str | None = None, measurement: Any = None) -> int:
        """Offer another configuration (factory arguments that differ from the cell's); returns its index."""
        self._sides.append(Side(label or ir.config_label(config), {**self._wk.config, **config}, measurement))
        options = [(s.label, i) for i, s in enumerate(self._sides)]
        self._quiet = True
        try:
            left, right = self.left.value, self.right.value
            self.left.options = self.right.options = options
            self.left.value, self.right.value = left, right
        finally:
            self._quiet = False
        return len(self._sides) - 1

    def refresh(self) -> None:
        """Compile the two sides (when needed) and diff them on the workbench's background thread; a newer request
        makes an older one's result stale (never shown). ``wait()`` blocks until it is shown."""
        if self._quiet or not self._sides or self.left.value is None or self.right.value is None:
            return
        from .jobs import compile_executor

        a, b, stage = self._sides[self.left.value], self._sides[self.right.value], self.stage.value
        with self._lock:
            self._generation += 1
            gen = self._generation
        self.status.value = message_html(f"{stage}: compiling / reading both sides ...")

        def work() -> None:
            try:
                ta, tb = stage_text(self._wk, a, stage), stage_text(self._wk, b, stage)
            except Exception as e:  # noqa: BLE001 - a side that does not compile shows why
                if gen == self._generation:
                    self.status.value = message_html(f"{type(e).__name__}: {e}", "#a00")
                    self.pane.value = ""
                return
            if gen != self._generation:
                return  # a newer request is on its way
            changed = sum(1 for line in difflib.ndiff(ta.splitlines(), tb.splitlines()) if line[:1] in "+-")
            self.pane.value = side_by_side_html(ta, tb, a.label, b.label)
            self.status.value = message_html(f"{stage}: {changed} line(s) differ")

        self._pending = compile_executor().submit(work)

    def wait(self, timeout: float | None = 300) -> bool:
        """Block until the latest request is shown; False on timeout."""
        fut = self._pending
        if fut is None:
            return True
        try:
            fut.result(timeout)
        except futures.TimeoutError:
            return False
        return True


__all__ = ["ConfigDiffView", "Side", "config_diff", "sides", "stages_of", "stage_text", "side_by_side_html"]

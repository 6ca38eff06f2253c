"""The tuning panel: sliders over a kernel's tunable arguments that recompile, check and time it live.

Why this module exists: ``matmul_relu.panel()`` (or ``%%tilekernel ... --panel``) is where a user explores a
kernel's configuration space by hand and by sweep. This module wires widgets to the :class:`~.explorer.Explorer`
(the work) through :class:`~.jobs.LatestOnly` (the rules):

- every control has ``continuous_update=False``; a change is debounced, then compiled, checked and timed on the
  workbench's background thread, so the notebook stays responsive and other cells run meanwhile;
- a newer setting supersedes an older one: stale results are dropped, never shown;
- a setting measured before in this session shows at once ("cached"), without a job;
- a status line says what is happening (queued / compiling / checking / timing / cached / the result), and a
  configuration that fails (does not compile, does not run, does not match) shows its error inline — the panel
  keeps working;
- the plots (:mod:`.plots`) show every configuration tried, earlier sessions' measurements from the tuning
  database, the best, the reference and the machine's roofline;
- **Sweep** runs a grid (``--tune`` syntax) in the background, one configuration per job, so a slider move during a
  sweep is served between two sweep steps; the plots fill live and **Stop** ends it. Its **run** choice picks where:
  ``inline`` (that, the default), or the tuner's executors ``local`` / ``ray`` (:mod:`.cell_sweep`: compile
  processes and timing workers, with a progress bar per worker).
"""

from __future__ import annotations

import html
import threading
from concurrent.futures import Future
from typing import Any

import ipywidgets as W

from .cell_sweep import EXECUTORS
from .explorer import COMPILED_ONLY, Explorer
from .jobs import DEBOUNCE_S, LatestOnly
from .plots import TuningPlots
from .status import margin_text, spread_warning
from .tunables import Tunable, full_label, parse_tune, tunables

_OK, _BAD, _DIM = "#070", "#b00", "#555"
SWEEP_AROUND = 1  # the default sweep grid: each tile size's current value and its neighbours


def make_control(knob: Tunable) -> W.Widget:
    """An ``IntSlider`` for a contiguous integer range, else a ``SelectionSlider``; never continuous."""
    style = {"description_width": "90px"}
    layout = W.Layout(width="100%", min_width="300px", max_width="360px")
    if knob.contiguous:
        w: W.Widget = W.IntSlider(value=knob.value, min=knob.values[0], max=knob.values[-1], step=1,
                                  description=knob.name, continuous_update=False, style=style, layout=layout)
    else:
        w = W.SelectionSlider(options=list(knob.values), value=knob.value, description=knob.name,
                              continuous_update=False, style=style, layout=layout)
    w.add_class(f"wb-knob-{knob.name}")
    w.add_class("wb-knob")
    return w


def _span(text: str, color: str | None = None, bold: bool = False) -> str:
    style = (f"color:{color};" if color else "") + ("font-weight:bold;" if bold else "")
    return f'<span style="{style}">{html.escape(text)}</span>'


def result_text(m: Any, names: list[str], margin: float | None = None) -> tuple[str, str]:
    """One measurement as the status line says it: (text, color); ``margin``: the worst element's share of the
    tolerance criterion, when known; a noisy timing (large p20-p80 spread) is flagged."""
    label = full_label(m.config, names)
    if m.status == "compile_error":
        return f"{label}: does not compile", _BAD
    if m.status == "run_error" and m.message == COMPILED_ONLY:
        res = getattr(m, "resources", None) or {}
        regs = f", {res['registers']} registers" if res.get("registers") else ""
        return f"{label}: compiled, not run (no CUDA GPU here{regs})", _DIM
    if m.status == "run_error":
        return f"{label}: failed to run", _BAD
    parts = [label + ":"]
    if m.latency_ms is not None:
        rate = m.rate()
        parts.append(f"{m.latency_ms:.3f} ms" + (f" ({rate:.1f} {m.unit})" if rate else ""))
    if m.max_rel is not None:
        parts.append(f"max rel err {m.max_rel:.1e}" + (f", worst element at {margin_text(margin)} of "
                                                       "|a-b| \u2264 atol + rtol\u00b7|b|" if margin is not None
                                                       else "") + (" PASS" if m.passed else " FAIL"))
    noisy = spread_warning(m.latency_ms, m.p20_ms, m.p80_ms)
    if noisy:
        parts.append("\u26a0 " + noisy)
    return " ".join(parts), (_OK if m.ok else _BAD)


def known_text(known: Any, names: list[str]) -> str:
    """The tuning database's best as ranked: the median over its measurements (and how many there were)."""
    m = known.measurement
    rate = m.rate(known.median_ms)
    runs = "one measurement" if known.count == 1 else f"median of {known.count} measurements"
    return (f"{full_label(m.config, names)}: {known.median_ms:.3f} ms" + (f" ({rate:.1f} {m.unit})" if rate else "")
            + f", {runs}")


class TuningPanel:
    """The widget (``.widget``) and its controls; drive it by setting ``panel.controls[name].value``."""

    def __init__(self, wk: Any, space: dict[str, list[Any]] | None = None, *, db: Any = True,
                 debounce_s: float = DEBOUNCE_S, executor: Any = None, timer: Any = threading.Timer,
                 start: bool = True):
        self.wk = wk
        self.knobs = tunables(wk.program.function, wk.kwargs, space)
        if not self.knobs:
            raise ValueError(f"{wk.name}: the factory has no tunable arguments (tile sizes, stages, threads); name "
                             "some with --tune NAME=v1,v2,...")
        self.names = [k.name for k in self.knobs]
        self.explorer = Explorer(wk, self.knobs, db=db)
        self.runner = LatestOnly(self._work, self._show_result, self._show_error, self._show_status,
                                 debounce_s=debounce_s, executor=executor, timer=timer)
        self._draw_lock = threading.RLock()
        self._holding = False
        self._sweep_gen = 0
        self.sweep_future: Future | None = None
        self.last_shown: Any = None  # the measurement on display (tests and benchmarks read it)
        self.shown = 0  # how many results were displayed

        self.controls: dict[str, W.Widget] = {k.name: make_control(k) for k in self.knobs}
        for c in self.controls.values():
            c.observe(self._changed, names="value")
        full = self.explorer.full_config(self.explorer.initial())
        unit = "GFLOP/s" if all(isinstance(full.get(k), int) for k in ("M", "N", "K")) else "GB/s"
        self.plots = TuningPlots(self.names, unit)
        self.plots.throughput.add_class("wb-throughput")
        self.plots.error.add_class("wb-error")
        self.plots.roofline.add_class("wb-roofline")
        self.status = W.HTML(self._status_html("starting", _DIM))
        self.status.add_class("wb-status")
        self.error = W.HTML()
        self.error.add_class("wb-error-text")
        self.best = W.HTML()
        self.resources = W.HTML()  # CUDA: registers, spills, smem, occupancy per configuration (workbench.resources)
        self.resources.add_class("wb-resources-table")
        self.use_best = W.Button(description="Use best", icon="star", tooltip="move the sliders to the best "
                                 "configuration measured in this session", layout=W.Layout(width="110px"))
        self.use_best.on_click(lambda _b: self.apply(self.explorer.best().config if self.explorer.best() else {}))
        self._sweep_default = self.default_sweep()  # what the grid box was last filled with (not typed)
        self.sweep_spec = W.Text(value=self._sweep_default, description="grid", continuous_update=False,
                                 placeholder="block_M=32,64,128 num_stages=1:3",
                                 layout=W.Layout(flex="1 1 560px", min_width="420px", max_width="760px"),
                                 style={"description_width": "40px"})
        self.sweep_spec.add_class("wb-sweep-grid")
        self.sweep_button = W.Button(description="Sweep", icon="play", button_style="primary",
                                     tooltip="measure every configuration of the grid in the background")
        self.sweep_button.add_class("wb-sweep")
        self.stop_button = W.Button(description="Stop", icon="stop", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, layout=W.Layout(width="160px"))
        self.sweep_executor = W.Dropdown(options=list(EXECUTORS), value="inline", description="run",
                                         tooltip="inline: one configuration after another on the workbench's "
                                         "thread; local: compile processes and a timing process per GPU; ray: a "
                                         "Ray cluster", layout=W.Layout(width="150px"),
                                         style={"description_width": "30px"})
        self.sweep_executor.add_class("wb-sweep-executor")
        self.worker_bars = W.VBox([])  # one progress bar per executor worker, filled during an executor sweep
        self.worker_bars.add_class("wb-sweep-workers")
        self._bars: dict[str, W.IntProgress] = {}
        self.sweep_result: Any = None  # the last executor sweep's TuneResult
        self.sweep_status = W.HTML()
        self.sweep_button.on_click(lambda _b: self.sweep())
        self.stop_button.on_click(lambda _b: self.stop_sweep())
        self.widget = self._layout()
        self._history = self.explorer.history()
        self._draw()
        if start:
            self.request(self.config())
            self.runner.run_later(self._load_ceilings)

    # -- layout ----------------------------------------------------------------------------------------------
    def _layout(self) -> W.Widget:
        wk = self.wk
        shapes = ", ".join(f"{k}={v}" for k, v in wk.kwargs.items() if k not in self.names) or "-"
        target = wk.target.get("mcpu") or wk.target.get("arch") or wk.target.get("kind")
        ref = html.escape(wk.options.ref or "no --ref: not checked")
        head = W.HTML(f'<div style="font-family:monospace;font-size:12px;"><b>{html.escape(wk.name)}</b> tuning '
                      f"panel &middot; {html.escape(shapes)} &middot; {html.escape(str(target))} &middot; "
                      f"reference: {ref}</div>")
        # the resources table has a row of its own across the panel: in the fixed 460 px column next to the
        # roofline its ten columns were clipped; the best-so-far column takes what the roofline leaves
        figs = W.VBox([W.HBox([self.plots.throughput, self.plots.error]),
                       W.HBox([self.plots.roofline,
                               W.VBox([self.best, self.use_best], layout=W.Layout(flex="1 1 260px",
                                                                                 min_width="260px"))]),
                       self.resources])
        sweep = W.VBox([W.HBox([self.sweep_spec, self.sweep_executor, self.sweep_button, self.stop_button,
                                self.progress, self.sweep_status],
                               layout=W.Layout(flex_flow="row wrap", align_items="center")), self.worker_bars])
        # as many 300-360 px columns as fit: at 1400 px with the file browser open, a fixed 3 x 340 px grid pushed
        # the third column's readout out of the cell (clipped)
        knobs = W.GridBox(list(self.controls.values()),
                          layout=W.Layout(grid_template_columns="repeat(auto-fill, minmax(300px, 360px))",
                                          grid_gap="2px 8px", width="100%"))
        knobs.add_class("wb-knobs")
        box = W.VBox([head, knobs, self.status, self.error, sweep, figs])
        box.add_class("wb-panel")
        return box

    def _status_html(self, text: str, color: str | None = None) -> str:
        return (f'<div class="wb-status-text" style="font-family:monospace;font-size:12px;padding:3px 0;">'
                f"{_span(text, color, bold=True)}</div>")

    # -- requests --------------------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The sliders' current setting."""
        return {name: c.value for name, c in self.controls.items()}

    def _changed(self, _change: Any) -> None:
        if not self._holding:
            self.request(self.config())

    def request(self, config: dict[str, Any]) -> None:
        """Show ``config``'s measurement: at once when cached, else after a debounced background job."""
        self._refresh_sweep_default()
        m = self.explorer.cached(config)
        if m is not None:
            self.runner.supersede()
            self._show(m, cached=True)
            return
        self._set_status(f"queued {full_label(config, self.names)}", _DIM)
        self.runner.submit(dict(config))

    def apply(self, config: dict[str, Any]) -> None:
        """Move every slider named in ``config`` at once (one request, not one per slider)."""
        values = {k: v for k, v in config.items() if k in self.controls}
        if not values:
            return
        self._holding = True
        try:
            for k, v in values.items():
                self.controls[k].value = v
        finally:
            self._holding = False
        self.request(self.config())

    def wait(self, timeout: float | None = 300) -> bool:
        """Block until every queued job (slider, sweep, ceilings) is done; False on timeout."""
        return self.runner.wait(timeout)

    # -- the job and its display -----------------------------------------------------------------------------
    def _work(self, config: dict[str, Any], ctx: Any) -> Any:
        return self.explorer.measure(config, ctx)

    def _show_status(self, text: str) -> None:
        self._set_status(text, _DIM)

    def _set_status(self, text: str, color: str | None) -> None:
        with self._draw_lock:
            self.status.value = self._status_html(text, color)

    def _show_result(self, _config: dict[str, Any], m: Any) -> None:
        self._show(m, cached=False)

    def _show_error(self, config: dict[str, Any], exc: BaseException) -> None:
        with self._draw_lock:
            self._set_status(f"{full_label(config, self.names)}: {type(exc).__name__}", _BAD)
            self.error.value = self._error_html(f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _error_html(text: str) -> str:
        return (f'<pre style="color:#b00;font-size:11px;white-space:pre-wrap;margin:2px 0;max-height:160px;'
                f'overflow:auto;">{html.escape(text)}</pre>')

    def _show(self, m: Any, cached: bool) -> None:
        text, color = result_text(m, self.names, self.explorer.margin(m))
        with self._draw_lock:
            self._set_status(("cached " if cached else "") + text, color)
            failed = m.message and m.status != "ok" and m.message != COMPILED_ONLY  # the status line says it all
            self.error.value = self._error_html(m.message) if failed else ""
            self.last_shown = m
            self.shown += 1
            self._draw()

    def _draw(self) -> None:
        ex = self.explorer
        session = ex.measurements()
        rtol = next((m.rtol for m in session if m.rtol is not None), None)
        with self._draw_lock:
            self.plots.update(session, self._history, ex.cached(self.config()), ex.best(), ex.ref_ms, rtol,
                              ex.known_ceilings, margin=ex.margin)
            b = ex.best()
            known = ex.best_known()
            lines = []
            if b is not None:
                lines.append("best this session: " + _span(result_text(b, self.names, ex.margin(b))[0], _OK,
                                                           bold=True))
            key = self.explorer.key
            if known is not None and (b is None or (known.median_ms < b.latency_ms
                                                    and key(known.config) != key(b.config))):
                lines.append("best known (tuning database, this kernel source): "
                             + _span(known_text(known, self.names)))
            self.best.value = '<div style="font-family:monospace;font-size:12px;">' + "<br>".join(lines) + "</div>"
            self._draw_resources(session, b)

    def _draw_resources(self, session: list[Any], best: Any) -> None:
        """CUDA: the resources column (a table per configuration) and the throughput points coloured by registers
        per thread; a CPU kernel's measurements have none and nothing changes."""
        from .resources import color_points, table_html

        self.resources.value = table_html(session, self.names, best, self.explorer.cached(self.config()))
        with self.plots.throughput.batch_update():
            color_points(self.plots.throughput.data[1], session)
        self.plots.sync_state()

    def _load_ceilings(self) -> None:
        self.explorer.ceilings()
        self._draw()

    # -- sweeps ----------------------------------------------------------------------------------------------
    def _refresh_sweep_default(self) -> None:
        """Re-centre the grid box on the sliders' new values, unless the user typed their own grid."""
        new = self.default_sweep()
        if self.sweep_spec.value == self._sweep_default and new != self._sweep_default:
            self.sweep_spec.value = new
        if self.sweep_spec.value == new:
            self._sweep_default = new

    def default_sweep(self) -> str:
        """Each tile size's current (slider) value and its neighbours (up to 3^n configurations)."""
        from tilelang_core.autotune.space import is_block_param

        controls = getattr(self, "controls", {})
        parts = []
        for k in self.knobs:
            if is_block_param(k.name):
                value = controls[k.name].value if k.name in controls else k.value
                i = k.values.index(value) if value in k.values else k.values.index(k.value)
                around = k.values[max(0, i - SWEEP_AROUND): i + SWEEP_AROUND + 1]
                parts.append(f"{k.name}={','.join(str(v) for v in around)}")
        return " ".join(parts)

    def sweep(self, spec: str | dict[str, list[Any]] | None = None, executor: Any = None) -> Future:
        """Measure every configuration of the grid (``--tune`` syntax; default: the text box) in the background,
        the other knobs at their slider values; configurations measured before are skipped. Returns a future that
        resolves with the number measured. ``executor``: where (default: the **run** choice): ``"inline"``,
        ``"local"``, ``"ray"``, or an executor object (``RayExecutor(address=...)``, ``LocalExecutor(...)``)."""
        from tilelang_core.autotune import grid

        try:
            axes = parse_tune(spec if spec is not None else self.sweep_spec.value) if not isinstance(spec, dict) \
                else dict(spec)
            unknown = [k for k in axes if k not in self.controls]
            if unknown:
                raise ValueError(f"no knob named {', '.join(unknown)}; the knobs are {', '.join(self.names)}")
        except Exception as e:  # noqa: BLE001 - a bad grid is shown, not raised into the widget callback
            self.sweep_status.value = _span(f"grid: {e}", _BAD)
            done: Future = Future()
            done.set_exception(e)
            return done
        base = self.config()
        todo = [c for c in ({**base, **g} for g in grid(axes)) if self.explorer.cached(c) is None]
        self._sweep_gen += 1
        gen = self._sweep_gen
        total = len(todo)
        self.progress.max, self.progress.value = max(total, 1), 0
        self.sweep_button.disabled, self.stop_button.disabled = True, False
        self.sweep_status.value = _span(f"sweep: {total} configuration(s) to measure", _DIM)
        result: Future = Future()
        self.sweep_future = result
        choice = executor if executor is not None else self.sweep_executor.value
        if choice != "inline":
            self._sweep_through(gen, todo, result, choice)
        else:
            self._sweep_step(gen, todo, 0, result)
        return result

    def _sweep_through(self, gen: int, todo: list[dict[str, Any]], result: Future, executor: Any) -> None:
        """The sweep through ``tilelang_core.autotune.tune(executor=...)`` on a thread of its own."""
        from .cell_sweep import start_sweep

        choice = getattr(executor, "name", executor)
        total = len(todo)
        measured = [0]
        self._bars = {}
        self.worker_bars.children = ()

        def on_result(m: Any) -> None:
            if m.stage == "final":  # a finalist's re-timing goes to the database (best()); the panel keeps the
                return  # checked measurement of the configuration (error, margin) on display
            self.explorer.add(m)
            measured[0] += 1
            self.progress.value = measured[0]
            with self._draw_lock:
                self._draw()

        def on_progress(ex: Any) -> None:
            self._show_workers(ex.workers, total)

        def on_done(res: Any, err: BaseException | None) -> None:
            self.sweep_result = res
            if err is not None:
                self.sweep_button.disabled, self.stop_button.disabled = False, True
                self.sweep_status.value = _span(f"sweep ({choice}): {type(err).__name__}: {err}", _BAD)
                result.set_exception(err)
                return
            self._sweep_finished(measured[0], 0, stopped=bool(res.cancelled))
            result.set_result(measured[0])

        if not todo:
            self._sweep_finished(0, 0, stopped=False)
            result.set_result(0)
            return
        self.sweep_status.value = _span(f"sweep ({choice}): {total} configuration(s) to measure", _DIM)
        try:
            start_sweep(self.wk, todo, executor=executor, db=self.explorer.db, on_result=on_result,
                        on_progress=on_progress, should_stop=lambda: gen != self._sweep_gen, on_done=on_done)
        except Exception as e:  # noqa: BLE001 - the cell or --ref cannot reach a worker: said in the panel
            self.sweep_button.disabled, self.stop_button.disabled = False, True
            self.sweep_status.value = _span(f"sweep ({choice}): {e}", _BAD)
            result.set_exception(e)

    def _show_workers(self, workers: dict[str, Any], total: int) -> None:
        """One progress bar per executor worker: its tasks done (of the sweep's configurations), red once it died."""
        for name, w in workers.items():
            bar = self._bars.get(name)
            if bar is None:
                bar = W.IntProgress(value=0, min=0, max=max(total, 1), description=name,
                                    style={"description_width": "220px"}, layout=W.Layout(width="480px"))
                bar.add_class("wb-sweep-worker")
                self._bars[name] = bar
                self.worker_bars.children = tuple(self._bars.values())
            bar.max = max(bar.max, w.done, 1)
            bar.value = w.done
            bar.bar_style = "danger" if w.lost else ("info" if w.busy else "success")
            bar.tooltip = f"{w.role}: {w.done} done" + (f", {w.lost} lost (worker died)" if w.lost else "")

    def _sweep_step(self, gen: int, todo: list[dict[str, Any]], done: int, result: Future) -> None:
        if gen != self._sweep_gen or not todo:
            self._sweep_finished(done, len(todo), stopped=gen != self._sweep_gen)
            result.set_result(done)
            return
        config, rest = todo[0], todo[1:]
        ctx = _SweepContext(self, done + 1, done + 1 + len(rest))

        def step() -> None:
            if gen == self._sweep_gen:
                try:
                    self.explorer.measure(config, ctx)
                except Exception as e:  # noqa: BLE001 - one failing step does not end the sweep
                    self.sweep_status.value = _span(f"{full_label(config, self.names)}: {type(e).__name__}: {e}",
                                                    _BAD)
                self.progress.value = done + 1
                with self._draw_lock:
                    self._draw()
            self._sweep_step(gen, rest, done + 1, result)

        self.runner.run_later(step)

    def _sweep_finished(self, done: int, left: int, stopped: bool) -> None:
        self.sweep_button.disabled, self.stop_button.disabled = False, True
        b = self.explorer.best()
        best = f"; best {result_text(b, self.names)[0]}" if b is not None else ""
        what = f"sweep stopped after {done}" if stopped else f"sweep done: {done} measured"
        self.sweep_status.value = _span(what + best, _DIM)

    def stop_sweep(self) -> None:
        """End the running sweep after the configuration being measured."""
        self._sweep_gen += 1

    # -- display ---------------------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        from .display import widget_bundle
        from .status import target_part

        target = target_part(self.wk.target).text  # "cuda (sm_90)", "cpu (skylake)": a log says where it ran
        return widget_bundle(self.widget, f"<tuning panel for {self.wk.name} on {target}: {', '.join(self.names)}>")

    def __repr__(self) -> str:
        return f"<TuningPanel {self.wk.name}: {len(self.explorer.results)} configuration(s) measured>"


class _SweepContext:
    """A sweep step's phases go to the sweep's own status; a sweep step is never stale (Stop ends the sweep)."""

    def __init__(self, panel: TuningPanel, index: int, total: int):
        self.panel, self.index, self.total = panel, index, total

    def stale(self) -> bool:
        return False

    def status(self, text: str) -> None:
        self.panel.sweep_status.value = _span(f"sweep {self.index}/{self.total}: {text}", _DIM)


__all__ = ["TuningPanel", "make_control", "result_text"]

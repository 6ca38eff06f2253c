"""The tuning panel's plots (plotly figures in ``PlotWidget``): throughput, error against the reference, roofline.

Why this module exists: the three figures are how the user reads a tuning session, and building them is separate
from the panel's wiring. Each figure has fixed, named traces whose data is replaced inside ``batch_update()`` (one
message to the browser per update). The x axis of throughput and error is the configuration (the tunable values,
``64/64/32/2/128``), so earlier sessions' measurements (from the tuning database) line up with this session's;
hovering a point shows the full configuration. The roofline draws the machine's measured compute and bandwidth
ceilings (``tilelang_core.machine.ceilings``); for kernels without a FLOP count (no ``M``, ``N``, ``K``) it shows
achieved bandwidth against the bandwidth ceiling instead.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

from .plot_widget import PlotWidget
from .tunables import full_label, short_label

ERROR_FLOOR = 1e-6  # an exact result (margin 0) is drawn here on the log axis: six decades under the limit
HEIGHT = 330
WIDTH = 460  # two figures side by side fit a JupyterLab notebook next to the file browser
_BLUE, _RED, _GREY, _GOLD, _GREEN = "#1f77b4", "#d62728", "#b0b0b0", "#f2b01e", "#2ca02c"


def hover(m: Any, names: list[str] | None = None) -> str:
    """The hover text of one measurement: every factory argument, latency with spread, rate, error, status."""
    lines = [html.escape(full_label(m.config)).replace(", ", "<br>")]
    if m.latency_ms is not None:
        spread = f" (p20 {m.p20_ms:.3f}, p80 {m.p80_ms:.3f})" if m.p20_ms is not None else ""
        lines.append(f"<b>{m.latency_ms:.4f} ms</b>{spread}")
        rate = m.rate()
        if rate is not None:
            lines.append(f"{rate:.1f} {m.unit}")
    if m.max_rel is not None:
        lines.append(f"max rel err {m.max_rel:.2e}, max abs err {m.max_abs:.2e}")
    if m.status != "ok":
        lines.append(f"<b>{html.escape(m.status)}</b>: {html.escape(m.message[:200])}")
    return "<br>".join(lines)


def _layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    # the legend sits in its own strip above the plot area, under the title: below the plot it collided with the
    # x axis title whenever the (rotated) configuration labels grew
    layout = dict(title=dict(text=title, font=dict(size=13), y=0.98, yanchor="top"), height=HEIGHT, width=WIDTH,
                  autosize=False, margin=dict(l=55, r=10, t=62, b=90),
                  xaxis=dict(title=dict(text=xtitle, font=dict(size=11)), automargin=True),
                  yaxis=dict(title=ytitle, automargin=True),
                  hovermode="closest", showlegend=True,
                  legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom", font=dict(size=10)),
                  template="plotly_white")
    layout.update(extra)
    return layout


def log_range(values: Iterable[float], pad: float = 0.15) -> list[float] | None:
    """A log axis range (log10 units) from the power of ten at or below the smallest of ``values`` to the one at or
    above the largest, at least one decade (so ``dtick=1`` labels two ticks at least); None without positive values."""
    logs = [math.log10(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not logs:
        return None
    lo = math.floor(min(logs) + 1e-9)
    hi = max(math.ceil(max(logs) - 1e-9), lo + 1)
    return [lo - pad, hi + pad]


# log axes label powers of ten only: plotly's default labels minor ticks "2" and "5" in every decade, which repeat
# along a roofline's axes (0.01 ... 1000) and read as garbage
LOG_AXIS = dict(type="log", dtick=1, exponentformat="power", minor=dict(ticks="inside", showgrid=False))


def _points(ms: Iterable[Any], names: list[str], y: Any, note: Any = None) -> dict[str, list[Any]]:
    xs, ys, texts, colors = [], [], [], []
    for m in ms:
        value = y(m)
        if value is None:
            continue
        xs.append(short_label(m.config, names))
        ys.append(value)
        texts.append(hover(m, names) + (note(m) if note is not None else ""))
        colors.append(_BLUE if m.ok else _RED)
    return {"x": xs, "y": ys, "hovertext": texts, "colors": colors}


MARGIN_CAP = 1e6  # an infinite or NaN margin is drawn at the top of the axis


def _margin_of(margin: Any) -> Any:
    """y of the error plot: the worst element's share of ``atol + rtol*|b|`` (<= 1 passes), where known."""
    def y(m: Any) -> float | None:
        value = margin(m) if margin is not None else None
        if value is None:
            return None
        if math.isnan(value) or math.isinf(value):
            return MARGIN_CAP
        return max(value, ERROR_FLOOR)

    return y


class TuningPlots:
    """The three figures; :meth:`update` redraws them from the measurements."""

    def __init__(self, names: list[str], unit: str):
        self.names = names
        self.unit = unit
        cfg = f"config ({'/'.join(names)})"

        def scatter(name: str, **kw: Any) -> go.Scatter:
            return go.Scatter(x=[], y=[], name=name, hoverinfo="text", **kw)

        self.throughput = PlotWidget(
            data=[scatter("earlier sessions", mode="markers", marker=dict(color=_GREY, size=7)),
                  scatter("this session", mode="markers", marker=dict(color=_BLUE, size=9)),
                  scatter("best", mode="markers", marker=dict(symbol="star", color=_GOLD, size=16,
                                                              line=dict(color="black", width=1))),
                  scatter("current", mode="markers", marker=dict(symbol="circle-open", color="black", size=18,
                                                                 line=dict(width=2)))],
            layout=_layout(f"throughput ({unit})", cfg, unit, xaxis_type="category"))
        self.error = PlotWidget(
            data=[scatter("earlier sessions", mode="markers", marker=dict(color=_GREY, size=7)),
                  scatter("this session", mode="markers", marker=dict(color=_BLUE, size=9)),
                  scatter("current", mode="markers", marker=dict(symbol="circle-open", color="black", size=18,
                                                                 line=dict(width=2)))],
            layout=_layout("error / allowance (|a-b| \u2264 atol + rtol\u00b7|b|)", cfg,
                           "worst |a-b| / (atol + rtol\u00b7|b|)", xaxis_type="category",
                           yaxis=dict(title="worst |a-b| / (atol+rtol\u00b7|b|)", automargin=True, **LOG_AXIS)))
        roof_x = "arithmetic intensity (FLOP/byte)" if unit == "GFLOP/s" else cfg
        self.roofline = PlotWidget(
            data=[go.Scatter(x=[], y=[], name="ceilings", mode="lines", hoverinfo="text",
                             line=dict(color="black", width=2)),
                  scatter("this session", mode="markers", marker=dict(color=_BLUE, size=9)),
                  scatter("best", mode="markers", marker=dict(symbol="star", color=_GOLD, size=16,
                                                              line=dict(color="black", width=1))),
                  scatter("current", mode="markers", marker=dict(symbol="circle-open", color="black", size=18,
                                                                 line=dict(width=2)))],
            layout=_layout("roofline" if unit == "GFLOP/s" else "bandwidth vs ceiling", roof_x, unit,
                           **({"xaxis": dict(title=dict(text=roof_x, font=dict(size=11)), automargin=True,
                                             **LOG_AXIS),
                               "yaxis": dict(title=unit, automargin=True, **LOG_AXIS)} if unit == "GFLOP/s"
                              else {"xaxis_type": "category"})))
        self.figures = [self.throughput, self.error, self.roofline]

    # -- drawing ---------------------------------------------------------------------------------------------
    def update(self, session: list[Any], history: list[Any], current: Any, best: Any, ref_ms: float | None,
               rtol: float | None, ceilings: Any, margin: Any = None) -> None:
        """Redraw every figure (each in one ``batch_update``). ``margin(m)``: a measurement's worst element's share
        of its tolerance (None where unknown, e.g. earlier sessions'); the error plot draws it against 1, the
        line the criterion ``|a-b| <= atol + rtol*|b|`` actually draws."""
        names = self.names
        rate = _rate_of(self.unit)
        hist = _points(history, names, rate)
        mine = _points(session, names, rate)
        with self.throughput.batch_update():
            d = self.throughput.data
            _set(d[0], hist)
            _set(d[1], mine, colors=True)
            _set(d[2], _points([best] if best is not None else [], names, rate))
            _set(d[3], _points([current] if current is not None else [], names, rate))
            ref_rate = _ref_rate(session, ref_ms, self.unit)
            _hline(self.throughput, ref_rate, f"reference {ref_rate:.1f} {self.unit}" if ref_rate else "", _GREEN)
        with self.error.batch_update():
            d = self.error.data
            y = _margin_of(margin)

            def note(m: Any) -> str:
                value = margin(m) if margin is not None else None
                return "" if value is None else f"<br>worst element at {value:.3g}x of atol + rtol\u00b7|b|"

            _set(d[0], _points(history, names, y, note))
            _set(d[1], _points(session, names, y, note), colors=True)
            _set(d[2], _points([current] if current is not None else [], names, y, note))
            _hline(self.error, 1.0, "limit: pass \u2264 1", _RED, log=True)
            self.error.layout.yaxis.range = log_range([v for t in d for v in (t.y or ())] + [1.0])
        self._roofline(session, current, best, ceilings)
        self.sync_state()

    def sync_state(self) -> None:
        """Send every figure's current state to the browser (edits made inside ``batch_update`` are sent already;
        an unchanged figure sends nothing)."""
        for fig in self.figures:
            fig.push()

    def _roofline(self, session: list[Any], current: Any, best: Any, ceilings: Any) -> None:
        names = self.names
        with self.roofline.batch_update():
            d = self.roofline.data
            if self.unit == "GFLOP/s":
                def at(m: Any) -> tuple[float, float] | None:
                    return (m.intensity, m.gflops) if m.intensity and m.gflops else None

                for trace, ms in ((d[1], session), (d[2], [best] if best else []),
                                  (d[3], [current] if current else [])):
                    pts = [(at(m), m) for m in ms if at(m) is not None]
                    trace.x = [p[0][0] for p in pts]
                    trace.y = [p[0][1] for p in pts]
                    trace.hovertext = [hover(m, names) for _, m in pts]
                    if trace is d[1]:
                        trace.marker.color = [_BLUE if m.ok else _RED for _, m in pts]
                if ceilings is not None:
                    xs = [0.01, ceilings.ridge, 1000.0]
                    d[0].x = xs
                    d[0].y = [ceilings.attainable(x) for x in xs]
                    label = (f"{html.escape(ceilings.device)}<br>peak {ceilings.peak_gflops:.0f} GFLOP/s, "
                             f"bandwidth {ceilings.bandwidth_gbs:.1f} GB/s")
                    d[0].hovertext = [label] * len(xs)
                self.roofline.layout.xaxis.range = log_range([v for t in d for v in (t.x or ())])
                self.roofline.layout.yaxis.range = log_range([v for t in d for v in (t.y or ())])
            else:
                gbs = _points(session, names, lambda m: m.bytes / (m.latency_ms * 1e-3) / 1e9
                              if m.latency_ms and m.bytes else None)
                _set(d[1], gbs, colors=True)
                _set(d[2], _points([best] if best else [], names, lambda m: m.rate()))
                _set(d[3], _points([current] if current else [], names, lambda m: m.rate()))
                bw = ceilings.bandwidth_gbs if ceilings is not None else None
                _hline(self.roofline, bw, f"bandwidth ceiling {bw:.1f} GB/s ({ceilings.device})" if bw else "",
                       "black")

    def point_count(self) -> int:
        """Points of this session on the throughput plot (tests and the browser test read it)."""
        return len(self.throughput.data[1].x or ())


def _rate_of(unit: str) -> Any:
    def rate(m: Any) -> float | None:
        return m.rate() if m.latency_ms else None

    return rate


def _ref_rate(session: list[Any], ref_ms: float | None, unit: str) -> float | None:
    if not ref_ms or not session:
        return None
    m = session[0]
    work = m.flops if unit == "GFLOP/s" else m.bytes
    return work / (ref_ms * 1e-3) / 1e9 if work else None


def _hline(fig: Any, y: float | None, text: str, color: str, log: bool = False) -> None:
    """A dashed horizontal line across the plot at ``y`` (a reference, a tolerance, a ceiling), labelled."""
    if y is None:
        fig.layout.shapes, fig.layout.annotations = (), ()
        return
    fig.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y,
                              line=dict(color=color, dash="dash", width=2))]
    fig.layout.annotations = [dict(xref="paper", x=1, xanchor="right", yref="y", y=math.log10(y) if log else y,
                                   yanchor="bottom", text=html.escape(text), showarrow=False,
                                   font=dict(size=10, color=color))]


def _set(trace: Any, pts: dict[str, list[Any]], colors: bool = False) -> None:
    trace.x, trace.y, trace.hovertext = pts["x"], pts["y"], pts["hovertext"]
    if colors:
        trace.marker.color = pts["colors"]


__all__ = ["TuningPlots", "hover", "ERROR_FLOOR"]

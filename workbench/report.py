"""A shareable report of a tuning session: one self-contained HTML file.

Why this module exists: a tuning session's result is worth sending to a colleague or attaching to a pull request —
which configurations were tried, how fast each was and how noisy that timing was, what resources it used, the
plots, and the winning kernel's source, IR and generated code. ``export_report(wk, path)`` writes all of it into
one ``.html`` file that opens anywhere without a network or a Jupyter server: plotly's JavaScript is inlined
(``include_plotlyjs=True``), code is highlighted with inline styles, and nothing is fetched.

The measurements are the tuning panel's for this session (``wk.last_panel``) and, with ``history=True`` (the
default), the tuning database's for the same kernel source, shapes and target. The best is the fastest
measurement that passed its check.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path
from typing import Any

from . import ir
from .highlight import code_html
from .resources import row as resource_row

_CSS = """
body {font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 24px; color: #222;}
h1 {font-size: 20px;} h2 {font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd;}
table.wb-report {border-collapse: collapse; font-family: monospace; font-size: 12px;}
table.wb-report th, table.wb-report td {border-bottom: 1px solid #eee; padding: 2px 8px; text-align: right;}
table.wb-report th:first-child, table.wb-report td:first-child {text-align: left;}
tr.best {background: #fff6d0; font-weight: bold;} tr.failed {color: #b00;}
.noisy {color: #a60;} .meta {color: #666; font-size: 12px;}
"""
NOISY_SPREAD = 0.10  # (p80 - p20) / median above this: the timing is flagged as noisy


def measurements_of(wk: Any, history: bool = True, db: Any = True) -> list[Any]:
    """This session's panel measurements, then (``history``) the tuning database's for the same kernel source,
    shapes and target that the session does not have (compile errors included: they are part of the story)."""
    panel = getattr(wk, "last_panel", None)
    mine = list(panel.explorer.measurements()) if panel is not None else []
    if not history or db is None or db is False or getattr(wk.program, "function", None) is None:
        return mine
    try:
        from tilelang_core.autotune import TuningDB, kernel_identity
        from tilelang_core.machine import target_kind

        handle = TuningDB() if db is True else db
        name, _module, digest = kernel_identity(wk.program.function, wk.name)
        rows = handle.query(name, source_hash=digest, shapes=[list(p.shape) for p in wk.params],
                            target=target_kind(wk.kernel.target), device=None)
    except Exception:  # noqa: BLE001 - an unreadable database leaves the session's measurements
        rows = []
    ids = {m.id for m in mine if m.id is not None}
    uids = {getattr(m, "uid", None) for m in mine}
    return mine + [m for m in rows if m.id not in ids and getattr(m, "uid", None) not in uids]


def best_of(ms: list[Any]) -> Any:
    good = [m for m in ms if m.ok]
    return min(good, key=lambda m: m.latency_ms) if good else None


def _spread(m: Any) -> tuple[str, bool]:
    if m.latency_ms is None or m.p20_ms is None or m.p80_ms is None:
        return "-", False
    rel = (m.p80_ms - m.p20_ms) / m.latency_ms if m.latency_ms else 0.0
    return f"{m.p20_ms:.4f} / {m.p80_ms:.4f} ({rel:.0%})", rel > NOISY_SPREAD


def table_html(ms: list[Any], names: list[str], best: Any) -> str:
    """Every measurement: configuration, status, median with p20/p80 spread (noisy ones flagged), min, runs,
    rate, error, and the CUDA resources where known."""
    res_cols = [("registers", "regs"), ("spills", "spills B"), ("smem_kb", "smem KB"), ("occupancy", "occ")]
    head = ["configuration (" + "/".join(names) + ")", "status", "median ms", "p20 / p80 ms (spread)", "min ms",
            "runs", "rate", "max rel err", *[t for _, t in res_cols], "compile s", "when"]
    rows = []
    for m in sorted(ms, key=lambda m: (m.latency_ms is None, m.latency_ms or 0.0)):
        spread, noisy = _spread(m)
        r = resource_row(getattr(m, "resources", None) or {})
        rate = m.rate()
        cls = "best" if m is best else ("failed" if not m.ok else "")
        cells = [", ".join(f"{k}={m.config.get(k)}" for k in names) or ir.config_label(m.config), m.status,
                 f"{m.latency_ms:.4f}" if m.latency_ms is not None else "-",
                 f'<span class="{"noisy" if noisy else ""}">{html.escape(spread)}{" noisy" if noisy else ""}'
                 "</span>",
                 f"{m.min_ms:.4f}" if m.min_ms is not None else "-", str(m.runs or "-"),
                 f"{rate:.1f} {m.unit}" if rate else "-", f"{m.max_rel:.1e}" if m.max_rel is not None else "-",
                 *[str(r.get(k, "-")) for k, _ in res_cols],
                 f"{m.compile_s:.2f}" if m.compile_s is not None else "-",
                 _dt.datetime.fromtimestamp(m.timestamp).strftime("%Y-%m-%d %H:%M")]
        rows.append(f'<tr class="wb-report-row {cls}">' + "".join(
            f"<td>{c if c.startswith('<span') else html.escape(c)}</td>" for c in cells) + "</tr>")
    return ('<table class="wb-report"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")


def figures(ms: list[Any], names: list[str], best: Any) -> list[Any]:
    """Throughput per configuration (p20-p80 as error bars, the best starred) and error against the reference."""
    import plotly.graph_objects as go

    from .tunables import short_label

    timed = [m for m in ms if m.latency_ms is not None and m.rate() is not None]
    unit = timed[0].unit if timed else "GFLOP/s"
    xs = [short_label(m.config, names) for m in timed]
    rates = [m.rate() for m in timed]
    lo = [r - (m.rate(m.p80_ms) or r) if m.p80_ms else 0 for m, r in zip(timed, rates)]
    hi = [(m.rate(m.p20_ms) or r) - r if m.p20_ms else 0 for m, r in zip(timed, rates)]
    thr = go.Figure([go.Scatter(x=xs, y=rates, mode="markers", name="measured",
                                marker=dict(color=["#1f77b4" if m.ok else "#d62728" for m in timed], size=9),
                                error_y=dict(type="data", array=hi, arrayminus=lo, visible=True),
                                hovertext=[m.describe(names) for m in timed], hoverinfo="text")])
    if best is not None and best in timed:
        thr.add_trace(go.Scatter(x=[short_label(best.config, names)], y=[best.rate()], mode="markers", name="best",
                                 marker=dict(symbol="star", size=16, color="#f2b01e",
                                             line=dict(color="black", width=1))))
    thr.update_layout(title=f"throughput ({unit}), bars: p20-p80", xaxis_title="/".join(names), yaxis_title=unit,
                      xaxis_type="category", template="plotly_white", height=380, width=820)
    checked = [m for m in ms if m.max_rel is not None]
    err = go.Figure([go.Scatter(x=[short_label(m.config, names) for m in checked],
                                y=[max(m.max_rel, 1e-10) for m in checked], mode="markers", name="max rel err",
                                marker=dict(color=["#1f77b4" if m.passed else "#d62728" for m in checked]))])
    err.update_layout(title="max relative error vs reference", yaxis_type="log", xaxis_type="category",
                      template="plotly_white", height=320, width=820)
    return [thr, err]


def _best_code(wk: Any, best: Any) -> tuple[Any, list[tuple[str, str, str]]]:
    """The best configuration's kernel (a variant of the cell) and its texts: (title, language, text)."""
    import inspect

    kernel_wk = wk
    if best is not None and getattr(wk.program, "function", None) is not None:
        params = inspect.signature(wk.program.function).parameters
        overrides = {k: v for k, v in best.config.items() if k in params and wk.config.get(k) != v}
        if overrides:
            kernel_wk = wk.variant(**overrides)
    k = kernel_wk.kernel
    texts = [("kernel source (the cell)", "python", wk.source)]
    try:
        texts.append((f"IR after the last stage ({k.trace.last.name})", "tvmscript", k.trace.last.text))
    except Exception:  # noqa: BLE001 - no trace (e.g. loaded from an artifact): the lowered TIR stands in
        if "tir" in k.source_kinds:
            texts.append(("lowered TIR", "tvmscript", k.get_kernel_source("tir")))
    main = "cuda" if k.target.get("kind") == "cuda" else "llvm"
    texts.append(({"cuda": "CUDA C", "llvm": "LLVM IR"}[main], main, k.get_kernel_source(main)))
    return kernel_wk, texts


def report_html(wk: Any, ms: list[Any] | None = None, title: str | None = None) -> str:
    """The report as one HTML document (plotly inlined)."""
    import plotly.io as pio

    names = list(getattr(getattr(wk, "last_panel", None), "names", None) or [])
    ms = measurements_of(wk) if ms is None else list(ms)
    if not names:
        from tilelang_core.autotune.space import is_block_param

        names = [k for k in (ms[0].config if ms else wk.config) if is_block_param(k) or k in ("num_stages",
                                                                                           "threads")]
    best = best_of(ms)
    kernel_wk, texts = _best_code(wk, best)
    figs = figures(ms, names, best)
    plots = "".join(pio.to_html(f, include_plotlyjs=(i == 0), full_html=False, div_id=f"wb-report-plot-{i}")
                    for i, f in enumerate(figs))
    k = kernel_wk.kernel
    target = k.target.get("arch") or k.target.get("mcpu") or k.target.get("kind")
    shapes = ", ".join(f"{p.name}: {p.dtype}[{', '.join(str(d) for d in p.shape)}]" for p in wk.params)
    best_line = (html.escape(best.describe(names)) if best is not None else "no configuration passed")
    res = ""
    from .resources import summary_line

    line = summary_line(k)
    if line:
        res = f"<p class='meta'>{html.escape(line)}</p>"
    code = "".join(f"<h3>{html.escape(t)}</h3>" + code_html(text, lang, max_lines=4000, height="480px")
                   for t, lang, text in texts)
    title = title or f"{wk.name}: tuning report"
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    ref = html.escape(wk.options.ref or "(no reference: not checked)")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p class='meta'>target {html.escape(str(target))} · {html.escape(shapes)} · reference {ref} · "
            f"{len(ms)} measurement(s) · written {stamp}</p>"
            f"<h2>Best</h2><p class='wb-report-best'>{best_line}</p>{res}"
            f"<h2>Plots</h2>{plots}<h2>Configurations</h2>{table_html(ms, names, best)}"
            f"<p class='meta'>spread = (p80 - p20) / median; over {NOISY_SPREAD:.0%} is flagged noisy</p>"
            f"<h2>The best kernel</h2>{code}</body></html>")


def export_report(wk: Any, path: str | Path, ms: list[Any] | None = None, title: str | None = None) -> Path:
    """Write :func:`report_html` to ``path`` (``.html`` added when missing); returns the path."""
    if not isinstance(path, (str, Path)) or not str(path):
        raise ValueError(f"export_report: path must be a file name (str or Path), got {path!r}")
    p = Path(path)
    if p.suffix.lower() not in (".html", ".htm"):
        p = p.with_suffix(p.suffix + ".html")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(report_html(wk, ms, title), encoding="utf-8")
    return p


__all__ = ["export_report", "report_html", "measurements_of", "best_of", "table_html", "figures"]

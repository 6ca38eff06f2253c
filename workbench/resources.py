"""Registers, spills, shared memory and occupancy per configuration, as the summary, the panel and the plots show
them.

Why this module exists: a CUDA configuration's resources decide much of its speed (a spilling kernel, or one that
fits one block per SM, is rarely the fastest), so the workbench puts them next to every timing: a line in the
``%%tilekernel`` summary, a table of the configurations measured in the tuning panel, and the colour of the
throughput plot's points (registers per thread). The numbers come from the core's public API,
``JITKernel.resources()`` (the cubin and ptxas's report), and a measurement keeps them in its ``resources``
record, so earlier sessions' rows from the tuning database have them too. A CPU kernel has none: every function
here then returns nothing and the views stay as they were.
"""

from __future__ import annotations

import html
from typing import Any

from .tunables import short_label

COLUMNS = (("registers", "regs"), ("spills", "spills (B)"), ("smem_kb", "smem (KB)"), ("local", "local (B)"),
           ("blocks_per_sm", "blocks/SM"), ("warps_per_sm", "warps/SM"), ("occupancy", "occupancy"),
           ("limiter", "limited by"))
COLORSCALE = "Viridis"


def kernel_resources(kernel: Any) -> Any:
    """``kernel.resources()`` (a ``KernelResources``), or None for a CPU kernel or where they cannot be read."""
    read = getattr(kernel, "resources", None)
    if not callable(read):
        return None
    try:
        return read()
    except Exception:  # noqa: BLE001 - resources are extra facts; a summary without them is still a summary
        return None


def summary_line(kernel: Any) -> str | None:
    """``resources: 108 regs, no spills, 25.0 KB smem (...); occupancy 4 block(s) = 16/64 warps (25%), limited
    by registers`` and any ptxas performance warning; None without resources."""
    r = kernel_resources(kernel)
    if r is None:
        return None
    line = f"resources: {r.summary()}"
    for w in r.warnings:
        line += f"\n    ptxas: {w}"
    return line


def row(record: dict[str, Any]) -> dict[str, Any]:
    """One table row from a measurement's ``resources`` record (``KernelResources.to_dict()``)."""
    if not record:
        return {}
    smem = int(record.get("static_smem", 0)) + int(record.get("dynamic_smem", 0))
    return {"registers": record.get("registers"),
            "spills": int(record.get("spill_stores", 0)) + int(record.get("spill_loads", 0)),
            "smem_kb": round(smem / 1024, 1), "local": record.get("local", 0),
            "blocks_per_sm": record.get("blocks_per_sm"), "warps_per_sm": record.get("warps_per_sm"),
            "occupancy": f"{float(record.get('occupancy', 0)):.0%}", "limiter": record.get("limiter", "")}


def has_resources(measurements: list[Any]) -> bool:
    return any(getattr(m, "resources", None) for m in measurements)


def table_html(measurements: list[Any], names: list[str], best: Any = None, current: Any = None) -> str:
    """The panel's resources table: one row per configuration (its tunable values), latency, then the resource
    columns; spilling rows in red, the best starred, the current one bold. '' when no measurement has
    resources (a CPU kernel)."""
    if not has_resources(measurements):
        return ""
    head = "".join(f"<th style='padding:1px 6px;text-align:right;'>{html.escape(t)}</th>" for _, t in COLUMNS)
    body = []
    for m in measurements:
        r = row(getattr(m, "resources", None) or {})
        if not r:
            continue
        mark = " &#9733;" if best is not None and m is best else ""
        weight = "font-weight:bold;" if current is not None and m is current else ""
        color = "color:#b00;" if r["spills"] else ""
        lat = f"{m.latency_ms:.3f}" if m.latency_ms is not None else "-"
        cells = "".join(f"<td style='padding:1px 6px;text-align:right;'>{html.escape(str(r[k]))}</td>"
                        for k, _ in COLUMNS)
        body.append(f"<tr class='wb-res-row' style='{weight}{color}'><td style='padding:1px 6px;'>"
                    f"{html.escape(short_label(m.config, names))}{mark}</td>"
                    f"<td style='padding:1px 6px;text-align:right;'>{lat}</td>{cells}</tr>")
    # its own scroll box (never clipped on a narrow page), the tunables' header breakable at each '/', and the
    # table's own line height (a widget's HTML inherits a widget row's 28 px)
    names_head = "/<wbr>".join(html.escape(n) for n in names)
    return ("<div class='wb-resources-box' style='max-width:100%;overflow-x:auto;'>"
            "<table class='wb-resources' style='font-family:monospace;font-size:11px;line-height:1.35;"
            "border-collapse:collapse;'>"
            f"<tr><th style='padding:1px 6px;text-align:left;'>{names_head}</th>"
            f"<th style='padding:1px 6px;text-align:right;'>ms</th>{head}</tr>" + "".join(body) + "</table></div>")


def color_points(trace: Any, measurements: list[Any], by: str = "registers") -> bool:
    """Colour a plot trace's points (one per measurement, in order) by a resource (default registers per thread)
    on a colour scale with a colour bar; a failed configuration keeps a red outline. False (nothing changed) when
    no measurement has resources."""
    if not has_resources(measurements):
        return False
    values = [(getattr(m, "resources", None) or {}).get(by) for m in measurements if _plotted(m)]
    if not any(v is not None for v in values):
        return False
    title = {"registers": "regs/thread", "blocks_per_sm": "blocks/SM"}.get(by, by)
    trace.marker.color = [v if v is not None else 0 for v in values]
    trace.marker.colorscale = COLORSCALE
    trace.marker.showscale = True
    trace.marker.colorbar = dict(title=dict(text=title, side="right"), thickness=10, len=0.8)
    trace.marker.line = dict(color=["#d62728" if not m.ok else "rgba(0,0,0,0)" for m in measurements
                                    if _plotted(m)], width=2)
    return True


def _plotted(m: Any) -> bool:
    """Whether the throughput plot has a point for ``m`` (it has a rate)."""
    return bool(m.latency_ms) and m.rate() is not None


__all__ = ["kernel_resources", "summary_line", "row", "table_html", "color_points", "has_resources", "COLUMNS"]

"""Timing the tuning panel as a user drives it: one slider move to the result on screen, and the spread of many.

Shared by bench/interactivity.py (the CPU latency benchmark) and bench/gpu/notebooks.py (the same on the GPU host),
so both measure a slider move the same way.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any


def stats(xs: list[float]) -> dict[str, float]:
    """Median, 20th/80th percentiles, min, max and count of ``xs`` (``{"n": 0}`` when empty)."""
    s = sorted(xs)
    if not s:
        return {"n": 0}
    return {"median": statistics.median(s), "p20": s[int(0.2 * (len(s) - 1))], "p80": s[int(0.8 * (len(s) - 1))],
            "min": s[0], "max": s[-1], "n": len(s)}


def timed_move(panel: Any, name: str, value: Any, timeout: float = 300) -> tuple[float, Any]:
    """Set one slider as a user does; seconds until the panel has displayed the result for the new setting, and
    that result."""
    done = threading.Event()
    real = panel._show

    def show(m: Any, cached: bool) -> None:
        real(m, cached)
        if m.config.get(name) == value:
            done.set()

    panel._show = show
    t0 = time.perf_counter()
    try:
        panel.controls[name].value = value
        if not done.wait(timeout):
            raise TimeoutError(f"{name}={value}: no result after {timeout:.0f} s")
        seconds = time.perf_counter() - t0
    finally:
        panel._show = real
    panel.wait(timeout)
    return seconds, panel.last_shown

"""The one-line status of a workbench kernel, as parts that text and HTML views format their own way.

Why this module exists: the terminal summary, the widget header and ``repr()`` all say the same thing — target,
compile time or "cached", error against the reference with pass/fail, kernel and reference time, their ratio and
the achieved rate — and must never disagree, so the wording is decided once here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, BAD, INFO = "ok", "bad", "info"


@dataclass(frozen=True)
class Part:
    """One piece of the status line; ``tone`` is ``ok``, ``bad`` or ``info``."""

    text: str
    tone: str = INFO


def _seconds(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _ms(ms: float) -> str:
    ms = float(ms)
    return f"{ms * 1e3:.1f} us" if ms < 0.1 else f"{ms:.3f} ms"


def target_part(target: dict[str, Any]) -> Part:
    kind = target.get("kind", "?")
    if kind == "llvm":
        return Part(f"cpu ({target.get('mcpu', 'host')})")
    return Part(f"{kind} ({target.get('arch', '')})" if target.get("arch") else str(kind))


def compile_part(wk: Any) -> Part:
    b = wk.build
    if b.status == "cached":
        return Part(f"cached ({_seconds(b.seconds)}; compiled in {_seconds(b.compile_seconds)})", OK)
    if b.status == "disk":
        return Part(f"from disk cache ({_seconds(b.seconds)})", OK)
    return Part(f"compiled in {_seconds(b.seconds)}")


def check_part(wk: Any) -> Part:
    c = wk.check
    if getattr(wk, "not_run", None):
        return Part(f"not run ({wk.not_run})")
    if c is None:
        return Part("not checked (no --ref)")
    verdict = "PASS" if c.passed else "FAIL"
    text = (f"max abs err {c.max_abs:.2e}, max rel err {c.max_rel:.2e} vs {c.reference}: {verdict} "
            f"({criterion_text(c.rtol, c.atol, c.margin)})")
    if not c.passed:
        bad = sum(o.mismatched for o in c.outputs)
        total = sum(o.total for o in c.outputs)
        text += f", {bad} of {total} elements out of tolerance"
    return Part(text, OK if c.passed else BAD)


def criterion_text(rtol: float, atol: float, margin: float | None = None) -> str:
    """The check actually applied, element by element, and how much of it the worst element uses: a max abs error
    above atol can pass, since ``rtol * |b|`` adds to each element's allowance."""
    text = f"|a-b| \u2264 atol + rtol\u00b7|b|, rtol {rtol:g}, atol {atol:g}"
    if margin is not None:
        text += f"; worst element at {margin_text(margin)} of its allowance"
    return text


def margin_text(margin: float) -> str:
    if margin != margin:  # NaN
        return "nan"
    return "inf" if margin == float("inf") else f"{margin:.2f}x"


def spread_warning(median: Any, p20: Any, p80: Any) -> str | None:
    """A warning when the runs' p20-p80 spread is large against the median (the machine was busy), else None."""
    from .check import SPREAD_WARN, relative_spread

    spread = relative_spread(median, p20, p80)
    if spread is None or spread <= SPREAD_WARN:
        return None
    return (f"noisy timing: p20-p80 spread {spread:.0%} of the median (p20 {_ms(p20)}, p80 {_ms(p80)}); the "
            "machine may be busy, time again")


def timing_parts(wk: Any) -> list[Part]:
    t = wk.timing
    if getattr(wk, "not_run", None):
        return []
    if t is None:
        if wk.check is not None and not wk.check.passed:
            return [Part("not timed (the check failed)")]
        if not getattr(getattr(wk, "options", None), "bench", True):
            return [Part("not timed (--no-bench)")]
        return [Part("not timed")]
    parts = []
    rate = t.rate(float(t.kernel_ms))
    parts.append(Part(f"kernel {_ms(t.kernel_ms)}" + (f" ({rate[0]:.1f} {rate[1]})" if rate else "")))
    noisy = spread_warning(t.kernel_ms, getattr(t.kernel_ms, "p20_ms", None), getattr(t.kernel_ms, "p80_ms", None))
    if noisy:
        parts.append(Part(noisy, BAD))
    if t.ref_ms is not None:
        rrate = t.rate(float(t.ref_ms))
        parts.append(Part(f"reference {_ms(t.ref_ms)}" + (f" ({rrate[0]:.1f} {rrate[1]})" if rrate else "")))
        sp = t.speedup
        if sp is not None:
            parts.append(Part(f"{sp:.2f}x the reference's speed", OK if sp >= 1 else INFO))
    return parts


def status_parts(wk: Any) -> list[Part]:
    """Target, compile, check, timings — in that order."""
    return [target_part(wk.target), compile_part(wk), check_part(wk), *timing_parts(wk)]

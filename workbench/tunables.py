"""The tuning panel's knobs: which factory arguments get a slider, over which values.

Why this module exists: the panel builds its controls from the factory's signature, the shapes and the user's
``--tune`` overrides, and that decision is plain data that tests can check without widgets. Sensible values come
from tilelang_core's own search-space rules (``tilelang_core.autotune.default_space``: powers of two for tile
sizes bounded by the shapes, 1-5 stages, 32-512 threads); ``--tune block_M=32,64,128 num_stages=1:4`` replaces or
adds axes. An axis that is a contiguous integer range becomes an ``IntSlider``, anything else a
``SelectionSlider``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError


@dataclass(frozen=True)
class Tunable:
    """One knob: its factory argument, the values offered, and the starting value."""

    name: str
    values: tuple[Any, ...]
    value: Any

    @property
    def contiguous(self) -> bool:
        """Consecutive integers (an ``IntSlider`` suits them)."""
        v = self.values
        return (len(v) > 1 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                and list(v) == list(range(v[0], v[-1] + 1)))


def parse_tune(tokens: Any) -> dict[str, list[Any]]:
    """``--tune block_M=32,64,128 num_stages=1:4`` (tokens or one string) -> axes; ``UsageError`` when unreadable."""
    from tilelang_core.autotune import parse_space

    if not tokens:
        return {}
    try:
        return parse_space(tokens)
    except ValueError as e:
        raise UsageError(f"--tune: {e}") from None


def tunables(function: Any, kwargs: dict[str, Any], overrides: dict[str, list[Any]] | None = None) -> list[Tunable]:
    """The knobs for ``function`` called with ``kwargs``: tile sizes, stages, threads, plus ``overrides``' axes."""
    from tilelang_core.autotune import default_space

    params = inspect.signature(function).parameters
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in params]
    if unknown:
        raise UsageError(f"--tune: the factory {function.__name__} has no parameter(s) {', '.join(unknown)}; "
                         f"it takes {', '.join(params)}")
    space = default_space(function, kwargs)
    space.update(overrides)
    current = {n: p.default for n, p in params.items() if p.default is not p.empty}
    current.update(kwargs)
    out = []
    for name in params:  # the factory's order
        if name not in space:
            continue
        values = list(dict.fromkeys(space[name]))
        value = current.get(name, values[0])
        if value not in values:
            if name in overrides:  # the user's list wins; start on its first value
                value = values[0]
            else:
                values.append(value)
        if len(values) < 2 and name not in overrides:
            continue  # nothing to choose
        try:
            values.sort()
        except TypeError:
            pass
        out.append(Tunable(name, tuple(values), value))
    return out


def short_label(config: dict[str, Any], names: list[str]) -> str:
    """``64/64/32/2/128``: the tunable values in knob order (the plots' x categories)."""
    return "/".join(str(config.get(n)) for n in names)


def full_label(config: dict[str, Any], names: list[str] | None = None) -> str:
    """``block_M=64, block_N=64, ...`` over ``names`` (default: every key)."""
    keys = names if names is not None else list(config)
    return ", ".join(f"{k}={config[k]}" for k in keys if k in config)


__all__ = ["Tunable", "tunables", "parse_tune", "short_label", "full_label"]

"""Search spaces: which factory arguments are tunable, which values make sense, and grids over them.

Why this module exists: both the tuner and the workbench's panel need the same answer to "what can I try for this
factory at these shapes?". Tile sizes are powers of two bounded by the dimension they tile (``block_M`` by ``M``),
pipeline stages run 1-5, thread counts 32-512; everything else is fixed unless named. A space can also be written
as text, ``"block_M=32,64,128 num_stages=1:4"`` (lists, or inclusive ``lo:hi[:step]`` ranges), and expanded into
the list of configurations (:func:`grid`).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from collections.abc import Iterable
from typing import Any

MAX_BLOCK = 256  # larger tiles are rarely useful on a CPU and overflow a GPU's shared memory
MIN_BLOCK = 16
STAGES = (1, 5)
THREADS = (32, 64, 128, 256, 512)
_TOKEN = re.compile(r"([A-Za-z_]\w*)\s*=\s*([^\s=]+)")


def is_block_param(name: str) -> bool:
    """``block_M``, ``BLOCK_SIZE``, ``tile_n``, ``blk_k``: a tile size."""
    low = name.lower()
    return low.startswith(("block", "tile", "blk")) and "thread" not in low and "stage" not in low


def is_stage_param(name: str) -> bool:
    return "stage" in name.lower()


def is_thread_param(name: str) -> bool:
    return name.lower() in ("threads", "num_threads", "block_threads", "nthreads")


def is_tunable(name: str) -> bool:
    """Whether the name marks a tuning knob (tile size, pipeline stages, threads) rather than a problem size."""
    return is_block_param(name) or is_stage_param(name) or is_thread_param(name)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _block_bound(name: str, args: dict[str, Any]) -> int | None:
    """The dimension a tile size tiles: ``block_M`` -> ``M`` (any case); else the largest integer argument."""
    suffix = re.split(r"[_]", name)[-1] if "_" in name else ""
    for key, value in args.items():
        if suffix and key.lower() == suffix.lower() and _int(value):
            return int(value)
    dims = [int(v) for k, v in args.items() if _int(v) and not is_tunable(k)]
    return max(dims) if dims else None


def powers_of_two(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def suggest(name: str, value: int, args: dict[str, Any]) -> list[int]:
    """Sensible values for one tunable argument currently at ``value`` (always included)."""
    if is_stage_param(name):
        values = list(range(min(STAGES[0], value), max(STAGES[1], value) + 1))
    elif is_thread_param(name):
        values = list(THREADS)
    else:
        bound = _block_bound(name, args)
        hi = min(MAX_BLOCK, bound) if bound else MAX_BLOCK
        hi = max(hi, 1)
        values = powers_of_two(min(MIN_BLOCK, value, hi), hi)
    if value not in values:
        values.append(value)
    return sorted(set(values))


def factory_args(factory: Any, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every argument of ``factory`` (a plain function or a ``@jit`` factory) in signature order: defaults,
    overridden by ``args``."""
    func = getattr(factory, "factory", factory)
    given = dict(args or {})
    out: dict[str, Any] = {}
    for pname, p in inspect.signature(func).parameters.items():
        if pname in given:
            out[pname] = given.pop(pname)
        elif p.default is not p.empty:
            out[pname] = p.default
    out.update(given)
    return out


def default_space(factory: Any, args: dict[str, Any] | None = None) -> dict[str, list[int]]:
    """Tunable arguments of ``factory`` and sensible values for them, given the problem ``args`` (e.g. M, N, K).

    Tunable: integer arguments named like a tile size, a stage count or a thread count. Bounds come from ``args``.
    """
    values = factory_args(factory, args)
    space: dict[str, list[int]] = {}
    for name, value in values.items():
        v = _int(value)
        if v is not None and is_tunable(name):
            space[name] = suggest(name, v, values)
    return space


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_values(text: str) -> list[Any]:
    """``"32,64,128"`` -> ``[32, 64, 128]``; ``"1:4"`` -> ``[1, 2, 3, 4]`` (inclusive); ``"16:64:16"`` steps."""
    text = text.strip()
    if ":" in text and "," not in text:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not all(re.fullmatch(r"-?\d+", p.strip()) for p in parts):
            raise ValueError(f"{text!r}: a range is lo:hi or lo:hi:step with integers")
        lo, hi = int(parts[0]), int(parts[1])
        step = int(parts[2]) if len(parts) == 3 else 1
        if step <= 0 or hi < lo:
            raise ValueError(f"{text!r}: a range needs lo <= hi and a positive step")
        return list(range(lo, hi + 1, step))
    values = [_literal(v) for v in text.split(",") if v.strip()]
    if not values:
        raise ValueError(f"{text!r}: no values")
    return values


def parse_space(text: str | Iterable[str]) -> dict[str, list[Any]]:
    """``"block_M=32,64,128 num_stages=1:4"`` (or a list of such tokens) -> ``{"block_M": [...], ...}``."""
    if not isinstance(text, str):
        text = " ".join(text)
    space: dict[str, list[Any]] = {}
    rest = _TOKEN.sub(" ", text).strip()
    if rest:
        raise ValueError(f"cannot read {rest!r}: write NAME=v1,v2,... or NAME=lo:hi, separated by spaces")
    for name, values in _TOKEN.findall(text):
        if name in space:
            raise ValueError(f"{name} is given twice")
        space[name] = parse_values(values)
    return space


def grid(space: dict[str, Iterable[Any]] | None = None, **axes: Iterable[Any]) -> list[dict[str, Any]]:
    """Every combination: ``grid(block_M=[64, 128], num_stages=[1, 2])`` -> 4 configs (last axis fastest)."""
    merged = {**(space or {}), **axes}
    names = list(merged)
    lists = [list(v) for v in merged.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*lists)]


def as_configs(configs: Any) -> list[dict[str, Any]]:
    """Configurations from a list of dicts, a grid (dict of value lists), a space string, or a callable."""
    if callable(configs):
        configs = configs()
    if isinstance(configs, str):
        return grid(parse_space(configs))
    if isinstance(configs, dict):
        return grid({k: (v if isinstance(v, (list, tuple, range)) else [v]) for k, v in configs.items()})
    out = [dict(c) for c in configs]
    if not all(isinstance(c, dict) for c in out):
        raise TypeError("configs: expected a list of dicts, a dict of value lists, or a space string")
    return out


__all__ = ["default_space", "suggest", "grid", "parse_space", "parse_values", "as_configs", "factory_args",
           "is_tunable", "is_block_param", "is_stage_param", "is_thread_param", "powers_of_two"]

"""``T.cumsum`` and ``T.cummax``: inclusive prefix scans of a tile along one dimension.

Written with the language itself, so every backend lowers them with what it already knows: a serial loop along
``dim`` around a ``T.Parallel`` over the other dimensions (``tile[.., k, ..] = op(tile[.., k, ..],
tile[.., k -/+ 1, ..])``). A fragment is staged through a shared tile first (on CUDA a fragment's neighbouring
element may sit in another thread's registers; TileLang does the same), a local tile is scanned by each thread
in place. ``reverse=True`` scans from the end (a suffix scan). ``T.cummax`` propagates NaN from where it first
appears, as ``torch.cummax`` does.

Speed: one step per element along ``dim`` (a barrier between steps on CUDA), not a work-efficient parallel scan;
fine for the short tiles (chunk sizes) programs scan.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.ir import TensorRegion
from tvm.script import tirx as _T

from ._ir import describe, is_buffer, shape_of
from .alloc import SCOPE_FRAGMENT, SCOPE_LOCAL, SCOPE_VAR, alloc_shared
from .copy import copy
from .loops import Parallel


def _whole(x: Any, what: str) -> tuple[Any, list[Any], list[Any]]:
    """(buffer, mins, extents) of a whole buffer or a slice."""
    if is_buffer(x):
        return x, [0] * len(x.shape), list(x.shape)
    if isinstance(x, TensorRegion):
        return x.source, [r.min for r in x.region], [r.extent for r in x.region]
    raise TypeError(f"{what}: expected a buffer or a slice A[a:b, ...], got {describe(x)}")


def _step(kind: str, cur: Any, prev: Any) -> Any:
    if kind == "sum":
        return cur + prev
    if str(cur.ty.dtype).startswith(("float", "bfloat")):  # NaN sticks once seen, as torch.cummax
        return tirx.Select(tirx.isnan(cur) | (cur >= prev), cur, prev)
    return tirx.max(cur, prev)


def _scan_in_place(buf: Any, mins: list[Any], exts: list[Any], dim: int, reverse: bool, kind: str) -> None:
    n = exts[dim]
    others = [d for d in range(len(exts)) if d != dim]

    def at(coords: list[Any], k: Any) -> list[Any]:
        full = list(coords[:dim]) + [k] + list(coords[dim:])
        return [m + x for m, x in zip(mins, full)]

    def body(coords: list[Any], k: Any) -> None:
        cur_k, prev_k = (n - 1 - k, n - k) if reverse else (k, k - 1)
        _T.buffer_store(buf, _step(kind, tirx.BufferLoad(buf, at(coords, cur_k)),
                                   tirx.BufferLoad(buf, at(coords, prev_k))), at(coords, cur_k))

    with _T.serial(1, n) as k:
        if not others:
            body([], k)
        elif buf.scope() in (SCOPE_LOCAL, SCOPE_VAR):  # per thread: plain loops
            with _T.grid(*[exts[d] for d in others]) as vs:
                body(list(vs) if isinstance(vs, (list, tuple)) else [vs], k)
        else:
            with Parallel(*[exts[d] for d in others]) as vs:
                body(list(vs) if isinstance(vs, (list, tuple)) else [vs], k)


def _scan(src: Any, dst: Any, dim: int, reverse: bool, kind: str) -> None:
    what = f"T.cum{kind}"
    sbuf, _, sext = _whole(src, f"{what} src")
    dst = src if dst is None else dst
    dbuf, dmins, dext = _whole(dst, f"{what} dst")
    rank = len(sext)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise ValueError(f"{what} dim: expected an int in [{-rank}, {rank}) for a rank-{rank} src, got {dim!r}")
    dim %= rank
    if not isinstance(reverse, bool):
        raise TypeError(f"{what} reverse: expected a Python bool, got {reverse!r}")
    if len(dext) != rank or any(str(a) != str(b) for a, b in zip(sext, dext)):
        raise ValueError(f"{what}: dst {describe(dst)} must have the shape of src {describe(src)}")
    if sbuf.scope() == SCOPE_FRAGMENT or dbuf.scope() == SCOPE_FRAGMENT or dbuf.scope() in ("global", ""):
        stage = alloc_shared(sext, str(dbuf.dtype))
        copy(src, stage)
        _scan_in_place(stage, [0] * rank, sext, dim, reverse, kind)
        copy(stage, dst)
        return
    if not (dbuf.same_as(sbuf) and shape_of(src) == shape_of(dst)):
        copy(src, dst)
    _scan_in_place(dbuf, dmins, dext, dim, reverse, kind)


def cumsum(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False, **_ignored: Any) -> None:
    """Inclusive cumulative sum of ``src`` along ``dim`` into ``dst`` (in place when ``dst`` is None)."""
    _scan(src, dst, dim, reverse, "sum")


def cummax(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False, **_ignored: Any) -> None:
    """Inclusive cumulative maximum of ``src`` along ``dim`` into ``dst`` (in place when ``dst`` is None)."""
    _scan(src, dst, dim, reverse, "max")

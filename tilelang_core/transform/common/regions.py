"""Region arithmetic for tile ops: squeezing unit dimensions and mapping tile coordinates to buffer indices.

``T.copy(Q[b, i0:i0+64, h, :], Q_s)`` copies a 4-D region with two unit dimensions into a 2-D tile. Both sides
are reduced to their non-unit ("squeezed") dimensions, which must agree; tile coordinates then map back to
full buffer indices, unit dimensions staying at their start.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ...language._ir import Region
from .rewriter import const_int


def squeezed(region: Region, ana: Any) -> list[int]:
    """Indices of the dimensions of ``region`` whose extent is not provably 1."""
    dims = []
    for d, e in enumerate(region.extents):
        c = const_int(e)
        if c == 1 or (c is None and ana.can_prove_equal(e, 1)):
            continue
        dims.append(d)
    return dims


def indices_at(region: Region, dims: list[int], coords: list[Any]) -> list[Any]:
    """Buffer indices of the tile coordinate ``coords`` (one per squeezed dim)."""
    idx = list(region.mins)
    for d, c in zip(dims, coords):
        idx[d] = idx[d] + c
    return idx


def fmt_extents(exts: list[Any]) -> str:
    return "[" + ", ".join(str(const_int(e)) if const_int(e) is not None else str(e) for e in exts) + "]"


def in_bounds_conds(buffer: Any, indices: list[Any], ana: Any) -> list[Any]:
    """The bound checks ``0 <= idx < shape`` that ``ana`` cannot prove (upper bounds only when min >= 0)."""
    conds = []
    for i, s in zip(indices, buffer.shape):
        c = tirx.LT(i, s)
        try:
            proven = ana.can_prove(c)
        except Exception:  # noqa: BLE001
            proven = False
        if not proven:
            conds.append(ana.simplify(c))
        lo = tirx.GE(i, 0)
        try:
            lo_ok = ana.can_prove(lo)
        except Exception:  # noqa: BLE001
            lo_ok = False
        if not lo_ok:
            conds.append(ana.simplify(lo))
    return conds


def is_global(buffer: Any) -> bool:
    return buffer.scope() in ("global", "")

"""Pass: run a kernel's blocks serially when the whole grid is too little work to split over cores.

Handing a parallel loop to the thread pool costs a fork/join (several microseconds, more on a loaded machine);
a 64×64 elementwise kernel finishes in about a microsecond on one core. After the tile ops are lowered every loop
is explicit, so the total trip count of the fused block loop (blocks × iterations per block, constant extents)
estimates the work; below ``MIN_PARALLEL_WORK`` the loop becomes serial.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..common.rewriter import const_int

MIN_PARALLEL_WORK = 1 << 15


def trip_count(s: Any) -> int:
    """Innermost statement executions of ``s`` (unknown extents count as 64)."""
    if s is None:
        return 0
    if isinstance(s, tirx.For):
        ext = const_int(s.extent)
        return (ext if ext is not None else 64) * max(trip_count(s.body), 1)
    if isinstance(s, tirx.SeqStmt):
        return sum(trip_count(x) for x in s.seq)
    if isinstance(s, tirx.IfThenElse):
        return max(trip_count(s.then_case), trip_count(s.else_case))
    body = getattr(s, "body", None)
    if isinstance(body, tirx.Stmt):
        return trip_count(body)
    return 1


def serialize_small_grids_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = func.body

    def visit(s: Any) -> Any:
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL and "tl.parallel" not in s.annotations:
            if trip_count(s) < MIN_PARALLEL_WORK:
                return tirx.For(s.loop_var, s.min, s.extent, tirx.ForKind.SERIAL, s.body, None, s.annotations,
                                s.step, s.span)
            return s
        if isinstance(s, tirx.SeqStmt):
            return tirx.SeqStmt([visit(x) for x in s.seq], span=s.span)
        return s

    new = visit(body)
    return func if new.same_as(body) else func.with_body(new)

"""Pass: an innermost loop whose whole body is ``if v + c < n: ...`` runs ``min(extent, n - c)`` times instead.

Why: ragged edges are lowered as guarded loops (``for j in range(48): if j < 25: C[..., j] = ...``). LLVM
vectorises such a loop with masked stores, and with a constant mask of one active lane on a 2-byte element (a
bfloat16 store, whose rounding is an i32 -> i16 truncation) LLVM 20 for x86 (AVX-512) emits a 4-byte ``movl``:
the element after the last valid one is overwritten with zero. Found by the differential fuzzer (seed 168: a
bf16 GEMM into a (2, 137, 25) tensor lost element (1, 0, 0) to a neighbouring block's edge store, and the last
block wrote two bytes past the tensor). A loop with the exact trip count needs no mask at all (vector body plus a
scalar remainder), which is also less work; the skipped iterations did nothing, so the rewrite is exact.

Only the bound that depends on the loop variable as ``v + c`` (``c`` free of ``v``) is moved into the extent; the
other conditions stay in the ``if``.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ...language._ir import dtype_of
from ..common.rewriter import Rewriter


def _conjuncts(c: Any) -> list[Any]:
    if isinstance(c, tirx.And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _uses(e: Any, v: Any) -> bool:
    return any(x.same_as(v) for x in tirx.analysis.undefined_vars(e))


def _offset(e: Any, v: Any) -> Any | None:
    """``c`` when ``e`` is ``v + c`` or ``c + v`` with ``c`` free of ``v`` (``0`` for ``v`` itself), else None."""
    if e.same_as(v):
        return tirx.IntImm(dtype_of(v), 0)
    if isinstance(e, tirx.Add):
        if e.a.same_as(v) and not _uses(e.b, v):
            return e.b
        if e.b.same_as(v) and not _uses(e.a, v):
            return e.a
    return None


class _Clamp(Rewriter):
    pass_name = "tl.ClampGuardedLoopsCPU"

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        s = super().visit_For(s)
        body = s.body
        if (s.kind != tirx.ForKind.SERIAL or not isinstance(body, tirx.IfThenElse) or body.else_case is not None
                or not (isinstance(s.min, tirx.IntImm) and s.min.value == 0)):
            return s
        v = s.loop_var
        conds = _conjuncts(body.condition)
        for n, c in enumerate(conds):
            if not isinstance(c, tirx.LT) or _uses(c.b, v):
                continue
            off = _offset(c.a, v)
            if off is None:
                continue
            limit = c.b - off
            extent = tirx.max(tirx.min(s.extent, limit), tirx.IntImm(dtype_of(s.extent), 0))
            rest = conds[:n] + conds[n + 1:]
            inner = body.then_case
            if rest:
                cond = rest[0]
                for x in rest[1:]:
                    cond = tirx.And(cond, x)
                inner = tirx.IfThenElse(cond, inner, None, span=body.span)
            return tirx.For(v, s.min, self.ana.simplify(extent), s.kind, inner, s.thread_binding, s.annotations,
                            s.step, s.span)
        return s


def clamp_guarded_loops_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return _Clamp().run(func)

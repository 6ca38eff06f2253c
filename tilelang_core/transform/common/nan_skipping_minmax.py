"""Pass: element-wise float ``max``/``min`` skip a NaN operand wherever it sits (``tl.NanSkippingMinMax``).

Why: TVM lowers ``max(a, b)`` to ``select(a > b, a, b)`` on the CPU and to ``__hgt(a, b) ? a : b`` for CUDA half,
so a NaN was kept or dropped by its position: ``T.max(NaN, 0) = 0`` but ``T.max(0, NaN) = NaN``, and ReLU written
``T.max(x, 0)`` gave a different answer from ``T.max(0, x)``. The decision (docs/design.md, "NaN in max/min")
follows the reductions: a NaN operand is skipped, as CUDA's ``fmaxf``/``fminf`` and TileLang's reductions do, so
``max(NaN, y) = max(y, NaN) = y`` (NaN only when both are NaN), and ReLU(NaN) = 0, unlike torch.

On the CPU the rewrite is ``select(a > b || isnan(b), a, b)`` (``<`` for min): two compares and a blend, which
LLVM keeps in vector registers (the softmax and GEMM-ReLU kernels stay vectorised). On CUDA, float32 already reaches
``fmaxf``/``fminf``; float16 and bfloat16 (whose ``max`` in cuda_bf16.h kept NaN by position: 14% of a NaN-laden
test wrong on the H200) are rewritten there (``cuda=True``) as ``fmaxf`` of the operands widened to float32 (exact:
the result is one of them); TVM's CUDA code generator
cannot print the vector boolean a select of half vectors would need.
It runs after our lowering and before the fast ``exp`` passes, whose own clamps are not user operations.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of


def _is_float(dt: str | None) -> bool:
    return dt is not None and dt.startswith(("float", "bfloat"))


def nan_skipping_minmax(func: tirx.PrimFunc, cuda: bool = False) -> tirx.PrimFunc:
    """Rewrite every float ``Max``/``Min`` of ``func`` so that a NaN operand is skipped (see the docstring)."""

    def wanted(dt: str | None) -> bool:
        if not _is_float(dt):
            return False
        return dt.startswith(("float16", "bfloat16")) if cuda else True

    def rewrite(e: Any) -> Any:
        if not wanted(dtype_of(e)):
            return e
        a, b = e.a, e.b
        if cuda:  # fmaxf / fminf skip NaN; the max of two halves is one of them, exact in float32
            dt = dtype_of(e)
            wide = "float32" + dt[len("bfloat16" if dt.startswith("bfloat16") else "float16"):]
            m = tirx.Max if isinstance(e, tirx.Max) else tirx.Min
            return tirx.Cast(dtype_of(e), m(tirx.Cast(wide, a), tirx.Cast(wide, b)))
        dt = dtype_of(e)
        if dt.startswith("bfloat16"):  # TVM has no isnan for bfloat16: choose in float32 (exact), round back
            wide = "float32" + dt[len("bfloat16"):]
            return tirx.Cast(dt, rewrite(type(e)(tirx.Cast(wide, a), tirx.Cast(wide, b))))
        wins = a > b if isinstance(e, tirx.Max) else a < b
        return tirx.Select(tirx.Or(wins, tirx.isnan(b)), a, b)

    body = tvm_ffi.structural_map(func.body, [((tirx.Max, tirx.Min), rewrite)])
    return func.with_body(body)

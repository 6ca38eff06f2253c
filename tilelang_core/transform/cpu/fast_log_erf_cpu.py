"""Vectorisable float32 ``log``, ``log2``, ``log10`` and ``erf`` for CPUs (used by the ``tl.FastExpCPU`` pass).

Why this module exists: TVM lowers these to ``llvm.log`` / an ``erff`` call, which LLVM can only scalarise inside a
vector loop (no vector math library is wired in), so a GELU (``erf``) or log-softmax epilogue ran one lane at a
time, slower than the GEMM before it. Here each is a few plain arithmetic and bit operations, so the loop vectorises
like ``exp`` does (:mod:`.fast_exp_cpu`). float64 keeps the libm call; float16/bfloat16 go through float32.

- ``log(x)``: ``x = m * 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read from the float's bits (subnormals scaled
  by ``2^23`` first), then ``log(m) = 2 atanh(s)``, ``s = (m - 1) / (m + 1)`` (``|s| < 0.172``), as
  ``2 s (1 + s^2/3 + ... + s^10/11)`` (truncation below 1e-10), and ``e * ln 2`` added in two parts (Cody-Waite).
  ``log2`` adds ``e`` itself (``log2(8)`` is exactly 3), ``log10`` scales ``log``. ``x < 0`` or NaN gives NaN, ``0``
  gives ``-inf``, ``+inf`` gives ``+inf``, as libm does.
- ``erf(x)``: ``x P(x^2)`` for ``|x| < 1`` (``P`` a degree-6 fit of ``erf(x)/x``, relative error 1.4e-9), else
  ``sign(x) (1 - e^{-x^2} Q(t))`` with ``t = 1 / (1 + x/2)`` and ``Q`` a degree-7 fit of ``erfc(x) e^{x^2}``
  (relative error 1e-9) on the fast exp, and exactly ``sign(x)`` from ``|x| >= 4`` (float32 rounds erf to 1 there).
"""

from __future__ import annotations

import math
from typing import Any

from tvm import tirx

from ...language._ir import dtype_of

_LN2_HI = 0.693359375
_LN2_LO = math.log(2) - _LN2_HI
_LOG2E = 1.0 / math.log(2)
_LOG10E = 1.0 / math.log(10)
_SQRT2 = math.sqrt(2.0)
# log(m) = 2 s (1 + s^2/3 + s^4/5 + ...): the atanh series
_ATANH = [1.0 / (2 * k + 1) for k in range(6)]
# erf(x) / x = P(x^2) on |x| < 1
_ERF_P = [1.1283791664921252, -0.37612628788069113, 0.11283611964733066, -0.026854792130359944,
          0.005190025535292886, -0.0008024124849496414, 7.897490618022735e-05]
# erfc(x) e^(x^2) = Q(1 / (1 + x/2)) on 1 <= x < 4
_ERFC_Q = [-0.0001555510092389907, 0.28493040436481903, 0.25959241971157204, 0.34806537935859033,
           -0.10399924958402866, 0.5635400024659645, -0.47123688184034357, 0.1193154648463447]


def _f32(v: float) -> Any:
    return tirx.const(v, "float32")


def _i32(v: int) -> Any:
    return tirx.const(v, "int32")


def _poly(coeffs: list[float], z: Any) -> Any:
    p = _f32(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p * z + _f32(c)
    return p


def _log_parts(x: Any) -> tuple[Any, Any]:
    """``(e, log(m))`` with ``x = m * 2^e``, ``m`` in [sqrt(1/2), sqrt(2)), for positive finite ``x``."""
    tiny = x < _f32(1.1754943508222875e-38)  # subnormal: scale into the normal range first
    xs = tirx.Select(tiny, x * _f32(8388608.0), x)
    bits = tirx.reinterpret("int32", xs)
    e = tirx.shift_right(bits, _i32(23)) - _i32(127) - tirx.Select(tiny, _i32(23), _i32(0))
    m = tirx.reinterpret("float32", tirx.bitwise_or(tirx.bitwise_and(bits, _i32(0x007FFFFF)), _i32(0x3F800000)))
    big = m > _f32(_SQRT2)
    m = tirx.Select(big, m * _f32(0.5), m)
    e = e + tirx.Select(big, _i32(1), _i32(0))
    s = (m - _f32(1.0)) / (m + _f32(1.0))
    log_m = _f32(2.0) * s * _poly(_ATANH, s * s)
    return tirx.Cast("float32", e), log_m


def _log_specials(x: Any, finite: Any) -> Any:
    """libm's answers outside (0, inf): NaN below zero and for NaN, -inf at zero, +inf at +inf."""
    out = tirx.Select(x == _f32(0.0), _f32(-math.inf), finite)
    out = tirx.Select(x == _f32(math.inf), x, out)
    return tirx.Select(tirx.any(x < _f32(0.0), tirx.isnan(x)), _f32(math.nan), out)


def fast_log_f32(x: Any) -> Any:
    e, log_m = _log_parts(x)
    return _log_specials(x, (e * _f32(_LN2_HI) + (log_m + e * _f32(_LN2_LO))))


def fast_log2_f32(x: Any) -> Any:
    e, log_m = _log_parts(x)
    return _log_specials(x, e + log_m * _f32(_LOG2E))


def fast_log10_f32(x: Any) -> Any:
    return fast_log_f32(x) * _f32(_LOG10E)


def fast_erf_f32(x: Any) -> Any:
    from .fast_exp_cpu import fast_exp_f32

    ax = tirx.abs(x)
    small = x * _poly(_ERF_P, x * x)
    t = _f32(1.0) / (_f32(1.0) + ax * _f32(0.5))
    tail = _f32(1.0) - fast_exp_f32(-(ax * ax)) * _poly(_ERFC_Q, t)
    tail = tirx.Select(ax >= _f32(4.0), _f32(1.0), tail)
    big = tirx.Select(x < _f32(0.0), -tail, tail)
    return tirx.Select(tirx.isnan(x), x, tirx.Select(ax < _f32(1.0), small, big))


# T.log2 builds "prim.log2" (TVM's Python helper), tirx.log2 the registered op
FAST_F32 = {"tirx.log": fast_log_f32, "tirx.log2": fast_log2_f32, "prim.log2": fast_log2_f32,
            "tirx.log10": fast_log10_f32, "tirx.erf": fast_erf_f32}



def rewrite_log_erf(call: Any) -> Any:
    """The vectorisable form of a ``log``/``log2``/``log10``/``erf`` call, or ``call`` itself for other ops."""
    op = getattr(call.op, "name", None)
    fast = FAST_F32.get(op)
    if fast is None:
        return call
    dt = dtype_of(call)
    x = call.args[0]
    if dt == "float32":
        return fast(x)
    if dt in ("float16", "bfloat16"):
        return tirx.Cast(dt, fast(tirx.Cast("float32", x)))
    return call


__all__ = ["fast_log_f32", "fast_log2_f32", "fast_log10_f32", "fast_erf_f32", "rewrite_log_erf"]

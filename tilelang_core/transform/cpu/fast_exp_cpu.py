"""Pass: replace float32 ``exp``/``exp2`` with a vectorisable polynomial on CPUs.

TVM lowers ``T.exp`` to ``llvm.exp``, which LLVM can only scalarise into ``expf`` calls inside a vector loop
(no vector math library is wired in), so a softmax would run one lane at a time. Here ``exp2(x)`` is computed
as ``2^n * p(f)`` with ``n = round(x)``, ``f = x - n`` in [-0.5, 0.5] and ``p`` the degree-7 Taylor polynomial
of ``2^f`` (relative error below 2e-8, under float32 rounding). ``exp(x)`` takes ``n = round(x * log2(e))`` and
the reduced argument ``r = x - n * ln(2)`` in two parts (Cody-Waite: ``n * LN2_HI`` is exact), so rounding
``x * log2(e)`` costs nothing at large ``|x|``; ``p`` is then the degree-7 Taylor polynomial of ``e^r``.
Every step is a plain arithmetic op, so the loop vectorises.

``2^n`` is applied as two factors ``2^(n >> 1) * 2^(n - (n >> 1))``, each built by writing its exponent into the
float bits: a single factor could not represent ``2^128``, which ``x`` in [127.5, 128) (exp2) or [88.38, 88.72]
(exp) needs with ``p < 1`` to give a finite result, nor the subnormal range. Inputs are clamped so both factors
stay normal: results overflow to +inf exactly where float32 does, and go gradually through the subnormals to
zero. A NaN input gives NaN (the clamp alone would turn it into +inf). sigmoid is rewritten to
``1 / (1 + exp(-x))`` on the same exp. float64 and half types keep the libm call.

``tanh`` is rewritten too: TVM's own lowering, ``(1 - e^-2x) / (1 + e^-2x)``-style, cancels for small ``|x|``
(tanh(1e-6) came out 0, relative error 1e-4 near 1e-3). float32: ``x + x^3 P(x^2)`` for ``|x| < 0.625`` (``P`` a
degree-4 fit of ``(tanh x - x) / x^3``, within 1 ulp), else ``sign(x) (1 - 2 / (e^{2|x|} + 1))`` on the fast exp;
float16/bfloat16 go through float32; float64 calls libm's ``tanh``. ``log``, ``log2``, ``log10`` and ``erf`` are
rewritten the same way by :mod:`.fast_log_erf_cpu`.

Each expansion reads its argument about 26 times (the clamp, the NaN test, Horner's rule on the reduced argument).
Written inline, nested calls multiply: ``sigmoid(sigmoid(sigmoid(x)))`` became 17,576 copies of ``x`` and took
25 s to compile. So in a store whose value has no short-circuit guard (``T.if_then_else``, ``and``, ``or``) the
argument of each rewritten call is stored once into a one-element local buffer before the store (innermost call
first) and the expansion reads it: the code grows linearly with the nesting. (Not a let: TVM's simplifier
substitutes a pure let's value back into every use; LLVM promotes the buffer to a register.) Under a guard the argument
stays inline (binding it before the store would evaluate a guarded load unconditionally).
"""

from __future__ import annotations

import math
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from .fast_log_erf_cpu import FAST_F32, rewrite_log_erf

_COEFFS_EXP2 = [math.log(2) ** k / math.factorial(k) for k in range(8)]
_COEFFS_EXP = [1.0 / math.factorial(k) for k in range(8)]
_LOG2E = 1.0 / math.log(2)
_LN2_HI = 0.693359375  # 8 significant bits: n * _LN2_HI is exact in float32 for |n| <= 2^15
_LN2_LO = math.log(2) - _LN2_HI


def _f32(v: float) -> Any:
    return tirx.const(v, "float32")


def _i32(v: int) -> Any:
    return tirx.const(v, "int32")


def _poly(coeffs: list[float], f: Any) -> Any:
    p = _f32(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = p * f + _f32(c)
    return p


def _times_pow2(p: Any, n: Any) -> Any:
    """``p * 2^n`` for an integral float ``n`` in [-151, 128], as two normal power-of-two factors."""
    ni = tirx.Cast("int32", n)
    half = tirx.shift_right(ni, _i32(1))

    def pow2(e: Any) -> Any:  # e in [-76, 64]: a normal float
        return tirx.reinterpret("float32", tirx.shift_left(e + _i32(127), _i32(23)))

    return p * pow2(half) * pow2(ni - half)


def _nan_passes(x: Any, result: Any) -> Any:
    return tirx.Select(tirx.isnan(x), x, result)


def fast_exp2_f32(x: Any) -> Any:
    xc = tirx.max(tirx.min(x, _f32(128.0)), _f32(-151.0))
    n = tirx.floor(xc + _f32(0.5))
    return _nan_passes(x, _times_pow2(_poly(_COEFFS_EXP2, xc - n), n))


def fast_exp_f32(x: Any) -> Any:
    # exp(88.8) overflows and exp(-104) is below half the smallest subnormal: the clamp changes no result
    xc = tirx.max(tirx.min(x, _f32(88.8)), _f32(-104.0))
    n = tirx.floor(xc * _f32(_LOG2E) + _f32(0.5))
    r = (xc - n * _f32(_LN2_HI)) - n * _f32(_LN2_LO)
    return _nan_passes(x, _times_pow2(_poly(_COEFFS_EXP, r), n))


# (tanh(x) - x) / x^3 = P(x^2) on |x| < 0.625: a relative-error least-squares fit (max error 4.4e-9)
_TANH_P = [-0.33333281560235434, 0.13331433922973712, -0.05373913154529273, 0.02063742376739209,
           -0.005703326125803492]


def fast_tanh_f32(x: Any) -> Any:
    ax = tirx.abs(x)
    z = x * x
    small = x + x * z * _poly(_TANH_P, z)
    big = _f32(1.0) - _f32(2.0) / (fast_exp_f32(ax * _f32(2.0)) + _f32(1.0))  # NaN stays NaN; 1 past ~9
    big = tirx.Select(x < _f32(0.0), -big, big)
    return tirx.Select(ax < _f32(0.625), small, big)


def _rewrite_tanh(call: Any) -> Any:
    dt = dtype_of(call)
    x = call.args[0]
    if dt == "float32":
        return fast_tanh_f32(x)
    if dt == "float64":
        return tirx.call_pure_extern("float64", "tanh", x)
    if dt in ("float16", "bfloat16"):
        return tirx.Cast(dt, fast_tanh_f32(tirx.Cast("float32", x)))
    return call


def _rewrite(call: Any) -> Any:
    op = getattr(call.op, "name", None)
    if op == "tirx.tanh":
        return _rewrite_tanh(call)
    if op in FAST_F32:  # log, log2, log10, erf: see fast_log_erf_cpu
        return rewrite_log_erf(call)
    if op not in ("tirx.exp", "tirx.exp2", "tirx.sigmoid") or dtype_of(call) != "float32":
        return call
    x = call.args[0]
    if op == "tirx.exp2":
        return fast_exp2_f32(x)
    if op == "tirx.exp":
        return fast_exp_f32(x)
    return _f32(1.0) / (_f32(1.0) + fast_exp_f32(-x))


_REWRITTEN = ("tirx.exp", "tirx.exp2", "tirx.sigmoid", "tirx.tanh", *FAST_F32)
_GUARDS = ("tirx.if_then_else", "prim.if_then_else", "tir.if_then_else")


def _scan(value: Any) -> tuple[bool, bool]:
    """(the value calls a rewritten op, the value has a short-circuit guard)."""
    found = {"call": False, "guard": False}

    def call(c: Any) -> Any:
        name = getattr(c.op, "name", None)
        found["call"] |= name in _REWRITTEN
        found["guard"] |= name in _GUARDS
        return c

    def guard(x: Any) -> Any:
        found["guard"] = True
        return x

    tvm_ffi.structural_map(value, [(tvm.ir.Call, call), (tirx.And, guard), (tirx.Or, guard)])
    return found["call"], found["guard"]


def _hoist_store(s: Any) -> Any:
    """A store of an unguarded value: each rewritten call's argument bound once before it (see the docstring)."""
    has_call, guarded = _scan(s.value)
    if not has_call or guarded:
        return s
    binds: list[Any] = []

    def rewrite(call: Any) -> Any:
        if getattr(call.op, "name", None) not in _REWRITTEN or len(call.args) != 1:
            return call
        x = call.args[0]
        if _rewrite(call).same_as(call):  # kept as a call (float64, an op with no fast form): nothing to share
            return call
        if not isinstance(x, (tvm.ir.Var, tirx.IntImm, tirx.FloatImm)) and "x" not in dtype_of(x):  # scalars only
            # a one-element local buffer, not a let: TVM's simplifier substitutes a pure let's value into every
            # use (undoing the binding), but never looks through a load
            buf = tirx.decl_buffer((1,), dtype_of(x), f"fx{len(binds) // 2}", scope="local")
            binds.extend([tirx.AllocBuffer(buf), tirx.BufferStore(buf, x, [_i32(0)])])
            call = tvm.ir.Call(call.op, [tirx.BufferLoad(buf, [_i32(0)])], ret_ty=dtype_of(call), span=call.span)
        return _rewrite(call)

    value = tvm_ffi.structural_map(s.value, [(tvm.ir.Call, rewrite)])
    if not binds:
        return tirx.BufferStore(s.buffer, value, s.indices, span=s.span)
    return tirx.SeqStmt([*binds, tirx.BufferStore(s.buffer, value, s.indices, span=s.span)])


def fast_exp_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = tvm_ffi.structural_map(func.body, [(tirx.BufferStore, _hoist_store)])
    body = tvm_ffi.structural_map(body, [(tvm.ir.Call, _rewrite)])  # the calls left: guarded, or not in a store
    return func.with_body(body)

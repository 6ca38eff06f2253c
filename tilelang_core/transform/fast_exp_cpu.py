"""Pass: replace float32 ``exp``/``exp2`` with a vectorisable polynomial on CPUs.

TVM lowers ``T.exp`` to ``llvm.exp``, which LLVM can only scalarise into ``expf`` calls inside a vector loop
(no vector math library is wired in), so a softmax would run one lane at a time. Here ``exp2(x)`` is computed
as ``2^n * p(f)`` with ``n = round(x)``, ``f = x - n`` in [-0.5, 0.5] and ``p`` the degree-7 Taylor polynomial
of ``2^f`` (relative error below 2e-8, under float32 rounding), ``2^n`` built by writing ``n + 127`` into the
exponent bits. Every step is a plain arithmetic op, so the loop vectorises. Inputs are clamped to
[-126, 128): results below 2^-126 flush to zero (no subnormals) and above overflow to +inf as usual.
``exp(x) = exp2(x * log2(e))``; sigmoid is rewritten to use it too. float64 and half types keep the libm call.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..language._ir import dtype_of

_COEFFS = [math.log(2) ** k / math.factorial(k) for k in range(8)]
_LOG2E = 1.0 / math.log(2)


def _f32(v: float) -> Any:
    return tirx.const(v, "float32")


def fast_exp2_f32(x: Any) -> Any:
    x = tirx.max(tirx.min(x, _f32(128.0)), _f32(-127.0))
    n = tirx.floor(x + _f32(0.5))
    f = x - n
    p = _f32(_COEFFS[-1])
    for c in reversed(_COEFFS[:-1]):
        p = p * f + _f32(c)
    ni = tirx.Cast("int32", n)
    # 2^n for n in [-127, 128]: n == -127 gives exponent 0 (zero), n == 128 gives exponent 255 (inf)
    scale = tirx.reinterpret("float32", tirx.shift_left(ni + tirx.const(127, "int32"), tirx.const(23, "int32")))
    return p * scale


def _rewrite(call: Any) -> Any:
    op = getattr(call.op, "name", None)
    if op not in ("tirx.exp", "tirx.exp2", "tirx.sigmoid") or dtype_of(call) != "float32":
        return call
    x = call.args[0]
    if op == "tirx.exp2":
        return fast_exp2_f32(x)
    if op == "tirx.exp":
        return fast_exp2_f32(x * _f32(_LOG2E))
    return _f32(1.0) / (_f32(1.0) + fast_exp2_f32(-x * _f32(_LOG2E)))


def fast_exp_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = tvm_ffi.structural_map(func.body, [(tvm.ir.Call, _rewrite)])
    return func.with_body(body)

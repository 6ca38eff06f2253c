"""Pass: exact float8 conversions on CPUs (``float8_e4m3fn`` and ``float8_e5m2``, as torch converts them).

TVM 0.27's LLVM lowering of a cast from or to a float8 dtype is wrong at the edges: zero decodes to 2^-7
(e4m3fn) or 2^-15 (e5m2), subnormals are shifted, e5m2's infinities and NaNs decode as finite numbers, and
encoding flushes small values to zero. Each such ``Cast`` is rewritten here into integer and float arithmetic
on the byte (no table, no branch, so a ``T.Parallel`` loop still vectorises):

* decode: ``(m | 2^M) * 2^(e - bias - M)`` for a normal byte, ``m * 2^(1 - bias - M)`` for a subnormal, the sign
  applied last (``0x80`` is -0.0), then e5m2 ``e == 31`` is +-inf / NaN and e4m3fn ``0x7f`` / ``0xff`` NaN;
* encode (round to nearest even, torch's results bit for bit): the float32 bits rounded to ``M`` mantissa bits
  and re-biased for a normal result, ``nearbyint(|x| * 2^(M - emin))`` for a subnormal one (the carry into the
  exponent comes out of the integer add); e4m3fn has no infinity: from 464 up (where rounding passes 448) and for +-inf
  the result saturates to +-448, as torch's conversion does, NaN stays NaN; e5m2 gives +-inf from 61440 up (the
  rounding carry) and NaN for NaN.

Other source and target dtypes go through float32 (exact for every float8 value; a float64 source is rounded
twice). Arithmetic directly on float8 operands (``a[i] * b[i]``) is computed in
float32 and rounded once; comparisons compare the float32 values. TVM's own ``FP8ComputeLegalize`` is disabled
in the CPU build (backend/cpu.py): it promotes float8 tiles to float32 through the faulty conversion.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.fp8_codec import FORMATS, decode, encode, encode_constant

__all__ = ["decode", "encode", "encode_constant", "fp8_cast_cpu"]


def _rewrite_constant(node: Any) -> Any:
    """A float8 constant (the zero of a guarded ragged copy, ``T.fill``): its byte, reinterpreted (LLVM codegen of
    a float8 ``FloatImm`` crashes)."""
    name = str(dtype_of(node))
    if name not in FORMATS:
        return node
    return tirx.reinterpret(name, tirx.const(encode_constant(float(node.value), name), "uint8"))


def _rewrite(node: Any) -> Any:
    dst = str(dtype_of(node))
    src = str(dtype_of(node.value))
    if src == dst or (src not in FORMATS and dst not in FORMATS):
        return node
    value = node.value
    if src in FORMATS:
        value = decode(value, src)
        src = "float32"
    if dst in FORMATS:
        if src != "float32":
            value = tirx.Cast("float32", value)
        return encode(value, dst)
    return value if dst == "float32" else tirx.Cast(dst, value)


_ARITH = ("Add", "Sub", "Mul", "Div", "Min", "Max")
_COMPARE = ("LT", "LE", "GT", "GE", "EQ", "NE")


def _rewrite_arith(node: Any) -> Any:
    """``a * b`` on float8 operands: computed in float32, rounded back once (as CUDA's __nv_fp8 operators do)."""
    a, b = node.a, node.b
    src = str(dtype_of(a))
    if src not in FORMATS or str(dtype_of(b)) != src:
        return node
    op = type(node)
    value = op(decode(a, src), decode(b, src))
    return value if op.__name__ in _COMPARE else encode(value, src)


def _as_bytes(x: Any) -> Any:
    return tirx.reinterpret("uint8", x)


def _rewrite_select(node: Any) -> Any:
    """A float8-valued select chooses between bytes (TVM's FP8StorageLegalize leaves a float8 select behind)."""
    name = str(dtype_of(node))
    if name not in FORMATS:
        return node
    if isinstance(node, tirx.Select):
        picked = tirx.Select(node.condition, _as_bytes(node.true_value), _as_bytes(node.false_value))
    elif isinstance(node.op, tvm.ir.Op) and node.op.name in ("prim.if_then_else", "tirx.if_then_else"):
        cond, t, f = node.args
        picked = tirx.if_then_else(cond, _as_bytes(t), _as_bytes(f))
    else:
        return node
    return tirx.reinterpret(name, picked)


def fp8_cast_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    rules = [(tirx.Cast, _rewrite), (tirx.Select, _rewrite_select), (tvm.ir.Call, _rewrite_select),
             (tirx.FloatImm, _rewrite_constant)]
    rules += [(getattr(tirx, n), _rewrite_arith) for n in _ARITH + _COMPARE]
    body = tvm_ffi.structural_map(func.body, rules)
    return func if body.same_as(func.body) else func.with_body(body)

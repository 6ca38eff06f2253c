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

import struct
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of

# name -> (exponent bits, mantissa bits, bias)
_FORMATS = {"float8_e4m3fn": (4, 3, 7), "float8_e5m2": (5, 2, 15)}


def _u32(v: int) -> Any:
    return tirx.const(v, "uint32")


def _pow2_f32(k: Any) -> Any:
    """2^k as float32 for an int32 ``k`` in the normal range, by writing the exponent bits."""
    return tirx.reinterpret("float32", tirx.Cast("uint32", k + tirx.const(127, "int32")) << _u32(23))


def decode(x: Any, name: str) -> Any:
    """The float32 value of the float8 expression ``x``."""
    e_bits, m_bits, bias = _FORMATS[name]
    b = tirx.Cast("uint32", tirx.reinterpret("uint8", x))
    e = tirx.Cast("int32", (b >> _u32(m_bits)) & _u32((1 << e_bits) - 1))
    m = tirx.Cast("int32", b & _u32((1 << m_bits) - 1))
    normal = e > tirx.const(0, "int32")
    mant = tirx.Select(normal, m + tirx.const(1 << m_bits, "int32"), m)
    scale = _pow2_f32(tirx.max(e, tirx.const(1, "int32")) - tirx.const(bias + m_bits, "int32"))
    mag = tirx.Cast("float32", mant) * scale
    negative = (b & _u32(0x80)) != _u32(0)
    value = tirx.Select(negative, -mag, mag)
    nan = tirx.const(float("nan"), "float32")
    if name == "float8_e5m2":
        inf = tirx.Select(negative, tirx.const(float("-inf"), "float32"), tirx.const(float("inf"), "float32"))
        special = tirx.Select(m == tirx.const(0, "int32"), inf, nan)
        return tirx.Select(e == tirx.const(31, "int32"), special, value)
    return tirx.Select((b & _u32(0x7F)) == _u32(0x7F), nan, value)


def encode(x: Any, name: str) -> Any:
    """The float8 byte of the float32 expression ``x``, rounded to nearest even (torch's conversion)."""
    e_bits, m_bits, bias = _FORMATS[name]
    bits = tirx.reinterpret("uint32", x)
    sign = (bits >> _u32(24)) & _u32(0x80)
    a = bits & _u32(0x7FFFFFFF)
    emin = 1 - bias
    shift = 23 - m_bits
    # normal result: round the float32 bits to m_bits mantissa bits (ties to even), then re-bias the exponent
    rounded = (a + _u32((1 << (shift - 1)) - 1) + ((a >> _u32(shift)) & _u32(1))) >> _u32(shift)
    normal_code = rounded - _u32((127 - bias) << m_bits)
    # subnormal result (|x| < 2^emin): |x| * 2^(m_bits - emin) < 2^m_bits, rounded; 2^m_bits is the smallest normal
    absx = tirx.reinterpret("float32", a)
    sub_code = tirx.Cast("uint32", tirx.nearbyint(absx * tirx.const(2.0 ** (m_bits - emin), "float32")))
    code = tirx.Select(a < _u32((127 + emin) << 23), sub_code, normal_code)
    if name == "float8_e4m3fn":
        # no infinity: torch saturates to +-448 (0x7e) from 464 up, inf included; NaN stays NaN (0x7f)
        code = tirx.Select(a > _u32(0x7F800000), _u32(0x7F), tirx.Select(a >= _u32(0x43E80000), _u32(0x7E), code))
    else:
        code = tirx.Select(a > _u32(0x7F800000), _u32(0x7F), tirx.Select(a >= _u32(143 << 23), _u32(0x7C), code))
    return tirx.reinterpret(name, tirx.Cast("uint8", code | sign))


def encode_constant(value: float, name: str) -> int:
    """The float8 byte of a Python float: :func:`encode`'s arithmetic, done here on the float32 bits."""
    e_bits, m_bits, bias = _FORMATS[name]
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    sign, a = (bits >> 24) & 0x80, bits & 0x7FFFFFFF
    emin, shift = 1 - bias, 23 - m_bits
    if a > 0x7F800000:
        return 0x7F | sign
    if name == "float8_e4m3fn" and a >= 0x43E80000:
        return 0x7E | sign
    if name == "float8_e5m2" and a >= 143 << 23:
        return 0x7C | sign
    if a < (127 + emin) << 23:
        absx = struct.unpack("<f", struct.pack("<I", a))[0]
        return int(round(absx * 2.0 ** (m_bits - emin))) | sign  # round() ties to even
    rounded = (a + (1 << (shift - 1)) - 1 + ((a >> shift) & 1)) >> shift
    return (rounded - ((127 - bias) << m_bits)) | sign


def _rewrite_constant(node: Any) -> Any:
    """A float8 constant (the zero of a guarded ragged copy, ``T.fill``): its byte, reinterpreted (LLVM codegen of
    a float8 ``FloatImm`` crashes)."""
    name = str(dtype_of(node))
    if name not in _FORMATS:
        return node
    return tirx.reinterpret(name, tirx.const(encode_constant(float(node.value), name), "uint8"))


def _rewrite(node: Any) -> Any:
    dst = str(dtype_of(node))
    src = str(dtype_of(node.value))
    if src == dst or (src not in _FORMATS and dst not in _FORMATS):
        return node
    value = node.value
    if src in _FORMATS:
        value = decode(value, src)
        src = "float32"
    if dst in _FORMATS:
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
    if src not in _FORMATS or str(dtype_of(b)) != src:
        return node
    op = type(node)
    value = op(decode(a, src), decode(b, src))
    return value if op.__name__ in _COMPARE else encode(value, src)


def _as_bytes(x: Any) -> Any:
    return tirx.reinterpret("uint8", x)


def _rewrite_select(node: Any) -> Any:
    """A float8-valued select chooses between bytes (TVM's FP8StorageLegalize leaves a float8 select behind)."""
    name = str(dtype_of(node))
    if name not in _FORMATS:
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

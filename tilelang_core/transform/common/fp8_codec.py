"""The float8 codec as TIR arithmetic: torch's conversions of ``float8_e4m3fn`` / ``float8_e5m2`` bit for bit.

Shared by the CPU pass (``cpu/fp8_cast_cpu``: every float8 cast) and the CUDA pass (``cuda/fp8_encode_cuda``: the
encodes, where CUDA's hardware conversion keeps no NaN sign and saturates e5m2). Integer and float arithmetic on
the byte, no table and no branch, so a vectorised loop stays vectorised. See ``cpu/fp8_cast_cpu`` for the
formulas.
"""

from __future__ import annotations

import struct
from typing import Any

from tvm import tirx

# name -> (exponent bits, mantissa bits, bias)
FORMATS = {"float8_e4m3fn": (4, 3, 7), "float8_e5m2": (5, 2, 15)}


def _u32(v: int) -> Any:
    return tirx.const(v, "uint32")


def _pow2_f32(k: Any) -> Any:
    """2^k as float32 for an int32 ``k`` in the normal range, by writing the exponent bits."""
    return tirx.reinterpret("float32", tirx.Cast("uint32", k + tirx.const(127, "int32")) << _u32(23))


def decode(x: Any, name: str) -> Any:
    """The float32 value of the float8 expression ``x``."""
    e_bits, m_bits, bias = FORMATS[name]
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
    e_bits, m_bits, bias = FORMATS[name]
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
    e_bits, m_bits, bias = FORMATS[name]
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

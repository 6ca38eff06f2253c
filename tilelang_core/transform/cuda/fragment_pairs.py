"""Two fp16 B-fragment elements decoded from one 32-bit word at once (used by tl.DequantFragmentsCUDA).

Why: an element-by-element int4 decode costs about four instructions per weight (shift, mask, ``| 0x6400``, and a
byte permute to pair two halves into the mma's 32-bit register). When the two halves of a register come from
bit fields 16 bits apart in one word of the staged packed bytes (the fragment pass pairs k that way: nibbles
``i`` and ``i + 4`` of a word), ``((w >> s) & (m | m << 16)) | 0x64006400`` read as ``half2`` is ``1024 + x`` in
both halves at once, so the pair costs one ``LOP3`` (``tl::lop3``: the mask and the exponent bits in one
instruction, where ptxas makes two of the C expression), at most one shift per word (a field in the high nibble of
a byte stays in place: ``(1024 + 16 x) / 16 + (z - 64)`` is one exact ``HFMA2``), then the program's own fp16
arithmetic in ``half2`` (``HADD2``/``HMUL2``/``HFMA2`` on both lanes).

:func:`pair_value` does this for any element expression of the form ``F(cast_f16(X + z))``: ``X`` the one bit
field ``(cast_i32(arr[c]) >> s) & m`` of a staged uint8 register array (``m < 1024``) or a whole int8 byte (then
``(b ^ 0x80)`` is ``b + 128``), ``z`` an integer the two elements share (a constant, a zero point) such that
``reinterpret(0x6400 | (X - low)) - (1024 - low - z)`` is exact (both operands integers in ``[0, 2048]``);
bf16 the same with ``0x4300`` (128, 128 values, integers up to 256 exact: nibbles, not bytes). ``F``: additions,
subtractions and multiplications in the result type by values the two elements share (a scale). The two
elements must be the same expression but for their bit field. Anything else returns None and the caller stores
the elements one by one.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.rewriter import const_int
from .common import mentions

# the exponent trick per result type: bits of the number BASE, and how many integers BASE + x (0 <= x < CAP) it holds
MAGIC = {"float16": (0x6400, 1024), "bfloat16": (0x4300, 128)}


def _byte(e: Any) -> tuple[Any, int] | None:
    """``(array, index)`` when ``e`` is a load of an 8-bit local register array at a constant index."""
    if not (isinstance(e, tvm.ir.TensorLoad) and str(e.source.dtype) in ("uint8", "int8")
            and e.source.scope() == "local" and len(e.indices) == 1 and const_int(e.indices[0]) is not None):
        return None
    return e.source, const_int(e.indices[0])


def bit_field(e: Any) -> tuple[Any, int, int, int, bool] | None:
    """``(array, byte, shift, mask, signed)`` when ``e`` is a bit field of one staged byte: ``(cast_i32(arr[byte]) >>
    shift) & mask`` of a uint8 array (the shift may be absent), or a whole int8 ``arr[byte]`` (signed, possibly cast
    to int32); else None."""
    x = e.value if isinstance(e, tirx.Cast) and dtype_of(e) == "int32" else e
    got = _byte(x)
    if got is not None and str(x.source.dtype) == "int8":
        return got[0], got[1], 0, 0xFF, True
    if not (isinstance(e, tirx.BitwiseAnd) and dtype_of(e) == "int32"):
        return None
    mask = const_int(e.b)
    if mask is None or not 0 < mask < 1024:
        return None
    x, shift = e.a, 0
    if isinstance(x, tirx.RShift):
        shift = const_int(x.b)
        x = x.a
        if shift is None:
            return None
    while isinstance(x, tirx.Cast) and dtype_of(x) == "int32":
        x = x.value
    got = _byte(x)
    if got is None or str(x.source.dtype) != "uint8":
        return None
    return got[0], got[1], shift, mask, False


def bit_fields(e: Any) -> list[Any]:
    """The bit-field nodes of ``e`` (outermost: a field's own cast or load is not counted again)."""
    out: list[Any] = []

    def rec(x: Any) -> None:
        if bit_field(x) is not None:
            out.append(x)
            return
        for child in _children(x):
            rec(child)

    rec(e)
    return out


def _children(x: Any) -> list[Any]:
    if isinstance(x, (tirx.Cast,)):
        return [x.value]
    if hasattr(x, "a") and hasattr(x, "b"):
        return [x.a, x.b]
    if isinstance(x, tvm.ir.Call):
        return list(x.args)
    if isinstance(x, tirx.Select):
        return [x.condition, x.true_value, x.false_value]
    return []


def swap_node(e: Any, node: Any, x: Any) -> Any:
    """``e`` with the sub-expression ``node`` (by identity) replaced by the int32 variable ``x``."""
    def rec(n: Any) -> Any:
        return x if n.same_as(node) else n

    return tvm_ffi.structural_map(e, [(tirx.Cast, rec), (tirx.BitwiseAnd, rec), (tvm.ir.TensorLoad, rec)])


def pair_value(v0: Any, v1: Any, ana: Any) -> Any | None:
    """A two-lane fp16/bf16 expression whose lanes are ``v0`` and ``v1`` (see the module doc), or None."""
    dt = dtype_of(v0)
    if dt not in MAGIC or dtype_of(v1) != dt:
        return None
    magic, base = MAGIC[dt]
    f0, f1 = bit_fields(v0), bit_fields(v1)
    if len(f0) != 1 or len(f1) != 1:
        return None
    (arr0, c0, s0, m0, sg0), (arr1, c1, s1, m1, sg1) = bit_field(f0[0]), bit_field(f1[0])
    pos0, pos1 = 8 * c0 + s0, 8 * c1 + s1
    width = m0.bit_length()
    if not (arr0.same_as(arr1) and m0 == m1 and sg0 == sg1 and (m0 + 1) & m0 == 0 and pos1 == pos0 + 16
            and pos0 // 32 == pos1 // 32 and pos0 % 32 + 16 + width <= 32 and s0 + width <= 8):
        return None
    low = -128 if sg0 else 0  # the field's smallest value: the pair computes x - low, in [0, m]
    if m0 >= base:
        return None
    x = tvm.ir.Var("dq_field", "int32")
    g0, g1 = swap_node(v0, f0[0], x), swap_node(v1, f1[0], x)
    if not tvm_ffi.structural_equal(g0, g1, map_free_vars=False):
        return None
    # the one cast to the result type of x + z
    casts: list[Any] = []

    def find(c: Any) -> Any:
        if dtype_of(c) == dt and mentions(c.value, x):
            casts.append(c)
        return c

    tvm_ffi.structural_map(g0, [(tirx.Cast, find)])
    if len(casts) != 1:
        return None
    cast = casts[0]
    if dtype_of(cast.value) not in ("int32", "int64"):
        return None
    z = ana.simplify(tirx.Cast("int32", cast.value) - x) if dtype_of(cast.value) == "int64" else \
        ana.simplify(cast.value - x)
    if mentions(z, x):
        return None
    zb = ana.const_int_bound(z)
    # (base + (x - low)) - (base - low - z) = x + z: both operands integers in [0, 2 base], which the type holds
    # exactly (fp16 up to 2048, bf16 up to 256), so the subtraction is exact
    if zb.min_value < -base - low or zb.max_value > base - low:
        return None
    h = tvm.ir.Var("dq_half", dt)
    rest = tvm_ffi.structural_map(g0, [(tirx.Cast, lambda c: h if c.same_as(cast) else c)])
    if mentions(rest, x):
        return None
    word = tirx.reinterpret("uint32", tirx.BufferLoad(arr0, [tirx.Ramp(tirx.IntImm("int32", 4 * (c0 // 4)),
                                                                        tirx.IntImm("int32", 1), 4)]))
    shift = pos0 % 32
    # a field in the high nibble of a byte stays in place, 16 times its value: (1024 + 16 x) / 16 = 64 + x exactly,
    # so one fma replaces the shift (fp16 only: 16 x < 1024; bf16's 128 values leave no room)
    high = shift % 8 == 4 and dt == "float16" and (m0 << 4) < base and not sg0
    if high:
        shift -= 4
    if shift:
        word = tirx.shift_right(word, tirx.const(shift, "uint32"))
    # one LOP3 (include/tl/gemm_frag.cuh): the two fields, then the exponent bits: | magic, or for a signed byte b
    # ^ (0x80 | magic) (b ^ 0x80 is b + 128 unsigned; the magic bits lie above the field, so | and ^ agree there)
    lut, top = (0x6A, magic | 0x80) if sg0 else (0xEA, magic)
    fm = m0 << 4 if high else m0
    bits = tirx.call_pure_extern("uint32", f"tl::lop3<{lut}>", word, tirx.const(fm | (fm << 16), "uint32"),
                                 tirx.const(top | (top << 16), "uint32"))
    halves = tirx.reinterpret(f"{dt}x2", bits)
    if high:  # (1024 + 16 x) * 1/16 + (z - 64) = x + z: every step exact
        offset = ana.simplify(tirx.Cast(dt, tirx.Cast("int32", z) - base // 16))
        pair = halves * tirx.Broadcast(tirx.const(1 / 16, dt), 2) + tirx.Broadcast(offset, 2)
    else:
        offset = ana.simplify(tirx.Cast(dt, tirx.IntImm("int32", base - low) - tirx.Cast("int32", z)))
        pair = halves - tirx.Broadcast(offset, 2)
    return vectorise(rest, h, pair)


def vectorise(e: Any, h: Any, pair: Any) -> Any | None:
    """``e`` (fp16, with ``h`` once on a path of +, -, * whose other operands do not mention it) in two lanes,
    ``h`` replaced by ``pair`` and every other operand broadcast; None for any other shape."""
    if isinstance(e, tvm.ir.Var) and e.same_as(h):
        return pair
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)) and dtype_of(e) in MAGIC:
        a_h, b_h = mentions(e.a, h), mentions(e.b, h)
        if a_h == b_h:
            return None
        a = vectorise(e.a, h, pair) if a_h else tirx.Broadcast(e.a, 2)
        b = vectorise(e.b, h, pair) if b_h else tirx.Broadcast(e.b, 2)
        if a is None or b is None:
            return None
        return type(e)(a, b)
    return None

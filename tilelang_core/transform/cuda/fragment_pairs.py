"""Two fp16 B-fragment elements decoded from one 32-bit word at once (used by tl.DequantFragmentsCUDA).

Why: an element-by-element int4 decode costs about four instructions per weight (shift, mask, ``| 0x6400``, and a
byte permute to pair two halves into the mma's 32-bit register). When the two halves of a register come from
bit fields 16 bits apart in one word of the staged packed bytes (the fragment pass pairs k that way: nibbles
``i`` and ``i + 4`` of a word), ``((w >> s) & (m | m << 16)) | 0x64006400`` read as ``half2`` is ``1024 + x`` in
both halves at once, so the pair costs one shift, one ``LOP3``, then the program's own fp16 arithmetic in
``half2`` (``HADD2``/``HMUL2``/``HFMA2`` on both lanes).

:func:`pair_value` does this for any element expression of the form ``F(cast_f16(X + z))``: ``X`` the one bit
field ``(cast_i32(arr[c]) >> s) & m`` of a staged uint8 register array (``m < 1024``), ``z`` an integer the two
elements share (a constant, a zero point) within ``[-1024, 1024]`` (then ``reinterpret(0x6400 | X) - (1024 - z)``
is exact: both operands and the result are integers of magnitude at most 2048), ``F`` fp16 additions,
subtractions and multiplications by values the two elements share (a scale). The two elements must be the same
expression but for their bit field. Anything else returns None and the caller stores the elements one by one.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.rewriter import const_int


def _strip(e: Any) -> Any:
    while isinstance(e, tirx.Cast) and dtype_of(e) == "int32":
        e = e.value
    return e


def _field(e: Any) -> tuple[Any, int, int, int] | None:
    """``(array, byte, shift, mask)`` when ``e`` is ``(cast_i32(arr[byte]) >> shift) & mask`` (the shift may be
    absent) of a uint8 local array at a constant index, else None."""
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
    x = _strip(x)
    if not (isinstance(x, tvm.ir.TensorLoad) and str(x.source.dtype) == "uint8" and x.source.scope() == "local"
            and len(x.indices) == 1 and const_int(x.indices[0]) is not None):
        return None
    return x.source, const_int(x.indices[0]), shift, mask


def _fields(e: Any) -> list[Any]:
    out: list[Any] = []

    def rec(x: Any) -> Any:
        if _field(x) is not None:
            out.append(x)
        return x

    tvm_ffi.structural_map(e, [(tirx.BitwiseAnd, rec)])
    return out


def _mentions(e: Any, var: Any) -> bool:
    hit: list[Any] = []
    tvm_ffi.structural_map(e, [(tvm.ir.Var, lambda v: (hit.append(v), v)[1] if v.same_as(var) else v)])
    return bool(hit)


def pair_value(v0: Any, v1: Any, ana: Any) -> Any | None:
    """A ``float16x2`` expression whose lanes are ``v0`` and ``v1`` (see the module doc), or None."""
    if dtype_of(v0) != "float16" or dtype_of(v1) != "float16":
        return None
    f0, f1 = _fields(v0), _fields(v1)
    if len(f0) != 1 or len(f1) != 1:
        return None
    (arr0, c0, s0, m0), (arr1, c1, s1, m1) = _field(f0[0]), _field(f1[0])
    pos0, pos1 = 8 * c0 + s0, 8 * c1 + s1
    width = m0.bit_length()
    if not (arr0.same_as(arr1) and m0 == m1 and (m0 + 1) & m0 == 0 and pos1 == pos0 + 16
            and pos0 // 32 == pos1 // 32 and pos0 % 32 + 16 + width <= 32 and s0 + width <= 8):
        return None
    x = tvm.ir.Var("dq_field", "int32")
    g0 = tvm_ffi.structural_map(v0, [(tirx.BitwiseAnd, lambda e: x if e.same_as(f0[0]) else e)])
    g1 = tvm_ffi.structural_map(v1, [(tirx.BitwiseAnd, lambda e: x if e.same_as(f1[0]) else e)])
    if not tvm_ffi.structural_equal(g0, g1, map_free_vars=False):
        return None
    # the one cast to float16 of x + z
    casts: list[Any] = []

    def find(c: Any) -> Any:
        if dtype_of(c) == "float16" and _mentions(c.value, x):
            casts.append(c)
        return c

    tvm_ffi.structural_map(g0, [(tirx.Cast, find)])
    if len(casts) != 1:
        return None
    cast = casts[0]
    z = ana.simplify(cast.value - x)
    if _mentions(z, x) or dtype_of(cast.value) not in ("int32", "int64"):
        return None
    zb = ana.const_int_bound(z)
    if zb.min_value < -1024 or zb.max_value > 1024:
        return None
    h = tvm.ir.Var("dq_half", "float16")
    rest = tvm_ffi.structural_map(g0, [(tirx.Cast, lambda c: h if c.same_as(cast) else c)])
    if _mentions(rest, x):
        return None
    word = tirx.reinterpret("uint32", tirx.BufferLoad(arr0, [tirx.Ramp(tirx.IntImm("int32", 4 * (c0 // 4)),
                                                                        tirx.IntImm("int32", 1), 4)]))
    shift = pos0 % 32
    if shift:
        word = tirx.shift_right(word, tirx.const(shift, "uint32"))
    bits = tirx.bitwise_or(tirx.bitwise_and(word, tirx.const(m0 | (m0 << 16), "uint32")),
                           tirx.const(0x64006400, "uint32"))
    offset = ana.simplify(tirx.Cast("float16", tirx.IntImm("int32", 1024) - tirx.Cast("int32", z)))
    pair = tirx.reinterpret("float16x2", bits) - tirx.Broadcast(offset, 2)
    return _vectorise(rest, h, pair)


def _vectorise(e: Any, h: Any, pair: Any) -> Any | None:
    """``e`` (fp16, with ``h`` once on a path of +, -, * whose other operands do not mention it) in two lanes,
    ``h`` replaced by ``pair`` and every other operand broadcast; None for any other shape."""
    if isinstance(e, tvm.ir.Var) and e.same_as(h):
        return pair
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)) and dtype_of(e) == "float16":
        a_h, b_h = _mentions(e.a, h), _mentions(e.b, h)
        if a_h == b_h:
            return None
        a = _vectorise(e.a, h, pair) if a_h else tirx.Broadcast(e.a, 2)
        b = _vectorise(e.b, h, pair) if b_h else tirx.Broadcast(e.b, 2)
        if a is None or b is None:
            return None
        return type(e)(a, b)
    return None

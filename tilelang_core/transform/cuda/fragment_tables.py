"""Two B-fragment elements of a nibble-indexed decode looked up at once with byte permutes (tl.DequantFragmentsCUDA).

Why: a decode whose value is any function of one 4-bit field, such as fp4 e2m1 written as selects and shifts on
``q`` (``bench/gpu/dequant_variants.py``), is not ``cast(x + z)``, so the word pairs of ``fragment_pairs.py`` do
not apply, and element by element it costs ~18 SASS instructions per weight (nested selects in float32, ``I2F``
and ``F2F`` conversions on the 16-per-clock conversion pipe): fp4 e2m1 with groups of 32 ran 126.6 us at
16x8192x8192 on the H200 against 26-31 us for the int4 forms. But such a value takes at most 16 values, which
the compiler can compute: :func:`table_pair` evaluates the part of the element expression that depends only on the
field (``h(x)``, in the result type: fp16/bf16) at every field value, with the program's own dtypes and rounding
(:func:`evaluate`: IEEE float32/fp16/bf16 operations round to nearest even, as the generated CUDA C does without
fast math; anything it cannot evaluate exactly, a transcendental, a denormal float32 intermediate (``-ftz`` aside),
is refused), and looks the 16 results up with ``PRMT``: the four nibbles of a 16-bit group of a word are exactly a
``prmt`` selector, so one ``prmt`` looks up four high bytes in an 8-entry byte table held in two constant
registers, a second does entries 8..15, and a third (the nibbles' top bits, sign-replicated) makes the byte mask
that one ``LOP3`` selects with (``tl::nib_lut4``, ``include/tl/gemm_frag.cuh``). The low bytes the same way
unless all 16 are zero (fp4 e2m1: every value has at most two significant bits). One more ``prmt`` places a
register's two elements (its two halves). Then the rest of the expression (``F``: ``+ - *`` by values the two
elements share, a group scale) on ``half2``. The values are bit for bit the nest's: nothing is rounded again.

Which spelling of the decode does not matter (selects, shifts, an arithmetic formula, a comparison chain): only its
values at the 16 field values; a field of fewer bits (a mask of 1, 3 or 7) looks up the first 2, 4 or 8 entries.
The two elements must be the same expression but for their field, each field one nibble ``(b >> 0|4) & m`` of the
same 32-bit word of a staged uint8 register array. :func:`table_pair` returns None otherwise.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from .common import loads_in, mentions
from .fragment_pairs import MAGIC, bit_field, bit_fields, vectorise


class _NotExactError(Exception):
    """The expression cannot be evaluated here exactly as the GPU would."""


def _round(v: float, dt: str) -> float:
    """``v`` (a float64 result of one IEEE operation) rounded to ``dt`` as the hardware's round-to-nearest-even does
    (float64 holds every float32 / fp16 / bf16 sum, difference and product exactly up to one rounding)."""
    if dt == "float64":
        return v
    if dt == "float32":
        r = float(np.float32(v))
        if r != 0.0 and abs(r) < 2.0 ** -126:
            raise _NotExactError("a denormal float32 intermediate")
        return r
    if dt == "float16":
        return float(np.float16(v))
    if dt == "bfloat16":
        if math.isnan(v) or math.isinf(v):
            raise _NotExactError("a non-finite bfloat16")
        bits = struct.unpack("<I", struct.pack("<f", float(np.float32(v))))[0]
        if float(np.float32(v)) != v:
            raise _NotExactError("a bfloat16 rounding of a value float32 does not hold")
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    raise _NotExactError(dt)


def _wrap(v: int, dt: str) -> int:
    bits = int(dt[len(dt.rstrip("0123456789")):] or 32)
    v &= (1 << bits) - 1
    return v - (1 << bits) if dt.startswith("int") and v >> (bits - 1) else v


def evaluate(e: Any, env: dict[Any, int]) -> float | int:
    """The value of the scalar expression ``e`` with its variables bound by ``env`` (var -> int), each operation in
    its own dtype; raises ``_NotExactError`` for anything outside basic arithmetic, comparisons, selects, bit operations
    and casts."""
    dt = dtype_of(e)
    is_float = dt.startswith("float") or dt.startswith("bfloat")
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    if isinstance(e, tirx.FloatImm):
        return _round(float(e.value), dt)
    if isinstance(e, tvm.ir.Var):
        for k, v in env.items():
            if k.same_as(e):
                return v
        raise _NotExactError(f"the free variable {e.name}")
    if isinstance(e, tirx.Cast):
        v = evaluate(e.value, env)
        if is_float:
            return _round(float(v), dt)
        if isinstance(v, float):
            if not math.isfinite(v):
                raise _NotExactError("a non-finite float cast to an integer")
            return _wrap(int(v), dt)  # C's truncation toward zero
        return _wrap(int(v), dt) if dt != "bool" else int(bool(v))
    if isinstance(e, tirx.Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    if isinstance(e, tvm.ir.Call):
        name = str(e.op.name) if isinstance(e.op, tvm.ir.Op) else ""
        args = e.args
        if name in ("tirx.if_then_else", "prim.if_then_else"):
            return evaluate(args[1] if evaluate(args[0], env) else args[2], env)
        ints = {"tirx.shift_left": lambda a, b: a << b, "tirx.shift_right": lambda a, b: a >> b,
                "tirx.bitwise_and": lambda a, b: a & b, "tirx.bitwise_or": lambda a, b: a | b,
                "tirx.bitwise_xor": lambda a, b: a ^ b}
        if name in ints and not is_float:
            a, b = (int(evaluate(x, env)) for x in args)
            if name in ("tirx.shift_left", "tirx.shift_right") and not 0 <= b < 32:
                raise _NotExactError("a shift by more than the width")
            if name == "tirx.shift_right" and dt.startswith("uint"):
                a &= (1 << int(dt[4:] or 32)) - 1
            return _wrap(ints[name](a, b), dt)
        if name == "tirx.bitwise_not" and not is_float:
            return _wrap(~int(evaluate(args[0], env)), dt)
        raise _NotExactError(f"the call {name or e.op}")
    bit_nodes = {tirx.BitwiseAnd: lambda a, b: a & b, tirx.BitwiseOr: lambda a, b: a | b,
                 tirx.BitwiseXor: lambda a, b: a ^ b, tirx.LShift: lambda a, b: a << b,
                 tirx.RShift: lambda a, b: a >> b}  # TVM 0.27's node forms of the bit operators
    for op, fn in bit_nodes.items():
        if isinstance(e, op) and not is_float:
            a, b = int(evaluate(e.a, env)), int(evaluate(e.b, env))
            if op in (tirx.LShift, tirx.RShift) and not 0 <= b < 32:
                raise _NotExactError("a shift by more than the width")
            if op is tirx.RShift and dt.startswith("uint"):
                a &= (1 << int(dt[4:] or 32)) - 1
            return _wrap(fn(a, b), dt)
    if isinstance(e, tirx.BitwiseNot) and not is_float:
        return _wrap(~int(evaluate(e.a, env)), dt)
    binary = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
              tirx.Min: min, tirx.Max: max}
    compare = {tirx.EQ: lambda a, b: a == b, tirx.NE: lambda a, b: a != b, tirx.LT: lambda a, b: a < b,
               tirx.LE: lambda a, b: a <= b, tirx.GT: lambda a, b: a > b, tirx.GE: lambda a, b: a >= b}
    for op, fn in compare.items():
        if isinstance(e, op):
            return int(fn(evaluate(e.a, env), evaluate(e.b, env)))
    if isinstance(e, tirx.And):
        return int(bool(evaluate(e.a, env)) and bool(evaluate(e.b, env)))
    if isinstance(e, tirx.Or):
        return int(bool(evaluate(e.a, env)) or bool(evaluate(e.b, env)))
    if isinstance(e, tirx.Not):
        return int(not evaluate(e.a, env))
    for op, fn in binary.items():
        if isinstance(e, op):
            a, b = evaluate(e.a, env), evaluate(e.b, env)
            return _round(float(fn(a, b)), dt) if is_float else _wrap(int(fn(a, b)), dt)
    if not is_float and isinstance(e, (tirx.FloorDiv, tirx.FloorMod)):
        a, b = int(evaluate(e.a, env)), int(evaluate(e.b, env))
        if b == 0:
            raise _NotExactError("a division by zero")
        return _wrap(a // b if isinstance(e, tirx.FloorDiv) else a % b, dt)
    raise _NotExactError(type(e).__name__)


def _bits(v: float, dt: str) -> int:
    """The 16-bit pattern of the fp16/bf16 value ``v``."""
    if dt == "float16":
        return int(np.array(v, dtype=np.float16).view(np.uint16))
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16


def _only_field(e: Any, x: Any) -> bool:
    """``e`` depends on nothing but ``x`` (no loads, no other variable)."""
    if loads_in(e):
        return False
    free: list[Any] = []

    def rec(v: Any) -> Any:
        if not v.same_as(x):
            free.append(v)
        return v

    tvm_ffi.structural_map(e, [(tvm.ir.Var, rec)])
    return not free and mentions(e, x)


def _split(e: Any, x: Any, dt: str) -> Any | None:
    """The sub-expression ``h`` of ``e`` that is a function of ``x`` alone, of type ``dt``, reached from the root
    through ``+ - *`` whose other operand does not mention ``x`` (what :func:`vectorise` pairs); None otherwise."""
    if dtype_of(e) == dt and _only_field(e, x):
        return e
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Mul)) and dtype_of(e) == dt:
        a_x, b_x = mentions(e.a, x), mentions(e.b, x)
        if a_x != b_x:
            return _split(e.a if a_x else e.b, x, dt)
    return None


def _table(h: Any, x: Any, mask: int, dt: str) -> list[int] | None:
    """The 16-bit patterns of ``h`` at ``x`` = 0..mask, or None when it cannot be evaluated exactly."""
    try:
        vals = [evaluate(h, {x: v}) for v in range(mask + 1)]
    except (_NotExactError, OverflowError, ValueError, ZeroDivisionError):
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in vals):
        return None  # NaN payloads: not worth matching bit for bit
    return [_bits(float(v), dt) for v in vals]


def _u32(c: int) -> Any:
    return tirx.const(c, "uint32")


def _words(table: list[int], byte: int) -> list[int]:
    """Byte ``byte`` (0 low, 1 high) of each 16-entry table value packed four to a word (entry i in byte i % 4 of
    word i // 4), padded with zeros."""
    b = [(v >> (8 * byte)) & 0xFF for v in table] + [0] * (16 - len(table))
    return [b[4 * w] | b[4 * w + 1] << 8 | b[4 * w + 2] << 16 | b[4 * w + 3] << 24 for w in range(4)]


def _lookup(word: Any, group: int, mask: int, words: list[int]) -> Any:
    """``tl::nib_lut4``: the bytes ``table[nibble]`` of the four nibbles of 16-bit group ``group`` of ``word``."""
    return tirx.call_pure_extern("uint32", f"tl::nib_lut4<{group}, {mask}>", word, *(_u32(w) for w in words))


def _one_field(v: Any) -> Any | None:
    """The bit field ``v`` reads (every occurrence the same field, as a decode that uses ``q`` several times after
    it was inlined), or None for none or several."""
    fs = bit_fields(v)
    if not fs or any(not tvm_ffi.structural_equal(f, fs[0]) for f in fs[1:]):
        return None
    return fs[0]


def _swap_all(e: Any, field: Any, x: Any) -> Any:
    """``e`` with every occurrence of ``field`` replaced by the int32 variable ``x``."""
    def rec(n: Any) -> Any:
        return x if tvm_ffi.structural_equal(n, field) else n

    return tvm_ffi.structural_map(e, [(type(field), rec)])


def table_pair(v0: Any, v1: Any, ana: Any) -> Any | None:
    """A two-lane fp16/bf16 expression whose lanes are ``v0`` and ``v1`` (see the module doc), or None."""
    dt = dtype_of(v0)
    if dt not in MAGIC or dtype_of(v1) != dt:
        return None
    f0, f1 = _one_field(v0), _one_field(v1)
    if f0 is None or f1 is None:
        return None
    (arr0, c0, s0, m0, sg0), (arr1, c1, s1, m1, sg1) = bit_field(f0), bit_field(f1)
    if not (arr0.same_as(arr1) and m0 == m1 and not sg0 and not sg1 and m0 in (1, 3, 7, 15) and s0 in (0, 4)
            and s1 in (0, 4) and c0 // 4 == c1 // 4 and (c0, s0) != (c1, s1)):
        return None
    x = tvm.ir.Var("dq_field", "int32")
    g0, g1 = _swap_all(v0, f0, x), _swap_all(v1, f1, x)
    if not tvm_ffi.structural_equal(g0, g1, map_free_vars=False):
        return None
    h = _split(g0, x, dt)
    if h is None:
        return None
    table = _table(h, x, m0, dt)
    if table is None:
        return None
    hv = tvm.ir.Var("dq_half", dt)
    rest = tvm_ffi.structural_map(g0, [(type(h), lambda n: hv if n.same_as(h) else n)])
    if mentions(rest, x) or not mentions(rest, hv):
        return None
    word = tirx.reinterpret("uint32", tirx.BufferLoad(arr0, [tirx.Ramp(tirx.IntImm("int32", 4 * (c0 // 4)),
                                                                        tirx.IntImm("int32", 1), 4)]))
    nib = [(2 * (c % 4) + s // 4) for c, s in ((c0, s0), (c1, s1))]  # nibble 0..7 of the word
    his = _words(table, 1)
    los = _words(table, 0) if any(v & 0xFF for v in table) else None
    groups = sorted({n // 4 for n in nib})
    hi = {g: _lookup(word, g, m0, his) for g in groups}
    lo = {g: _lookup(word, g, m0, los) for g in groups} if los is not None else None
    (g_0, i0), (g_1, i1) = divmod(nib[0], 4), divmod(nib[1], 4)
    prmt = "tl::prmt"
    if g_0 == g_1:
        if lo is None:  # bytes 4..7 are the zero word: [0, hi[i0], 0, hi[i1]]
            sel = 4 | i0 << 4 | 4 << 8 | i1 << 12
            bits = tirx.call_pure_extern("uint32", prmt, hi[g_0], _u32(0), _u32(sel))
        else:
            sel = i0 | (4 + i0) << 4 | i1 << 8 | (4 + i1) << 12
            bits = tirx.call_pure_extern("uint32", prmt, lo[g_0], hi[g_0], _u32(sel))
    else:  # element 0 from group g_0 (bytes 0..3), element 1 from g_1 (bytes 4..7), then the halves masked
        sel = i0 | i0 << 4 | (4 + i1) << 8 | (4 + i1) << 12
        hb = tirx.call_pure_extern("uint32", prmt, hi[g_0], hi[g_1], _u32(sel))
        if lo is None:
            bits = tirx.bitwise_and(hb, _u32(0xFF00FF00))
        else:
            lb = tirx.call_pure_extern("uint32", prmt, lo[g_0], lo[g_1], _u32(sel))
            bits = tirx.call_pure_extern("uint32", "tl::lop3<202>", _u32(0xFF00FF00), hb, lb)
    pair = tirx.reinterpret(f"{dt}x2", bits)
    return vectorise(rest, hv, pair)


def table_of(v: Any) -> list[int] | None:
    """For tests and notes: the 16-bit patterns the element expression ``v`` takes at its one nibble field's values
    (the table :func:`table_pair` looks up), or None."""
    dt = dtype_of(v)
    f = _one_field(v)
    if dt not in MAGIC or f is None:
        return None
    _, _, _, m, sg = bit_field(f)
    if sg:
        return None
    x = tvm.ir.Var("dq_field", "int32")
    h = _split(_swap_all(v, f, x), x, dt)
    return None if h is None else _table(h, x, m, dt)


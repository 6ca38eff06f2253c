"""Pass: int → float16 casts of small integers on CUDA through the exponent bits, without ``I2F``.

A dequantising nest casts every weight: ``T.cast(q - 8, "float16")`` with ``q`` a nibble. nvcc compiles an int →
half conversion to ``I2F.F16``, which runs on the conversion pipe at a quarter of the ALU rate and is one
instruction per weight on its own. When the analyzer proves the integer ``x`` lies in a range of fewer than 1024
values, ``[lo, lo + 1024)``, the cast is exact as ``reinterpret<half>(0x6400 | (x - lo)) - (1024 - lo)``: the bits
``0x6400 | m`` are the fp16 number ``1024 + m`` for ``0 <= m < 1024`` (exponent 10, ``m`` the mantissa), and the
subtraction of two integers in ``[0, 2048]`` whose difference is below 1024 in magnitude is exact in fp16. That is
an integer add, one ``LOP3`` and one half subtraction on the ALU (the trick of Marlin-class kernels and of our
W4A16 template, here for any program).

Only casts of 32/64-bit integers (the result of integer arithmetic: ``q - 8``, ``q - z``): a cast straight from an
8-bit value keeps its conversion (ptxas converts int8 in one instruction, and the rewrite measured more
instructions there: the int8 weight loop grew from 1542 to 2149 SASS instructions per K step). Why it pays where
it applies, before any GPU measurement: the conversion pipe takes 16 results per clock per SM, so 256 conversions
per K step of 4 warps occupy it 2048 clocks against 1813 issue clocks for the whole loop (hi_first, 16x8192x8192):
it was the bottleneck; after the rewrite the loop is 1564 instructions, none on that pipe.

Bounds: the analyzer's constant bounds of the cast's operand, where a load of a one-element-at-a-time local (the
``q`` of ``q = (P[i, j // 2] >> s) & 0xF``) is read as the value stored into that element when it is stored exactly
once in the kernel (so every value it ever holds is that expression's). Other casts are left alone.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.rewriter import const_int

SPAN = 1024  # fp16 integers with exponent 10: 1024 + m, m in [0, 1024)


def small_int_to_half_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    stores: dict[tuple[Any, int], list[Any]] = {}

    def count(st: Any) -> Any:
        if st.buffer.scope() in ("local", "local.var") and len(st.indices) == 1:
            i = const_int(st.indices[0])
            key = (st.buffer, i if i is not None else -1)
            stores.setdefault(key, []).append(st.value)
        return st

    tvm_ffi.structural_map(func.body, [(tirx.BufferStore, count)])
    varying = {b for (b, i) in stores if i == -1}  # written at a computed index: no single value per element
    single = {k: v[0] for k, v in stores.items() if len(v) == 1 and k[1] >= 0 and k[0] not in varying}
    ana = tvm.sym.Analyzer()

    def inline(e: Any, depth: int = 0) -> Any:
        """``e`` with loads of single-store local elements replaced by their stored values (for bounds only)."""
        if depth > 4:
            return e

        def load(ld: Any) -> Any:
            if len(ld.indices) == 1:
                i = const_int(ld.indices[0])
                for (b, j), v in single.items():
                    if b.same_as(ld.source) and j == i and dtype_of(v) == dtype_of(ld):
                        return inline(v, depth + 1)
            return ld

        return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])

    def rewrite(c: Any) -> Any:
        src = str(dtype_of(c.value))
        if dtype_of(c) != "float16" or src not in ("int32", "uint32", "int64", "uint64"):  # scalars of int math
            return c
        x = c.value
        try:
            b = ana.const_int_bound(inline(x))
        except Exception:  # noqa: BLE001 (no bound: keep the cast)
            return c
        lo, hi = int(b.min_value), int(b.max_value)
        if hi - lo >= SPAN or lo <= -SPAN or hi >= SPAN:
            return c
        m = tirx.Cast("int32", x) - lo if lo else tirx.Cast("int32", x)
        bits = tirx.BitwiseOr(tirx.Cast("uint16", m), tirx.const(0x6400, "uint16"))
        # bits = fp16 1024 + (x - lo), so x = bits - (1024 - lo)
        return tirx.Sub(tirx.call_intrin("float16", "tirx.reinterpret", bits), tirx.const(float(SPAN - lo), "float16"))

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Cast, rewrite)]))

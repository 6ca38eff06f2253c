"""Pass: consecutive float32 element atomics into one vector ``red.global.add.v2/v4.f32`` (``tl.cuda.vector_atomics``).

What: after ``tl.LowerParallelCUDA`` a ``T.atomic_add`` of a fragment (``for i, j in T.Parallel(..):
T.atomic_add(dQ[.., j], dq[i, j])``, or the tile form ``T.atomic_add(dQ[..], dq)``, or ``T.atomic_addx2/x4``) is one
``atomicAdd(&B[off_r], v_r)`` per register ``r``, each under its own bounds guard. Where 4 (else 2) statements in a
row add into the same global float32 tensor at consecutive flat offsets ``off, off + 1, ..``, under the same guard
(structurally equal, or none), with ``off`` provably a multiple of 4 (2) — 16 (8) bytes, since CUDA tensors are
16-byte aligned (the launcher checks) — they become one ``tl::atomic_add_v4`` (``tl::atomic_add_v2``) under that
guard: ``red.global.add.v4.f32`` / ``.v2.f32`` (``include/tl/atomic.cuh``; sm_90+).

Why: the flash-attention backward adds its ``64 x 128`` float32 ``dQ`` share per query tile into global memory:
64 ``REDG.E.ADD.F32`` per thread per iteration, each warp instruction touching 8 sectors of which it fills half
(lanes ``4 k .. 4 k + 3`` own columns ``2 (l % 4) + {0, 1}`` of a row in the mma/wgmma accumulator layouts, so the
two registers of a pair are adjacent). As pairs: 32 ``REDG.E.ADD.F32x2`` filling each sector they touch, half the
L1-to-L2 requests of the atomics.

Sound: each element is still added atomically (what ``atomicAdd`` guarantees; the vector instruction is not one
atomic unit, and relaxed element atomics of one thread have no order to keep); a value that reads the destination
tensor keeps its element atomics (hoisting it above the previous add would change what it reads). Only
statements that are adjacent after the lowering are paired; an atomic inside a rolled loop keeps its form (a note
says how many became vectors, and how many float32 global atomics stayed).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.notes import add_notes
from ..common.regions import is_global
from ..common.rewriter import Rewriter, const_int, seq
from .common import extern, extern_name

WIDTHS = (4, 2)  # lanes of red.global.add.v4.f32 / .v2.f32
FUNCS = {4: "tl::atomic_add_v4", 2: "tl::atomic_add_v2"}


def _arch_number(arch: str) -> int:
    digits = "".join(c for c in str(arch) if c.isdigit())
    return int(digits) if digits else 0


def vector_atomics_cuda(func: tirx.PrimFunc, opts: Any, arch: str) -> tirx.PrimFunc:
    from ...pass_config import PassConfigKey, resolve

    if not resolve(opts)[PassConfigKey.TL_CUDA_VECTOR_ATOMICS] or _arch_number(arch) < 90:
        return func
    rw = _Pair()
    out = rw.run(func)
    if rw.paired or rw.kept:
        made = ", ".join(f"{n} x{w}" for w, n in sorted(rw.paired.items(), reverse=True)) or "none"
        out = add_notes(out, [f"tl.cuda.vector_atomics: {sum(w * n for w, n in rw.paired.items())} float32 element "
                              f"atomics became vector red.global.add ({made}); {rw.kept} stayed element atomics "
                              "(no adjacent consecutive, aligned partner under the same guard)"])
    return out


class _Atomic:
    """One ``[if (cond)] atomicAdd(&B[idx], value)`` statement, its flat offset into ``B``."""

    def __init__(self, cond: Any, load: Any, value: Any, flat: Any) -> None:
        self.cond, self.load, self.value, self.flat = cond, load, value, flat


def _flat_offset(load: Any) -> Any:
    buf = load.source
    if const_int(buf.elem_offset) != 0:
        return None
    shape = list(buf.shape)
    strides = list(buf.strides) if len(buf.strides) else None
    if strides is None:
        strides, acc = [], tirx.IntImm("int32", 1)
        for ext in reversed(shape):
            strides.insert(0, acc)
            acc = acc * ext
    flat: Any = tirx.IntImm("int32", 0)
    for i, s in zip(load.indices, strides):
        flat = flat + i * s
    return flat


def _reads(e: Any, buf: Any) -> bool:
    found = []

    def seen(ld: Any) -> Any:
        if ld.source.same_as(buf):
            found.append(ld)
        return ld

    tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, seen)])
    return bool(found)


class _Pair(Rewriter):
    pass_name = "tl.VectorAtomicsCUDA"

    def __init__(self) -> None:
        super().__init__()
        self.paired: dict[int, int] = {}
        self.kept = 0

    def atomic(self, s: Any) -> _Atomic | None:
        cond = None
        if isinstance(s, tirx.IfThenElse) and s.else_case is None:
            cond, s = s.condition, s.then_case
        if not isinstance(s, tirx.Evaluate) or not isinstance(s.value, tvm.ir.Call):
            return None
        call = s.value
        if extern_name(call) != "atomicAdd" or len(call.args) != 3:
            return None
        addr, value = call.args[1], call.args[2]
        if not (isinstance(addr, tvm.ir.Call) and str(getattr(addr.op, "name", "")) == "tirx.address_of"):
            return None
        load = addr.args[0]
        if not isinstance(load, tvm.ir.TensorLoad) or str(load.source.dtype) != "float32" or \
                not is_global(load.source) or dtype_of(value) != "float32" or _reads(value, load.source):
            return None
        flat = _flat_offset(load)
        return None if flat is None else _Atomic(cond, load, value, flat)

    def group(self, items: list[_Atomic | None], width: int) -> bool:
        if len(items) < width or any(a is None for a in items[:width]):
            return False
        first = items[0]
        for k, a in enumerate(items[1:width], start=1):
            if not a.load.source.same_as(first.load.source):
                return False
            if (a.cond is None) != (first.cond is None) or \
                    (a.cond is not None and not tvm_ffi.structural_equal(a.cond, first.cond)):
                return False
            if const_int(self.ana.simplify(a.flat - first.flat)) != k:
                return False
        return self.prove(tirx.EQ(tirx.floormod(first.flat, width), 0))

    def visit_SeqStmt(self, s: Any) -> Any:  # noqa: N802
        s = super().visit_SeqStmt(s)
        if not isinstance(s, tirx.SeqStmt):
            return s
        stmts = list(s.seq)
        found = [self.atomic(x) for x in stmts]
        if sum(a is not None for a in found) < 2:
            self.kept += sum(a is not None for a in found)
            return s
        out, i = [], 0
        while i < len(stmts):
            for w in WIDTHS:
                if self.group(found[i:i + w], w):
                    a0 = found[i]
                    call = extern(FUNCS[w], tirx.address_of(a0.load), *[a.value for a in found[i:i + w]])
                    out.append(tirx.IfThenElse(a0.cond, call, None) if a0.cond is not None else call)
                    self.paired[w] = self.paired.get(w, 0) + 1
                    i += w
                    break
            else:
                self.kept += found[i] is not None
                out.append(stmts[i])
                i += 1
        return seq(out, s.span)

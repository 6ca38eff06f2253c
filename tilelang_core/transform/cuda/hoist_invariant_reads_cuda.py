"""Pass: register loads of read-only global data that no iteration of a serial loop changes move before the loop.

A dequantising ``T.gemm`` decoded into fragments reads its per-channel scale (``S[n, 0]``) into a register every K
step of the pipelined loop, right after the step's barrier and right before the decode needs it: the load's L2
latency is paid once per step, with little else for the warp to do meanwhile (the H200 profile of the decode
kernels: few warps ever eligible). Neither NVVM nor ptxas moves a load across ``__syncthreads``, so the compiler
does it here, for any loop and any such load, not only the scale's.

What moves: at the top level of the body of a serial loop of constant, positive trip count, a register array
allocated there (``local``) whose every store in the body is a top-level statement storing an expression of
constants, variables bound outside the loop and loads of global buffers the kernel never writes (no store, no call
takes them) into it — guarded or not. The allocation and its stores go before the loop, in order; the loop reads the
same values it computed before (the loads do not depend on anything the loop changes), so results are bit for bit
the same. ``pass_configs`` ``tl.cuda.hoist_invariant_reads`` switches it on; it is off by default because the H200
measured no gain (ptxas already issues those loads ahead of the step's barrier) and a loss for int8 (docs/cuda.md).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..common.regions import is_global
from ..common.rewriter import const_int, seq

PURE_OPS = ("tirx.if_then_else", "tirx.call_pure_extern", "tirx.reinterpret", "tirx.likely", "tirx.bitwise_and",
            "tirx.bitwise_or", "tirx.shift_right", "tirx.shift_left")


def _written_globals(func: tirx.PrimFunc) -> set[Any]:
    """Buffers the kernel may write: stored into, or named by any call's arguments."""
    out: set[Any] = set()

    def store(st: Any) -> Any:
        out.add(st.buffer)
        return st

    def call(c: Any) -> Any:
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) in PURE_OPS:
            return c
        for a in c.args:  # address_of(B[...]), regions, access pointers: the callee may write through them
            tvm_ffi.structural_walk(a, [(tvm.ir.TensorLoad, lambda ld: out.add(ld.source)),
                                        (tvm.ir.Var, lambda v: out.add(v))], order="pre")
        return c

    tvm_ffi.structural_map(func.body, [(tirx.BufferStore, store), (tvm.ir.Call, call)])
    return out


def _bound_inside(loop: Any) -> set[Any]:
    """Variables the loop binds: its own, nested loops', ``Bind`` statements'."""
    out = {loop.loop_var}

    def rec(x: Any) -> Any:
        out.add(x.loop_var if isinstance(x, tirx.For) else x.var)
        return x

    tvm_ffi.structural_map(loop.body, [(tirx.For, rec), (tirx.Bind, rec)])
    return out


class _Invariant:
    def __init__(self, written: set[Any], inside: set[Any]) -> None:
        self.written, self.inside = written, inside

    def expr(self, e: Any) -> bool:
        ok = [True]

        def var(v: Any) -> Any:
            if v in self.inside:
                ok[0] = False
            return v

        def load(ld: Any) -> Any:
            if not is_global(ld.source) or ld.source in self.written:
                ok[0] = False
            return ld

        def call(c: Any) -> Any:
            if not (isinstance(c.op, tvm.ir.Op) and str(c.op.name) in PURE_OPS):
                ok[0] = False
            return c

        tvm_ffi.structural_map(e, [(tvm.ir.Var, var), (tvm.ir.TensorLoad, load), (tvm.ir.Call, call)])
        return ok[0]

    def store_into(self, st: Any, arr: Any) -> bool:
        """``st`` stores only invariant values into ``arr`` (a store, or an if/else of such stores)."""
        if isinstance(st, tirx.BufferStore):
            return st.buffer.same_as(arr) and all(self.expr(i) for i in st.indices) and self.expr(st.value)
        if isinstance(st, tirx.IfThenElse):
            return (self.expr(st.condition) and self.store_into(st.then_case, arr)
                    and (st.else_case is None or self.store_into(st.else_case, arr)))
        return False


def _stores_to(node: Any, arr: Any) -> int:
    n = [0]

    def store(st: Any) -> Any:
        if st.buffer.same_as(arr):
            n[0] += 1
        return st

    tvm_ffi.structural_map(node, [(tirx.BufferStore, store)])
    return n[0]


def hoist_invariant_reads_cuda(func: tirx.PrimFunc, enabled: bool = True) -> tirx.PrimFunc:
    if not enabled:
        return func
    written = _written_globals(func)

    def loop(f: Any) -> Any:
        ext = const_int(f.extent)
        if f.kind != tirx.ForKind.SERIAL or ext is None or ext <= 0 or not isinstance(f.body, tirx.SeqStmt):
            return f
        body = list(f.body.seq)
        inv = _Invariant(written, _bound_inside(f))
        moved: list[Any] = []
        for s in [s for s in body if isinstance(s, tirx.AllocBuffer) and s.buffer.scope() == "local"]:
            arr = s.buffer
            mine = [x for x in body if x is not s and _stores_to(x, arr)]
            if not mine or any(not inv.store_into(x, arr) for x in mine):  # every store into it, top level
                continue
            moved += [s, *mine]
        if not moved:
            return f
        keep = [x for x in body if not any(x.same_as(m) for m in moved)]
        out = tirx.For(f.loop_var, f.min, f.extent, f.kind, seq(keep, f.body.span), f.thread_binding,
                       f.annotations, f.step, f.span)
        return tirx.SeqStmt([*[x for x in body if any(x.same_as(m) for m in moved)], out])

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, loop)]))

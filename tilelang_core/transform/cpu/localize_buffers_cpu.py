"""Pass: give every on-chip tile (shared, fragment, local, var) the CPU's plain scope.

A CPU has one memory; what matters is how TVM's LLVM codegen places the array. In TVM 0.27 an allocation in
scope ``local``/``shared``/``local.fragment`` inside a parallel loop becomes a heap workspace call per block,
whose pointer LLVM must assume may alias every other tile — which keeps the gemm accumulators from being
promoted to registers. In scope ``global`` the same allocation is a stack ``alloca`` inside the parallel
body: one private copy per block, no allocator call, and provably distinct from the other tiles.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

_ON_CHIP = ("shared", "shared.dyn", "local", "local.fragment", "local.var")


class _Collect:
    def __init__(self) -> None:
        self.remap: dict[Any, Any] = {}

    def __call__(self, s: Any) -> Any:
        buf = s.buffer
        if buf.scope() in _ON_CHIP and buf not in self.remap:
            self.remap[buf] = tirx.decl_buffer(list(buf.shape), buf.dtype, buf.name, scope="global")
        return s


def localize_buffers_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    collect = _Collect()
    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, collect)])
    if not collect.remap:
        return func
    remap = collect.remap

    def swap(v: Any) -> Any:
        return remap.get(v, v) if isinstance(v, tvm.ir.Var) and tirx.is_buffer_var(v) else v

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.Var, swap)])
    return func.with_body(body)

"""Pass: place every shared tile in one dynamic shared-memory buffer, at fixed offsets, in its physical layout.

Tiles are laid out one after the other (128-byte aligned, no reuse) in a single ``extern __shared__`` byte array,
so the kernel's dynamic shared memory size is known exactly here — the launcher needs it, and sizes above 48 KiB
need the function attribute raised before launch. (TVM's own merging pass reuses memory by liveness, which cannot
see the pointers our gemm and copy templates take.) Each tile becomes a flat view of that array; accesses are
rewritten to the physical offset: leading (pipeline stage) dimensions select a slab, and inside a slab of a
swizzled tile the XOR swizzle of ``_cuda_layouts.swizzle_expr`` applies — the same function the tensor-core
gemm template uses to find its operands.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import TileLangCompileError
from ._cuda_common import ATTR_SMEM, is_shared, swizzles_of
from ._cuda_layouts import dtype_bytes, swizzle_expr

ALIGN = 128
# opt-in maximum of dynamic shared memory per block, by compute capability
MAX_SMEM = {"sm_80": 166912, "sm_86": 101376, "sm_87": 166912, "sm_89": 101376, "sm_90": 232448,
            "sm_90a": 232448}


def _phys(buf: Any, idx: list[Any], shift: int) -> Any:
    """Flat physical element offset of logical ``idx`` (the last index may be a Ramp of a chunk)."""
    shape = [int(x) for x in buf.shape]
    lanes = None
    last = idx[-1]
    if isinstance(last, tirx.Ramp):
        lanes = int(last.lanes)
        idx = idx[:-1] + [last.base]
    if len(shape) >= 2:
        rows, cols = shape[-2], shape[-1]
        slab = rows * cols
        lead: Any = 0
        for i, s in zip(idx[:-2], shape[:-2]):
            lead = lead * s + i
        inner = idx[-2] * cols + idx[-1]
        off = lead * slab + swizzle_expr(inner, shift, str(buf.dtype)) if shift else lead * slab + inner
    else:
        off = idx[0]
    if lanes is not None:
        return tirx.Ramp(off, 1, lanes)
    return off


def lower_shared_memory_cuda(func: tirx.PrimFunc, arch: str = "sm_90") -> tirx.PrimFunc:
    shared: list[Any] = []

    def collect(s: Any) -> Any:
        if is_shared(s.buffer) and not any(s.buffer.same_as(b) for b in shared):
            shared.append(s.buffer)
        return s

    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, collect)])
    if not shared:
        return func.with_attr(ATTR_SMEM, 0)
    swz = swizzles_of(func)
    offsets = []
    total = 0
    for b in shared:
        total = -(-total // ALIGN) * ALIGN
        offsets.append(total)
        n = 1
        for x in b.shape:
            n *= int(x)
        total += n * dtype_bytes(str(b.dtype))
    total = -(-total // 16) * 16
    limit = MAX_SMEM.get(arch, 232448)
    if total > limit:
        names = ", ".join(f"{b.name}{[int(x) for x in b.shape]} {b.dtype}" for b in shared)
        raise TileLangCompileError(f"the kernel needs {total} bytes of shared memory, more than the {limit} an "
                                   f"{arch} block can have ({names}); use smaller tiles or fewer pipeline stages",
                                   stage="tl.LowerSharedMemoryCUDA")
    smem = tirx.decl_buffer((total,), "uint8", "smem", scope="shared.dyn")
    data = tirx.buffer_data(smem)
    views: dict[Any, Any] = {}
    for b, off in zip(shared, offsets):
        n = 1
        for x in b.shape:
            n *= int(x)
        es = dtype_bytes(str(b.dtype))
        views[b] = tirx.decl_buffer((n,), str(b.dtype), b.name, data=data, elem_offset=off // es,
                                    scope="shared.dyn")

    def alloc(s: Any) -> Any:
        v = views.get(s.buffer)
        return tirx.DeclBuffer(v, data=data) if v is not None else s

    def load(ld: Any) -> Any:
        v = views.get(ld.source)
        if v is None:
            return ld
        return tirx.BufferLoad(v, [_phys(ld.source, list(ld.indices), swz.get(ld.source, 0))])

    def store(st: Any) -> Any:
        v = views.get(st.buffer)
        if v is None:
            return st
        return tirx.BufferStore(v, st.value, [_phys(st.buffer, list(st.indices), swz.get(st.buffer, 0))],
                                span=st.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, alloc), (tvm.ir.TensorLoad, load),
                                              (tirx.BufferStore, store)])

    def add_alloc(s: Any) -> Any:
        tb = s.thread_binding
        if tb is not None and str(tb.thread_tag) == "threadIdx.x":
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, tirx.SeqStmt([tirx.AllocBuffer(smem), s.body]),
                            s.thread_binding, s.annotations, s.step, s.span)
        return s

    body = tvm_ffi.structural_map(body, [(tirx.For, add_alloc)])
    return func.with_body(body).with_attr(ATTR_SMEM, total)

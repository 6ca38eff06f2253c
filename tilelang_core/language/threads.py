"""``T.get_thread_binding``: the index of the executing thread, for per-thread (SIMT) code in a kernel.

The call becomes an opaque ``tl.thread_binding(dim)`` expression; the CUDA launch pass
(``tl.LowerKernelLaunchCUDA``) replaces it by ``threadIdx.x`` (a list of thread counts ``threads=(x, y, z)`` is
flattened, so dimension d is recovered from the linear index). The CPU backend runs a block's code once, not once
per thread, so a program that reads the thread index is refused there with a located error (docs/compat.md).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

THREAD_BINDING_OP = "tl.thread_binding"
tvm.ir.register_op_attr(THREAD_BINDING_OP, "TCallEffectKind", 2)  # reads state: never hoisted across a launch
tvm.ir.register_op_attr(THREAD_BINDING_OP, "TScriptPrinterName", THREAD_BINDING_OP)
_OP = tvm.ir.Op.get(THREAD_BINDING_OP)


def get_thread_binding(dim: int = 0) -> Any:
    """The thread index along ``dim`` (0, 1 or 2) of the block's ``threads``."""
    if not isinstance(dim, int) or isinstance(dim, bool) or dim not in (0, 1, 2):
        raise ValueError(f"T.get_thread_binding dim: expected 0, 1 or 2, got {dim!r}")
    return tvm.ir.Call(_OP, [tirx.IntImm("int32", dim)], ret_ty="int32")


def get_thread_bindings() -> list[Any]:
    """The thread indices along the three dimensions."""
    return [get_thread_binding(d) for d in range(3)]


def thread_binding_dim(e: Any) -> int | None:
    """The dimension of a ``tl.thread_binding`` call, or None for any other expression."""
    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and str(e.op.name) == THREAD_BINDING_OP:
        return int(e.args[0].value)
    return None


def sync_threads() -> None:
    """A barrier of the block's threads (``__syncthreads()`` on CUDA), for per-thread code written with
    ``T.get_thread_binding``; tile ops get their barriers from the compiler. A no-op on the CPU (one thread)."""
    from tvm.script import tirx as _T

    _T.evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", tvm.ir.StringImm("shared")))

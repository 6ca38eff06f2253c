"""Pass: ``T.alloc_global`` on CUDA — a workspace the program allocates becomes an array of the kernel's module.

On the CPU a ``T.alloc_global`` buffer is allocated for each call. On CUDA the same needs memory that every block
of the launch sees; the options were (a) a hidden kernel parameter that the launcher allocates per call with torch
(extra meta.json entries, argument packing in ``runtime/cuda_launcher.py`` and in the exported runtime) or (b) a
``__device__`` array of the module (``tl::global_workspace<KEY, T, N>()`` in ``include/tl/workspace.cuh``), the
mechanism split-K's workspace already uses. (b) is taken (docs/design.md): nothing changes at launch, the
artifact and exported kernels need nothing new, and the cost is the one split-K pays — one workspace per loaded
kernel, reused by every launch, so its launches are stream-ordered (``serial_streams`` in the launch metadata,
set by ``jit/cuda.py`` when the source uses a workspace). Its contents at the start of a launch are unspecified
(as with ``torch.empty``; the CPU's per-call buffer is not initialised either).

Each global-scope ``AllocBuffer`` becomes a ``DeclBuffer`` of the same buffer on that array's address, placed at
the top of the kernel's ``threadIdx.x`` loop (device code: declared outside it, TVM would pass the host's pointer
in as a kernel argument), so every access and tile op on it is unchanged (a global buffer like a kernel
parameter). The shape must be a compile-time
constant (the array's size is part of the program); a symbolic one is a located error that names the
alternative (pass the workspace in as a parameter).
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ..common.rewriter import const_int, location_of

WORKSPACE_MARK = "tl::global_workspace<"  # in the CUDA source: the kernel keeps state in its module's globals
_C_TYPES = {"float32": "float", "float16": "half", "bfloat16": "nv_bfloat16", "float64": "double",
            "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
            "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long",
            "bool": "bool"}  # the C types TVM's CUDA code generator declares these as


def lower_global_workspaces_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    problems: list[tuple[str, Any]] = []
    count = [0]

    def alloc(s: Any) -> Any:
        buf = s.buffer
        if buf.scope() not in ("global", ""):
            return s
        dims = [const_int(x) for x in buf.shape]
        ctype = _C_TYPES.get(str(buf.dtype))
        if None in dims:
            problems.append((f"T.alloc_global({buf.name}): on CUDA a workspace's shape must be a compile-time "
                             f"constant (it is {list(buf.shape)}); pass the workspace in as a kernel parameter, e.g. "
                             "a torch.empty tensor (see docs/compat.md)", s.span))
            return s
        if ctype is None:
            problems.append((f"T.alloc_global({buf.name}): dtype {buf.dtype} is not supported for a CUDA workspace; "
                             "pass it in as a kernel parameter (see docs/compat.md)", s.span))
            return s
        n = 1
        for d in dims:
            n *= d
        key = count[0]
        count[0] += 1
        ptr = tirx.call_extern("handle", f"tl::global_workspace<{key}, {ctype}, {max(n, 1)}>")
        decls.append(tirx.DeclBuffer(buf, data=ptr, span=s.span))
        return tirx.Evaluate(tirx.IntImm("int32", 0))

    def into_kernel(loop: Any) -> Any:  # device code: declared inside the threadIdx.x loop, not on the host
        tb = loop.thread_binding
        if tb is None or str(tb.thread_tag) != "threadIdx.x":
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([*decls, loop.body]),
                        loop.thread_binding, loop.annotations, loop.step, loop.span)

    decls: list[Any] = []
    body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, alloc)])
    if problems:
        msg, span = problems[0]
        raise TileLangCompileError(msg, location_of(span), stage="tl.LowerGlobalWorkspacesCUDA")
    if not decls:
        return func
    return func.with_body(tvm_ffi.structural_map(body, [(tirx.For, into_kernel)]))


__all__ = ["WORKSPACE_MARK", "lower_global_workspaces_cuda"]

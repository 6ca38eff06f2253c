"""Pass: a ``bfloat16`` scalar kernel parameter (``alpha: T.bfloat16``) arrives as a float32 and is rounded inside.

Why: TVM's packed calling convention hands a float scalar to the kernel as a float, and its argument binding cannot
bind such an argument to a bfloat16 variable (``Check failed: dtype.code() == kDLFloat``): every kernel with a
bfloat16 scalar parameter failed to compile, on the CPU and for CUDA (where the launcher then packs a float32). The
parameter becomes a float32 one of the same name, and the body binds the original variable to its cast to bfloat16,
which TVM's bfloat16 legalisation lowers to round-to-nearest-even (the caller's Python float is first rounded to
float32, as torch's ``torch.tensor(x, dtype=torch.bfloat16)`` does). The runtime still checks the argument as a
bfloat16 parameter.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of


def bf16_scalar_params(func: tirx.PrimFunc) -> tirx.PrimFunc:
    narrowed: dict[Any, Any] = {}
    params = []
    for p in func.params:
        if not tirx.is_buffer_var(p) and dtype_of(p) == "bfloat16":
            wide = tvm.ir.Var(p.name, "float32")
            narrowed[p] = tirx.Cast("bfloat16", wide)
            params.append(wide)
        else:
            params.append(p)
    if not narrowed:
        return func
    body = tvm_ffi.structural_map(func.body, [(tvm.ir.Var, lambda v: narrowed.get(v, v))])
    return tirx.PrimFunc(params, body, func.ret_type, func.attrs, func.span)

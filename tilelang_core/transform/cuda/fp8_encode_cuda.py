"""Pass: float8 encodes on CUDA give torch's (and the CPU path's) bytes.

CUDA's conversion (``__nv_fp8_e4m3(float)``, ``cvt.rn.satfinite``) differs from torch's ``.to()`` in two places:
a NaN keeps no sign (always ``0x7f``) and e5m2 saturates to 57344 where torch overflows to infinity. So that one
program gives the same bytes on the CPU and the GPU, every cast *to* a float8 dtype is rewritten into the shared
codec's arithmetic (``common/fp8_codec``: integer operations on the float32 bits, vectorisable, no table). Decodes
stay CUDA's: they are exact. Runs after the tile ops are lowered (a ``T.copy`` between dtypes becomes casts there)
and before ``T.Parallel`` loops are vectorised.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ..common.fp8_codec import FORMATS, decode, encode


def _rewrite(node: Any) -> Any:
    dst, src = str(dtype_of(node)), str(dtype_of(node.value))
    if dst not in FORMATS or src == dst:
        return node
    value = decode(node.value, src) if src in FORMATS else node.value
    if str(dtype_of(value)) != "float32":
        value = tirx.Cast("float32", value)
    return encode(value, dst)


def fp8_encode_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = tvm_ffi.structural_map(func.body, [(tirx.Cast, _rewrite)])
    return func if body.same_as(func.body) else func.with_body(body)

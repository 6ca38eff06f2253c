"""Passes: 64-bit index arithmetic for tensors of 2³¹ elements or more (``tl.PromoteIndexInt64``), and a clear
refusal of a single dimension that large (``tl.CheckIndexExtents``).

Why: TIR indices are int32 by default. A (M, N) tensor with M·N ≥ 2³¹ has a flattened offset ``i·N + j`` that
wraps: between 2³¹ and 2³² the offset turns negative (a write before the tensor: a segfault), at 2³² and above it
wraps to small offsets (the last row lands on row 0, silently), and TVM's constant folding fails on literals like
the flattened extent with an internal message. Both the CPU and the CUDA pipeline run TVM's
``NarrowDataType(32)`` after ``FlattenBuffer``, which narrows an int64 index back to int32 only where it proves the
value fits, so promoting costs nothing where it is not needed; and we promote only when some tensor of the program
is that large, so ordinary kernels keep exactly the int32 code they had (32-bit arithmetic vectorises better).

What ``tl.PromoteIndexInt64`` does, once our lowering has produced plain loops (last in each pipeline): each
parameter tensor whose element count is ≥ 2³¹, or whose shape has a symbolic (run-time) size — the compiler
cannot know how large a call's tensor will be — gets int64 shape and strides (a symbolic dimension stays the
parameter's int32 variable and is widened where offsets multiply by it), and every index of its loads and stores
(``address_of`` of a load included) is rebuilt in int64 arithmetic from its leaves: constants become int64,
variables and other int32 values are cast to int64 where they enter, so no intermediate sum or product wraps. Loop
and block variables stay int32: every dimension is below 2³¹ (checked below), so each per-dimension index fits.

What ``tl.CheckIndexExtents`` does (first in each pipeline): a parameter tensor with one dimension of 2³¹ or more
is refused with an error naming the tensor, its shape, its element count and the limit. Our lowering builds loop
and guard arithmetic in int32 per dimension; making every loop variable of such a program int64 is not done (reshape
the tensor, e.g. ``(N // 4096, 4096)``). A symbolic size is an int32 variable; the call-time check of the same
limit is in ``runtime.exported.bind_arguments`` (a dimension of 2³¹ or more bound to a symbol is refused, naming the
argument). Known limit of both checks: a dimension within one tile of 2³¹ can still wrap the int32 block/guard
arithmetic (``bx * block + i``); not handled.

Cost of the symbolic case: 64-bit offsets in every kernel with symbolic sizes; measured on the CPU as within noise
(docs/design.md, "64-bit offsets"); not yet measured on a GPU.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ...language._ir import dtype_of, is_buffer
from .rewriter import location_of

INT32_LIMIT = 2**31  # offsets of a tensor with this many elements or more do not fit in int32

_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod, tirx.Min, tirx.Max)


def _const_dims(buf: Any) -> list[int] | None:
    dims = []
    for d in buf.shape:
        if not isinstance(d, tirx.IntImm):
            return None
        dims.append(int(d.value))
    return dims


def element_count(buf: Any) -> int | None:
    """The number of elements of ``buf`` when its shape is constant, else None."""
    dims = _const_dims(buf)
    if dims is None:
        return None
    n = 1
    for d in dims:
        n *= d
    return n


def _param_buffers(func: tirx.PrimFunc) -> list[Any]:
    return [p for p in func.params if is_buffer(p)]


def check_index_extents(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Refuse a tensor with one dimension of 2³¹ elements or more (see the module docstring)."""
    for buf in _param_buffers(func):
        dims = _const_dims(buf)
        if dims is None:
            continue
        for axis, d in enumerate(dims):
            if d >= INT32_LIMIT:
                raise TileLangCompileError(
                    f"tensor '{buf.name}' of shape {tuple(dims)} ({element_count(buf)} elements) has dimension "
                    f"{axis} of {d} elements; the limit for one dimension is {INT32_LIMIT - 1} (2**31 - 1). "
                    f"Reshape it so that every dimension is below 2**31 (e.g. (N // 4096, 4096)): tensors with more "
                    f"elements in all are supported with 64-bit offsets", location_of(func.span),
                    stage="tl.CheckIndexExtents")
    return func


def _wide(dtype: str) -> str:
    return "int64" + dtype[len("int32"):]  # int32 -> int64, int32x4 -> int64x4


def widen(e: Any) -> Any:
    """``e`` (an int32 index expression) recomputed in int64 from its leaves; other dtypes are returned as is."""
    dt = dtype_of(e)
    if dt is None or not (dt == "int32" or dt.startswith("int32x")):
        return e
    if isinstance(e, tirx.IntImm):
        return tirx.IntImm("int64", int(e.value))
    if isinstance(e, _ARITH):
        return type(e)(widen(e.a), widen(e.b))
    if isinstance(e, tirx.Cast) and dtype_of(e.value) in ("int64",):
        return e.value  # an int64 value narrowed only to be indexed with: keep it wide
    if isinstance(e, tirx.Select):
        return tirx.Select(e.condition, widen(e.true_value), widen(e.false_value))
    if isinstance(e, tirx.Ramp):
        return tirx.Ramp(widen(e.base), widen(e.stride), e.lanes)
    if isinstance(e, tirx.Broadcast):
        return tirx.Broadcast(widen(e.value), e.lanes)
    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and str(e.op.name) == "tirx.if_then_else":
        c, a, b = e.args
        return tirx.call_intrin(_wide(dt), "tirx.if_then_else", c, widen(a), widen(b))
    return tirx.Cast(_wide(dt), e)


def _needs_int64(buf: Any) -> bool:
    """Whether ``buf``'s offsets may not fit in int32: 2³¹ elements or more, or a symbolic (run-time) size."""
    n = element_count(buf)
    return n is None or n >= INT32_LIMIT


def _int64_buffer(buf: Any) -> Any:
    # constant dimensions become int64; a symbolic one stays the parameter's own int32 variable (TVM binds it from
    # the tensor's shape at the call) and is widened where the flattened offset multiplies by it
    shape = [tirx.IntImm("int64", int(d.value)) if isinstance(d, tirx.IntImm) else d for d in buf.shape]
    strides = [widen(s) for s in buf.strides] if len(buf.strides) else None
    off = buf.elem_offset
    off = tirx.IntImm("int64", int(off.value)) if isinstance(off, tirx.IntImm) else off
    return tirx.decl_buffer(shape, str(buf.dtype), str(buf.name), strides=strides, elem_offset=off,
                            scope=buf.scope(),
                            data_alignment=int(buf.data_alignment), offset_factor=int(buf.offset_factor),
                            span=buf.span)


def promote_index_int64(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """64-bit shapes and offsets for every parameter tensor of 2³¹ elements or more (see the module docstring)."""
    big = {p: _int64_buffer(p) for p in _param_buffers(func) if _needs_int64(p)}
    if not big:
        return func
    wide = list(big.values())

    def is_wide(b: Any) -> bool:
        return any(b.same_as(w) for w in wide)

    def swap(v: Any) -> Any:
        return big.get(v, v)

    def load(x: Any) -> Any:
        if not is_wide(x.source):
            return x
        return tirx.BufferLoad(x.source, [widen(i) for i in x.indices], span=x.span)

    def store(x: Any) -> Any:
        if not is_wide(x.buffer):
            return x
        return tirx.BufferStore(x.buffer, x.value, [widen(i) for i in x.indices], span=x.span)

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.Var, swap)])
    body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    params = [big.get(p, p) for p in func.params]
    return tirx.PrimFunc(params, body, func.ret_type, func.attrs, func.span)

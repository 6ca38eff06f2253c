"""``T.copy``, ``T.fill`` and ``T.clear``: moving and initialising tiles.

Operands may be whole buffers, TileLang's start-index form (``A[by * bM, k * bK]``, extents taken from the
other operand) or explicit slices. Extent agreement is checked when the op is lowered, where symbolic
extents can be proven equal; bounds against the tensor are the compiler's job (ragged shapes are legal).
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ._ir import dtype_of, emit, shape_of, to_region

# TileLang's spelling and codes of ``T.copy(..., eviction_policy=)``: the L2 priority of the copy's global loads
EVICTION_POLICIES = {"evict_normal": 0, "evict_first": 1, "evict_last": 2}


def eviction_code(policy: Any) -> int | None:
    """The code of an ``eviction_policy`` argument (None when not given); a clear error for anything else."""
    if policy is None:
        return None
    if not isinstance(policy, str) or policy not in EVICTION_POLICIES:
        raise ValueError(f"T.copy eviction_policy: expected one of {', '.join(map(repr, EVICTION_POLICIES))} or "
                         f"None, got {policy!r}")
    return EVICTION_POLICIES[policy]


def copy(src: Any, dst: Any, coalesced_width: Any = None, disable_tma: bool = False,
         eviction_policy: str | None = None, **_ignored: Any) -> None:
    """Copy a tile: ``T.copy(A[by * bM, k * bK], A_shared)``.

    ``eviction_policy`` (``"evict_first"``, ``"evict_last"``, ``"evict_normal"``) is the L2 priority of the copy's
    global loads on CUDA (a cache hint, docs/cuda.md); the CPU accepts it with no effect. When given it travels as
    the call's fourth argument (the third is the asynchronous flag the CUDA pipeline sets)."""
    code = eviction_code(eviction_policy)
    src_shape, dst_shape = shape_of(src), shape_of(dst)
    if src_shape is None and dst_shape is None:
        raise TypeError("T.copy: both src and dst use the start-index form A[i, j]; at least one side must be a "
                        "whole buffer or an explicit slice so the tile extents are known")
    args = [to_region(src, dst_shape, "T.copy src"), to_region(dst, src_shape, "T.copy dst")]
    if code is not None:
        args += [tirx.IntImm("int32", 0), tirx.IntImm("int32", code)]
    emit("tl.copy", args)


def fill(buffer: Any, value: Any) -> None:
    """Set every element of a tile to ``value``."""
    region = to_region(buffer, None, "T.fill")
    dt = region.source.dtype
    if isinstance(value, (int, float, bool)):
        value = tirx.const(value, dt)
    elif dtype_of(value) is None:
        raise TypeError(f"T.fill value: expected a number or a scalar expression, got {value!r}")
    elif dtype_of(value) != dt:
        value = tirx.Cast(dt, value)
    emit("tl.fill", [region, value])


def clear(buffer: Any) -> None:
    """Set every element of a tile to zero."""
    fill(buffer, 0)


def transpose(src: Any, dst: Any, **_ignored: Any) -> None:
    """``dst[..., j, i] = src[..., i, j]`` over the last two dimensions (TileLang: shared tiles; any tiles here).
    Written as a ``T.Parallel`` loop, so each backend lowers it as an element-wise loop."""
    from tvm.ir import TensorRegion
    from tvm.script import tirx as _T

    from ._ir import describe, is_buffer
    from .loops import Parallel

    def whole(x: Any, what: str) -> tuple[Any, list[Any], list[Any]]:
        if is_buffer(x):
            return x, [0] * len(x.shape), list(x.shape)
        if isinstance(x, TensorRegion):
            return x.source, [r.min for r in x.region], [r.extent for r in x.region]
        raise TypeError(f"T.transpose {what}: expected a buffer or a slice, got {describe(x)}")

    sb, sm, se = whole(src, "src")
    db, dm, de = whole(dst, "dst")
    if len(se) < 2 or len(se) != len(de):
        raise ValueError(f"T.transpose: src {describe(src)} and dst {describe(dst)} must be tiles of one rank >= 2")
    want = list(se[:-2]) + [se[-1], se[-2]]
    if any(str(a) != str(b) for a, b in zip(want, de)):
        raise ValueError(f"T.transpose: dst {describe(dst)} must have the shape {want} (src {describe(src)} with its "
                         "last two dimensions swapped)")
    with Parallel(*se) as vs:
        vs = list(vs) if isinstance(vs, (list, tuple)) else [vs]
        swapped = vs[:-2] + [vs[-1], vs[-2]]
        val = tirx.BufferLoad(sb, [m + v for m, v in zip(sm, vs)])
        if str(sb.dtype) != str(db.dtype):
            val = tirx.Cast(str(db.dtype), val)
        _T.buffer_store(db, val, [m + v for m, v in zip(dm, swapped)])

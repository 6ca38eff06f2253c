"""``T.reduce_*``: reductions of a tile along one dimension into a tile of one rank less.

``dst`` has the shape of ``src`` without dimension ``dim``. With ``clear=False`` the result is combined with
what ``dst`` already holds (a running max or sum, as online softmax needs).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ._ir import emit, shape_of, to_region

REDUCE_KINDS = ("sum", "max", "min", "abssum", "absmax")


def reduce(src: Any, dst: Any, kind: str, dim: int = -1, clear: bool = True, nan_propagate: bool = False,
           batch: int = 1, annotations: Any = None) -> None:
    """``batch`` (TileLang: outputs per batched all-reduce call, fewer barriers) is checked and accepted; it does not
    change the result, and our CUDA reduction already combines all outputs of one ``T.reduce_*`` in one call.
    ``annotations`` (TileLang's lowering controls for newer GPUs) are accepted and ignored."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"T.reduce_{kind} batch: expected a positive int, got {batch!r}")
    if annotations is not None and not isinstance(annotations, dict):
        raise TypeError(f"T.reduce_{kind} annotations: expected a dict or None, got {annotations!r}")
    if kind not in REDUCE_KINDS:
        raise ValueError(f"T.reduce kind: expected one of {REDUCE_KINDS}, got {kind!r}")
    if not isinstance(dim, int):
        raise TypeError(f"T.reduce_{kind} dim: expected a Python int, got {dim!r}")
    src_shape = shape_of(src)
    if src_shape is None:
        raise TypeError(f"T.reduce_{kind} src: expected a buffer or a slice, got an element A[i, j]")
    rank = len(src_shape)
    if not -rank <= dim < rank:
        raise ValueError(f"T.reduce_{kind} dim: expected a dimension in [{-rank}, {rank}) for a rank-{rank} src, "
                         f"got {dim}")
    if not isinstance(nan_propagate, bool):
        raise TypeError(f"T.reduce_{kind} nan_propagate: expected a Python bool, got {nan_propagate!r}")
    if nan_propagate and kind not in ("max", "min", "absmax"):
        raise ValueError(f"T.reduce_{kind}: nan_propagate applies to reduce_max, reduce_min and reduce_absmax "
                         f"(a sum propagates NaN anyway)")
    args = [to_region(src, None, f"T.reduce_{kind} src"), to_region(dst, None, f"T.reduce_{kind} dst"),
            tvm.ir.StringImm(kind), tirx.IntImm("int32", dim % rank), tirx.IntImm("bool", bool(clear))]
    if nan_propagate:  # only when set: programs without it keep their exact IR (and cache keys)
        args.append(tirx.IntImm("bool", True))
    emit("tl.reduce", args)


def reduce_sum(src: Any, dst: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               annotations: Any = None) -> None:
    """Sum along ``dim``."""
    reduce(src, dst, "sum", dim, clear, batch=batch, annotations=annotations)


def reduce_max(src: Any, dst: Any, dim: int = -1, clear: bool = True, nan_propagate: bool = False,
               batch: int = 1, annotations: Any = None) -> None:
    """Maximum along ``dim``. A NaN element is skipped (as CUDA's ``fmaxf`` and TileLang do) unless
    ``nan_propagate=True``, which makes the result NaN as ``torch.amax`` does (CPU and CUDA)."""
    reduce(src, dst, "max", dim, clear, nan_propagate, batch, annotations)


def reduce_min(src: Any, dst: Any, dim: int = -1, clear: bool = True, nan_propagate: bool = False,
               batch: int = 1, annotations: Any = None) -> None:
    """Minimum along ``dim``. A NaN element is skipped (as CUDA's ``fminf`` and TileLang do) unless
    ``nan_propagate=True``, which makes the result NaN as ``torch.amin`` does (CPU and CUDA)."""
    reduce(src, dst, "min", dim, clear, nan_propagate, batch, annotations)


def reduce_abssum(src: Any, dst: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               annotations: Any = None) -> None:
    """Sum of absolute values along ``dim``."""
    reduce(src, dst, "abssum", dim, clear, batch=batch, annotations=annotations)


def reduce_absmax(src: Any, dst: Any, dim: int = -1, clear: bool = True, nan_propagate: bool = False,
               batch: int = 1, annotations: Any = None) -> None:
    """Maximum absolute value along ``dim``. A NaN element is skipped (as CUDA's ``fmaxf`` and TileLang do)
    unless ``nan_propagate=True``, which makes the result NaN as ``torch.amax`` does (CPU and CUDA)."""
    reduce(src, dst, "absmax", dim, clear, nan_propagate, batch, annotations)

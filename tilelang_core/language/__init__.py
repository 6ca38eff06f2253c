"""The tile language, imported as ``T``: ``import tilelang_core.language as T``.

TileLang's classic spelling on stock TVMScript (``tvm.script.tirx``): a ``@T.prim_func`` body is parsed by TVM's
parser, and the tile-level names below (``T.Kernel``, ``T.copy``, ``T.gemm`` ...) are our own functions that
emit tile ops into the TIR being built. Every other name (``T.float32``, ``T.serial``, ``T.if_then_else`` ...)
falls through to TVMScript, so programs may use the full TIR vocabulary too.
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as _tirx
from tvm.script.tirx import prim_func  # the TVMScript parser finds the dialect through this very object

from . import assign as _assign  # noqa: F401 (parser hook: chained assignment, T.alloc_var stores)
from . import var_values as _var_values  # noqa: F401 (parser hook: T.alloc_var read by name)
from .alloc import alloc_fragment, alloc_global, alloc_local, alloc_shared, alloc_var
from .atomic import atomic_addx2, atomic_addx4, atomic_max, atomic_min
from .copy import clear, copy, fill, transpose
from .dtypes import SUPPORTED_DTYPES
from .eager import annotate_compile_flags, annotate_pass_configs, const, empty
from .extern import import_source
from .gemm import GemmWarpPolicy, gemm
from .hints import annotate_layout, disable_warp_group_reg_alloc
from .kernel import (  # Tensor: T.Tensor(shape, dtype) or T.Tensor[shape, dtype]
    Buffer,
    Kernel,
    Tensor,
    get_block_binding,
    get_block_bindings,
    get_block_extent,
    get_block_extents,
    get_thread_extent,
    get_thread_extents,
)
from .logical import all_of, any_of
from .loops import Parallel, Pipelined, grid, serial, unroll, vectorized
from .macro import macro
from .math import (
    abs,
    align_up,
    cast,
    ceil,
    ceildiv,
    clamp,
    exp,
    exp2,
    floor,
    if_then_else,
    infinity,
    log,
    log2,
    max,
    min,
    rsqrt,
    sigmoid,
    sqrt,
    tanh,
)
from .misc import atomic_add, let, print, use_swizzle
from .reduce import reduce, reduce_absmax, reduce_abssum, reduce_max, reduce_min, reduce_sum
from .reducer import alloc_reducer, finalize_reducer
from .scan import cummax, cumsum
from .symbolic import dynamic, symbolic
from .tensor import StridedTensor
from .threads import get_thread_binding, get_thread_bindings, sync_threads
from .unsupported import UNSUPPORTED, refusal
from .views import reshape, view

__all__ = [
    "prim_func", "Kernel", "Tensor", "Buffer", "SUPPORTED_DTYPES",
    "StridedTensor", "symbolic", "dynamic",
    "alloc_shared", "alloc_fragment", "alloc_local", "alloc_var",
    "copy", "fill", "clear", "gemm", "GemmWarpPolicy",
    "Parallel", "Pipelined", "serial", "unroll", "grid", "vectorized",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_abssum", "reduce_absmax",
    "atomic_add", "print", "use_swizzle",
    "ceildiv", "max", "min", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "floor", "ceil",
    "cast", "if_then_else", "infinity", "macro",
    "alloc_global", "alloc_reducer", "finalize_reducer", "annotate_layout", "disable_warp_group_reg_alloc",
    "import_source",
    "get_thread_binding", "get_thread_bindings", "get_thread_extent", "get_thread_extents", "get_block_binding",
    "get_block_bindings", "get_block_extent", "get_block_extents", "reshape", "view", "transpose", "cumsum",
    "cummax", "clamp",
    "align_up", "all_of", "any_of", "let", "atomic_max", "atomic_min", "atomic_addx2", "atomic_addx4",
    "sync_threads", "reduce",
    "const", "empty", "annotate_pass_configs", "annotate_compile_flags",
]


def __getattr__(name: str) -> Any:
    """Fall through to TVMScript's TIR namespace for everything we do not redefine."""
    if name in UNSUPPORTED:  # TileLang names we do not support: a stand-in that raises why, at the user's line
        return refusal(name)
    from . import dtypes as _dtypes

    if name in _dtypes.DTYPES:  # T.float16, T.float, T.int4, T.float8_e4m3fn ...: str-like dtype objects
        return _dtypes.DTYPES[name]
    if name == "dtype":
        return _dtypes.dtype
    try:
        return getattr(_tirx, name)
    except AttributeError:
        from .names import did_you_mean

        hint = did_you_mean(name, __all__) if not name.startswith("_") else ""
        raise AttributeError(f"tilelang_core.language has no attribute {name!r}{hint}") from None

"""Buffer allocation inside a kernel: shared tiles, per-thread fragments, locals and scalars.

Scopes follow TileLang: ``shared`` (one copy per block), ``local.fragment`` (a tile distributed over the
block's threads; its layout is inferred by the backend), ``local`` (per thread) and ``local.var`` (a scalar).
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as _T

from .dtypes import canonical_dtype

SCOPE_SHARED = "shared"
SCOPE_FRAGMENT = "local.fragment"
SCOPE_LOCAL = "local"
SCOPE_VAR = "local.var"


def _shape(shape: Any, what: str) -> tuple:
    from ._sizes import shape_value

    return shape_value(shape, f"{what} shape")


def alloc_shared(shape: Any, dtype: Any = "float32", scope: str = SCOPE_SHARED) -> Any:
    """A tile shared by the threads of a block."""
    return _T.alloc_buffer(_shape(shape, "T.alloc_shared"), canonical_dtype(dtype, "T.alloc_shared dtype"),
                           scope=scope if scope != "shared.dyn" else SCOPE_SHARED)


def alloc_fragment(shape: Any, dtype: Any = "float32", scope: str = SCOPE_FRAGMENT) -> Any:
    """A tile held in registers, distributed over the block's threads (the accumulator of ``T.gemm``)."""
    return _T.alloc_buffer(_shape(shape, "T.alloc_fragment"), canonical_dtype(dtype, "T.alloc_fragment dtype"),
                           scope=SCOPE_FRAGMENT)


def alloc_local(shape: Any, dtype: Any = "float32", scope: str = SCOPE_LOCAL) -> Any:
    """A per-thread array."""
    return _T.alloc_buffer(_shape(shape, "T.alloc_local"), canonical_dtype(dtype, "T.alloc_local dtype"),
                           scope=SCOPE_LOCAL)


def alloc_var(dtype: Any = "float32", init: Any = None, scope: str = SCOPE_VAR) -> Any:
    """A scalar variable; read and write it as ``x[0]``."""
    buf = _T.alloc_buffer((1,), canonical_dtype(dtype, "T.alloc_var dtype"), scope=SCOPE_VAR)
    if init is not None:
        _T.buffer_store(buf, init, [0])
    return buf


def alloc_global(shape: Any, dtype: Any = "float32", scope: str = "global") -> Any:
    """A global-memory workspace the program allocates itself (TileLang: for tests and special cases; a tensor
    passed in as a parameter is the usual way). CPU: allocated for each call and freed after it. CUDA: not
    supported (a located error: pass the workspace as a kernel parameter), see docs/compat.md."""
    if scope != "global":
        raise ValueError(f"T.alloc_global scope: expected 'global', got {scope!r}")
    return _T.alloc_buffer(_shape(shape, "T.alloc_global"), canonical_dtype(dtype, "T.alloc_global dtype"),
                           scope="global")

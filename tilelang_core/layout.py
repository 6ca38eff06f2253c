"""TileLang's ``tilelang.layout``: ``Layout``, ``Fragment`` and the swizzle constructors, for ``T.annotate_layout``.

In TileLang a layout given to ``T.annotate_layout`` tells its compiler where each element of a tile lives. Here
(language/hints.py, transform/common/layout_annotations.py, docs/compat.md) a ``Layout`` — an index map — is
honoured on the CPU and CUDA for tiles the kernel allocates (the tile is stored at the image of each index), a
swizzle constructor sets a CUDA shared tile's swizzle, and a ``Fragment`` is accepted and not honoured (the CUDA
backend infers fragment layouts itself). Indices in a program are logical, so no layout changes what a program
computes.

The objects also work as index maps: :meth:`Layout.map_forward_index` applies the forward function (to Python ints
or TIR expressions), :meth:`Fragment.map_forward_thread` the thread function, and the shapes are kept.
Constructors whose result would have to be computed by TileLang's C++ layout engine (``inverse``,
``make_gemm_fragment_8x8`` ...) raise ``NotImplementedError`` pointing to docs/compat.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

COMPAT_DOC = "docs/compat.md#modules-and-top-level-api"


def _shape(shape: Any, what: str) -> tuple[Any, ...]:
    if hasattr(shape, "shape") and not isinstance(shape, (list, tuple)):
        shape = shape.shape  # a buffer
    if isinstance(shape, int):
        shape = (shape,)
    try:
        return tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: expected a shape (a tuple of sizes) or a buffer, got {type(shape).__name__}") \
            from None


def _arity(fn: Callable[..., Any]) -> int:
    return len([p for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])


class Layout:
    """An index map ``forward_fn(*indices) -> index or tuple of indices`` over a tile of ``shape``."""

    def __init__(self, shape: Any, forward_fn: Callable[..., Any]):
        self.shape = _shape(shape, "Layout shape")
        if not callable(forward_fn):
            raise TypeError(f"Layout forward_fn: expected a function of {len(self.shape)} indices, got "
                            f"{type(forward_fn).__name__}")
        if _arity(forward_fn) != len(self.shape):
            raise TypeError(f"Layout forward_fn: takes {_arity(forward_fn)} indices, the shape has "
                            f"{len(self.shape)} dimensions")
        self.forward_fn = forward_fn

    def get_input_shape(self) -> list[Any]:
        return list(self.shape)

    def map_forward_index(self, indices: Sequence[Any]) -> Any:
        if len(indices) != len(self.shape):
            raise ValueError(f"Layout.map_forward_index: expected {len(self.shape)} indices, got {len(indices)}")
        return self.forward_fn(*indices)

    def __call__(self, *indices: Any) -> Any:
        return self.map_forward_index(indices)

    def inverse(self) -> Layout:
        raise NotImplementedError(f"Layout.inverse is not supported: TileLang computes it in its C++ layout engine, "
                                  f"which is not built (see {COMPAT_DOC})")

    def __repr__(self) -> str:
        return f"Layout(shape={list(self.shape)})"


class Fragment(Layout):
    """A register fragment: ``forward_thread_fn(*indices)`` the owning thread, ``forward_index_fn`` the slot in
    that thread (or ``forward_fn`` giving both as a pair), ``replicate`` copies."""

    def __init__(self, shape: Any, forward_fn: Callable[..., Any] | None = None,
                 forward_thread_fn: Callable[..., Any] | None = None, replicate: int = 1,
                 forward_index_fn: Callable[..., Any] | None = None):
        if forward_fn is None and forward_thread_fn is None:
            raise TypeError("Fragment: give forward_fn (indices -> (thread, index)) or forward_thread_fn")
        if not isinstance(replicate, int) or replicate < 1:
            raise ValueError(f"Fragment replicate: expected an int >= 1, got {replicate!r}")
        self.forward_thread_fn = forward_thread_fn
        self.forward_index_fn = forward_index_fn
        self.replicate_count = replicate
        super().__init__(shape, forward_fn if forward_fn is not None else
                         (forward_index_fn if forward_index_fn is not None else forward_thread_fn))
        self._pair = forward_fn is not None

    def map_forward_thread(self, indices: Sequence[Any]) -> Any:
        if self._pair:
            return self.forward_fn(*indices)[0]
        return self.forward_thread_fn(*indices)  # type: ignore[misc]

    def map_forward_index(self, indices: Sequence[Any]) -> Any:
        if self._pair:
            return self.forward_fn(*indices)[1]
        if self.forward_index_fn is None:
            raise NotImplementedError(f"Fragment without forward_index_fn: its slots would be inferred by "
                                      f"TileLang's layout engine, which is not built (see {COMPAT_DOC})")
        return self.forward_index_fn(*indices)

    def __repr__(self) -> str:
        return f"Fragment(shape={list(self.shape)}, replicate={self.replicate_count})"


class SwizzledLayout(Layout):
    """A request for a bank-conflict-free (swizzled) shared tile; ``kind`` names TileLang's constructor. The CUDA
    backend applies it as its own XOR swizzle (tl.ApplyLayoutAnnotationsCUDA); as an index map here it is the
    identity on logical indices (the swizzle lives below them)."""

    def __init__(self, shape: Any, kind: str, **params: Any):
        self.shape = _shape(shape, kind)
        self.forward_fn = lambda *indices: tuple(indices)  # the identity on logical indices
        self.kind, self.params = kind, params

    def __repr__(self) -> str:
        return f"{self.kind}(shape={list(self.shape)})"


def make_swizzled_layout(buffer: Any, k_major: bool = True, allow_pad: bool = True, **_: Any) -> SwizzledLayout:
    return SwizzledLayout(buffer, "make_swizzled_layout", k_major=k_major, allow_pad=allow_pad)


def make_wgmma_swizzled_layout(buffer: Any, continuity: Any = None, k_major: bool = True,
                               **_: Any) -> SwizzledLayout:
    return SwizzledLayout(buffer, "make_wgmma_swizzled_layout", continuity=continuity, k_major=k_major)


def make_full_bank_swizzled_layout(*args: Any, **_: Any) -> SwizzledLayout:
    return SwizzledLayout(args[0], "make_full_bank_swizzled_layout")


def make_half_bank_swizzled_layout(*args: Any, **_: Any) -> SwizzledLayout:
    return SwizzledLayout(args[0], "make_half_bank_swizzled_layout")


def make_quarter_bank_swizzled_layout(*args: Any, **_: Any) -> SwizzledLayout:
    return SwizzledLayout(args[0], "make_quarter_bank_swizzled_layout")


def make_linear_layout(*args: Any, **_: Any) -> SwizzledLayout:
    return SwizzledLayout(args[0], "make_linear_layout")


_ENGINE = ("computed by TileLang's C++ layout engine (MMA register layouts, tcgen05, Volta), which is not built; "
           "our CUDA backend infers fragment layouts itself")
UNSUPPORTED = {name: _ENGINE for name in (
    "make_volta_swizzled_layout", "make_tcgen05mma_swizzled_layout", "make_gemm_fragment_8x8",
    "make_gemm_fragment_8x8_transposed", "make_fully_replicated_layout_fragment", "make_cutlass_metadata_layout",
    "SwizzleMode", "cute")}

__all__ = ["Layout", "Fragment", "SwizzledLayout", "make_swizzled_layout", "make_wgmma_swizzled_layout",
           "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout", "make_quarter_bank_swizzled_layout",
           "make_linear_layout"]


def __getattr__(name: str) -> Any:
    if name in UNSUPPORTED:
        raise AttributeError(f"tilelang_core.layout.{name} is not supported: {UNSUPPORTED[name]} (see {COMPAT_DOC})")
    raise AttributeError(f"module 'tilelang_core.layout' has no attribute {name!r}")

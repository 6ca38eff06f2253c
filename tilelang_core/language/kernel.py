"""``T.Kernel``: the launch grid of a tile program.

A Python context manager the TVMScript parser enters like any ``with`` frame: it opens one
``thread_binding`` loop per grid dimension (``blockIdx.x/y/z``) and yields the block indices. The thread
count is recorded as an annotation; each backend decides what a block and its threads become (a CUDA thread
block, or an iteration of a parallel loop on the CPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from tvm.script import tirx as _T

KERNEL_ATTR = "tl.kernel_threads"
_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def _threads_tuple(threads: Any) -> list[int]:
    if isinstance(threads, int):
        threads = [threads]
    try:
        ts = [int(t) for t in threads]
    except TypeError:
        raise TypeError(f"T.Kernel threads: expected an int or a list of up to 3 ints, got {threads!r}") from None
    if not 1 <= len(ts) <= 3 or any(t <= 0 for t in ts):
        raise ValueError(f"T.Kernel threads: expected 1 to 3 positive ints, got {threads!r}")
    return ts


@contextlib.contextmanager
def Kernel(*grid: Any, threads: Any = 128, is_cpu: bool = False, prelude: str | None = None) -> Iterator[Any]:  # noqa: N802
    """Launch a grid of blocks; yields ``bx`` for a 1-D grid, else ``(bx, by[, bz])``."""
    if not 1 <= len(grid) <= 3:
        raise ValueError(f"T.Kernel grid: expected 1 to 3 grid dimensions, got {len(grid)}")
    from ._sizes import size_value

    grid = tuple(size_value(g, f"T.Kernel grid: dimension {i}") for i, g in enumerate(grid))
    for i, g in enumerate(grid):
        if isinstance(g, int) and g <= 0:
            raise ValueError(f"T.Kernel grid: dimension {i} must be positive, got {g}")
    ts = _threads_tuple(threads)
    with contextlib.ExitStack() as stack:
        ivs = []
        for i, ext in enumerate(grid):
            ann = {KERNEL_ATTR: ts} if i == 0 else None
            ivs.append(stack.enter_context(_T.thread_binding(ext, thread=_TAGS[i], annotations=ann)))
        _LAUNCHES.stack = [*_launches(), _Launch(tuple(grid), tuple(ivs), tuple(ts))]
        try:
            yield ivs[0] if len(ivs) == 1 else tuple(ivs)
        finally:
            _LAUNCHES.stack = _launches()[:-1]


# -- the launch of the enclosing T.Kernel, as TileLang's T.get_block_* / T.get_thread_extent* read it ---------------
@dataclasses.dataclass(frozen=True)
class _Launch:
    grid: tuple[Any, ...]  # extents (ints, or expressions of symbolic sizes)
    blocks: tuple[Any, ...]  # the block index variables
    threads: tuple[int, ...]


_LAUNCHES = threading.local()  # the T.Kernel frames being parsed on this thread (innermost last)


def _launches() -> list[_Launch]:
    return list(getattr(_LAUNCHES, "stack", []))


def _current(name: str, dim: Any) -> _Launch:
    if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim not in (0, 1, 2)):
        raise ValueError(f"T.{name} dim: expected 0, 1 or 2, got {dim!r}")
    stack = _launches()
    if not stack:
        raise ValueError(f"T.{name}: only inside a `with T.Kernel(...)` block (it reads that launch)")
    return stack[-1]


def get_block_binding(dim: int = 0) -> Any:
    """The block index along ``dim`` (0, 1, 2: blockIdx.x/y/z) of the enclosing ``T.Kernel``; 0 along a dimension
    the grid does not have."""
    launch = _current("get_block_binding", dim)
    return launch.blocks[dim] if dim < len(launch.blocks) else _T.int32(0)


def get_block_bindings() -> list[Any]:
    """The block indices along the three dimensions."""
    return [get_block_binding(d) for d in range(3)]


def get_block_extent(dim: int = 0) -> Any:
    """The number of blocks along ``dim`` of the enclosing ``T.Kernel`` (an int, or an expression of symbolic
    sizes); 1 along a dimension the grid does not have."""
    launch = _current("get_block_extent", dim)
    return launch.grid[dim] if dim < len(launch.grid) else 1


def get_block_extents() -> list[Any]:
    """The grid's extents along the three dimensions."""
    return [get_block_extent(d) for d in range(3)]


def get_thread_extent(dim: int = 0) -> int:
    """The ``threads`` of the enclosing ``T.Kernel`` along ``dim`` (1 along a dimension it does not give)."""
    launch = _current("get_thread_extent", dim)
    return launch.threads[dim] if dim < len(launch.threads) else 1


def get_thread_extents() -> list[int]:
    """The block's thread counts along the three dimensions."""
    return [get_thread_extent(d) for d in range(3)]


class TensorAnnotation:
    """``T.Tensor`` / ``T.Buffer``: a parameter annotation spelled as a call, ``T.Tensor((M, K), dtype)``, or as
    TileLang's subscript, ``T.Tensor[(M, K), dtype]`` (both give the same tensor parameter)."""

    def __init__(self, name: str):
        self.__name__ = self.__qualname__ = name

    def __call__(self, shape: Any, dtype: Any = "float32", data: Any = None, *args: Any, **kwargs: Any) -> Any:
        from .dtypes import Tensor

        if data is not None:  # T.Tensor(shape, dtype, A.data) in a body: a view of A's memory (see .tensor)
            from .tensor import view_of

            return view_of(shape, dtype, data, f"T.{self.__name__}")
        return Tensor(shape, dtype, *args, **kwargs)

    def __getitem__(self, key: Any) -> Any:
        from .tensor import split_subscript

        return self(*split_subscript(key, f"T.{self.__name__}"))

    def from_ptr(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"T.{self.__name__}.from_ptr is not supported by tilelang_core: pointer "
                                  "parameters are not built; take a T.Tensor parameter, and for another shape over "
                                  "its memory write T.Tensor(shape, dtype, A.data) (see docs/compat.md)")

    def __repr__(self) -> str:
        return f"T.{self.__name__}"


Tensor = TensorAnnotation("Tensor")
Buffer = TensorAnnotation("Buffer")

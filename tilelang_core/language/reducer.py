"""``T.alloc_reducer`` / ``T.finalize_reducer``: TileLang's (v1) reducer, a fragment that ``T.Parallel`` loops
accumulate into (``r[j] += x[i, j]``, ``r[j] = T.max(r[j], x[i, j])``) and that ``T.finalize_reducer`` makes
whole.

In the program's meaning the updates are applied one after another, so the CPU backend, which runs a block's
loops in order, needs nothing more: ``finalize_reducer`` is a no-op there. On CUDA every thread keeps a replica of
the reducer, the ``T.Parallel`` nests that update it give each iteration to one thread, and ``finalize_reducer``
all-reduces the replicas over the block's threads with the reducer's op (``tl::block_allreduce``; see
``transform/cuda/reducers_cuda.py``). The op travels in the ``tl.finalize_reducer`` call (its second argument),
looked up here from the allocation. TileLang's newer reducer epochs (``T.reducer_init``/``T.reducer_update``,
``finalize_reducer(r, dst)``) are not supported (docs/compat.md).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import tvm

from ._ir import describe, is_buffer, to_region
from .alloc import SCOPE_FRAGMENT, alloc_fragment

FINALIZE_OP = "tl.finalize_reducer"
tvm.ir.register_op_attr(FINALIZE_OP, "TCallEffectKind", 3)
tvm.ir.register_op_attr(FINALIZE_OP, "TScriptPrinterName", FINALIZE_OP)
REDUCER_OPS = ("sum", "max", "min")
# (buffer, op) of the reducers allocated lately on this thread: T.finalize_reducer reads its reducer's op here (a
# buffer is the same TVM object, not the same Python object, when the parser hands it back: matched by same_as)
_RECENT = threading.local()


def _recent() -> deque:
    if not hasattr(_RECENT, "items"):
        _RECENT.items = deque(maxlen=256)
    return _RECENT.items


def reducer_op(buffer: Any) -> str | None:
    """The op ``T.alloc_reducer`` gave ``buffer`` (None for a buffer it did not allocate lately)."""
    for buf, op in reversed(_recent()):
        if buf.same_as(buffer):
            return op
    return None


def alloc_reducer(shape: Any, dtype: Any = "float32", op: str = "sum", replication: Any = None) -> Any:
    """A fragment to accumulate into with ``op`` ("sum", "max" or "min"); fill it with the op's identity first
    (``T.clear`` for a sum, ``T.fill(r, -T.infinity(dtype))`` for a max), as in TileLang."""
    if op not in REDUCER_OPS:
        raise ValueError(f"T.alloc_reducer op: expected one of {REDUCER_OPS}, got {op!r} (bitwise reducers are not "
                         "supported, see docs/compat.md)")
    if replication not in (None, "all", "none"):
        raise ValueError(f"T.alloc_reducer replication: expected None, 'all' or 'none', got {replication!r}")
    buf = alloc_fragment(shape, dtype)
    _recent().append((buf, op))
    return buf


def finalize_reducer(reducer: Any, dst: Any = None, batch: int = 1, **_ignored: Any) -> None:
    """Combine a reducer's partial results (a no-op on the CPU; an all-reduce over the block's threads on CUDA)."""
    if not is_buffer(reducer) or reducer.scope() != SCOPE_FRAGMENT:
        raise TypeError(f"T.finalize_reducer reducer: expected a buffer from T.alloc_reducer, got {describe(reducer)}")
    if dst is not None:
        raise ValueError("T.finalize_reducer(reducer, dst): TileLang's reducer epochs (T.reducer_init / "
                         "T.reducer_update) are not supported (see docs/compat.md); call T.finalize_reducer(reducer)")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"T.finalize_reducer batch: expected a positive int, got {batch!r}")
    op = reducer_op(reducer)
    if op is None:
        raise TypeError(f"T.finalize_reducer reducer: expected a buffer from T.alloc_reducer, got the fragment "
                        f"{reducer.name} (allocate it with T.alloc_reducer(shape, dtype, op))")
    from tvm.script import tirx as _T

    _T.evaluate(tvm.ir.Call(tvm.ir.Op.get(FINALIZE_OP), [to_region(reducer, None, "T.finalize_reducer"),
                                                         tvm.ir.StringImm(op)], ret_ty="handle"))

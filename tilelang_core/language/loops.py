"""Loops inside a kernel: ``T.Parallel``, ``T.Pipelined`` and the plain TVM loops.

``T.Parallel(m, n)`` is an element-wise loop nest over a tile whose iterations are independent; backends map it
to threads (CUDA) or to vector lanes (CPU). ``T.Pipelined(n, num_stages=s)`` is a sequential loop whose body
a backend may software-pipeline. Multi-dimensional ``T.Parallel`` needs a ``for`` handler that accepts a
context manager yielding several loop variables; it is installed here and hands every other loop to TVM's own
handler unchanged.
"""

from __future__ import annotations

import contextlib
from typing import Any

from tvm.script import tirx as _T
from tvm.script.parser.core import dispatch, doc
from tvm.tirx.script.builder.frame import ForFrame

PARALLEL_ATTR = "tl.parallel"
STAGES_ATTR = "tl.num_stages"


class _LoopNest:
    """A context manager entering one ForFrame per extent; yields the loop variables."""

    def __init__(self, frames: list[Any]):
        self._frames = frames
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> Any:
        self._stack = contextlib.ExitStack()
        vs = [self._stack.enter_context(f) for f in self._frames]
        return vs[0] if len(vs) == 1 else vs

    def __exit__(self, *exc: Any) -> Any:
        assert self._stack is not None
        return self._stack.__exit__(*exc)


def Parallel(*extents: Any) -> Any:  # noqa: N802
    """Element-wise loop nest over a tile: ``for i, j in T.Parallel(bM, bN)``."""
    if not extents:
        raise ValueError("T.Parallel: expected at least one extent")
    from ._sizes import size_value

    extents = tuple(size_value(e, f"T.Parallel: extent {i}") for i, e in enumerate(extents))
    frames = [_T.parallel(e, annotations={PARALLEL_ATTR: 1}) for e in extents]
    return frames[0] if len(frames) == 1 else _LoopNest(frames)


def Pipelined(start: Any, stop: Any = None, num_stages: int = 0, order: Any = None, stage: Any = None,  # noqa: N802
              sync: Any = None, group: Any = None) -> Any:
    """A sequential loop a backend may software-pipeline with ``num_stages`` stages in flight."""
    if not isinstance(num_stages, int) or num_stages < 0:
        raise ValueError(f"T.Pipelined num_stages: expected a non-negative int, got {num_stages!r}")
    ann = {STAGES_ATTR: num_stages}
    if stop is None:
        return _T.serial(start, annotations=ann)
    return _T.serial(start, stop, annotations=ann)


serial = _T.serial
unroll = _T.unroll
grid = _T.grid
vectorized = _T.vectorized

_stock_visit_for = dispatch.get(token="tirx", type_name="For")


def _visit_for(self: Any, node: Any) -> None:
    is_range = (isinstance(node.iter, doc.Call) and isinstance(node.iter.func, doc.Name)
                and node.iter.func.id == "range")
    if is_range:
        return _stock_visit_for(self, node)
    it = self.eval_expr(node.iter)
    if not isinstance(it, _LoopNest):
        if isinstance(it, ForFrame):
            # re-evaluating would build a second frame; enter the one we have, as the stock handler does
            from tvm.tirx.script.parser.parser import bind_for_value

            with self.var_table.with_frame():
                with it as iters:
                    self.eval_assign(target=node.target, source=iters, bind_value=bind_for_value)
                    self.visit_body(node.body)
            return None
        return _stock_visit_for(self, node)
    from tvm.tirx.script.parser.parser import bind_for_value

    with self.var_table.with_frame():
        with it as iters:
            self.eval_assign(target=node.target, source=iters, bind_value=bind_for_value)
            self.visit_body(node.body)
    return None


if getattr(_stock_visit_for, "__name__", "") != "_visit_for":
    dispatch.register(token="tirx", type_name="For")(_visit_for)



"""Pass: lower ``T.Parallel`` loop nests for CPUs, guarding their global-memory accesses.

On a CPU a ``T.Parallel`` nest is a plain loop nest that LLVM vectorises (the block is the unit of thread
parallelism). User code inside it may index global tensors directly (``C[by * bM + i, j] = ...``); where a
ragged shape can push such an access past the tensor, a guard is added — stores are skipped and loads read 0 —
so bounds are the compiler's job, not the user's. Guards that the loop ranges prove unnecessary are omitted.
Also strips ``T.Pipelined``'s stage annotation: the CPU runs the loop as written.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ...language.loops import PARALLEL_ATTR, STAGES_ATTR
from ..common.regions import in_bounds_conds, is_global
from ..common.rewriter import Rewriter, and_all


class LowerParallelCPU(Rewriter):
    pass_name = "tl.LowerParallelCPU"

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        is_par = s.kind == tirx.ForKind.PARALLEL and PARALLEL_ATTR in s.annotations
        is_pipe = STAGES_ATTR in s.annotations
        if not (is_par or is_pipe):
            return super().visit_For(s)
        self.bind_loop(s.loop_var, s.min, s.extent)
        self.depth += is_par
        body = self.visit(s.body)
        self.depth -= is_par
        ann = {k: v for k, v in s.annotations.items() if k not in (PARALLEL_ATTR, STAGES_ATTR)}
        kind = tirx.ForKind.SERIAL if is_par else s.kind
        return tirx.For(s.loop_var, s.min, s.extent, kind, body, None, ann or None, s.step, s.span)

    def _guard_loads(self, e: Any) -> Any:
        def fix(load: Any) -> Any:
            buf = load.source
            if not (tirx.is_buffer_var(buf) and is_global(buf)):
                return load
            conds = in_bounds_conds(buf, list(load.indices), self.ana)
            if not conds:
                return load
            return tirx.if_then_else(and_all(conds), load, tirx.const(0, dtype_of(load)))

        return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, fix)])

    def visit_BufferStore(self, s: Any) -> Any:  # noqa: N802
        if self.depth == 0:
            return s
        value = self._guard_loads(s.value)
        st = tirx.BufferStore(s.buffer, value, list(s.indices), span=s.span) if not value.same_as(s.value) else s
        if is_global(s.buffer):
            conds = in_bounds_conds(s.buffer, list(s.indices), self.ana)
            if conds:
                return tirx.IfThenElse(and_all(conds), st, None, span=s.span)
        return st


def lower_parallel_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return LowerParallelCPU().run(func)

"""Pass: turn the ``T.Kernel`` grid into one parallel loop over blocks, for CPUs.

The ``blockIdx`` loops of a kernel are fused into a single ``parallel`` loop (TVM splits it over the cores),
and each block index is recovered with a ``Bind`` (``bx = blk % gx`` ...), so every block of a 2-D or 3-D
grid is a unit of parallel work however the grid is shaped. A kernel that uses ``T.atomic_add`` runs its blocks
serially instead: on one core the adds need no atomics, and results stay deterministic.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ...language.kernel import KERNEL_ATTR
from ..common.rewriter import Rewriter, make_for, new_var, seq, tile_op_name


class _FindAtomics(Rewriter):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        if tile_op_name(s) == "tl.atomic_add":
            self.found = True
        return s


class LowerKernelGridCPU(Rewriter):
    pass_name = "tl.LowerKernelGridCPU"

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if s.kind != tirx.ForKind.THREAD_BINDING or KERNEL_ATTR not in s.annotations:
            return super().visit_For(s)
        loops = [s]
        while isinstance(loops[-1].body, tirx.For) and loops[-1].body.kind == tirx.ForKind.THREAD_BINDING:
            loops.append(loops[-1].body)
        body = loops[-1].body
        finder = _FindAtomics()
        finder.visit(body)
        blk = new_var("blk")
        total: Any = 1
        binds = []
        stride: Any = 1
        for i, lp in enumerate(loops):
            ext = lp.extent
            value = blk if len(loops) == 1 else (blk // stride if i == len(loops) - 1 else (blk // stride) % ext
                                                  if i else blk % ext)
            binds.append(tirx.Bind(lp.loop_var, value))
            stride = stride * ext
            total = total * ext
        kind = tirx.ForKind.SERIAL if finder.found else tirx.ForKind.PARALLEL
        return make_for(blk, total, seq(binds + [body]), kind, span=s.span)


def lower_kernel_grid_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return LowerKernelGridCPU().run(func)

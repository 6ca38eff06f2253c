"""Pass: split a ``T.Parallel`` loop whose variable is divided by a constant, so the loop vectorises on CPUs.

Unpacking sub-byte data is written TileLang's way, element by element::

    for i, j in T.Parallel(block_N, block_K):
        B[i, j] = (B_packed[i, j // 2] >> (4 * (j % 2))) & 0xF ...

With ``j // 2`` and ``j % 2`` in the innermost loop, LLVM sees a gather (two lanes read the same byte) and a
per-lane shift amount, and the loop stays scalar or turns into slow gathers. When the innermost ``T.Parallel``
loop variable ``j`` only appears divided by one constant ``c`` that divides the extent, the loop is split into
``jo`` (outer, ``T.Parallel``) and ``ji`` (inner, ``c`` unrolled iterations): ``j // c`` becomes ``jo``,
``j % c`` becomes ``ji``, and ``j`` becomes ``jo * c + ji``. Each unrolled copy then has a constant shift and a
contiguous load, and LLVM vectorises the ``jo`` loop with interleaved stores. Runs before
``LowerParallelCPU``, which still sees a ``T.Parallel`` loop and adds any bounds guards.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language.loops import PARALLEL_ATTR
from ..common.rewriter import Rewriter, const_int, new_var


def _divisors_of(body: Any, var: Any) -> set[int] | None:
    """The constants ``var`` is floor-divided / taken modulo by in ``body``; None when one is not a constant."""
    found: set[int] = set()
    bad = False

    def visit(node: Any) -> Any:
        nonlocal bad
        if node.a.same_as(var):
            c = const_int(node.b)
            if c is None or c <= 1:
                bad = True
            else:
                found.add(c)
        return node

    tvm_ffi.structural_map(body, [(tirx.FloorDiv, visit), (tirx.FloorMod, visit)])
    return None if bad else found


def _has_loop(body: Any) -> bool:
    seen = False

    def visit(node: Any) -> Any:
        nonlocal seen
        seen = True
        return node

    tvm_ffi.structural_map(body, [(tirx.For, visit), (tirx.While, visit)])
    return seen


class SplitDivModCPU(Rewriter):
    pass_name = "tl.SplitDivModCPU"

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        out = super().visit_For(s)
        if not (s.kind == tirx.ForKind.PARALLEL and PARALLEL_ATTR in s.annotations):
            return out
        extent, start = const_int(s.extent), const_int(s.min)
        if extent is None or start != 0 or _has_loop(out.body):
            return out
        divisors = _divisors_of(out.body, s.loop_var)
        if not divisors or len(divisors) != 1:
            return out
        (c,) = divisors
        if extent % c or extent // c < 2:
            return out
        var = s.loop_var
        jo, ji = new_var(var.name + "_o"), new_var(var.name + "_i")

        def div_mod(node: Any) -> Any:
            if node.a.same_as(var) and const_int(node.b) == c:
                return jo if isinstance(node, tirx.FloorDiv) else ji
            return node

        body = tvm_ffi.structural_map(out.body, [(tirx.FloorDiv, div_mod), (tirx.FloorMod, div_mod)])
        body = tvm_ffi.structural_map(body, [(tvm.ir.Var, lambda v: jo * c + ji if v.same_as(var) else v)])
        inner = tirx.For(ji, tirx.IntImm("int32", 0), tirx.IntImm("int32", c), tirx.ForKind.UNROLLED, body, None,
                         None, None, s.span)
        return tirx.For(jo, tirx.IntImm("int32", 0), tirx.IntImm("int32", extent // c), s.kind, inner, None,
                        s.annotations, None, s.span)


def split_div_mod_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return SplitDivModCPU().run(func)

"""A small recursive statement rewriter with loop-range tracking, shared by our passes.

TVM 0.27 removed the Python stmt functors; ``tvm_ffi.structural_map`` rewrites post-order without context.
Our lowering needs context (the ranges of enclosing loops, to prove accesses in bounds, and the span of the
user's statement, to report errors), so passes subclass :class:`Rewriter` and override ``visit_<Node>``.
Errors are collected, not raised mid-walk, and reported with the user's line by :func:`raise_collected`.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm.sym
from tvm import tirx

from ...errors import SourceLocation, TileLangCompileError


def location_of(span: Any) -> SourceLocation | None:
    if span is None:
        return None
    try:
        return SourceLocation(str(span.source_name.name), int(span.line), int(span.column))
    except Exception:  # noqa: BLE001 - a span without a source
        return None


class Rewriter:
    """Recursive rewriter over the statement kinds our programs contain."""

    pass_name = "rewriter"

    def __init__(self) -> None:
        self.ana = tvm.sym.Analyzer()
        self.errors: list[tuple[str, Any]] = []
        self.loop_stack: list[tirx.For] = []

    # -- errors --------------------------------------------------------------------------------------------
    def error(self, span: Any, message: str) -> None:
        self.errors.append((message, span))

    def raise_collected(self) -> None:
        if self.errors:
            msg, span = self.errors[0]
            raise TileLangCompileError(msg, location_of(span), stage=self.pass_name)

    # -- driver --------------------------------------------------------------------------------------------
    def run(self, func: tirx.PrimFunc) -> tirx.PrimFunc:
        body = self.visit(func.body)
        self.raise_collected()
        return func.with_body(body)

    def visit(self, s: Any) -> Any:
        if s is None:
            return None
        meth = getattr(self, "visit_" + type(s).__name__, None)
        if meth is None:
            return s
        return meth(s)

    def visit_SeqStmt(self, s: Any) -> Any:  # noqa: N802
        out = []
        for x in s.seq:
            y = self.visit(x)
            if y is None:
                continue
            if isinstance(y, tirx.SeqStmt):
                out.extend(y.seq)
            else:
                out.append(y)
        if len(out) == 1:
            return out[0]
        return tirx.SeqStmt(out, span=s.span)

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        self.bind_loop(s.loop_var, s.min, s.extent)
        self.loop_stack.append(s)
        body = self.visit(s.body)
        self.loop_stack.pop()
        if body.same_as(s.body):
            return s
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations, s.step, s.span)

    def visit_IfThenElse(self, s: Any) -> Any:  # noqa: N802
        then = self.visit(s.then_case)
        els = self.visit(s.else_case) if s.else_case is not None else None
        return tirx.IfThenElse(s.condition, then, els, span=s.span)

    def visit_Bind(self, s: Any) -> Any:  # noqa: N802
        try:
            self.ana.bind(s.var, s.value, allow_override=True)
        except Exception:  # noqa: BLE001
            pass
        return s

    def visit_AttrStmt(self, s: Any) -> Any:  # noqa: N802
        return tirx.AttrStmt(s.node, s.attr_key, s.value, self.visit(s.body), span=s.span)

    def visit_While(self, s: Any) -> Any:  # noqa: N802
        return tirx.While(s.condition, self.visit(s.body), span=s.span)

    # -- helpers -------------------------------------------------------------------------------------------
    def bind_loop(self, var: Any, mn: Any, extent: Any) -> None:
        try:
            self.ana.bind(var, tvm.ir.Range.from_min_extent(mn, extent), allow_override=True)
        except Exception:  # noqa: BLE001 - symbolic extents the analyzer cannot take
            pass

    def prove(self, cond: Any) -> bool:
        try:
            return bool(self.ana.can_prove(cond))
        except Exception:  # noqa: BLE001
            return False


def const_int(e: Any) -> int | None:
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return None


def and_all(conds: list[Any]) -> Any:
    c = conds[0]
    for x in conds[1:]:
        c = tirx.And(c, x)
    return c


def make_for(var: Any, extent: Any, body: Any, kind: Any = None, span: Any = None, annotations: Any = None) -> Any:
    kind = tirx.ForKind.SERIAL if kind is None else kind
    ext = tirx.IntImm("int32", extent) if isinstance(extent, int) else extent
    return tirx.For(var, tirx.IntImm("int32", 0), ext, kind, body, None, annotations, None, span)


def new_var(name: str, dtype: str = "int32") -> Any:
    return tvm.ir.Var(name, dtype)


def seq(stmts: list[Any], span: Any = None) -> Any:
    stmts = [s for s in stmts if s is not None]
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts, span=span)


def tile_op_name(s: Any) -> str | None:
    """The ``tl.*`` op an ``Evaluate`` statement calls, or None."""
    v = s.value
    if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and str(v.op.name).startswith("tl."):
        return str(v.op.name)
    return None


def with_span(s: Any, span: Any) -> Any:
    """``s`` rebuilt to carry ``span`` (the user's statement it was lowered from) where it has none, so later
    stages — the CUDA source-line map among them — can still name the user's line. Kinds it cannot rebuild are
    returned as they are."""
    if s is None or span is None:
        return s
    if isinstance(s, tirx.SeqStmt):  # a sequence's own span marks no statement: its members need one each
        return tirx.SeqStmt([with_span(x, span) for x in s.seq], span=s.span if location_of(s.span) else span)
    if getattr(s, "span", None) is not None and location_of(s.span) is not None:
        return s
    if isinstance(s, tirx.Evaluate):
        return tirx.Evaluate(s.value, span=span)
    if isinstance(s, tirx.BufferStore):
        return tirx.BufferStore(s.buffer, s.value, s.indices, span=span)
    if isinstance(s, tirx.For):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding, s.annotations, s.step, span)
    if isinstance(s, tirx.IfThenElse):
        return tirx.IfThenElse(s.condition, s.then_case, s.else_case, span=span)
    return s


def first_span(s: Any) -> Any:
    """The span of the first statement in ``s`` (pre-order) that names a user's line, or None."""
    import tvm_ffi

    found: list[Any] = []

    def visit(x: Any) -> None:
        if not found and location_of(getattr(x, "span", None)) is not None:
            found.append(x.span)

    tvm_ffi.structural_walk(s, [(tirx.Stmt, visit)], order="pre")
    return found[0] if found else None

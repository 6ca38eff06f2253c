"""Pass: test a loop-dependent mask once per iteration where it holds for a whole ``T.Parallel`` nest.

``tl.SplitMaskedIterations``: on the iterations of a serial loop where the analyzer proves a mask true for every
element of a nest, the nest runs an unmasked copy; only the others (diagonal, ragged tiles) test each element.

Why: a tiled program masks its tiles where they leave the valid region. Flash attention's causal program writes,
for every K/V tile ``k`` of its ``T.Pipelined`` loop, ``acc_s[i, j] = T.if_then_else(bx*M + i >= k*N + j and
k*N + j < seq_len, 0, -inf)``: a compare-and-select per score although only the diagonal tile (and a ragged last
tile) has any element where the condition is false. The compiler can see that: the condition is affine in the
loop variable and the nest's variables, so the iterations on which it is true for the whole nest form a range of
``k`` that the analyzer can bound in closed form.

What it does, for every serial loop (``T.serial``, ``T.Pipelined``) over ``k``, for each ``T.Parallel`` nest at
the top level of the loop's body whose conditions (``T.if_then_else``, ``T.Select``, ``if``) depend on ``k``:

* each condition is split into its atoms (``and`` / ``or`` / ``not`` of integer comparisons); an atom that depends
  on ``k`` is brought to the form ``c*k + r >= 0`` (``tvm.sym.detect_linear_equation``, ``c`` a constant, ``r`` free
  of ``k``; bindings the loop body makes from ``k`` before the nest, such as ``kv0 = first + k * N``, are
  substituted first);
* the lower bound ``r_min`` of ``r`` over the nest's whole iteration space (``Analyzer.int_set``) gives the range of
  ``k`` on which the atom holds for every element: ``k < r_min // -c + 1`` when ``c < 0``, ``k >= ceil(-r_min / c)``
  when ``c > 0``. The analyzer must prove the bound (the atom at the range's extreme ``k``, for ``r = r_min``) or
  the atom is left alone;
* the nest becomes ``if lo <= k < hi: <nest with those atoms replaced by True, simplified> else: <nest as
  written>``; where the analyzer proves the range covers the whole loop the nest is replaced outright.

It is a per-iteration branch inside the one loop, not a split of the loop into two: the loop keeps its
``T.Pipelined`` annotation, its top-level ``T.copy`` producers and its ``T.gemm``s, so ``tl.PipelineCUDA`` (and its
wgmma, TMA and warp-specialised forms) see the loop they saw before, and a block-dependent trip count stays as the
program wrote it. The branch is uniform across a block (it depends on ``k`` and the block indices only).

Where a ``k``-dependent condition cannot be analysed (not an integer inequality, not affine in ``k``, a
coefficient that is not a constant, a bound over the nest the analyzer cannot give, a bound that needs variables
the nest defines, or a mask that holds for the whole nest on no iteration), the nest keeps its per-element test
and the kernel carries a note (``tl.notes``: ``kernel.notes``, the compile trace) saying which condition and why.
Conditions that do not depend on the loop variable, or only through the index of a memory read (``mask[k]``:
data, not a tile's edge), are not this pass's business and get no note.

Runs first among the lowering passes (before the grid and the tile ops are lowered), for the CPU and CUDA alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm.sym
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ...language.loops import PARALLEL_ATTR
from .notes import add_notes, at_line
from .rewriter import Rewriter

_COMPARES = (tirx.LT, tirx.LE, tirx.GT, tirx.GE)
_SELECT_OPS = ("prim.if_then_else", "tirx.if_then_else", "tir.if_then_else")


def _is_parallel(s: Any) -> bool:
    return isinstance(s, tirx.For) and PARALLEL_ATTR in (s.annotations or {})


def _is_mask_loop(s: Any) -> bool:
    """A loop whose iterations this pass may tell apart: serial, not a thread binding, not a T.Parallel nest."""
    return (isinstance(s, tirx.For) and s.kind == tirx.ForKind.SERIAL and s.thread_binding is None
            and not _is_parallel(s))


def _free_vars(e: Any) -> list[Any]:
    out: list[Any] = []

    def visit(x: Any) -> None:
        if isinstance(x, tvm.ir.Var) and not tirx.is_buffer_var(x) and not any(x.same_as(y) for y in out):
            out.append(x)

    tvm_ffi.structural_walk(e, [(tvm.ir.Var, visit)], order="pre")
    return out


def _uses(e: Any, var: Any) -> bool:
    return any(v.same_as(var) for v in _free_vars(e))


def _substitute(e: Any, vmap: dict[Any, Any]) -> Any:
    """``e`` with the variables and the reads of one-element scalars in ``vmap`` replaced by their values."""
    if not vmap:
        return e

    def load(x: Any) -> Any:
        return vmap.get(x.source, x)

    def var(v: Any) -> Any:
        return v if tirx.is_buffer_var(v) else vmap.get(v, v)

    return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load), (tvm.ir.Var, var)])


def _without_loads(e: Any) -> Any:
    """``e`` with every memory read replaced by a fresh variable: what ``e`` computes from indices alone."""

    def load(x: Any) -> Any:
        return tvm.ir.Var("load", dtype_of(x))

    return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])


def _loads(e: Any) -> list[Any]:
    out: list[Any] = []
    tvm_ffi.structural_walk(e, [(tvm.ir.TensorLoad, out.append)], order="pre")
    return out


def _written_in(s: Any) -> list[Any]:
    """Buffers ``s`` may write: stored to, or named by a tile op (whose destination it may be)."""
    out: list[Any] = []

    def store(x: Any) -> None:
        out.append(x.buffer)

    def call(x: Any) -> None:
        if str(getattr(x.op, "name", "")).startswith("tl."):
            for a in x.args:
                b = getattr(a, "buffer", None)
                if b is not None:
                    out.append(b)

    tvm_ffi.structural_walk(s, [(tirx.BufferStore, store), (tvm.ir.Call, call)], order="pre")
    return out


def _is_scalar(b: Any) -> bool:
    return b.scope() in ("local", "local.var") and len(b.shape) == 1 and isinstance(b.shape[0], tirx.IntImm) \
        and int(b.shape[0].value) == 1


def _defined_in(s: Any) -> list[Any]:
    """Variables ``s`` defines: loop variables and bindings."""
    out: list[Any] = []

    def visit(x: Any) -> None:
        out.append(x.loop_var if isinstance(x, tirx.For) else x.var)

    tvm_ffi.structural_walk(s, [((tirx.For, tirx.Bind), visit)], order="pre")
    return out


def _with_fresh_allocations(s: Any) -> Any:
    """``s`` with each buffer it allocates replaced by a new one of the same kind: a copy of a nest placed beside
    the original must not define the same buffer twice (TVM refuses a duplicate definition)."""
    remap: dict[Any, Any] = {}

    def alloc(x: Any) -> None:
        b = x.buffer
        remap[b] = tirx.decl_buffer(list(b.shape), dtype_of(b) or str(b.dtype), str(b.name), scope=str(b.scope()))

    tvm_ffi.structural_walk(s, [(tirx.AllocBuffer, alloc)], order="pre")
    if not remap:
        return s

    def var(v: Any) -> Any:
        return remap.get(v, v)

    def swap(x: Any) -> Any:
        return tirx.AllocBuffer(remap[x.buffer]) if x.buffer in remap else x

    return tvm_ffi.structural_map(s, [(tvm.ir.Var, var), (tirx.AllocBuffer, swap)])


def _is_select(e: Any) -> bool:
    return isinstance(e, tvm.ir.Call) and str(getattr(e.op, "name", "")) in _SELECT_OPS


def _atoms(cond: Any) -> list[Any]:
    """The leaves of ``cond``'s ``and`` / ``or`` / ``not`` tree."""
    if isinstance(cond, (tirx.And, tirx.Or)):
        return _atoms(cond.a) + _atoms(cond.b)
    if isinstance(cond, tirx.Not):
        return _atoms(cond.a)
    return [cond]


def _as_nonnegative(atom: Any) -> Any | None:
    """``atom`` as an expression ``e`` with ``atom <=> e >= 0``, for signed integer inequalities; else None."""
    if not isinstance(atom, _COMPARES):
        return None
    a, b = atom.a, atom.b
    dt = dtype_of(a) or ""
    if not dt.startswith("int") or dtype_of(b) != dt:  # signed: the differences below must not wrap
        return None
    one = tirx.IntImm(dt, 1)
    if isinstance(atom, tirx.GE):
        return a - b
    if isinstance(atom, tirx.GT):
        return a - b - one
    if isinstance(atom, tirx.LE):
        return b - a
    return b - a - one  # LT


@dataclass
class _Nest:
    """One T.Parallel nest's masks: the conditions found in it and what was proven about them."""

    stmt: Any
    doms: dict[Any, Any]  # loop var of the nest (and of loops inside it) -> IntervalSet
    conds: list[tuple[Any, Any]] = field(default_factory=list)  # (condition, statement it sits in)
    proven: list[Any] = field(default_factory=list)  # atoms (bindings substituted) true on [lo, hi)
    lo: list[Any] = field(default_factory=list)
    hi: list[Any] = field(default_factory=list)


class _SplitMaskedIterations(Rewriter):
    pass_name = "tl.SplitMaskedIterations"

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[str] = []

    # -- walk ----------------------------------------------------------------------------------------------
    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if _is_parallel(s):
            return s  # a nest: its conditions are looked at from the serial loop around it
        out = super().visit_For(s)
        if _is_mask_loop(out):
            self.bind_loop(out.loop_var, out.min, out.extent)
            out = self.split_loop(out)
        return out

    # -- one loop ------------------------------------------------------------------------------------------
    def split_loop(self, loop: Any) -> Any:
        k = loop.loop_var
        body = loop.body
        stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        # values the body defines before a nest (``kv0 = first + k * N``: a binding, or a one-element scalar stored
        # once from values the loop does not change), in terms of k and what the loop does not change
        binds: dict[Any, Any] = {}
        written = _written_in(body)
        changed = False
        out = []
        for st in stmts:
            if isinstance(st, tirx.Bind):
                binds[st.var] = _substitute(st.value, binds)
            elif isinstance(st, tirx.BufferStore) and _is_scalar(st.buffer):
                value = _substitute(st.value, binds)
                once = sum(1 for b in written if b.same_as(st.buffer)) == 1
                if once and not any(any(ld.source.same_as(b) for b in written) for ld in _loads(value)):
                    binds[st.buffer] = value
            elif _is_parallel(st):
                new = self.split_nest(loop, st, binds, written)
                changed = changed or not new.same_as(st)
                st = new
            out.append(st)
        if not changed:
            return loop
        new_body = tirx.SeqStmt(out, span=body.span) if len(out) > 1 else out[0]
        return tirx.For(k, loop.min, loop.extent, loop.kind, new_body, loop.thread_binding, loop.annotations,
                        loop.step, loop.span)

    def split_nest(self, loop: Any, nest: Any, binds: dict[Any, Any], written: list[Any]) -> Any:
        k = loop.loop_var
        info = _Nest(nest, {})
        self.collect(nest, info)
        masks = [(c, st) for c, st in info.conds if _uses(_without_loads(_substitute(c, binds)), k)]
        if not masks:
            return nest
        local = _defined_in(loop.body)  # a bound of the branch must not use what the loop body defines
        for cond, st in masks:
            for atom in _atoms(_substitute(cond, binds)):
                if not _uses(_without_loads(atom), k):
                    continue  # free of k, or data-dependent (``mask[k] != 0``): not a tile's edge
                why = self.bound_atom(k, atom, info, local, written)
                if why:
                    self.note(st, k, atom, why)
        if not info.proven:
            return nest
        end = loop.min + loop.extent
        lo = self.ana.simplify(_fold(tirx.max, [loop.min, *info.lo]))
        hi = self.ana.simplify(_fold(tirx.min, info.hi)) if info.hi else end
        if self.prove(hi <= lo) or self.prove(hi <= loop.min) or self.prove(lo >= end):
            self.note(masks[0][1], k, masks[0][0], "on no iteration does it hold for the whole nest")
            return nest
        unmasked = _with_fresh_allocations(self.simplify_nest(nest, info.proven, binds))
        parts = []
        if info.lo and not self.prove(lo <= loop.min):  # k >= the loop's start goes without saying
            parts.append(tirx.LE(self.ana.simplify(_fold(tirx.max, info.lo)), k))
        if info.hi and not self.prove(hi >= end):
            parts.append(tirx.LT(k, hi))
        if not parts:
            return unmasked
        cond = parts[0] if len(parts) == 1 else tirx.And(parts[0], parts[1])
        return tirx.IfThenElse(cond, unmasked, nest, span=nest.span)

    # -- analysis ------------------------------------------------------------------------------------------
    def collect(self, s: Any, info: _Nest, vals: dict[Any, Any] | None = None) -> None:
        """Loop domains inside the nest and every condition in it, with the statement it belongs to. Conditions
        are recorded with the nest's own scalars substituted (``visible = k * N + j < n`` then
        ``T.if_then_else(visible, ...)``): ``vals`` holds each scalar's value where it is certainly the last one
        stored (straight-line code; a store under an ``if`` or in an inner loop forgets it afterwards)."""
        vals = {} if vals is None else vals
        if isinstance(s, tirx.For):
            info.doms[s.loop_var] = tvm.sym.IntervalSet(s.min, s.min + s.extent - 1)
            self.collect(s.body, info, vals)
            self.forget(s.body, vals)
        elif isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.collect(x, info, vals)
        elif isinstance(s, tirx.IfThenElse):
            info.conds.append((_substitute(s.condition, vals), s))
            self.collect_exprs(s.condition, s, info, vals)
            self.collect(s.then_case, info, dict(vals))
            if s.else_case is not None:
                self.collect(s.else_case, info, dict(vals))
            self.forget(s, vals)
        elif isinstance(s, tirx.BufferStore):
            self.collect_exprs(s.value, s, info, vals)
            for i in s.indices:
                self.collect_exprs(i, s, info, vals)
            if _is_scalar(s.buffer):
                vals[s.buffer] = _substitute(s.value, vals)
        elif isinstance(s, tirx.Bind):
            info.doms[s.var] = None  # defined inside the nest: a bound must not use it
            self.collect_exprs(s.value, s, info, vals)
            vals[s.var] = _substitute(s.value, vals)
        elif isinstance(s, tirx.Evaluate):
            self.collect_exprs(s.value, s, info, vals)
        elif isinstance(s, (tirx.AttrStmt, tirx.While)):
            self.collect(s.body, info, dict(vals))
            self.forget(s.body, vals)

    @staticmethod
    def forget(s: Any, vals: dict[Any, Any]) -> None:
        for b in _written_in(s):
            vals.pop(b, None)

    @staticmethod
    def collect_exprs(e: Any, st: Any, info: _Nest, vals: dict[Any, Any]) -> None:
        def visit(x: Any) -> None:
            if _is_select(x):
                info.conds.append((_substitute(x.args[0], vals), st))
            elif isinstance(x, tirx.Select):
                info.conds.append((_substitute(x.condition, vals), st))

        tvm_ffi.structural_walk(e, [((tvm.ir.Call, tirx.Select), visit)], order="pre")

    def bound_atom(self, k: Any, atom: Any, info: _Nest, local: list[Any], written: list[Any]) -> str:
        """Record the range of ``k`` on which ``atom`` holds over the whole nest; return why not ('' if done)."""
        e = _as_nonnegative(atom)
        if e is None:
            return "it is not an inequality (<, <=, >, >=) of integers"
        try:
            coeffs = tvm.sym.detect_linear_equation(e, [k])
        except Exception:  # noqa: BLE001 - an expression the linear analysis does not take
            coeffs = []
        if len(coeffs) != 2:
            return "it is not affine in the loop variable"
        c, rest = coeffs[0], coeffs[1]
        c = self.ana.simplify(c)
        if not isinstance(c, tirx.IntImm) or _uses(rest, k):
            return "its coefficient of the loop variable is not a constant"
        c = int(c.value)
        if c == 0:
            return "it is not affine in the loop variable"
        if any(info.doms.get(v, 1) is None for v in _free_vars(rest)):
            return "it uses a value the nest computes"
        if any(any(ld.source.same_as(b) for b in written) for ld in _loads(rest)):
            return "it reads a value the loop changes"
        doms = {v: d for v, d in info.doms.items() if d is not None}
        try:
            r_min = self.ana.simplify(self.ana.int_set(rest, doms).min_value)
        except Exception:  # noqa: BLE001 - an expression the interval analysis does not take
            return "the analyzer cannot bound it over the nest"
        if any(str(v.name) in ("neg_inf", "pos_inf") or any(v.same_as(x) for x in local)
               for v in _free_vars(r_min)):
            return "the analyzer cannot bound it over the nest"
        dt = dtype_of(r_min)
        ci = tirx.IntImm(dt, abs(c))
        if c < 0:  # holds for every element while c*k + r_min >= 0, i.e. k <= r_min // |c|
            bound = self.ana.simplify(tirx.floordiv(r_min, ci) + tirx.IntImm(dt, 1))
            worst = bound - tirx.IntImm(dt, 1)
            ok = self.prove(tirx.GE(r_min - ci * worst, tirx.IntImm(dt, 0)))
            target = info.hi
        else:  # holds while k >= ceil(-r_min / c)
            bound = self.ana.simplify(tirx.floordiv(ci - tirx.IntImm(dt, 1) - r_min, ci))
            ok = self.prove(tirx.GE(r_min + ci * bound, tirx.IntImm(dt, 0)))
            target = info.lo
        if not ok:
            return "the analyzer cannot prove the range on which it holds"
        if dtype_of(bound) != dtype_of(k):
            bound = tirx.Cast(dtype_of(k), bound)
        target.append(bound)
        info.proven.append(atom)
        return ""

    def note(self, st: Any, k: Any, atom: Any, why: str) -> None:
        self.notes.append(f"{at_line(st)}mask `{atom}` is tested per element on every iteration of loop "
                          f"`{k.name}`: {why}")

    # -- rewrite -------------------------------------------------------------------------------------------
    def simplify_nest(self, nest: Any, proven: list[Any], binds: dict[Any, Any]) -> Any:
        """``nest`` with every comparison that is a proven atom replaced by True, and what that decides decided.

        Every occurrence counts, not only those in a condition (``visible = k * N + j < n`` is one): a proven
        atom reads only the nest's loop variables and values the loop does not change, so it has the same value
        wherever it stands in the nest."""
        true, false = tirx.const(True, "bool"), tirx.const(False, "bool")

        def on_compare(e: Any) -> Any:
            sub = _substitute(e, binds)
            return true if any(tvm_ffi.structural_equal(sub, p) for p in proven) else e

        def on_logic(e: Any) -> Any:
            if isinstance(e, tirx.Not):
                return false if _is_true(e.a) else true if _is_false(e.a) else e
            a, b = e.a, e.b
            if isinstance(e, tirx.And):
                return b if _is_true(a) else a if _is_true(b) else false if _is_false(a) or _is_false(b) else e
            return a if _is_false(b) else b if _is_false(a) else true if _is_true(a) or _is_true(b) else e

        def on_call(e: Any) -> Any:
            if _is_select(e) and (_is_true(e.args[0]) or _is_false(e.args[0])):
                return e.args[1] if _is_true(e.args[0]) else e.args[2]
            return e

        def on_select(e: Any) -> Any:
            c = e.condition
            return e.true_value if _is_true(c) else e.false_value if _is_false(c) else e

        def on_if(s: Any) -> Any:
            if _is_true(s.condition):
                return s.then_case
            if _is_false(s.condition):
                return s.else_case if s.else_case is not None else tirx.Evaluate(tirx.IntImm("int32", 0))
            return s

        return tvm_ffi.structural_map(nest, [(_COMPARES, on_compare), ((tirx.And, tirx.Or, tirx.Not), on_logic),
                                             (tvm.ir.Call, on_call), (tirx.Select, on_select),
                                             (tirx.IfThenElse, on_if)])


def _fold(op: Any, xs: list[Any]) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = op(out, x)
    return out


def _is_true(e: Any) -> bool:
    return isinstance(e, tirx.IntImm) and dtype_of(e) == "bool" and int(e.value) == 1


def _is_false(e: Any) -> bool:
    return isinstance(e, tirx.IntImm) and dtype_of(e) == "bool" and int(e.value) == 0


def split_masked_iterations(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Give each ``T.Parallel`` nest whose mask depends on a serial loop's variable an unmasked copy for the
    iterations on which the analyzer proves the mask constant (see the module docstring); note where it cannot."""
    pass_ = _SplitMaskedIterations()
    out = pass_.run(func)
    return add_notes(out, pass_.notes)

"""``T.alloc_var`` scalars read as values: ``acc + x``, ``T.if_then_else(c, acc, 0)``, ``A[idx]``, ``B[i] = acc``.

In TileLang a ``T.alloc_var`` is a one-element buffer that a program writes by name (``acc = 0``, ``acc += x``,
both handled by TVMScript for a (1,)-buffer) and also *reads* by name. Stock TVMScript passes the buffer itself
on, so ``A[i] * acc`` failed with "unsupported operand type(s) for *: 'TensorLoad' and 'Var'" and
``T.if_then_else(c, acc, 0)`` with "Mismatched type ... prim._OpIfThenElse". This module teaches the expression
evaluator to read such a name as ``acc[0]`` where a value is wanted:

* an operand of an arithmetic, comparison, boolean or unary operator;
* an index of a subscript (``A[acc]``, ``A[i, acc]``, slice bounds);
* an argument of a scalar function: ``T.if_then_else``, ``T.max``, ``T.exp`` ... (our math module, TVM's TIR
  operators and dtype casts), a loop bound (``T.serial``, ``T.unroll``, ``T.Pipelined``, ``T.grid``, ``range``), and
  the value (second) argument of ``T.fill`` / ``T.atomic_*``.

Everywhere else the name is still the buffer (``acc[0]``, ``T.copy``, a macro argument), so existing programs
keep their meaning. Only buffers of scope ``local.var`` (what ``T.alloc_var`` allocates) are read this way.
"""

from __future__ import annotations

import copy
from typing import Any

from tvm.script.parser.core import doc
from tvm.script.parser.core.evaluator import ExprEvaluator

_VALUE_ARG_OPS = ("fill", "atomic_add", "atomic_max", "atomic_min", "atomic_addx2", "atomic_addx4")
_SCALAR_MODULES = ("tilelang_core.language.math", "tvm.tirx.op", "tvm.tirx.expr", "tvm.tirx.generic")


def is_var_buffer(value: Any) -> bool:
    """A ``T.alloc_var`` buffer (scope ``local.var``, one element)."""
    from ._ir import is_buffer

    try:
        return is_buffer(value) and value.scope() == "local.var"
    except Exception:  # noqa: BLE001 - not a buffer after all
        return False


def _load(name: doc.Name) -> doc.Subscript:
    pos = dict(lineno=name.lineno, col_offset=name.col_offset, end_lineno=name.end_lineno,
               end_col_offset=name.end_col_offset)
    return doc.Subscript(value=doc.Name(id=name.id, ctx=doc.Load(), **pos), slice=doc.Constant(value=0, kind=None,
                         **pos), ctx=doc.Load(), **pos)


def _as_value(ev: ExprEvaluator, node: Any) -> Any:
    """``node`` itself, or ``node[0]`` when it is a bare name bound to a ``T.alloc_var`` buffer."""
    if isinstance(node, doc.Name) and is_var_buffer(ev.value_table.get(node.id)):
        return _load(node)
    return node


def _callee(ev: ExprEvaluator, func: Any) -> Any:
    """The function a call names (``T.max``, ``max``), resolved without evaluating anything else."""
    if isinstance(func, doc.Name):
        return ev.value_table.get(func.id)
    if isinstance(func, doc.Attribute):
        base = _callee(ev, func.value)
        return getattr(base, func.attr, None) if base is not None else None
    return None


def _scalar_callee(f: Any) -> bool:
    mod = getattr(f, "__module__", "") or ""
    if mod.startswith(_SCALAR_MODULES):
        return True
    from . import loops

    if any(f is g for g in (loops.serial, loops.unroll, loops.Pipelined, loops.grid, range)):
        return True  # loop bounds: for i in T.serial(n_valid)
    # dtype constructors / casts: T.float32(x), T.int32(x) (TVMScript's or tilelang_core's str-like dtypes)
    name = getattr(f, "__name__", None) or str(f)
    try:
        import tvm

        tvm.DataType(str(name))
        return mod.startswith(("tvm.tirx.script", "tvm.script", "tilelang_core.language.dtypes")) or \
            type(f).__module__.startswith("tilelang_core.language.dtypes")
    except Exception:  # noqa: BLE001 - not a dtype name
        return False


def _rewrite(ev: ExprEvaluator, node: Any) -> Any:
    """A shallow copy of ``node`` with its value positions read as values (see the module docstring)."""
    if isinstance(node, doc.BinOp):
        left, right = _as_value(ev, node.left), _as_value(ev, node.right)
        if left is node.left and right is node.right:
            return node
        node = copy.copy(node)
        node.left, node.right = left, right
        return node
    if isinstance(node, doc.UnaryOp):
        operand = _as_value(ev, node.operand)
        if operand is node.operand:
            return node
        node = copy.copy(node)
        node.operand = operand
        return node
    if isinstance(node, doc.Compare):
        left = _as_value(ev, node.left)
        comps = [_as_value(ev, c) for c in node.comparators]
        if left is node.left and all(a is b for a, b in zip(comps, node.comparators)):
            return node
        node = copy.copy(node)
        node.left, node.comparators = left, comps
        return node
    if isinstance(node, doc.BoolOp):
        values = [_as_value(ev, v) for v in node.values]
        if all(a is b for a, b in zip(values, node.values)):
            return node
        node = copy.copy(node)
        node.values = values
        return node
    if isinstance(node, doc.Subscript):
        sl = _index_values(ev, node.slice)
        if sl is node.slice:
            return node
        node = copy.copy(node)
        node.slice = sl
        return node
    if isinstance(node, doc.Call) and node.args:
        if not any(_as_value(ev, a) is not a for a in node.args):
            return node  # no T.alloc_var argument: nothing to decide (the common case)
        f = _callee(ev, node.func)
        if f is None:
            return node
        if _scalar_callee(f):
            first = 0
        elif getattr(f, "__name__", "") in _VALUE_ARG_OPS and \
                (getattr(f, "__module__", "") or "").startswith("tilelang_core.language"):
            first = 1
        else:
            return node
        args = list(node.args[:first]) + [_as_value(ev, a) for a in node.args[first:]]
        if all(a is b for a, b in zip(args, node.args)):
            return node
        node = copy.copy(node)
        node.args = args
        return node
    return node


def _index_values(ev: ExprEvaluator, sl: Any) -> Any:
    if isinstance(sl, doc.Tuple):
        elts = [_index_values(ev, e) for e in sl.elts]
        if all(a is b for a, b in zip(elts, sl.elts)):
            return sl
        sl = copy.copy(sl)
        sl.elts = elts
        return sl
    if isinstance(sl, doc.Slice):
        parts = {k: _as_value(ev, getattr(sl, k)) if getattr(sl, k) is not None else None
                 for k in ("lower", "upper", "step")}
        if all(parts[k] is getattr(sl, k) for k in parts):
            return sl
        sl = copy.copy(sl)
        for k, v in parts.items():
            setattr(sl, k, v)
        return sl
    return _as_value(ev, sl)


# TVM's own method, kept on the class so that a re-import never wraps our hook in itself
if not hasattr(ExprEvaluator, "_tl_stock_visit_node"):
    ExprEvaluator._tl_stock_visit_node = ExprEvaluator._visit_node  # type: ignore[attr-defined]


def _visit_node(self: ExprEvaluator, node: Any) -> Any:
    if isinstance(node, (doc.BinOp, doc.UnaryOp, doc.Compare, doc.BoolOp, doc.Subscript, doc.Call)):
        node = _rewrite(self, node)
    return ExprEvaluator._tl_stock_visit_node(self, node)  # type: ignore[attr-defined]


def index_values(value_table: dict[str, Any], sl: Any) -> Any:
    """A subscript's index part with ``T.alloc_var`` names read as values (for the left side of a store)."""

    class _Ev:
        pass

    ev = _Ev()
    ev.value_table = value_table  # type: ignore[attr-defined]
    return _index_values(ev, sl)  # type: ignore[arg-type]


def value_of(value_table: dict[str, Any], node: Any) -> Any:
    """``node``, or ``node[0]`` when it is a bare ``T.alloc_var`` name (the right side of a store)."""
    if isinstance(node, doc.Name) and is_var_buffer(value_table.get(node.id)):
        return _load(node)
    return node


def install() -> None:
    """Install the evaluator hook (importing the language does it)."""
    ExprEvaluator._visit_node = _visit_node  # type: ignore[method-assign]


install()

"""Assignments in a kernel body: chained assignment ``a = b = c`` and ``T.alloc_var`` names on either side.

TVMScript refuses ``a = b = c`` ("Consequential assignments ... are not supported"). Python's meaning is kept
here: the right side is evaluated once, then assigned to each target from left to right, each target by
TVMScript's own rules (a store for ``B[i]`` or a ``T.alloc_var``, a new binding for a fresh name). A bare
``T.alloc_var`` name on the right of a store (``B[i] = acc``, ``other = acc`` for another var) and in the indices
of the stored-to element (``B[acc] = x``) is read as its value (see :mod:`.var_values`).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from tvm.script.parser.core import dispatch, doc

from .var_values import index_values, is_var_buffer, value_of


def _stock(type_name: str) -> Any:
    """TVM's own handler (also when this module is imported a second time and ours is registered already)."""
    f = dispatch.get(token="tirx", type_name=type_name)
    return getattr(f, "tl_stock", f)


_stock_visit_assign = _stock("Assign")
_stock_visit_aug_assign = _stock("AugAssign")
_tmp_names = itertools.count()


def _is_store_target(self: Any, table: dict[str, Any], target: Any) -> bool:
    """Whether assigning to ``target`` stores into memory (rather than binding a new name)."""
    if isinstance(target, doc.Subscript):
        return True
    if not isinstance(target, doc.Name) or target.id not in table:
        return False
    from tvm.ir import TensorLoad

    v = table[target.id]
    if isinstance(v, TensorLoad) or is_var_buffer(v):
        return True
    try:
        return bool(v.scope()) and len(v.shape) == 1 and int(v.shape[0]) == 1  # a (1,)-buffer: TVMScript stores
    except Exception:  # noqa: BLE001 - not a buffer
        return False


def _single(self: Any, target: Any, value: Any, node: Any) -> Any:
    table = self.var_table.get()
    if _is_store_target(self, table, target):
        value = value_of(table, value)
        if isinstance(target, doc.Subscript):
            sl = index_values(table, target.slice)
            if sl is not target.slice:
                target = doc.Subscript(value=target.value, slice=sl, ctx=target.ctx, lineno=target.lineno,
                                       col_offset=target.col_offset, end_lineno=target.end_lineno,
                                       end_col_offset=target.end_col_offset)
    if len(node.targets) == 1 and target is node.targets[0] and value is node.value:
        return _stock_visit_assign(self, node)
    one = copy.copy(node)
    one.targets, one.value = [target], value
    return _stock_visit_assign(self, one)


def _visit_assign(self: Any, node: doc.Assign) -> None:
    if len(node.targets) == 1:
        return _single(self, node.targets[0], node.value, node)
    # a = b = c: evaluate c once, then assign it to each target in turn (Python's order)
    value = self.eval_expr(node.value)
    name = f"__tl_chained_value_{next(_tmp_names)}"
    self.var_table.add(name, value, allow_shadowing=True)
    pos = dict(lineno=node.value.lineno, col_offset=node.value.col_offset, end_lineno=node.value.end_lineno,
               end_col_offset=node.value.end_col_offset)
    for target in node.targets:
        _single(self, target, doc.Name(id=name, ctx=doc.Load(), **pos), node)
    return None


def _visit_aug_assign(self: Any, node: doc.AugAssign) -> None:
    table = self.var_table.get()
    value = value_of(table, node.value)
    target = node.target
    if isinstance(target, doc.Subscript):
        sl = index_values(table, target.slice)
        if sl is not target.slice:
            target = doc.Subscript(value=target.value, slice=sl, ctx=target.ctx, lineno=target.lineno,
                                   col_offset=target.col_offset, end_lineno=target.end_lineno,
                                   end_col_offset=target.end_col_offset)
    if value is not node.value or target is not node.target:
        node = copy.copy(node)
        node.target, node.value = target, value
    return _stock_visit_aug_assign(self, node)


def install() -> None:
    """Register the handlers (importing the language does it); TVM's own stay the fallback inside them."""
    _visit_assign.tl_stock = _stock_visit_assign  # type: ignore[attr-defined]
    _visit_aug_assign.tl_stock = _stock_visit_aug_assign  # type: ignore[attr-defined]
    dispatch.register(token="tirx", type_name="Assign")(_visit_assign)
    dispatch.register(token="tirx", type_name="AugAssign")(_visit_aug_assign)


install()

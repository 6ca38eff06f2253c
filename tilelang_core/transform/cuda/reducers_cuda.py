"""TileLang's reducers (``T.alloc_reducer`` / ``T.finalize_reducer``) on CUDA: the pieces the passes share.

A reducer is a fragment that ``T.Parallel`` nests combine values into (``r[j] += x[i, j]``,
``r[i] = T.max(r[i], x[i, j])``) and that ``T.finalize_reducer`` makes whole. On CUDA:

* every thread holds a **replica** of the whole reducer (``tl.InferFragmentLayoutsCUDA`` makes it ``replicated``);
* a ``T.Parallel`` nest that updates a reducer gives **each iteration to exactly one thread**
  (``tl.LowerParallelCUDA``: over the layout of the distributed fragments it touches, else split over the threads
  like a nest over global/shared memory) and that thread combines into its own replica, so the replicas hold
  partial results that together cover every iteration once;
* ``T.fill`` / ``T.clear`` of a **sum** reducer writes the value into thread 0's replica and 0 into the others
  (a max / min reducer: the value everywhere, combining copies of it changes nothing), so the all-reduce below
  adds the initial value once, as the CPU's in-order updates do;
* ``T.finalize_reducer`` all-reduces the replicas element by element over the block's threads with the reducer's
  op (``tl::block_allreduce``, the combine of ``T.reduce_*``): afterwards every thread holds the final value.

What cannot be given that meaning is a located error: an update that is not ``r[idx] = op(r[idx], value)`` with
the reducer's op, a reducer written outside ``T.Parallel`` (every thread would apply it), or a nest that also writes
another per-thread tile. The reducers and their ops are found from the ``tl.finalize_reducer`` calls (the op is
their second argument) and handed from ``tl.LowerTileOpsCUDA``, which lowers the calls, to ``tl.LowerParallelCUDA``
as the function attribute ``tl.reducers`` (buffer -> op).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from ...language._ir import Region
from ...language.loops import PARALLEL_ATTR
from ..common.rewriter import location_of, tile_op_name
from .common import extern

ATTR_REDUCERS = "tl.reducers"
_COMBINE_OP = {"sum": "SumOp", "max": "MaxOp", "min": "MinOp"}


def reducers_in(func: tirx.PrimFunc) -> dict[Any, str]:
    """Reducer buffer -> op ("sum", "max", "min"), from the ``tl.finalize_reducer`` calls of ``func``."""
    found: dict[Any, str] = {}

    def ev(s: Any) -> Any:
        if tile_op_name(s) == "tl.finalize_reducer":
            args = list(s.value.args)
            op = str(args[1].value) if len(args) > 1 and isinstance(args[1], tvm.ir.StringImm) else "sum"
            found[Region.of(args[0]).buffer] = op
        return s

    tvm_ffi.structural_map(func.body, [(tirx.Evaluate, ev)])
    return found


def reducers_of(func: tirx.PrimFunc) -> dict[Any, str]:
    """The ``tl.reducers`` attribute (set by ``tl.LowerTileOpsCUDA``)."""
    attrs = func.attrs
    if attrs is None or ATTR_REDUCERS not in attrs:
        return {}
    return {k: str(v) for k, v in attrs[ATTR_REDUCERS].items()}


def fill_value(op: str, value: Any, tid: Any, dtype: str) -> Any:
    """What a thread writes into its replica for ``T.fill(r, value)``: thread 0 the value and the other threads 0
    for a sum (the all-reduce adds the value once); the value in every thread for max / min."""
    if op != "sum":
        return value
    return tirx.Select(tirx.EQ(tid, 0), value, tirx.const(0, dtype))


def finalize_stmts(local: Any, op: str, threads: int) -> list[Any]:
    """All-reduce the thread's replica ``local`` (its register array) over the block: a shared scratch and one
    ``tl::block_allreduce`` (every thread ends with the combined value of every element)."""
    d = 1
    for x in local.shape:
        d *= int(x)
    warps = threads // 32
    slots = threads if threads < 32 else max(warps, 1)
    scratch = tirx.decl_buffer((slots * d,), str(local.dtype), "reducer_smem", scope="shared")
    zero = tirx.IntImm("int32", 0)
    call = extern(f"tl::block_allreduce<tl::{_COMBINE_OP[op]}, {threads}, {d}>",
                  tirx.address_of(tirx.BufferLoad(local, [zero])), tirx.address_of(tirx.BufferLoad(scratch, [zero])))
    return [tirx.AllocBuffer(scratch), call]


def _is_own_element(e: Any, store: Any) -> bool:
    return (isinstance(e, tvm.ir.TensorLoad) and e.source.same_as(store.buffer)
            and len(e.indices) == len(store.indices)
            and all(tvm_ffi.structural_equal(a, b) for a, b in zip(e.indices, store.indices)))


def update_problem(store: Any, op: str) -> str | None:
    """Why ``store`` (a write to a reducer) is not an update ``r[idx] = op(r[idx], value)``; None when it is."""
    v = store.value
    kinds = {"sum": tirx.Add, "max": tirx.Max, "min": tirx.Min}
    name = store.buffer.name
    if isinstance(v, kinds[op]) and (_is_own_element(v.a, store) != _is_own_element(v.b, store)):
        return None
    spelled = {"sum": f"{name}[...] += value", "max": f"{name}[...] = T.max({name}[...], value)",
               "min": f"{name}[...] = T.min({name}[...], value)"}[op]
    return (f"reducer {name} (op {op!r}) is updated by a statement that is not `{spelled}`; on CUDA every thread "
            "combines into its own replica, so other writes to a reducer are not supported (see docs/compat.md)")


def check_reducer_writes(func: tirx.PrimFunc, reducers: dict[Any, str]) -> None:
    """Located errors for writes to a reducer that the CUDA lowering cannot give the CPU's meaning: outside
    ``T.Parallel`` (every thread would apply them to its replica) or not an update with the reducer's op."""
    if not reducers:
        return
    problems: list[tuple[str, Any]] = []

    def walk(s: Any, in_par: bool) -> None:
        if isinstance(s, tirx.BufferStore):
            op = next((o for b, o in reducers.items() if b.same_as(s.buffer)), None)
            if op is not None:
                if not in_par:
                    problems.append((f"reducer {s.buffer.name} is written outside T.Parallel; on CUDA every thread "
                                     "would apply the write to its replica. Initialise it with T.fill / T.clear and "
                                     "update it inside T.Parallel (see docs/compat.md)", s.span))
                else:
                    why = update_problem(s, op)
                    if why:
                        problems.append((why, s.span))
            return
        if isinstance(s, tirx.For):
            walk(s.body, in_par or PARALLEL_ATTR in s.annotations)
        elif isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                walk(x, in_par)
        elif isinstance(s, tirx.IfThenElse):
            walk(s.then_case, in_par)
            if s.else_case is not None:
                walk(s.else_case, in_par)
        elif isinstance(s, (tirx.AttrStmt, tirx.While)):
            walk(s.body, in_par)
        elif hasattr(s, "body") and isinstance(getattr(s, "body", None), tirx.Stmt):
            walk(s.body, in_par)

    walk(func.body, False)
    if problems:
        msg, span = problems[0]
        raise TileLangCompileError(msg, location_of(span), stage="tl.LowerTileOpsCUDA")


__all__ = ["ATTR_REDUCERS", "check_reducer_writes", "fill_value", "finalize_stmts", "reducers_in", "reducers_of",
           "update_problem"]

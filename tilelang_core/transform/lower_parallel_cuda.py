"""Pass: lower ``T.Parallel`` nests to per-thread code on CUDA, then retire the fragment buffers.

A nest that touches a distributed fragment becomes a loop over the registers the fragment's layout gives this
thread: register ``r`` stands for element ``coords(threadIdx.x, r)``, so ``C[i, j] = max(C[i, j], 0)`` on an mma
accumulator is a handful of register operations, with no communication. Other fragments in the nest share that
layout (the layout pass made sure); replicated fragments are read from the thread's full copy. A nest that only
writes per-thread tiles runs whole in every thread. A nest over global or shared memory alone is split over
the threads in coalesced chunks of up to 16 bytes (the ``blocked`` layout of its iteration domain).

Global accesses are bounds-checked where a ragged shape can push them out of the tensor (loads give 0, stores are
skipped). When the whole nest provably stays inside, or a run-time check on the block says so, the nest takes an
unguarded path whose contiguous, aligned accesses are vectorised (``float4`` loads and stores).

Finally every remaining access to a replicated fragment becomes an access to its register array, ``T.alloc_var``
scalars become one-element register arrays, and the fragment allocations are dropped.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..language._ir import dtype_of
from ..language.loops import PARALLEL_ATTR
from ._cuda_common import (
    find_thread_var,
    is_fragment,
    is_shared,
    layouts_of,
    loads_in,
    locals_of,
    parallel_nest,
    substitute,
    thread_count,
)
from ._cuda_layouts import FragmentLayout, dtype_bytes, flat_index
from ._regions import in_bounds_conds, is_global
from ._rewriter import Rewriter, and_all, const_int, make_for, new_var, seq

ForKind = tirx.ForKind
MAX_PY_UNROLL = 128


def _stores_in(node: Any) -> list[Any]:
    out: list[Any] = []

    def rec(s: Any) -> Any:
        out.append(s)
        return s

    tvm_ffi.structural_map(node, [(tirx.BufferStore, rec)])
    return out


def _has_calls(node: Any) -> bool:
    found = []

    def rec(c: Any) -> Any:
        if not (isinstance(c.op, tvm.ir.Op) and str(c.op.name) in ("tirx.if_then_else",)):
            found.append(c)
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, rec)])
    return bool(found)


def _allocated_in(node: Any) -> list[Any]:
    """Buffers allocated inside ``node``."""
    out: list[Any] = []

    def rec(s: Any) -> Any:
        out.append(s.buffer)
        return s

    tvm_ffi.structural_map(node, [(tirx.AllocBuffer, rec)])
    return out


class LowerParallelCUDA(Rewriter):
    pass_name = "tl.LowerParallelCUDA"

    def __init__(self, func: tirx.PrimFunc) -> None:
        super().__init__()
        self.tid = find_thread_var(func)
        self.threads = thread_count(func)
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.bind_loop(self.tid, tirx.IntImm("int32", 0), tirx.IntImm("int32", self.threads))

    # -- fragment access rewriting --------------------------------------------------------------------------
    def map_fragments(self, body: Any, vs: list[Any], reg: Any, nest: FragmentLayout | None = None) -> Any:
        """Distributed fragment accesses at the nest's own indices -> register ``reg``; row values of an ``mma``
        nest (``m[i]`` with the ``mma_row`` layout of the nest) -> the thread's register for that row; replicated
        fragments -> the thread's full copy."""

        def is_identity(idx: list[Any]) -> bool:
            return len(idx) == len(vs) and all(i.same_as(v) for i, v in zip(idx, vs))

        def load(ld: Any) -> Any:
            buf = ld.source
            if not is_fragment(buf):
                return ld
            lay = self.layouts[buf]
            idx = list(ld.indices)
            if (lay.kind == "mma_row" and nest is not None and nest.kind == "mma" and isinstance(reg, int)
                    and len(vs) == 2 and len(idx) == 1 and idx[0].same_as(vs[0]) and nest.row_layout() == lay):
                return tirx.BufferLoad(self.locals[buf], [tirx.IntImm("int32", nest.row_reg(reg))])
            if lay.distributed:
                if reg is None or not is_identity(list(ld.indices)):
                    self.error(None, f"fragment {buf.name} is distributed over threads and must be read as "
                                     f"{buf.name}[i, j] with the T.Parallel loop variables")
                    return ld
                return tirx.BufferLoad(self.locals[buf], [reg])
            return tirx.BufferLoad(self.locals[buf], [flat_index(list(ld.indices), lay.shape)])

        def store(st: Any) -> Any:
            buf = st.buffer
            if not is_fragment(buf):
                return st
            lay = self.layouts[buf]
            if lay.distributed:
                if reg is None or not is_identity(list(st.indices)):
                    self.error(st.span, f"fragment {buf.name} is distributed over threads and must be written as "
                                        f"{buf.name}[i, j] with the T.Parallel loop variables")
                    return st
                return tirx.BufferStore(self.locals[buf], st.value, [reg], span=st.span)
            return tirx.BufferStore(self.locals[buf], st.value, [flat_index(list(st.indices), lay.shape)],
                                    span=st.span)

        return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])

    # -- guards --------------------------------------------------------------------------------------------
    def guard_globals(self, body: Any) -> Any:
        """Bounds guards for global loads and stores the analyzer cannot prove in bounds."""

        def guard_value(e: Any) -> Any:
            def fix(ld: Any) -> Any:
                buf = ld.source
                if not (tirx.is_buffer_var(buf) and is_global(buf)):
                    return ld
                conds = in_bounds_conds(buf, list(ld.indices), self.ana)
                if not conds:
                    return ld
                return tirx.if_then_else(and_all(conds), ld, tirx.const(0, dtype_of(ld)))
            return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, fix)])

        def visit(s: Any) -> Any:
            if isinstance(s, tirx.SeqStmt):
                return tirx.SeqStmt([visit(x) for x in s.seq], span=s.span)
            if isinstance(s, tirx.For):
                self.bind_loop(s.loop_var, s.min, s.extent)
                return tirx.For(s.loop_var, s.min, s.extent, s.kind, visit(s.body), s.thread_binding, s.annotations,
                                s.step, s.span)
            if isinstance(s, tirx.IfThenElse):
                els = visit(s.else_case) if s.else_case is not None else None
                return tirx.IfThenElse(guard_value(s.condition), visit(s.then_case), els, span=s.span)
            if isinstance(s, tirx.Bind):
                return tirx.Bind(s.var, guard_value(s.value))
            if isinstance(s, tirx.BufferStore):
                st = tirx.BufferStore(s.buffer, guard_value(s.value), list(s.indices), span=s.span)
                if is_global(s.buffer):
                    conds = in_bounds_conds(s.buffer, list(s.indices), self.ana)
                    if conds:
                        return tirx.IfThenElse(and_all(conds), st, None, span=s.span)
                return st
            return s  # Evaluate (atomicAdd ...): guarded where it was lowered

        return visit(body)

    def nest_in_bounds(self, body: Any, vs: list[Any], exts: list[int]) -> list[Any]:
        """Run-time conditions under which every global access of the nest lies inside its tensor."""
        dom = {v: tvm.sym.IntervalSet(0, e - 1) for v, e in zip(vs, exts)}
        conds: list[Any] = []
        accesses = [(ld.source, list(ld.indices)) for ld in loads_in(body)]
        accesses += [(st.buffer, list(st.indices)) for st in _stores_in(body)]
        for buf, idx in accesses:
            if not (tirx.is_buffer_var(buf) and is_global(buf)):
                continue
            for i, n in zip(idx, buf.shape):
                try:
                    iset = self.ana.int_set(i, dom)
                    hi, lo = iset.max_value, iset.min_value
                except Exception:  # noqa: BLE001
                    return [tirx.const(False, "bool")]
                for c in (tirx.LT(hi, n), tirx.GE(lo, 0)):
                    if not self.prove(c):
                        c = self.ana.simplify(c)
                        if not any(c.same_as(x) for x in conds):
                            conds.append(c)
        return conds

    def vectorizable(self, body: Any, v: Any, vec: int) -> bool:
        """Every global/shared access is contiguous in ``v`` along its last dimension and ``vec``-aligned."""
        accesses = [(ld.source, list(ld.indices)) for ld in loads_in(body)]
        accesses += [(st.buffer, list(st.indices)) for st in _stores_in(body)]
        mem = [(b, i) for b, i in accesses if tirx.is_buffer_var(b) and (is_global(b) or is_shared(b))]
        if not mem or _has_calls(body):
            return False
        zero = tirx.IntImm("int32", 0)
        for buf, idx in mem:
            last = const_int(buf.shape[-1])
            if last is None or last % vec:
                return False
            for d, i in enumerate(idx):
                base = self.ana.simplify(substitute(i, {v: zero}))
                diff = self.ana.simplify(i - base)
                if d == len(idx) - 1:
                    if not (isinstance(diff, tvm.ir.Var) and diff.same_as(v)):
                        return False
                    if not self.prove(tirx.EQ(tirx.floormod(base, vec), 0)):
                        return False
                elif const_int(diff) != 0:
                    return False
        return True

    # -- nests ---------------------------------------------------------------------------------------------
    def visit_For(self, s: Any) -> Any:  # noqa: N802
        if PARALLEL_ATTR not in s.annotations:
            return super().visit_For(s)
        vs, exts, body = parallel_nest(s, PARALLEL_ATTR)
        exts_c = [const_int(e) for e in exts]
        if None in exts_c:
            self.error(s.span, "T.Parallel extents must be compile-time constants on CUDA")
            return s
        for v, e in zip(vs, exts_c):
            self.bind_loop(v, tirx.IntImm("int32", 0), tirx.IntImm("int32", e))
        body = self.visit(body)
        accessed = [ld.source for ld in loads_in(body)] + [st.buffer for st in _stores_in(body)]
        dist = [b for b in accessed if is_fragment(b) and self.layouts[b].distributed]
        written = [st.buffer for st in _stores_in(body)]
        # a scalar allocated inside the nest (``q = ...`` in the loop body) is private to one iteration: it does
        # not make the nest sequential per-thread code
        private = _allocated_in(body)
        per_thread_written = [b for b in written if ((is_fragment(b) and not self.layouts[b].distributed)
                                                     or b.scope() in ("local", "local.var"))
                              and not any(b.same_as(p) for p in private)]
        if dist:
            lay = self.layouts[dist[0]]
            for b in dist:  # the nest iterates over the 2-D layout; row fragments of it are read per row
                if self.layouts[b].kind != "mma_row":
                    lay = self.layouts[b]
                    break
            for b in dist:
                bl = self.layouts[b]
                if bl != lay and not (bl.kind == "mma_row" and lay.kind == "mma" and lay.row_layout() == bl):
                    self.error(s.span, f"T.Parallel combines fragments {dist[0].name} and {b.name} of different "
                                       "layouts")
                    return s
            if per_thread_written:
                self.error(s.span, f"T.Parallel writes per-thread tile {per_thread_written[0].name} while iterating "
                                   f"over the distributed fragment {dist[0].name}; split it into two T.Parallel loops")
                return s
            return self.lower_over_layout(s, vs, exts_c, body, lay)
        if per_thread_written:
            return self.lower_replicated(s, vs, exts_c, body)
        es = [dtype_bytes(str(b.dtype)) for b in accessed if tirx.is_buffer_var(b)] or [4]
        lay = FragmentLayout.blocked(exts_c, self.threads, max(es))
        return self.lower_over_layout(s, vs, exts_c, body, lay)

    def lower_replicated(self, s: Any, vs: list[Any], exts: list[int], body: Any) -> Any:
        body = self.guard_globals(self.map_fragments(body, vs, None))
        total = 1
        for e in exts:
            total *= e
        kind = ForKind.UNROLLED if total <= 64 else ForKind.SERIAL
        for v, e in reversed(list(zip(vs, exts))):
            body = make_for(v, e, body, kind, s.span)
        return body

    def lower_over_layout(self, s: Any, vs: list[Any], exts: list[int], body: Any, lay: FragmentLayout) -> Any:
        vec = lay.vec if lay.kind == "blocked" else 1
        n_regs = lay.num_regs
        force = lay.const_regs

        def elem(reg: Any, guarded: bool) -> Any:
            coords, valid = lay.coords(self.tid, reg, self.ana)
            b = substitute(self.map_fragments(body, vs, reg, lay), dict(zip(vs, coords)))
            if guarded:
                b = self.guard_globals(b)
            return tirx.IfThenElse(valid, b, None) if valid is not None else b

        def chunk(q: Any) -> Any:
            base = q * vec
            coords, valid = lay.coords(self.tid, base, self.ana)
            v = new_var("vec")
            self.bind_loop(v, tirx.IntImm("int32", 0), tirx.IntImm("int32", vec))
            lane_coords = coords[:-1] + [coords[-1] + v]
            b = substitute(self.map_fragments(body, vs, base + v), dict(zip(vs, lane_coords)))
            loop = make_for(v, vec, b, ForKind.VECTORIZED)
            return tirx.IfThenElse(valid, loop, None) if valid is not None else loop

        def iterate(count: int, fn: Any) -> Any:
            if count <= MAX_PY_UNROLL or force:
                return seq([fn(q) for q in range(count)])
            q = new_var("r")
            self.bind_loop(q, tirx.IntImm("int32", 0), tirx.IntImm("int32", count))
            return make_for(q, count, fn(q))

        use_vec = False
        if vec > 1:
            probe_v = new_var("probe")
            self.bind_loop(probe_v, tirx.IntImm("int32", 0), tirx.IntImm("int32", vec))
            coords, _ = lay.coords(self.tid, 0, self.ana)
            probe = substitute(self.map_fragments(body, vs, probe_v), dict(zip(vs, coords[:-1] + [coords[-1] +
                                                                                                probe_v])))
            use_vec = self.vectorizable(probe, probe_v, vec)
        tconds = self.nest_in_bounds(body, vs, exts)
        if use_vec:
            fast = iterate(n_regs // vec, chunk)
        else:
            fast = iterate(n_regs, lambda r: elem(r, False))
        if not tconds:
            return fast
        slow = iterate(n_regs, lambda r: elem(r, True))
        if len(tconds) == 1 and const_int(tconds[0]) == 0:
            return slow
        return tirx.IfThenElse(and_all(tconds), fast, slow, span=s.span)


def _retire_fragments(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Replicated-fragment accesses outside T.Parallel -> register arrays; alloc_var -> 1-element arrays."""
    layouts, locs = layouts_of(func), locals_of(func)
    var_remap: dict[Any, Any] = {}

    def collect(s: Any) -> Any:
        buf = s.buffer
        if buf.scope() == "local.var" and buf not in var_remap:
            var_remap[buf] = tirx.decl_buffer(list(buf.shape), str(buf.dtype), buf.name, scope="local")
        return s

    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, collect)])

    def ref(buf: Any, idx: list[Any]) -> tuple[Any, list[Any]] | None:
        if is_fragment(buf):
            lay = layouts[buf]
            return locs[buf], [flat_index(idx, lay.shape)]
        if buf in var_remap:
            return var_remap[buf], idx
        return None

    def load(ld: Any) -> Any:
        r = ref(ld.source, list(ld.indices))
        return ld if r is None else tirx.BufferLoad(r[0], r[1])

    def store(st: Any) -> Any:
        r = ref(st.buffer, list(st.indices))
        return st if r is None else tirx.BufferStore(r[0], st.value, r[1], span=st.span)

    def alloc(s: Any) -> Any:
        if is_fragment(s.buffer):
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        if s.buffer in var_remap:
            return tirx.AllocBuffer(var_remap[s.buffer])
        return s

    body = tvm_ffi.structural_map(func.body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                              (tirx.AllocBuffer, alloc)])
    return func.with_body(body)


def lower_parallel_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    func = LowerParallelCUDA(func).run(func)
    return _retire_fragments(func)

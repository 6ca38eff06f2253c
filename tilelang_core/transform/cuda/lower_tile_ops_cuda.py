"""Pass: lower tile ops to per-thread CUDA code (TIR over ``threadIdx.x`` plus calls into our CUDA headers).

Memory kinds: global (``G``), shared (``S``), distributed fragments (``F``: each thread holds its share, in the
register array the layout pass allocated), and per-thread full tiles (``R``: replicated fragments, ``T.alloc_local``
and ``T.alloc_var`` buffers).

* ``tl.copy`` — into or out of a distributed fragment: each thread moves the elements its layout gives it, a chunk
  at a time where the layout's chunks and the tensor's alignment allow (``mma`` accumulators: pairs of columns).
  A ``blocked`` chunk is 16 bytes of the narrowest global tensor the fragment meets, so it can be wider than 16
  bytes on one side (fp16 ``X`` into an fp32 fragment: 8 elements, 32 bytes of registers); no access is wider
  than 16 bytes: the narrow side moves whole chunks through a small register array, the wide side 16 bytes at a
  time.
  Between global and shared memory: the block's threads take consecutive 16-byte chunks (coalesced); a copy a
  software pipeline marked asynchronous becomes ``cp.async`` (``tl::cp_async_16``, zero-filling chunks outside a
  ragged tensor). Anything else falls back to guarded element copies. Into a per-thread tile: every thread copies
  all of it.
* ``tl.gemm`` — an accumulator in the ``wgmma`` layout (sm_90a): ``tl::wgmma_gemm_ss`` (shared-memory
  descriptors for A and B, wgmma.mma_async m64nNk16, fp32 accumulation; see ``include/tl/wgmma.cuh``); inside
  ``tl.PipelineCUDA``'s ``tl.wgmma_pending`` attribute the call leaves its group in flight (``PENDING = 1``).
  fp16/bf16 tiles whose accumulator has the ``mma`` layout: ``tl::gemm_ss`` (ldmatrix + mma.sync
  m16n8k16, fp32 accumulation, swizzled shared operands). Otherwise an FMA loop: each thread updates the
  accumulator elements it owns. An A operand held in a fragment is first written to a shared scratch tile.
* ``tl.reduce`` — each thread folds the elements it owns into per-row partials, then ``tl::block_allreduce``
  combines them across the block (warp shuffles, then shared memory across warps); every thread ends with the
  result, which is what a replicated destination needs; a shared or global destination gets each element from one
  owner thread. A leading stage dimension ``tl.PipelineCUDA`` gave a multi-buffered tile is not the user's: the
  call says so (arguments 6 and 7) and ``dim`` applies to the dimensions after it.
* ``tl.fill``, ``tl.atomic_add`` (``atomicAdd``), ``tl.print`` (``printf`` from thread 0).
* ``tl.finalize_reducer`` — ``tl::block_allreduce`` of every thread's replica of the reducer (``reducers_cuda.py``;
  a fill of a sum reducer puts the value in thread 0's replica only).

Global accesses that a ragged shape can push out of bounds are guarded (reads give 0, writes are skipped); a
guard is left out when the analyzer proves it unnecessary, and a whole tile that is inside its tensor takes an
unguarded, vectorised path.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import Region, dtype_of
from ...language.loops import PARALLEL_ATTR
from ...language.math import infinity as float_infinity  # bfloat16 too (TVM's knows fp16/32/64)
from ..common.layout_annotations import user_layouts
from ..common.notes import add_notes, at_line
from ..common.regions import in_bounds_conds, indices_at, is_global, squeezed
from ..common.rewriter import Rewriter, and_all, const_int, make_for, new_var, seq, tile_op_name, with_span
from .common import (
    ATTR_SWIZZLE,
    EVICTION_NAMES,
    PER_THREAD_SCOPES,
    WGMMA_PENDING_ATTR,
    calls_extern,
    eviction_of,
    extern,
    find_thread_var,
    gemm_operands,
    is_fragment,
    is_shared,
    layouts_of,
    locals_of,
    swizzles_of,
    sync_stmt,
    thread_count,
)
from .layouts import (
    WGMMA_SWIZZLE_BASE,
    FragmentLayout,
    dtype_bytes,
    flat_index,
    swizzle_shift,
    wgmma_chunk_n,
)
from .reducers_cuda import ATTR_REDUCERS, check_reducer_writes, fill_value, finalize_stmts, reducers_in
from .sm90.registers import entry_registers, wgmma_max_n
from .sm90.warp_specialize import ATTR_SPLIT, PRODUCER_THREADS

ForKind = tirx.ForKind
MAX_PY_UNROLL = 128


def _load(buf: Any, idx: list[Any]) -> Any:
    return tirx.BufferLoad(buf, list(idx))


def _cast(value: Any, dtype: str) -> Any:
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)


def _store(buf: Any, value: Any, idx: list[Any]) -> Any:
    dt = str(buf.dtype)
    vd = dtype_of(value)
    if vd is not None and vd.split("x")[0] != dt:
        lanes = vd.split("x")[1] if "x" in vd else None
        value = tirx.Cast(f"{dt}x{lanes}" if lanes else dt, value)
    return tirx.BufferStore(buf, value, list(idx))


def _bf16_pair_store(kind: str, into: bool) -> bool:
    """An mma/wgmma accumulator stored as bfloat16 goes out in column pairs (``nv_bfloat162``, one 4-byte store, as
    fp16's ``half2``): element by element the epilogue of a bf16 GEMM had twice the stores and conversions of the
    fp16 one (measured 10-12 % behind fp16 at 4096^3 / 8192^3 on the H200). Other bf16 conversions keep scalar
    accesses (TVM's bf16 vector casts are legalised lane by lane)."""
    return kind in ("mma", "wgmma") and not into


WGMMA_RS_A_REGS = 4  # a register-A wgmma's m64 x k16 A slice: 4 registers of two halves per thread


def _launched_threads(func: Any, threads: int) -> int:
    """Threads the kernel will launch with: ``threads``, or a warp-specialised loop's consumers plus the producer
    warpgroup (the ``tl.ws_split`` attribute ``tl.PipelineCUDA`` left)."""
    found: list[int] = []

    def visit(x: Any) -> Any:
        if str(x.attr_key) == ATTR_SPLIT:
            found.append(int(x.value))
        return x

    tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, visit)])
    return found[0] + PRODUCER_THREADS if found else threads


def _imm(v: int) -> Any:
    return tirx.IntImm("int32", v)


def _guard(conds: list[Any], stmt: Any, els: Any = None) -> Any:
    return tirx.IfThenElse(and_all(conds), stmt, els) if conds else stmt


class LowerTileOpsCUDA(Rewriter):
    pass_name = "tl.LowerTileOpsCUDA"

    def __init__(self, func: tirx.PrimFunc, arch: str = "sm_90") -> None:
        super().__init__()
        # ptxas 13.0 can emit LDGSTS reading uniform registers nothing writes when cp.async carries an L2 cache
        # policy on sm_90 (an illegal instruction on the H200; docs/cuda.md, "Steering tools"): no hint there
        self.async_hints = not arch.startswith("sm_90")
        self.tid = find_thread_var(func)
        self.threads = thread_count(func)
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.swizzle = swizzles_of(func)
        self.new_swizzle: dict[Any, int] = {}
        self.bind_loop(self.tid, _imm(0), _imm(self.threads))
        self.in_parallel = 0
        self.atomic_kind = "add"
        self.wgmma_pending = 0  # groups a wgmma T.gemm leaves in flight (tl.PipelineCUDA's attribute)
        # registers a thread has at the kernel's entry: the launch is the program's threads, or the consumers of a
        # warp-specialised loop plus the producer warpgroup (tl.WarpSpecializeCUDA adds it later)
        self.entry_regs = entry_registers(_launched_threads(func, self.threads))
        self.width_notes: list[str] = []  # wgmma instructions narrowed to fit the entry registers
        self.reducers = reducers_in(func)  # T.alloc_reducer buffers -> op
        self.hint_notes: list[str] = []  # T.copy eviction_policy hints that no load could carry
        self.dropped_hint = 0  # the policy _copy_distributed left off its cp.async loads (sm_90), for the note
        # T.annotate_layout index maps: the contiguous run of each tile's last dimension bounds its vector accesses
        self.runs = {n: u.run for n, u in user_layouts(func).items() if u.kind == "index"}

    # -- memory kinds --------------------------------------------------------------------------------------
    def kind(self, buf: Any) -> str:
        if is_global(buf):
            return "G"
        if is_shared(buf):
            return "S"
        if is_fragment(buf):
            return "F" if self.layouts[buf].distributed else "R"
        if buf.scope() in PER_THREAD_SCOPES:
            return "R"
        return "G"

    def rep_ref(self, buf: Any, idx: list[Any]) -> tuple[Any, list[Any]]:
        """(buffer, indices) of element ``idx`` of a per-thread full tile."""
        if is_fragment(buf):
            shape = tuple(int(s) for s in buf.shape)
            return self.locals[buf], [self.ana.simplify(flat_index(idx, shape))]
        return buf, list(idx)

    def read(self, buf: Any, idx: list[Any]) -> Any:
        k = self.kind(buf)
        if k == "R":
            b, i = self.rep_ref(buf, idx)
            return _load(b, i)
        return _load(buf, idx)

    def write(self, buf: Any, value: Any, idx: list[Any]) -> Any:
        if self.kind(buf) == "R":
            b, i = self.rep_ref(buf, idx)
            return _store(b, value, i)
        return _store(buf, value, idx)

    def guarded_read(self, buf: Any, idx: list[Any], dtype: str) -> Any:
        val = _cast(self.read(buf, idx), dtype)
        if is_global(buf):
            conds = in_bounds_conds(buf, idx, self.ana)
            if conds:
                return tirx.if_then_else(and_all(conds), val, tirx.const(0, dtype))
        return val

    def guarded_write(self, buf: Any, value: Any, idx: list[Any]) -> Any:
        st = self.write(buf, value, idx)
        if is_global(buf):
            return _guard(in_bounds_conds(buf, idx, self.ana), st)
        return st

    # -- iteration helpers -----------------------------------------------------------------------------------
    def unrolled(self, n: int, body_fn: Any, force_python: bool = False) -> Any:
        """``body_fn(q)`` for q < n: Python-unrolled (constant q) when small, else a TIR loop."""
        if n <= 0:
            return None
        if n <= MAX_PY_UNROLL or force_python:
            return seq([x for x in (body_fn(q) for q in range(n)) if x is not None])
        q = new_var("q")
        self.bind_loop(q, _imm(0), _imm(n))
        return make_for(q, n, body_fn(q))

    def nest(self, extents: list[int], body_fn: Any, kind: Any = None) -> Any:
        if not extents:
            return body_fn([])
        vs = [new_var("ijklmn"[d % 6] + (str(d) if d >= 6 else "")) for d in range(len(extents))]
        for v, e in zip(vs, extents):
            self.bind_loop(v, _imm(0), _imm(e) if isinstance(e, int) else e)
        body = body_fn(vs)
        total = 1
        for e in extents:
            total *= const_int(e) or 1 << 20
        k = kind if kind is not None else (ForKind.UNROLLED if total <= 64 else ForKind.SERIAL)
        for v, e in reversed(list(zip(vs, extents))):
            body = make_for(v, e, body, k)
        return body

    def tile_in_bounds(self, r: Region) -> list[Any]:
        """Conditions (not provable now) under which the whole region lies inside its global tensor."""
        if not is_global(r.buffer):
            return []
        conds = []
        for m, e, n in zip(r.mins, r.extents, r.buffer.shape):
            for c in (tirx.LE(m + e, n), tirx.GE(m, 0)):
                if not self.prove(c):
                    conds.append(self.ana.simplify(c))
        return conds

    def aligned(self, r: Region, vec: int) -> bool:
        """The region's rows start at multiples of ``vec`` elements (16-byte vector accesses are legal)."""
        if vec <= 1:
            return True
        shape = [const_int(x) for x in r.buffer.shape]
        if shape[-1] is None or shape[-1] % vec:
            return False
        return self.prove(tirx.EQ(tirx.floormod(r.mins[-1], vec), 0))

    # -- dispatch ------------------------------------------------------------------------------------------
    def visit_For(self, s: Any) -> Any:  # noqa: N802
        par = PARALLEL_ATTR in s.annotations
        self.in_parallel += par
        out = super().visit_For(s)
        self.in_parallel -= par
        return out

    def visit_AttrStmt(self, s: Any) -> Any:  # noqa: N802
        if s.attr_key != WGMMA_PENDING_ATTR:
            return super().visit_AttrStmt(s)
        self.wgmma_pending = int(s.value)
        body = self.visit(s.body)
        self.wgmma_pending = 0
        return body

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        name = tile_op_name(s)
        if name is None:
            return _void_extern(s)
        if self.in_parallel and name != "tl.atomic_add":
            self.error(s.span, f"{name[3:]} is a tile operation and cannot be used inside T.Parallel on CUDA")
            return s
        lower = getattr(self, "_lower_" + name[3:], None)
        if lower is None:
            self.error(s.span, f"{name} is not supported on the CUDA backend")
            return s
        out = lower(s, list(s.value.args))
        return with_span(out, s.span) if out is not None else tirx.Evaluate(_imm(0))

    # -- copy ----------------------------------------------------------------------------------------------
    def _lower_copy(self, s: Any, args: list[Any]) -> Any:
        src, dst = Region.of(args[0]), Region.of(args[1])
        is_async = len(args) > 2 and const_int(args[2]) == 1
        sd, dd = squeezed(src, self.ana), squeezed(dst, self.ana)
        exts = [const_int(dst.extents[d]) for d in dd]
        if None in exts:
            self.error(s.span, "T.copy: tile extents must be compile-time constants on CUDA")
            return s
        ks, kd = self.kind(src.buffer), self.kind(dst.buffer)
        if kd == "F":
            if ks == "F" and self.layouts[src.buffer] != self.layouts[dst.buffer]:
                self.error(s.span, f"T.copy between fragments {src.buffer.name} and {dst.buffer.name} of different "
                                   "layouts is not supported on CUDA")
                return s
            return self._copy_fragment(s, dst, dd, src, sd, into=True)
        if ks == "F":
            if kd == "R":
                self.error(s.span, f"T.copy from fragment {src.buffer.name} into a per-thread tile "
                                   f"{dst.buffer.name} is not supported on CUDA; copy through shared memory")
                return s
            return self._copy_fragment(s, src, sd, dst, dd, into=False)
        if kd == "R":
            def one(co: list[Any]) -> Any:
                si, di = indices_at(src, sd, co), indices_at(dst, dd, co)
                return self.write(dst.buffer, self.guarded_read(src.buffer, si, str(dst.buffer.dtype)), di)
            return self.nest(exts, one)
        policy = eviction_of(s) or 0
        self.dropped_hint = 0
        out = self._copy_distributed(src, sd, dst, dd, exts, is_async, policy if ks == "G" else 0)
        if self.dropped_hint:
            note = (f"{at_line(s)}T.copy {src.buffer.name} -> {dst.buffer.name}: eviction_policy="
                    f"{EVICTION_NAMES[policy]} not applied to its cp.async loads on sm_90 (ptxas 13.0 can miscompile "
                    "cp.async with an L2 cache hint there; docs/cuda.md, Steering tools); synchronous copies keep "
                    "the hint")
            if note not in self.hint_notes:
                self.hint_notes.append(note)
        elif policy and ks == "G" and not calls_extern(out, "tl::"):
            self.hint_notes.append(f"{at_line(s)}T.copy {src.buffer.name} -> {dst.buffer.name}: eviction_policy="
                                   f"{EVICTION_NAMES[policy]} not applied (the L2 hint rides on 16-byte loads; this "
                                   "copy's rows are not 16-byte chunks)")
        return out

    def _copy_fragment(self, s: Any, frag: Region, fd: list[int], other: Region, od: list[int], into: bool) -> Any:
        """Copy between a distributed fragment and global/shared/per-thread memory (or a same-layout fragment)."""
        lay = self.layouts[frag.buffer]
        loc = self.locals[frag.buffer]
        whole = all(const_int(m) == 0 for m in frag.mins) and [const_int(e) for e in frag.extents] == list(lay.shape)
        okind = self.kind(other.buffer)
        fdt, odt = str(frag.buffer.dtype), str(other.buffer.dtype)

        def tile_coords(coords: list[Any]) -> tuple[list[Any], list[Any]]:
            member = []
            if not whole:
                for c, m, e in zip(coords, frag.mins, frag.extents):
                    member += [tirx.GE(c, m), tirx.LT(c, m + e)]
            return [self.ana.simplify(coords[d] - frag.mins[d]) for d in fd], member

        def elem(reg: Any, guarded: bool) -> Any:
            coords, valid = lay.coords(self.tid, reg, self.ana)
            tc, member = tile_coords(coords)
            conds = ([valid] if valid is not None else []) + member
            oi = indices_at(other, od, tc)
            if okind == "F":
                st = tirx.BufferStore(loc, _cast(_load(self.locals[other.buffer], [reg]), fdt), [reg]) if into else \
                    tirx.BufferStore(self.locals[other.buffer], _cast(_load(loc, [reg]), odt), [reg])
            elif into:
                val = self.guarded_read(other.buffer, oi, fdt) if guarded else _cast(self.read(other.buffer, oi), fdt)
                st = tirx.BufferStore(loc, val, [reg])
            else:
                val = _cast(_load(loc, [reg]), odt)
                st = self.guarded_write(other.buffer, val, oi) if guarded else self.write(other.buffer, val, oi)
            return _guard(conds, st)

        # vector chunks: blocked layouts (vec elements along the last dim) and mma column pairs
        vec = lay.vec if lay.kind == "blocked" else 2 if lay.kind in ("mma", "wgmma") else 1
        contiguous = (whole and okind in ("G", "S") and od and od[-1] == len(other.buffer.shape) - 1
                      and fd and fd[-1] == len(frag.buffer.shape) - 1 and not lay.padded
                      and (fdt == odt or "bfloat16" not in (fdt, odt) or _bf16_pair_store(lay.kind, into)))
        if okind == "S" and contiguous and self.swizzle.get(other.buffer, 0):
            contiguous = vec * dtype_bytes(odt) <= 16
        use_vec = vec > 1 and contiguous and self.aligned(other, vec)

        fb, ob = dtype_bytes(fdt), dtype_bytes(odt)
        sub = min(vec, max(16 // max(fb, ob), 1))  # lanes per access of the wider side (the computation's vectors)

        def chunk(q: Any, guarded: bool) -> Any:
            base = q * vec
            coords, valid = lay.coords(self.tid, base, self.ana)
            tc, _ = tile_coords(coords)
            oi = indices_at(other, od, tc)
            conds = in_bounds_conds(other.buffer, oi, self.ana) if guarded and is_global(other.buffer) else []

            def at_other(first: int, lanes: int) -> list[Any]:
                return oi[:-1] + [tirx.Ramp(oi[-1] + first if first else oi[-1], 1, lanes)]

            def at_reg(first: int, lanes: int) -> list[Any]:
                start = base + first
                return [tirx.Ramp(_imm(start) if isinstance(start, int) else start, 1, lanes)]

            def pieces(lanes: int, fn: Any) -> list[Any]:
                return [fn(k * lanes, lanes) for k in range(vec // lanes)]

            # the narrower global/shared side moves the whole chunk through a register array, in accesses of up
            # to 16 bytes; the conversion runs ``sub`` lanes at a time
            staged = sub < vec and ob < fb
            arr = tirx.decl_buffer((vec,), odt, f"{other.buffer.name}_vec", scope="local") if staged else None
            olanes = min(vec, max(16 // ob, 1))

            def at_arr(first: int, lanes: int) -> list[Any]:
                return [tirx.Ramp(_imm(first), 1, lanes)]

            if into:
                if arr is None:
                    stmts = pieces(sub, lambda f, n: tirx.BufferStore(
                        loc, _cast(_load(other.buffer, at_other(f, n)), f"{fdt}x{n}"), at_reg(f, n)))
                else:
                    stmts = [tirx.AllocBuffer(arr)]
                    stmts += pieces(olanes, lambda f, n: tirx.BufferStore(
                        arr, _load(other.buffer, at_other(f, n)), at_arr(f, n)))
                    stmts += pieces(sub, lambda f, n: tirx.BufferStore(
                        loc, _cast(_load(arr, at_arr(f, n)), f"{fdt}x{n}"), at_reg(f, n)))
                zero = pieces(min(vec, max(16 // fb, 1)), lambda f, n: tirx.BufferStore(
                    loc, tirx.Broadcast(tirx.const(0, fdt), n), at_reg(f, n)))
                return _guard(conds, seq(stmts), seq(zero) if conds else None)
            if arr is None:
                stmts = pieces(sub, lambda f, n: tirx.BufferStore(
                    other.buffer, _cast(_load(loc, at_reg(f, n)), f"{odt}x{n}"), at_other(f, n)))
            else:
                stmts = [tirx.AllocBuffer(arr)]
                stmts += pieces(sub, lambda f, n: tirx.BufferStore(
                    arr, _cast(_load(loc, at_reg(f, n)), f"{odt}x{n}"), at_arr(f, n)))
                stmts += pieces(olanes, lambda f, n: tirx.BufferStore(
                    other.buffer, _load(arr, at_arr(f, n)), at_other(f, n)))
            return _guard(conds, seq(stmts))

        n_regs = lay.num_regs
        force = lay.const_regs
        if use_vec:
            fast = self.unrolled(n_regs // vec, lambda q: chunk(q, False), force)
            tconds = self.tile_in_bounds(other)
            if not tconds:
                return fast
            slow = self.unrolled(n_regs // vec, lambda q: chunk(q, True), force)
            return tirx.IfThenElse(and_all(tconds), fast, slow)
        fast = self.unrolled(n_regs, lambda r: elem(r, False), force)
        tconds = self.tile_in_bounds(other)
        if not tconds:
            return fast
        slow = self.unrolled(n_regs, lambda r: elem(r, True), force)
        return tirx.IfThenElse(and_all(tconds), fast, slow)

    def _copy_distributed(self, src: Region, sd: list[int], dst: Region, dd: list[int], exts: list[int],
                          is_async: bool, policy: int = 0) -> Any:
        """Copy between global/shared/per-thread tiles with the block's threads taking consecutive chunks.
        ``policy``: the L2 eviction priority of the global loads (1 first, 2 last; 0: none), carried by
        ``tl::cp_async_16_hint`` / ``tl::copy_16_hint`` on 16-byte chunks (include/tl/copy.cuh)."""
        sdt, ddt = str(src.buffer.dtype), str(dst.buffer.dtype)
        ks, kd = self.kind(src.buffer), self.kind(dst.buffer)
        if not exts:  # one element (every extent 1): thread 0 moves it
            si, di = indices_at(src, sd, []), indices_at(dst, dd, [])
            st = self.guarded_write(dst.buffer, self.guarded_read(src.buffer, si, ddt), di)
            return tirx.IfThenElse(tirx.EQ(self.tid, 0), st, None)
        max_es = max(dtype_bytes(sdt), dtype_bytes(ddt))
        vec = 1
        contiguous = (ks in ("G", "S") and kd in ("G", "S") and sd and dd and sd[-1] == len(src.buffer.shape) - 1
                      and dd[-1] == len(dst.buffer.shape) - 1 and sdt == ddt)
        if contiguous:
            vec = 16 // max_es
            cap = min(self.runs.get(str(src.buffer.name), 16), self.runs.get(str(dst.buffer.name), 16))
            while vec > 1 and (exts[-1] % vec or not self.aligned(src, vec) or not self.aligned(dst, vec)
                               or vec > cap):
                vec //= 2
        total = 1
        for e in exts:
            total *= e
        cshape = exts[:-1] + [exts[-1] // vec]
        n_chunks = total // vec
        rounds = -(-n_chunks // self.threads)
        use_cp_async = is_async and ks == "G" and kd == "S" and vec * dtype_bytes(sdt) == 16
        if use_cp_async and policy and not self.async_hints:
            self.dropped_hint = policy
            policy = 0
        if not use_cp_async and vec > 4 and sdt.startswith("float8"):
            vec = 4  # TVM's CUDA codegen prints float8 vectors (and their zero-fill broadcasts) of 1, 2 or 4 lanes only
            cshape = exts[:-1] + [exts[-1] // vec]
            n_chunks = total // vec
            rounds = -(-n_chunks // self.threads)

        def chunk_coords(q: Any) -> tuple[list[Any], list[Any]]:
            c = q * self.threads + self.tid
            co = []
            stride = 1
            for e in reversed(cshape):
                co.append(tirx.floormod(tirx.floordiv(c, stride), e) if stride > 1 else tirx.floormod(c, e))
                stride *= e
            co = list(reversed(co))
            co[0] = tirx.floordiv(c, stride // cshape[0]) if stride // cshape[0] > 1 else c
            co[-1] = co[-1] * vec
            co = [self.ana.simplify(x) for x in co]
            valid = [] if n_chunks % self.threads == 0 else [self.ana.simplify(tirx.LT(c, n_chunks))]
            return co, valid

        def body(q: Any, guarded: bool) -> Any:
            co, valid = chunk_coords(q)
            si, di = indices_at(src, sd, co), indices_at(dst, dd, co)
            if use_cp_async:
                conds = in_bounds_conds(src.buffer, si, self.ana) if guarded else []
                hint = f"_hint<{policy}>" if policy else ""
                if conds:
                    pred = and_all(conds)
                    safe = [tirx.if_then_else(pred, i, _imm(0)) for i in si]
                    call = extern(f"tl::cp_async_16_zfill{hint}", tirx.address_of(_load(dst.buffer, di)),
                                  tirx.address_of(_load(src.buffer, safe)), pred)
                else:
                    call = extern(f"tl::cp_async_16{hint}", tirx.address_of(_load(dst.buffer, di)),
                                  tirx.address_of(_load(src.buffer, si)))
                return _guard(valid, call)
            if vec > 1 and policy and vec * dtype_bytes(sdt) == 16:
                # a hinted 16-byte load (ld.global with an L2 cache policy), stored as one 16-byte chunk
                call = extern(f"tl::copy_16_hint<{policy}>", tirx.address_of(_load(dst.buffer, di)),
                              tirx.address_of(_load(src.buffer, si)))
                dv = di[:-1] + [tirx.Ramp(di[-1], 1, vec)]
                zero = tirx.BufferStore(dst.buffer, tirx.Broadcast(tirx.const(0, ddt), vec), dv)
                sc = in_bounds_conds(src.buffer, si, self.ana) if guarded else []
                dc = in_bounds_conds(dst.buffer, di, self.ana) if guarded and kd == "G" else []
                return _guard(valid + dc, _guard(sc, call, zero if sc else None))
            if vec > 1:
                sv = si[:-1] + [tirx.Ramp(si[-1], 1, vec)]
                dv = di[:-1] + [tirx.Ramp(di[-1], 1, vec)]
                st = tirx.BufferStore(dst.buffer, _load(src.buffer, sv), dv)
                conds = []
                if guarded:
                    sc = in_bounds_conds(src.buffer, si, self.ana) if ks == "G" else []
                    dc = in_bounds_conds(dst.buffer, di, self.ana) if kd == "G" else []
                    if dc:
                        return _guard(valid + dc, _guard(sc, st, tirx.BufferStore(
                            dst.buffer, tirx.Broadcast(tirx.const(0, ddt), vec), dv) if sc else None))
                    conds = sc
                zero = tirx.BufferStore(dst.buffer, tirx.Broadcast(tirx.const(0, ddt), vec), dv)
                return _guard(valid, _guard(conds, st, zero if conds else None))
            val = self.guarded_read(src.buffer, si, ddt) if guarded else _cast(self.read(src.buffer, si), ddt)
            st = self.guarded_write(dst.buffer, val, di) if guarded else self.write(dst.buffer, val, di)
            return _guard(valid, st)

        if use_cp_async:
            # cp.async zero-fills per chunk: no separate fast path needed
            conds = self.tile_in_bounds(src)
            return self.unrolled(rounds, lambda q: body(q, bool(conds)))
        fast = self.unrolled(rounds, lambda q: body(q, False))
        tconds = self.tile_in_bounds(src) + self.tile_in_bounds(dst)
        if not tconds:
            return fast
        slow = self.unrolled(rounds, lambda q: body(q, True))
        return tirx.IfThenElse(and_all(tconds), fast, slow)

    # -- fill ----------------------------------------------------------------------------------------------
    def _lower_fill(self, s: Any, args: list[Any]) -> Any:
        r = Region.of(args[0])
        value = args[1]
        if r.buffer in self.reducers:  # a reducer's replicas: the initial value is combined once (reducers_cuda.py)
            dt = str(r.buffer.dtype)
            value = fill_value(self.reducers[r.buffer], _cast(value, dt), self.tid, dt)
        k = self.kind(r.buffer)
        dims = squeezed(r, self.ana)
        exts = [const_int(r.extents[d]) for d in dims]
        if k == "F":
            lay = self.layouts[r.buffer]
            loc = self.locals[r.buffer]
            whole = all(const_int(m) == 0 for m in r.mins) and [const_int(e) for e in r.extents] == list(lay.shape)

            def one(reg: Any) -> Any:
                st = tirx.BufferStore(loc, _cast(value, str(loc.dtype)), [reg])
                if whole:
                    return st
                coords, _ = lay.coords(self.tid, reg, self.ana)
                conds = []
                for c, m, e in zip(coords, r.mins, r.extents):
                    conds += [tirx.GE(c, m), tirx.LT(c, m + e)]
                return _guard(conds, st)
            return self.unrolled(lay.num_regs, one, lay.const_regs)
        if k == "R":
            return self.nest(exts, lambda co: self.write(r.buffer, value, indices_at(r, dims, co)))
        total = 1
        for e in exts:
            total *= e
        rounds = -(-total // self.threads)

        def one_g(q: Any) -> Any:
            f = q * self.threads + self.tid
            co = []
            stride = 1
            for e in reversed(exts):
                co.append(tirx.floormod(tirx.floordiv(f, stride), e))
                stride *= e
            co = [self.ana.simplify(x) for x in reversed(co)]
            st = self.guarded_write(r.buffer, value, indices_at(r, dims, co))
            return _guard([] if total % self.threads == 0 else [tirx.LT(f, total)], st)
        return self.unrolled(rounds, one_g)

    # -- gemm ----------------------------------------------------------------------------------------------
    def _stage_a(self, a: Region, ta: bool, stmts: list[Any], span: Any) -> Region:
        """Write a fragment A operand into a shared scratch tile; returns the scratch region."""
        shape = [int(x) for x in a.buffer.shape]
        if len(shape) != 2:
            self.error(span, "T.gemm: a fragment A operand must be a 2-D fragment")
            return a
        dt = str(a.buffer.dtype)
        scratch = tirx.decl_buffer(shape, dt, a.buffer.name + "_smem", scope="shared")
        self.new_swizzle[scratch] = swizzle_shift(shape[-1], shape[-2], dt)
        lay = self.layouts.get(a.buffer)
        stmts.append(tirx.AllocBuffer(scratch))
        stmts.append(sync_stmt())  # the previous gemm may still read the scratch tile
        if lay is not None and lay.distributed:
            loc = self.locals[a.buffer]

            def one(reg: Any) -> Any:
                coords, valid = lay.coords(self.tid, reg, self.ana)
                st = tirx.BufferStore(scratch, _load(loc, [reg]), coords)
                return _guard([valid] if valid is not None else [], st)
            stmts.append(self.unrolled(lay.num_regs, one, lay.const_regs))
        else:
            stmts.append(self.nest(shape, lambda co: tirx.BufferStore(scratch, self.read(a.buffer, co), co)))
        stmts.append(sync_stmt())
        full = [tvm.ir.Range.from_min_extent(_imm(0), _imm(e)) for e in shape]
        return Region.of(tirx.BufferRegion(scratch, full))

    def _lower_gemm(self, s: Any, args: list[Any]) -> Any:
        ops = gemm_operands(s, self.ana)
        a, b, c = ops["a"], ops["b"], ops["c"]
        M, N, K = ops["M"], ops["N"], ops["K"]
        if None in (M, N, K):
            self.error(s.span, "T.gemm: tile extents must be compile-time constants on CUDA")
            return s
        stmts: list[Any] = []
        clay = self.layouts.get(c.buffer) if is_fragment(c.buffer) else None
        a_frag = is_fragment(a.buffer)
        if a_frag and clay is not None and clay.kind == "wgmma" and self._a_in_wgmma_registers(ops, clay):
            return self._gemm_wgmma_rs(s, ops, clay, stmts)
        if a_frag and self._a_in_registers(ops, clay):
            return self._gemm_rs(s, ops, clay, stmts)
        if a_frag:
            a = self._stage_a(a, ops["ta"], stmts, s.span)
        if clay is not None and clay.kind == "mma":
            return self._gemm_mma(s, ops, a, b, c, clay, stmts)
        if clay is not None and clay.kind == "wgmma":
            return self._gemm_wgmma(s, ops, a, b, clay, stmts)
        return self._gemm_fma(s, ops, a, b, c, clay, stmts)

    def _zeroed(self, loc: Any, lay: FragmentLayout) -> Any:
        """Every register of an accumulator set to 0 (``clear_accum=True``)."""
        return self.unrolled(lay.num_regs, lambda r: tirx.BufferStore(loc, tirx.const(0, str(loc.dtype)), [r]), True)

    def _wgmma_b_args(self, s: Any, b: Region, tb: bool, wn: int, a_regs: int = 0) -> tuple[int, str]:
        """The column chunk of one wgmma instruction for a warpgroup's ``wn`` columns of B, and the template's
        trailing ``PENDING`` argument (empty when the call waits for its own group). The chunk is narrowed where
        the widest one would not fit the kernel's entry registers (``sm90/registers.py``: ptxas refuses it), with
        a note; ``a_regs``: the register-A operand's registers per instruction."""
        swb = self.swizzle.get(b.buffer, 0) - WGMMA_SWIZZLE_BASE
        w_b = 1 if tb else swb // dtype_bytes(str(b.buffer.dtype))
        nc = wgmma_chunk_n(wn, w_b)
        cap = wgmma_max_n(self.entry_regs, a_regs)
        if nc > cap and wgmma_chunk_n(wn, w_b, cap):
            narrow = wgmma_chunk_n(wn, w_b, cap)
            self.width_notes.append(
                f"{at_line(s)}T.gemm: wgmma n{narrow} instructions instead of n{nc}: the kernel enters with "
                f"{self.entry_regs} registers per thread and ptxas checks each wgmma against that count (n{nc}: "
                f"{nc // 2} accumulators + operands), not against setmaxnreg's")
            nc = narrow
        return nc, (f", {self.wgmma_pending}" if self.wgmma_pending else "")

    def _gemm_mma(self, s: Any, ops: dict[str, Any], a: Region, b: Region, c: Region, lay: FragmentLayout,
                  stmts: list[Any]) -> Any:
        loc = self.locals[c.buffer]
        if ops["clear"]:
            stmts.append(self._zeroed(loc, lay))
        swa = self.swizzle.get(a.buffer, self.new_swizzle.get(a.buffer, 0))
        swb = self.swizzle.get(b.buffer, 0)
        M, N, K = ops["M"], ops["N"], ops["K"]
        ta, tb = int(ops["ta"]), int(ops["tb"])
        name = f"tl::gemm_ss<{M}, {N}, {K}, {lay.warp_m}, {lay.warp_n}, {ta}, {tb}, {swa}, {swb}>"
        stmts.append(extern(name, tirx.address_of(_load(a.buffer, a.mins)), tirx.address_of(_load(b.buffer, b.mins)),
                            tirx.address_of(_load(loc, [_imm(0)]))))
        return seq(stmts, s.span)

    def _gemm_wgmma(self, s: Any, ops: dict[str, Any], a: Region, b: Region, lay: FragmentLayout,
                    stmts: list[Any]) -> Any:
        """``tl::wgmma_gemm_ss``: A and B through shared-memory matrix descriptors (sm_90a), the accumulator in
        the ``wgmma`` layout of ``lay``'s warpgroup grid; the call waits for its wgmma group to complete, or, in
        a pipelined loop (``self.wgmma_pending``), for the previous one."""
        loc = self.locals[ops["c"].buffer]
        if ops["clear"]:
            stmts.append(self._zeroed(loc, lay))
        swa = self.swizzle.get(a.buffer, 0) - WGMMA_SWIZZLE_BASE
        swb = self.swizzle.get(b.buffer, 0) - WGMMA_SWIZZLE_BASE
        if swa <= 0 or swb <= 0:
            self.error(s.span, "T.gemm: internal error: a wgmma operand has no wgmma shared layout")
            return s
        M, N, K = ops["M"], ops["N"], ops["K"]
        ta, tb = int(ops["ta"]), int(ops["tb"])
        nc, pending = self._wgmma_b_args(s, b, bool(tb), N // lay.warp_n)
        name = (f"tl::wgmma_gemm_ss<{M}, {N}, {K}, {lay.warp_m}, {lay.warp_n}, {nc}, {ta}, {tb}, {swa}, {swb}"
                f"{pending}>")
        stmts.append(extern(name, tirx.address_of(_load(a.buffer, a.mins)), tirx.address_of(_load(b.buffer, b.mins)),
                            tirx.address_of(_load(loc, [_imm(0)]))))
        return seq(stmts, s.span)

    def _a_in_wgmma_registers(self, ops: dict[str, Any], clay: FragmentLayout) -> bool:
        """A whole fragment A in the ``wgmma`` layout of C's warpgroup grid (warpgroups along M only): its
        registers are the A operand of a register-A wgmma as they are (``tl::wgmma_gemm_rs``)."""
        a = ops["a"]
        alay = self.layouts.get(a.buffer)
        if alay is None or alay.kind != "wgmma" or ops["ta"] or clay.warp_n != 1:
            return False
        whole_a = all(const_int(m) == 0 for m in a.mins) and [const_int(e) for e in a.extents] == list(alay.shape)
        return (whole_a and alay.warp_n == 1 and alay.warp_m == clay.warp_m and alay.shape == (ops["M"], ops["K"])
                and str(a.buffer.dtype) in ("float16", "bfloat16") and str(ops["b"].buffer.dtype) == str(a.buffer.dtype)
                and is_shared(ops["b"].buffer))

    def _gemm_wgmma_rs(self, s: Any, ops: dict[str, Any], lay: FragmentLayout, stmts: list[Any]) -> Any:
        """``tl::wgmma_gemm_rs``: A from the registers of its ``wgmma``-layout fragment, B through a shared-memory
        descriptor (sm_90a); waits as ``_gemm_wgmma`` does."""
        b = ops["b"]
        loc = self.locals[ops["c"].buffer]
        if ops["clear"]:
            stmts.append(self._zeroed(loc, lay))
        swb = self.swizzle.get(b.buffer, 0) - WGMMA_SWIZZLE_BASE
        if swb <= 0:
            self.error(s.span, "T.gemm: internal error: the wgmma B operand has no wgmma shared layout")
            return s
        M, N, K = ops["M"], ops["N"], ops["K"]
        tb = int(ops["tb"])
        nc, pending = self._wgmma_b_args(s, b, bool(tb), N, WGMMA_RS_A_REGS)
        name = f"tl::wgmma_gemm_rs<{M}, {N}, {K}, {lay.warp_m}, {nc}, {tb}, {swb}{pending}>"
        aloc = self.locals[ops["a"].buffer]
        stmts.append(extern(name, tirx.address_of(_load(aloc, [_imm(0)])), tirx.address_of(_load(b.buffer, b.mins)),
                            tirx.address_of(_load(loc, [_imm(0)]))))
        return seq(stmts, s.span)

    def _a_in_registers(self, ops: dict[str, Any], clay: FragmentLayout | None) -> bool:
        """A fragment A operand whose ``mma`` layout already is the A-operand layout of the next mma.sync.

        The m16n8k16 accumulator of two neighbouring 8-column atoms, packed to half2, is exactly the A fragment of
        a 16-wide k-step (flash attention's P = softmax(S) feeding P @ V). That needs the A tile spread over the
        same warp rows as C, each warp holding whole rows of A (warp grid ``warp_m x 1`` for both).
        """
        a, b = ops["a"], ops["b"]
        alay = self.layouts.get(a.buffer)
        if alay is None or alay.kind != "mma" or clay is None or clay.kind != "mma" or ops["ta"]:
            return False
        adt = str(a.buffer.dtype)
        if adt not in ("float16", "bfloat16") or str(b.buffer.dtype) != adt or str(ops["c"].buffer.dtype) != "float32":
            return False
        whole_a = all(const_int(m) == 0 for m in a.mins) and [const_int(e) for e in a.extents] == list(alay.shape)
        return (whole_a and alay.warp_n == 1 and clay.warp_n == 1 and alay.warp_m == clay.warp_m
                and alay.shape == (ops["M"], ops["K"]) and ops["K"] % 16 == 0 and is_shared(b.buffer))

    def _gemm_rs(self, s: Any, ops: dict[str, Any], lay: FragmentLayout, stmts: list[Any]) -> Any:
        """``tl::gemm_rs``: A straight from the registers of its (mma-layout) fragment, B by ldmatrix."""
        a, b, c = ops["a"], ops["b"], ops["c"]
        loc = self.locals[c.buffer]
        if ops["clear"]:
            stmts.append(self._zeroed(loc, lay))
        swb = self.swizzle.get(b.buffer, 0)
        M, N, K = ops["M"], ops["N"], ops["K"]
        name = f"tl::gemm_rs<{M}, {N}, {K}, {lay.warp_m}, {int(ops['tb'])}, {swb}>"
        aloc = self.locals[a.buffer]
        stmts.append(extern(name, tirx.address_of(_load(aloc, [_imm(0)])), tirx.address_of(_load(b.buffer, b.mins)),
                            tirx.address_of(_load(loc, [_imm(0)]))))
        return seq(stmts, s.span)

    def _gemm_fma(self, s: Any, ops: dict[str, Any], a: Region, b: Region, c: Region, lay: FragmentLayout | None,
                  stmts: list[Any]) -> Any:
        M, N, K = ops["M"], ops["N"], ops["K"]
        ta, tb, clear = ops["ta"], ops["tb"], ops["clear"]

        def mat_dims(r: Region) -> list[int]:
            dims = squeezed(r, self.ana)
            return dims if len(dims) == 2 else [len(r.extents) - 2, len(r.extents) - 1]

        da, db, dc = mat_dims(a), mat_dims(b), mat_dims(c)
        acc = str(c.buffer.dtype)

        def A(i: Any, k: Any) -> Any:  # noqa: N802
            return _cast(self.read(a.buffer, indices_at(a, da, [k, i] if ta else [i, k])), acc)

        def B(k: Any, j: Any) -> Any:  # noqa: N802
            return _cast(self.read(b.buffer, indices_at(b, db, [j, k] if tb else [k, j])), acc)

        k = new_var("kk")
        self.bind_loop(k, _imm(0), _imm(K))
        if lay is not None and lay.distributed:
            loc = self.locals[c.buffer]
            if clear:
                stmts.append(self.unrolled(lay.num_regs, lambda r: tirx.BufferStore(loc, tirx.const(0, acc), [r]),
                                           lay.const_regs))

            def upd(reg: Any) -> Any:
                coords, valid = lay.coords(self.tid, reg, self.ana)
                i, j = coords[dc[0]] - c.mins[dc[0]], coords[dc[1]] - c.mins[dc[1]]
                st = tirx.BufferStore(loc, _load(loc, [reg]) + A(i, k) * B(k, j), [reg])
                return _guard([valid] if valid is not None else [], st)

            inner = self.unrolled(lay.num_regs, upd, lay.const_regs)
            stmts.append(make_for(k, K, inner, ForKind.UNROLLED if K <= 8 else ForKind.SERIAL))
            return seq(stmts, s.span)
        # per-thread accumulator (replicated fragment or local tile): every thread computes the whole product

        def Cidx(i: Any, j: Any) -> list[Any]:  # noqa: N802
            return indices_at(c, dc, [i, j])

        if clear:
            stmts.append(self.nest([M, N], lambda co: self.write(c.buffer, tirx.const(0, acc), Cidx(co[0], co[1]))))

        def full(co: list[Any]) -> Any:
            i, j = co
            return self.write(c.buffer, self.read(c.buffer, Cidx(i, j)) + A(i, k) * B(k, j), Cidx(i, j))

        stmts.append(make_for(k, K, self.nest([M, N], full, ForKind.SERIAL)))
        return seq(stmts, s.span)

    # -- reduce --------------------------------------------------------------------------------------------
    def _lower_reduce(self, s: Any, args: list[Any]) -> Any:
        src, dst = Region.of(args[0]), Region.of(args[1])
        kind, dim, clear = str(args[2].value), const_int(args[3]), bool(const_int(args[4]))
        nan_propagate = len(args) > 5 and bool(const_int(args[5]))
        # tl.PipelineCUDA's stage dimension in front of a multi-buffered source / destination (args 6, 7): not the
        # user's, so `dim` and the rank rules below apply to the dimensions after it; accesses keep its index
        lead_s, lead_d = (const_int(args[6]), const_int(args[7])) if len(args) > 7 else (0, 0)
        spre, dpre = list(src.mins[:lead_s]), list(dst.mins[:lead_d])
        src = Region(src.buffer, list(src.mins[lead_s:]), list(src.extents[lead_s:]))
        dst = Region(dst.buffer, list(dst.mins[lead_d:]), list(dst.extents[lead_d:]))
        dt = str(dst.buffer.dtype)
        rank = len(src.extents)
        sext = [const_int(e) for e in src.extents]
        if None in sext:
            self.error(s.span, f"T.reduce_{kind}: tile extents must be compile-time constants on CUDA")
            return s
        keep = [d for d in range(rank) if d != dim]
        kext = [sext[d] for d in keep]
        D = 1
        for e in kext:
            D *= e
        same_rank = len(dst.extents) == rank
        is_float = dt.startswith(("float", "bfloat"))
        if kind in ("sum", "abssum", "absmax"):
            init = tirx.const(0, dt)
        elif kind == "max":  # floats start from -inf / +inf, as on the CPU (a fully masked row stays -inf)
            init = -float_infinity(dt) if is_float else tirx.min_value(dt)
        else:
            init = float_infinity(dt) if is_float else tirx.max_value(dt)
        op = {"sum": "SumOp", "abssum": "SumOp", "max": "MaxOp", "absmax": "MaxOp", "min": "MinOp"}[kind]
        if nan_propagate and op != "SumOp" and is_float:
            op = op.replace("Op", "NanOp")  # tl::MaxNanOp / MinNanOp: a NaN anywhere in a row wins (torch.amax)

        def f(x: Any) -> Any:
            x = _cast(x, dt)
            return tirx.abs(x) if kind.startswith("abs") else x

        def comb(x: Any, y: Any) -> Any:
            if op == "SumOp":
                return x + y
            m = tirx.max(x, y) if op.startswith("Max") else tirx.min(x, y)
            if op.endswith("NanOp"):  # x + y is NaN exactly when one of them is
                return tirx.Select(_isnan(x) | _isnan(y), x + y, m)
            return m

        def dflat(keep_coords: list[Any]) -> Any:
            return self.ana.simplify(flat_index(keep_coords, tuple(kext)))

        def dst_idx(keep_coords: list[Any]) -> list[Any]:
            full = (list(keep_coords[:dim]) + [_imm(0)] + list(keep_coords[dim:])) if same_rank else list(keep_coords)
            return dpre + [m + x for m, x in zip(dst.mins, full)]

        if self._row_reduce_ok(src, dst, dim, sext):
            return self._reduce_rows(s, src, dst, init, f, comb, op, clear)
        part = tirx.decl_buffer((D,), dt, "red_part", scope="local")
        stmts: list[Any] = [tirx.AllocBuffer(part)]
        stmts.append(self.unrolled(D, lambda d: tirx.BufferStore(part, init, [d]), True) if D <= 256 else
                     self.nest([D], lambda co: tirx.BufferStore(part, init, co)))
        ks = self.kind(src.buffer)
        cross = True
        if ks == "F":
            lay = self.layouts[src.buffer]
            loc = self.locals[src.buffer]

            def acc_reg(reg: Any) -> Any:
                coords, valid = lay.coords(self.tid, reg, self.ana)
                rel = [self.ana.simplify(x - m) for x, m in zip(coords, src.mins)]
                conds = [valid] if valid is not None else []
                if not (all(const_int(m) == 0 for m in src.mins) and sext == list(lay.shape)):
                    for x, e in zip(rel, sext):
                        conds += [tirx.GE(x, 0), tirx.LT(x, e)]
                d = dflat([rel[x] for x in keep])
                st = tirx.BufferStore(part, comb(_load(part, [d]), f(_load(loc, [reg]))), [d])
                return _guard(conds, st)
            stmts.append(self.unrolled(lay.num_regs, acc_reg, lay.const_regs))
        elif ks == "R":
            cross = False

            def acc_full(co: list[Any]) -> Any:
                d = dflat([co[x] for x in keep])
                v = self.read(src.buffer, [m + x for m, x in zip(src.mins, co)])
                return tirx.BufferStore(part, comb(_load(part, [d]), f(v)), [d])
            stmts.append(self.nest(sext, acc_full, ForKind.SERIAL))
        else:  # shared (or global) source: the threads split its elements
            lay = FragmentLayout.blocked(sext, self.threads, 16)

            def acc_sh(reg: Any) -> Any:
                coords, valid = lay.coords(self.tid, reg, self.ana)
                v = self.read(src.buffer, spre + [m + x for m, x in zip(src.mins, coords)])
                d = dflat([coords[x] for x in keep])
                st = tirx.BufferStore(part, comb(_load(part, [d]), f(v)), [d])
                return _guard([valid] if valid is not None else [], st)
            stmts.append(self.unrolled(lay.num_regs, acc_sh))
        if cross:
            warps = self.threads // 32
            slots = self.threads if self.threads < 32 else max(warps, 1)  # under a warp: one slot per thread
            scratch = tirx.decl_buffer((slots * D,), dt, "red_smem", scope="shared")
            stmts.append(tirx.AllocBuffer(scratch))
            stmts.append(extern(f"tl::block_allreduce<tl::{op}, {self.threads}, {D}>",
                                tirx.address_of(_load(part, [_imm(0)])), tirx.address_of(_load(scratch, [_imm(0)]))))
        # write the result
        kd = self.kind(dst.buffer)
        if kd == "F":
            dlay = self.layouts[dst.buffer]
            dloc = self.locals[dst.buffer]

            def wr(reg: Any) -> Any:
                coords, valid = dlay.coords(self.tid, reg, self.ana)
                rel = [self.ana.simplify(x - m) for x, m in zip(coords, dst.mins)]
                kc = [x for i, x in enumerate(rel) if not same_rank or i != dim]
                val = _load(part, [dflat(kc)])
                if not clear:
                    val = comb(_load(dloc, [reg]), val)
                conds = [valid] if valid is not None else []
                return _guard(conds, tirx.BufferStore(dloc, _cast(val, str(dloc.dtype)), [reg]))
            stmts.append(self.unrolled(dlay.num_regs, wr, dlay.const_regs))
        else:
            def wr_full(co: list[Any]) -> Any:
                di = dst_idx(co)
                val = _load(part, [dflat(co)])
                if not clear:
                    val = comb(self.read(dst.buffer, di), val)
                return self.write(dst.buffer, val, di)
            if kd == "R":  # every thread keeps its own copy
                stmts.append(self.nest(kext, wr_full) if kext else wr_full([]))
            else:  # shared or global: one owner per element (thread d % threads), so clear=False adds it once
                def wr_owned(d: Any) -> Any:
                    co, rest = [], d
                    for e in reversed(kext):
                        co.append(rest % e if isinstance(rest, int) else self.ana.simplify(tirx.floormod(rest, e)))
                        rest = rest // e if isinstance(rest, int) else tirx.floordiv(rest, e)
                    owner = _imm(d % self.threads) if isinstance(d, int) else tirx.floormod(d, self.threads)
                    co = [_imm(x) if isinstance(x, int) else x for x in co[::-1]]
                    return _guard([tirx.EQ(self.tid, owner)], wr_full(co))
                stmts.append(self.unrolled(D, wr_owned))
        return seq(stmts, s.span)

    def _row_reduce_ok(self, src: Region, dst: Region, dim: int, sext: list[int]) -> bool:
        """A row reduction of an ``mma`` accumulator into the ``mma_row`` fragment of its rows."""
        if self.kind(src.buffer) != "F" or self.kind(dst.buffer) != "F" or dim != 1 or len(sext) != 2:
            return False
        slay, dlay = self.layouts[src.buffer], self.layouts[dst.buffer]
        if slay.row_kind is None or dlay.kind != slay.row_kind or slay.row_layout() != dlay:
            return False
        whole_src = all(const_int(m) == 0 for m in src.mins) and sext == list(slay.shape)
        whole_dst = all(const_int(m) == 0 for m in dst.mins) and [const_int(e) for e in dst.extents] == list(
            dlay.shape)
        return whole_src and whole_dst

    def _reduce_rows(self, s: Any, src: Region, dst: Region, init: Any, f: Any, comb: Any, op: str,
                     clear: bool) -> Any:
        """Each thread folds its accumulator registers into one partial per row it holds, then
        ``tl::row_allreduce`` combines the four lanes of each quad (and the warps of a warp row through shared
        memory when the warp grid splits N): no per-row partials for rows the thread does not hold."""
        slay, dlay = self.layouts[src.buffer], self.layouts[dst.buffer]
        loc, dloc = self.locals[src.buffer], self.locals[dst.buffer]
        dt = str(dst.buffer.dtype)
        R = dlay.num_regs
        part = tirx.decl_buffer((R,), dt, "row_part", scope="local")
        stmts: list[Any] = [tirx.AllocBuffer(part)]
        stmts += [tirx.BufferStore(part, init, [_imm(r)]) for r in range(R)]
        for reg in range(slay.num_regs):
            rr = _imm(slay.row_reg(reg))
            stmts.append(tirx.BufferStore(part, comb(_load(part, [rr]), f(_load(loc, [_imm(reg)]))), [rr]))
        args = [tirx.address_of(_load(part, [_imm(0)]))]
        if slay.warp_n > 1:
            scratch = tirx.decl_buffer(((self.threads // 32) * 8 * R,), dt, "red_smem", scope="shared")
            stmts.append(tirx.AllocBuffer(scratch))
            args.append(tirx.address_of(_load(scratch, [_imm(0)])))
        else:  # quad shuffles only: the scratch argument is unused
            args.append(tirx.address_of(_load(part, [_imm(0)])))
        stmts.append(extern(f"tl::row_allreduce<tl::{op}, {slay.warp_n}, {R}>", *args))
        for r in range(R):
            val = _load(part, [_imm(r)])
            if not clear:
                val = comb(_load(dloc, [_imm(r)]), val)
            stmts.append(tirx.BufferStore(dloc, _cast(val, str(dloc.dtype)), [_imm(r)]))
        return seq(stmts, s.span)

    # -- atomic_add ----------------------------------------------------------------------------------------
    def _atomic(self, buf: Any, idx: list[Any], value: Any) -> Any:
        dt = str(buf.dtype)
        fn = {"add": "atomicAdd", "max": "tl::atomic_max", "min": "tl::atomic_min"}[self.atomic_kind]
        call = extern(fn, tirx.address_of(_load(buf, idx)), _cast(value, dt), dtype=dt)
        if is_global(buf):
            return _guard(in_bounds_conds(buf, idx, self.ana), call)
        return call

    def _lower_atomic_add(self, s: Any, args: list[Any]) -> Any:
        self.atomic_kind = str(args[2].value) if len(args) > 2 else "add"  # T.atomic_max / T.atomic_min
        dst = Region.of(args[0])
        if self.atomic_kind != "add" and str(dst.buffer.dtype) in ("int8", "uint8", "int16", "uint16", "bool"):
            self.error(s.span, f"T.atomic_{self.atomic_kind}: {dst.buffer.dtype} has no atomic max/min on CUDA; "
                               "use a 32-bit integer tensor (see docs/compat.md)")
            return s
        dd = squeezed(dst, self.ana)
        if not isinstance(args[1], tvm.ir.TensorRegion):
            if dd:
                self.error(s.span, "T.atomic_add with a scalar value needs a single destination element")
                return s
            call = self._atomic(dst.buffer, list(dst.mins), args[1])
            if self.in_parallel:
                return call
            # block-level code runs in every thread: one thread performs the (non-idempotent) update
            return tirx.IfThenElse(tirx.EQ(self.tid, 0), call, None)
        src = Region.of(args[1])
        sd = squeezed(src, self.ana)
        exts = [const_int(dst.extents[d]) for d in dd]
        if self.kind(dst.buffer) not in ("G", "S"):
            self.error(s.span, "T.atomic_add: the destination must be a global or shared tile")
            return s
        if self.kind(src.buffer) == "F":
            lay = self.layouts[src.buffer]
            loc = self.locals[src.buffer]

            def one(reg: Any) -> Any:
                coords, valid = lay.coords(self.tid, reg, self.ana)
                tc = [self.ana.simplify(coords[d] - src.mins[d]) for d in sd]
                conds = [valid] if valid is not None else []
                for d in sd:
                    conds += [tirx.GE(coords[d], src.mins[d]), tirx.LT(coords[d], src.mins[d] + src.extents[d])]
                conds = [c for c in conds if not self.prove(c)]
                return _guard(conds, self._atomic(dst.buffer, indices_at(dst, dd, tc), _load(loc, [reg])))
            return self.unrolled(lay.num_regs, one, lay.const_regs)
        total = 1
        for e in exts:
            total *= e
        lay = FragmentLayout.blocked(exts, self.threads, 16)

        def one_d(reg: Any) -> Any:
            coords, valid = lay.coords(self.tid, reg, self.ana)
            v = self.read(src.buffer, indices_at(src, sd, coords))
            return _guard([valid] if valid is not None else [], self._atomic(dst.buffer, indices_at(dst, dd, coords),
                                                                            v))
        return self.unrolled(lay.num_regs, one_d)

    # -- finalize_reducer ----------------------------------------------------------------------------------
    def _lower_finalize_reducer(self, s: Any, args: list[Any]) -> Any:
        # every thread's replica holds partials: all-reduce them over the block (reducers_cuda.py)
        buf = Region.of(args[0]).buffer
        return seq(finalize_stmts(self.locals[buf], self.reducers[buf], self.threads), s.span)

    # -- use_swizzle (consumed by tl.LowerKernelLaunchCUDA; one left elsewhere does nothing) ------------------
    def _lower_use_swizzle(self, s: Any, args: list[Any]) -> Any:
        return tirx.Evaluate(_imm(0))

    # -- print ---------------------------------------------------------------------------------------------
    def _lower_print(self, s: Any, args: list[Any]) -> Any:
        obj, msg = args[0], str(args[1].value)
        prefix = (msg.replace("%", "%%") + " ") if msg else ""
        first = tirx.EQ(self.tid, 0)
        if isinstance(obj, tvm.ir.TensorRegion):
            r = Region.of(obj)
            if self.kind(r.buffer) == "F":
                self.error(s.span, f"T.print: fragment {r.buffer.name} is spread over the threads; copy it to "
                                   "shared memory to print it on CUDA")
                return s

            def body(co: list[Any]) -> Any:
                idx = [m + x for m, x in zip(r.mins, co)]
                fmt, v = _printf_arg(self.read(r.buffer, idx))
                where = ", ".join(["%d"] * len(co))
                return tirx.Evaluate(tirx.call_extern("int32", "printf", _c_literal(
                    f"{prefix}{r.buffer.name}[{where}] = {fmt}\n"), *co, v))
            return tirx.IfThenElse(first, self.nest([const_int(e) for e in r.extents], body, ForKind.SERIAL), None)
        fmt, v = _printf_arg(obj)
        return tirx.IfThenElse(first, tirx.Evaluate(tirx.call_extern("int32", "printf",
                                                                     _c_literal(f"{prefix}{fmt}\n"), v)), None)


def _c_literal(text: str) -> Any:
    """A string argument for an extern call: TVM's CUDA codegen writes a StringImm between quotes as it is, so
    backslashes, quotes and control characters are escaped here (a raw newline broke the CUDA build)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    out = "".join(c if c.isprintable() else f"\\{ord(c):03o}" for c in out)
    return tvm.ir.StringImm(out)


def _printf_arg(v: Any) -> tuple[str, Any]:
    dt = dtype_of(v) or "float64"
    if dt.startswith(("float", "bfloat")):
        return "%.6g", tirx.Cast("float64", v)
    if dt == "bool":
        return "%d", tirx.Cast("int32", v)
    return "%lld", tirx.Cast("int64", v)


def _void_extern(s: Any) -> Any:
    """``T.call_extern("handle", f, ...)`` as a statement (TileLang's spelling of a call to a void device function,
    a ``T.import_source`` decoder) called for its effect: TVM would print ``(void*)f(...)``, which does not compile
    for a void ``f``; an int32-typed call prints ``f(...);``."""
    v = s.value
    if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and str(v.op.name) == "tirx.call_extern" \
            and dtype_of(v) is None:  # a handle-typed call
        return tirx.Evaluate(tirx.call_extern("int32", *v.args), span=s.span)
    return s


def lower_tile_ops_cuda(func: tirx.PrimFunc, arch: str = "sm_90") -> tirx.PrimFunc:
    check_reducer_writes(func, reducers_in(func))
    pass_ = LowerTileOpsCUDA(func, arch)
    out = pass_.run(func)
    if pass_.reducers:  # tl.LowerParallelCUDA gives each iteration of a nest updating one of them to one thread
        out = out.with_attr(ATTR_REDUCERS, pass_.reducers)
    out = add_notes(out, pass_.hint_notes + pass_.width_notes)
    if pass_.new_swizzle:
        merged = dict(swizzles_of(out))
        merged.update(pass_.new_swizzle)
        out = out.with_attr(ATTR_SWIZZLE, merged)
    return out


def _isnan(x: Any) -> Any:
    """``isnan`` for any float dtype (TVM has none for bfloat16: tested in float32, exact)."""
    return tirx.isnan(tirx.Cast("float32", x) if (dtype_of(x) or "").startswith("bfloat16") else x)

"""Pass: lower tile ops to plain TIR loops for CPUs.

What each op becomes (the CPU has no shared memory or register fragments: tiles are local arrays):

* ``tl.copy``  — a loop nest, vectorised along the contiguous dimension. Ragged edges are the compiler's job: a
  tile that lies wholly inside its tensor takes an unguarded fast path; one crossing the edge reads zeros
  and skips out-of-bounds writes.
* ``tl.gemm``  — a register-blocked micro-kernel: an ``mr x nr`` block of C is held in vector registers
  (``nr`` a multiple of the SIMD width, the ``mr`` rows unrolled) across the whole K loop, each step
  broadcasting one A element against a vector of B. A transposed B is first packed K-major so B loads stay
  contiguous.
* ``tl.reduce`` — along the contiguous dimension, SIMD-width partial accumulators then a horizontal step;
  along another dimension, a loop that vectorises over the kept dimensions.
* ``tl.fill``, ``tl.atomic_add`` (plain adds: the grid pass serialises kernels that use it) and ``tl.print``
  (``printf``).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import Region, dtype_of
from ...language.math import infinity as float_infinity  # bfloat16 too (TVM's knows fp16/32/64)
from ..common.regions import in_bounds_conds, indices_at, is_global, squeezed
from ..common.rewriter import Rewriter, and_all, const_int, make_for, new_var, seq, tile_op_name

_NAMES = "ijklmn"
ForKind = tirx.ForKind
_DOT_MAX_M = 2  # T.gemm with a transposed B and at most this many rows of C: dot-product kernel (decode shapes)
_HALF_ACCUMULATORS = ("float16", "bfloat16")
K_STEP_HALF = 16  # products per rounding of a half accumulator: the k of an mma.sync m16n8k16 (TileLang's fp16 path)


def _is_block_barrier(s: Any) -> bool:
    v = s.value
    return (isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op)
            and str(v.op.name) == "tirx.tvm_storage_sync")


def _half_needs_simple(lanes: int, n: int) -> bool:
    """Whether the register-blocked kernel cannot take this N (no multiple of the SIMD width)."""
    return lanes <= 1 or not any(n % (v * lanes) == 0 for v in (4, 3, 2, 1))


def _dtype_bytes(dtype: str) -> int:
    return max(tvm.DataType(dtype).bits // 8, 1)


def _load(buf: Any, idx: list[Any]) -> Any:
    return tirx.BufferLoad(buf, idx)


def _store(buf: Any, value: Any, idx: list[Any]) -> Any:
    if dtype_of(value) != buf.dtype:
        value = tirx.Cast(buf.dtype, value)
    return tirx.BufferStore(buf, value, idx)


def _cast(value: Any, dtype: str) -> Any:
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)


def _alloc(shape: list[int], dtype: str, name: str) -> tuple[Any, Any]:
    buf = tirx.decl_buffer(shape, dtype, name, scope="local")
    return buf, tirx.AllocBuffer(buf)


class LowerTileOpsCPU(Rewriter):
    pass_name = "tl.LowerTileOpsCPU"

    def __init__(self, vector_bytes: int = 32):
        super().__init__()
        self.vector_bytes = vector_bytes

    def lanes(self, dtype: str) -> int:
        return max(self.vector_bytes // _dtype_bytes(dtype), 1)

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        name = tile_op_name(s)
        if name is None:
            if _is_block_barrier(s):  # T.sync_threads: a block is one thread here
                return tirx.Evaluate(tirx.IntImm("int32", 0), span=s.span)
            return s
        lower = getattr(self, "_lower_" + name[3:], None)
        if lower is None:
            self.error(s.span, f"{name} is not supported on the CPU backend")
            return s
        return lower(s, list(s.value.args))

    # -- loop nests ----------------------------------------------------------------------------------------
    def nest(self, extents: list[Any], body_fn: Any, span: Any, vec_lanes: int = 0) -> Any:
        """Loops over ``extents``; ``body_fn(coords)``. The innermost loop is split and vectorised by
        ``vec_lanes`` when its extent is a constant multiple of it."""
        if not extents:
            return body_fn([])
        vs = [new_var(_NAMES[d % len(_NAMES)] + ("" if d < len(_NAMES) else str(d))) for d in range(len(extents))]
        inner_ext = const_int(extents[-1])
        split = vec_lanes > 1 and inner_ext is not None and inner_ext % vec_lanes == 0 and inner_ext >= vec_lanes
        coords: list[Any] = list(vs)
        if split:
            vi = new_var(vs[-1].name + "_v")
            coords[-1] = vs[-1] * vec_lanes + vi if inner_ext > vec_lanes else vi
            self.bind_loop(vi, 0, vec_lanes)
        for v, e in zip(vs, extents):
            self.bind_loop(v, 0, e)
        body = body_fn(coords)
        if split:
            body = make_for(vi, vec_lanes, body, ForKind.VECTORIZED, span)
            if inner_ext > vec_lanes:
                body = make_for(vs[-1], inner_ext // vec_lanes, body, span=span)
        else:
            body = make_for(vs[-1], extents[-1], body, span=span)
        for v, e in reversed(list(zip(vs[:-1], extents[:-1]))):
            body = make_for(v, e, body, span=span)
        return body

    def _contiguous_inner(self, *regions_dims: tuple[Region, list[int]]) -> bool:
        return all(dims and dims[-1] == len(r.buffer.shape) - 1 for r, dims in regions_dims)

    # -- copy ----------------------------------------------------------------------------------------------
    def _lower_copy(self, s: Any, args: list[Any]) -> Any:
        src, dst = Region.of(args[0]), Region.of(args[1])
        sd, dd = squeezed(src, self.ana), squeezed(dst, self.ana)
        exts = [dst.extents[d] for d in dd]
        lanes = self.lanes(dst.buffer.dtype) if self._contiguous_inner((src, sd), (dst, dd)) else 0

        def body(coords: list[Any], guarded: bool) -> Any:
            si, di = indices_at(src, sd, coords), indices_at(dst, dd, coords)
            val = _cast(_load(src.buffer, si), dst.buffer.dtype)
            if not guarded:
                return _store(dst.buffer, val, di)
            sc = in_bounds_conds(src.buffer, si, self.ana) if is_global(src.buffer) else []
            dc = in_bounds_conds(dst.buffer, di, self.ana) if is_global(dst.buffer) else []
            if sc:
                val = tirx.if_then_else(and_all(sc), val, tirx.const(0, dst.buffer.dtype))
            st = _store(dst.buffer, val, di)
            return tirx.IfThenElse(and_all(dc), st, None) if dc else st

        tile_conds = self._tile_in_bounds(src) + self._tile_in_bounds(dst)
        fast = self.nest(exts, lambda c: body(c, False), s.span, lanes)
        if not tile_conds:
            return fast
        slow = self.nest(exts, lambda c: body(c, True), s.span, 0)
        return tirx.IfThenElse(and_all(tile_conds), fast, slow, span=s.span)

    def _tile_in_bounds(self, r: Region) -> list[Any]:
        """Conditions (not provable at compile time) under which the whole region lies inside its tensor."""
        if not is_global(r.buffer):
            return []
        conds = []
        for m, e, n in zip(r.mins, r.extents, r.buffer.shape):
            for c in (tirx.LE(m + e, n), tirx.GE(m, 0)):
                if not self.prove(c):
                    conds.append(self.ana.simplify(c))
        return conds

    # -- fill ----------------------------------------------------------------------------------------------
    def _lower_fill(self, s: Any, args: list[Any]) -> Any:
        r = Region.of(args[0])
        dims = squeezed(r, self.ana)
        lanes = self.lanes(r.buffer.dtype) if self._contiguous_inner((r, dims)) else 0

        def body(coords: list[Any]) -> Any:
            idx = indices_at(r, dims, coords)
            st = _store(r.buffer, args[1], idx)
            conds = in_bounds_conds(r.buffer, idx, self.ana) if is_global(r.buffer) else []
            return tirx.IfThenElse(and_all(conds), st, None) if conds else st

        return self.nest([r.extents[d] for d in dims], body, s.span, 0 if is_global(r.buffer) else lanes)

    # -- gemm ----------------------------------------------------------------------------------------------
    def _lower_gemm(self, s: Any, args: list[Any]) -> Any:
        a, b, c = (Region.of(x) for x in args[:3])
        ta, tb, clear = (bool(const_int(x)) for x in args[3:6])
        da, db, dc = (self._matrix_dims(r) for r in (a, b, c))
        M, N = (const_int(c.extents[d]) for d in dc)
        K = const_int(a.extents[da[0] if ta else da[1]])
        if None in (M, N, K):
            self.error(s.span, "T.gemm: tile extents must be compile-time constants on the CPU backend")
            return s
        # a half-precision accumulator (accum_dtype="float16") rounds once per k-step of K_STEP_HALF products, as a
        # tensor core's mma does (its products and their sum are exact/fp32 inside one instruction): the sums run in
        # float32 and are rounded into the accumulator's dtype after every step (docs/design.md)
        half = str(c.buffer.dtype) in _HALF_ACCUMULATORS
        acc = "float32" if half else c.buffer.dtype
        stmts: list[Any] = []
        if half and _half_needs_simple(self.lanes(acc), N):
            return self._gemm_half_simple(s, a, da, b, db, c, dc, ta, tb, M, N, K, clear)
        if tb and not ta and M <= _DOT_MAX_M and not half and self._dot_fits(a, da, b, db, c, dc, N, K):
            return self._gemm_dot(s, a, da, b, db, c, dc, M, N, K, clear)

        def A(i: Any, k: Any) -> Any:  # noqa: N802
            return _cast(_load(a.buffer, indices_at(a, da, [k, i] if ta else [i, k])), acc)

        if tb:  # pack B^T into a K-major panel so the micro-kernel's B loads are contiguous
            bp, alloc_bp = _alloc([K, N], b.buffer.dtype, "B_packed")
            stmts += [alloc_bp, self._transpose_pack(b, db, bp, K, N, s.span)]

            def B(k: Any, j: Any) -> Any:  # noqa: N802
                return _cast(_load(bp, [k, j]), acc)
        else:
            def B(k: Any, j: Any) -> Any:  # noqa: N802
                return _cast(_load(b.buffer, indices_at(b, db, [k, j])), acc)

        def C(i: Any, j: Any) -> list[Any]:  # noqa: N802
            return indices_at(c, dc, [i, j])

        L = self.lanes(acc)
        nv = next((v for v in (4, 3, 2, 1) if N % (v * L) == 0), 0) if L > 1 else 0
        if nv == 0:
            stmts.append(self._gemm_simple(s, M, N, K, A, B, C, c.buffer, clear))
            return seq(stmts, s.span)
        nr = nv * L
        mr = max(1, min(24 // nv, M))
        mr = next((m for m in (6, 4, 3, 2) if m <= mr and M % m == 0), mr if M <= mr else 4 if M >= 4 else M)
        # one small accumulator array per row: each stays under TVM's stack-allocation limit, so LLVM sees
        # allocas it can promote to vector registers (a workspace pointer could alias the A/B tiles)
        rows = [_alloc([nr], acc, f"C_reg{r}") for r in range(mr)]
        stmts += [alloc for _, alloc in rows]
        jo, k, jj = new_var("jo"), new_var("k"), new_var("jj")
        for v, e in ((jo, N // nr), (k, K), (jj, nr)):
            self.bind_loop(v, 0, e)
        j0 = jo * nr

        def vec(body: Any) -> Any:
            return make_for(jj, nr, body, ForKind.VECTORIZED)

        def micro(i0: Any, m: int) -> Any:
            regs = [buf for buf, _ in rows[:m]]
            init = [vec(tirx.BufferStore(regs[r], tirx.const(0, acc) if clear else
                                         _cast(_load(c.buffer, C(i0 + r, j0 + jj)), acc), [jj])) for r in range(m)]
            store = [vec(_store(c.buffer, _load(regs[r], [jj]), C(i0 + r, j0 + jj))) for r in range(m)]
            if not half:
                fma = [vec(tirx.BufferStore(regs[r], _load(regs[r], [jj]) + A(i0 + r, k) * B(k, j0 + jj), [jj]))
                       for r in range(m)]
                return seq(init + [make_for(k, K, seq(fma))] + store)
            return seq(init + self._half_k_steps(K, k, lambda kk: [
                vec(tirx.BufferStore(regs[r], _load(regs[r], [jj]) + A(i0 + r, kk) * B(kk, j0 + jj), [jj]))
                for r in range(m)], lambda: [
                vec(tirx.BufferStore(regs[r], _cast(_cast(_load(regs[r], [jj]), c.buffer.dtype), acc), [jj]))
                for r in range(m)]) + store)

        full, tail = divmod(M, mr)
        if full:
            io = new_var("io")
            self.bind_loop(io, 0, full)
            stmts.append(make_for(io, full, make_for(jo, N // nr, micro(io * mr, mr)), span=s.span))
        if tail:
            stmts.append(make_for(jo, N // nr, micro(tirx.IntImm("int32", full * mr), tail), span=s.span))
        return seq(stmts, s.span)

    def _half_k_steps(self, K: int, k: Any, fma: Any, round_: Any) -> list[Any]:
        """The K loop in steps of ``K_STEP_HALF``: ``fma(kk)`` for each k of a step, then ``round_()`` (the
        accumulator rounded to its half dtype and back), as a tensor core rounds once per mma k-chunk."""
        steps, tail = divmod(K, K_STEP_HALF)
        out: list[Any] = []
        if steps:
            ko, ki = new_var("ko"), new_var("ki")
            self.bind_loop(ko, 0, steps)
            self.bind_loop(ki, 0, K_STEP_HALF)
            kk = ko * K_STEP_HALF + ki
            out.append(make_for(ko, steps, seq([make_for(ki, K_STEP_HALF, seq(fma(kk)))] + round_())))
        if tail:
            self.bind_loop(k, 0, tail)
            out += [make_for(k, tail, seq(fma(k + steps * K_STEP_HALF)))] + round_()
        return out

    def _gemm_half_simple(self, s: Any, a: Region, da: list[int], b: Region, db: list[int], c: Region,
                          dc: list[int], ta: bool, tb: bool, M: int, N: int, K: int, clear: bool) -> Any:
        """A half-precision accumulator whose N is no multiple of the SIMD width: element by element, each
        element's sum in float32, rounded once per k-step."""
        tmp, alloc = _alloc([1], "float32", "C_f32")
        i, j, k = new_var("i"), new_var("j"), new_var("k")
        for v, e in ((i, M), (j, N)):
            self.bind_loop(v, 0, e)
        z = tirx.IntImm("int32", 0)

        def prod(kk: Any) -> Any:
            av = _cast(_load(a.buffer, indices_at(a, da, [kk, i] if ta else [i, kk])), "float32")
            bv = _cast(_load(b.buffer, indices_at(b, db, [j, kk] if tb else [kk, j])), "float32")
            return [tirx.BufferStore(tmp, _load(tmp, [z]) + av * bv, [z])]

        cidx = indices_at(c, dc, [i, j])
        init = tirx.BufferStore(tmp, tirx.const(0, "float32") if clear else _cast(_load(c.buffer, cidx), "float32"),
                                [z])
        body = seq([init] + self._half_k_steps(K, k, prod, lambda: [
            tirx.BufferStore(tmp, _cast(_cast(_load(tmp, [z]), c.buffer.dtype), "float32"), [z])])
            + [_store(c.buffer, _load(tmp, [z]), cidx)])
        return seq([alloc, make_for(i, M, make_for(j, N, body), span=s.span)], s.span)

    def _transpose_pack(self, b: Region, db: list[int], bp: Any, K: int, N: int, span: Any) -> Any:
        """``bp[k, n] = B[n, k]`` for a (N, K) tile of B.

        Element by element this is a strided gather (LLVM emits vector gathers, or scalar loads), which cost as
        much as the gemm itself when M is small (decode) and a fifth of attention's ``Q K^T``. When both extents
        are multiples of the SIMD width L and K is B's contiguous dimension, the tile is transposed in L x L
        blocks held in registers instead: L vector loads, log2(L) rounds of two-source shuffles
        (``vpermt2ps``/``vperm2f128``-class) and L vector stores per block.
        """
        L = self.lanes(b.buffer.dtype)
        contiguous_k = db[1] == len(b.buffer.shape) - 1
        # float8 rows stay element by element: tl.FP8CastCPU rewrites float8 loads to bytes, which breaks the
        # register transpose's float8 vector lets (LLVM codegen failed after minutes on a 64 x 64 e4m3 tile)
        fp8 = str(b.buffer.dtype).startswith("float8")
        if L < 2 or L & (L - 1) or N % L or K % L or not contiguous_k or fp8:
            def pack(co: list[Any]) -> Any:
                return _store(bp, _load(b.buffer, indices_at(b, db, [co[1], co[0]])), [co[0], co[1]])

            return self.nest([K, N], pack, span)
        n0, k0 = new_var("n0"), new_var("k0")
        self.bind_loop(n0, 0, N // L)
        self.bind_loop(k0, 0, K // L)
        loads = [tirx.BufferLoad(b.buffer, _ramp_last(indices_at(b, db, [n0 * L + r, k0 * L]), L)) for r in range(L)]
        pre: list[Any] = []
        if _is_bf16(b.buffer.dtype):
            loads, pre = _stage_bf16_rows(loads, L)
        stmts, cols = _register_transpose(loads, dtype_of(loads[0]))
        stmts = pre + stmts
        cols = [_cast(col, f"{b.buffer.dtype}x{L}") for col in cols]
        for c in range(L):  # cols[c] holds column c of the block
            stmts.append(tirx.BufferStore(bp, cols[c], [k0 * L + c, tirx.Ramp(n0 * L, 1, L)]))
        return make_for(n0, N // L, make_for(k0, K // L, seq(stmts)), span=span)

    def _dot_fits(self, a: Region, da: list[int], b: Region, db: list[int], c: Region, dc: list[int], N: int,
                  K: int) -> bool:
        """Whether ``_gemm_dot`` applies: K contiguous in A and B, N and K multiples of a power-of-two width."""
        L = self.lanes(c.buffer.dtype)
        return (L > 1 and L & (L - 1) == 0 and N % L == 0 and K % L == 0
                and da[1] == len(a.buffer.shape) - 1 and db[1] == len(b.buffer.shape) - 1
                and dc[1] == len(c.buffer.shape) - 1)

    def _gemm_dot(self, s: Any, a: Region, da: list[int], b: Region, db: list[int], c: Region, dc: list[int],
                  M: int, N: int, K: int, clear: bool) -> Any:
        """``C (+)= A @ B^T`` for a few rows of A (the decode shape), as dot products along the contiguous K.

        With one or two rows, packing B^T costs more than the multiply-adds it feeds. Here L columns of C are done
        at once: L vector accumulators (one per column, lanes running over K) take ``A[i, k:k+L] * B[j, k:k+L]``
        for the whole K, then a register transpose turns the L accumulators into L vectors whose sum holds the L
        dot products, added to ``C[i, j0:j0+L]`` with one vector store.
        """
        acc = c.buffer.dtype
        L = self.lanes(acc)
        vdt = f"{acc}x{L}"
        regs = [_alloc([L], acc, f"C_dot{r}") for r in range(L)]
        lane = tirx.Ramp(tirx.IntImm("int32", 0), 1, L)
        i, jo, k0 = new_var("i"), new_var("jo"), new_var("k0")
        for v, e in ((i, M), (jo, N // L), (k0, K // L)):
            self.bind_loop(v, 0, e)

        def vec(x: Any) -> Any:
            return x if dtype_of(x) == vdt else tirx.Cast(vdt, x)

        zero = tirx.Broadcast(tirx.const(0, acc), L)
        init = [tirx.BufferStore(buf, zero, [lane]) for buf, _ in regs]
        a_vec = vec(tirx.BufferLoad(a.buffer, _ramp_last(indices_at(a, da, [i, k0 * L]), L)))
        if _is_bf16(a.buffer.dtype):  # see _stage_bf16_rows: no bf16 load under a Bind; LLVM CSEs the copies
            av, bind_av = a_vec, []
        else:
            av = tvm.ir.Var("a_vec", vdt)
            bind_av = [tirx.Bind(av, a_vec)]
        fma = bind_av + [
            tirx.BufferStore(buf, tirx.BufferLoad(buf, [lane]) + av * vec(tirx.BufferLoad(
                b.buffer, _ramp_last(indices_at(b, db, [jo * L + r, k0 * L]), L))), [lane])
            for r, (buf, _) in enumerate(regs)]
        finish, parts = _register_transpose([tirx.BufferLoad(buf, [lane]) for buf, _ in regs], vdt)
        while len(parts) > 1:  # tree sum of the transposed rows: element r is column r's dot product
            parts = [parts[x] + parts[x + 1] for x in range(0, len(parts), 2)]
        cidx = _ramp_last(indices_at(c, dc, [i, jo * L]), L)
        total = parts[0] if clear else tirx.BufferLoad(c.buffer, cidx) + parts[0]
        finish.append(tirx.BufferStore(c.buffer, total, cidx))
        body = seq(init + [make_for(k0, K // L, seq(fma))] + finish)
        return seq([alloc for _, alloc in regs] + [make_for(i, M, make_for(jo, N // L, body), span=s.span)], s.span)

    def _gemm_simple(self, s: Any, M: int, N: int, K: int, A: Any, B: Any, C: Any, cbuf: Any, clear: bool) -> Any:
        i, j, k = new_var("i"), new_var("j"), new_var("k")
        body = tirx.BufferStore(cbuf, _load(cbuf, C(i, j)) + A(i, k) * B(k, j), C(i, j))
        loop = make_for(i, M, make_for(k, K, make_for(j, N, body)), span=s.span)
        if not clear:
            return loop
        zero = self.nest([M, N], lambda co: tirx.BufferStore(cbuf, tirx.const(0, cbuf.dtype), C(co[0], co[1])), s.span)
        return seq([zero, loop])

    def _matrix_dims(self, r: Region) -> list[int]:
        dims = squeezed(r, self.ana)
        rank = len(r.extents)
        if len(dims) == 2:
            return dims
        return [rank - 2, rank - 1]

    # -- reduce --------------------------------------------------------------------------------------------
    def _lower_reduce(self, s: Any, args: list[Any]) -> Any:
        src, dst = Region.of(args[0]), Region.of(args[1])
        kind, dim, clear = str(args[2].value), const_int(args[3]), bool(const_int(args[4]))
        nan_propagate = len(args) > 5 and bool(const_int(args[5]))
        dt = dst.buffer.dtype
        rank = len(src.extents)
        keep = [d for d in range(rank) if d != dim]
        same_rank = len(dst.extents) == rank

        def dst_idx(coords_keep: list[Any]) -> list[Any]:
            if same_rank:
                full = list(coords_keep[:dim]) + [0] + list(coords_keep[dim:])
                return [m + x for m, x in zip(dst.mins, full)]
            return [m + x for m, x in zip(dst.mins, coords_keep)]

        def src_idx(coords_keep: list[Any], r: Any) -> list[Any]:
            full = list(coords_keep[:dim]) + [r] + list(coords_keep[dim:])
            return [m + x for m, x in zip(src.mins, full)]

        if kind in ("sum", "abssum"):
            init = tirx.const(0, dt)
        elif kind == "absmax":
            init = tirx.const(0, dt)
        elif kind in ("max", "min"):
            # floats start from -inf / +inf (TileLang's identity): the max of a fully masked row stays -inf
            is_float = dt.startswith(("float", "bfloat"))
            if kind == "max":
                init = -float_infinity(dt) if is_float else tirx.min_value(dt)
            else:
                init = float_infinity(dt) if is_float else tirx.max_value(dt)

        def f(x: Any) -> Any:
            x = _cast(x, dt)
            return tirx.abs(x) if kind.startswith("abs") else x

        def comb(x: Any, y: Any) -> Any:
            if kind in ("sum", "abssum"):
                return x + y
            m = tirx.max(x, y) if kind in ("max", "absmax") else tirx.min(x, y)
            if not dt.startswith(("float", "bfloat")):
                return m
            if nan_propagate:  # x + y is NaN exactly when one of them is: branch-free, vectorises
                return tirx.Select(_isnan(x) | _isnan(y), x + y, m)
            # skip a NaN element as fmaxf / fminf do (CUDA's reduction, TileLang): ``y`` (the new element or lane)
            # replaces ``x`` (the running value) only when the comparison holds, which a NaN never does. TVM's
            # max(x, y) lets a NaN in y through, then a later max(NaN, z) drops it again: whether a row with a NaN
            # came out NaN depended on where the NaN sat. One maxps/minps per step, as before.
            better = y > x if kind in ("max", "absmax") else y < x
            return tirx.Select(better, y, x)

        keep_ext = [src.extents[d] for d in keep]
        red_ext = src.extents[dim]
        stmts = []
        if clear:
            stmts.append(self.nest(keep_ext, lambda co: tirx.BufferStore(dst.buffer, init, dst_idx(co)), s.span))
        L = self.lanes(dt)
        E = const_int(red_ext)
        if dim == rank - 1 and E is not None and L > 1 and E % L == 0 and E >= L:
            accv, alloc_v = _alloc([L], dt, "red_acc")
            ro, lane = new_var("r"), new_var("lane")
            self.bind_loop(ro, 0, E // L)
            self.bind_loop(lane, 0, L)

            def row(co: list[Any]) -> Any:
                di = dst_idx(co)
                return seq([
                    make_for(lane, L, tirx.BufferStore(accv, init, [lane]), ForKind.VECTORIZED),
                    make_for(ro, E // L, make_for(lane, L, tirx.BufferStore(
                        accv, comb(_load(accv, [lane]), f(_load(src.buffer, src_idx(co, ro * L + lane)))), [lane]),
                        ForKind.VECTORIZED)),
                    make_for(lane, L, tirx.BufferStore(dst.buffer, comb(_load(dst.buffer, di), _load(accv, [lane])),
                                                       di)),
                ])

            stmts += [alloc_v, self.nest(keep_ext, row, s.span)] if keep_ext else [alloc_v, row([])]
            return seq(stmts, s.span)
        r = new_var("r")
        self.bind_loop(r, 0, red_ext)
        if dim == rank - 1:
            def row2(co: list[Any]) -> Any:
                di = dst_idx(co)
                val = comb(_load(dst.buffer, di), f(_load(src.buffer, src_idx(co, r))))
                return make_for(r, red_ext, tirx.BufferStore(dst.buffer, val, di))
            stmts.append(self.nest(keep_ext, row2, s.span) if keep_ext else row2([]))
        else:
            inner = self.nest(keep_ext, lambda co: tirx.BufferStore(
                dst.buffer, comb(_load(dst.buffer, dst_idx(co)), f(_load(src.buffer, src_idx(co, r)))), dst_idx(co)),
                s.span, 0)
            stmts.append(make_for(r, red_ext, inner, span=s.span))
        return seq(stmts, s.span)

    # -- atomic_add ----------------------------------------------------------------------------------------
    def _lower_atomic_add(self, s: Any, args: list[Any]) -> Any:
        dst = Region.of(args[0])
        dd = squeezed(dst, self.ana)
        if isinstance(args[1], tvm.ir.TensorRegion):
            src = Region.of(args[1])
            sd = squeezed(src, self.ana)

            def val(co: list[Any]) -> Any:
                return _load(src.buffer, indices_at(src, sd, co))
        else:
            def val(co: list[Any]) -> Any:
                return args[1]

        kind = str(args[2].value) if len(args) > 2 else "add"  # T.atomic_max / T.atomic_min

        def combine(old: Any, v: Any) -> Any:
            if kind == "add":
                return old + v
            if not str(dst.buffer.dtype).startswith(("float", "bfloat")):
                return tirx.max(old, v) if kind == "max" else tirx.min(old, v)
            # a NaN value is skipped (it never compares greater), as in the reductions and on CUDA
            return tirx.Select(v > old if kind == "max" else v < old, v, old)

        def body(co: list[Any]) -> Any:
            di = indices_at(dst, dd, co)
            st = _store(dst.buffer, combine(_load(dst.buffer, di), _cast(val(co), dst.buffer.dtype)), di)
            conds = in_bounds_conds(dst.buffer, di, self.ana) if is_global(dst.buffer) else []
            return tirx.IfThenElse(and_all(conds), st, None) if conds else st

        return self.nest([dst.extents[d] for d in dd], body, s.span)

    # -- use_swizzle ---------------------------------------------------------------------------------------
    def _lower_use_swizzle(self, s: Any, args: list[Any]) -> Any:
        return tirx.Evaluate(tirx.IntImm("int32", 0), span=s.span)  # block order does not matter on a CPU

    # -- finalize_reducer ----------------------------------------------------------------------------------
    def _lower_finalize_reducer(self, s: Any, args: list[Any]) -> Any:
        # the CPU applies a reducer's updates in program order: it is whole already
        return tirx.Evaluate(tirx.IntImm("int32", 0), span=s.span)

    # -- print ---------------------------------------------------------------------------------------------
    def _lower_print(self, s: Any, args: list[Any]) -> Any:
        obj, msg = args[0], str(args[1].value)
        prefix = (msg + " ") if msg else ""
        if isinstance(obj, tvm.ir.TensorRegion):
            r = Region.of(obj)

            def body(co: list[Any]) -> Any:
                idx = [m + x for m, x in zip(r.mins, co)]
                fmt, v = _printf_arg(_load(r.buffer, idx))
                where = ", ".join(["%d"] * len(co))
                return tirx.Evaluate(tirx.call_extern("int32", "printf", tvm.ir.StringImm(
                    f"{prefix}{r.buffer.name}[{where}] = {fmt}\n"), *co, v))
            return self.nest(list(r.extents), body, s.span)
        fmt, v = _printf_arg(obj)
        return tirx.Evaluate(tirx.call_extern("int32", "printf", tvm.ir.StringImm(f"{prefix}{fmt}\n"), v), span=s.span)


def _ramp_last(idx: list[Any], lanes: int) -> list[Any]:
    """``idx`` with its last (contiguous) index widened to ``lanes`` consecutive elements."""
    return list(idx[:-1]) + [tirx.Ramp(idx[-1], 1, lanes)]


def _is_bf16(dtype: str) -> bool:
    return tvm.DataType(dtype).type_code == tvm.DataTypeCode.BFLOAT


def _stage_bf16_rows(loads: list[Any], L: int) -> tuple[list[Any], list[Any]]:
    """Widen L bf16 row loads into a float32 staging array; returns (loads of it, the staging statements).

    TVM's BF16ComputeLegalize replaces local bf16 buffers by float32 ones but leaves a load sitting in a
    ``Bind`` value pointing at the buffer it replaced (LLVM codegen then fails: "Load/Store of buffer ...
    occurred before its declaration", or Bind's ``value->ty == var->ty`` check when the row is bound as bf16).
    Staged through a BufferStore the loads are legalised; the float32 transpose is exact, and LLVM keeps the
    small staging array in registers.
    """
    stage, alloc = _alloc([L * L], "float32", "B_rows")
    lane = [tirx.Ramp(tirx.IntImm("int32", r * L), 1, L) for r in range(L)]
    stmts = [alloc] + [tirx.BufferStore(stage, tirx.Cast(f"float32x{L}", e), [lane[r]]) for r, e in enumerate(loads)]
    return [tirx.BufferLoad(stage, [lane[r]]) for r in range(L)], stmts


def _register_transpose(rows: list[Any], vdt: str) -> tuple[list[Any], list[Any]]:
    """Transpose L vectors of L lanes held in registers: returns (Bind statements, L column vectors).

    log2(L) rounds; round ``h`` swaps the off-diagonal h x h blocks of every 2h x 2h block with one two-source
    shuffle per vector (LLVM emits ``vpermt2ps``/``vunpck*``/``vshuf*``).
    """
    L = len(rows)
    stmts: list[Any] = []
    cur: list[Any] = []
    for r, e in enumerate(rows):
        v = tvm.ir.Var(f"row{r}", vdt)
        stmts.append(tirx.Bind(v, e))
        cur.append(v)
    half, rnd = L // 2, 0
    while half >= 1:
        nxt = list(cur)
        for i in range(L):
            if i & half:
                continue
            j = i + half
            lo = [tirx.IntImm("int32", x if x & half == 0 else L + x - half) for x in range(L)]
            hi = [tirx.IntImm("int32", x + half if x & half == 0 else L + x) for x in range(L)]
            for dst, ids in ((i, lo), (j, hi)):
                v = tvm.ir.Var(f"t{rnd}_{dst}", vdt)
                stmts.append(tirx.Bind(v, tirx.Shuffle([cur[i], cur[j]], ids)))
                nxt[dst] = v
        cur, half, rnd = nxt, half // 2, rnd + 1
    return stmts, cur


def _printf_arg(v: Any) -> tuple[str, Any]:
    dt = dtype_of(v) or "float64"
    if dt.startswith(("float", "bfloat")):
        return "%.6g", tirx.Cast("float64", v)
    if dt == "bool":
        return "%d", tirx.Cast("int32", v)
    return "%lld", tirx.Cast("int64", v)


def _refuse_thread_index(func: tirx.PrimFunc) -> None:
    """``T.get_thread_binding()`` has no meaning here: the CPU runs a block's code once, not once per thread."""
    from ...errors import TileLangCompileError
    from ...language.threads import thread_binding_dim
    from ..common.rewriter import location_of

    def uses(e: Any) -> bool:
        hit: list[Any] = []
        tvm_ffi.structural_map(e, [(tvm.ir.Call, lambda c: (hit.append(c) if thread_binding_dim(c) is not None
                                                            else None, c)[1])])
        return bool(hit)

    def own_exprs(st: Any) -> list[Any]:
        if isinstance(st, tirx.BufferStore):
            return [st.value, *st.indices]
        if isinstance(st, (tirx.IfThenElse, tirx.While)):
            return [st.condition]
        if isinstance(st, tirx.For):
            return [st.min, st.extent]
        if isinstance(st, (tirx.Bind, tirx.Evaluate)):
            return [st.value]
        return []

    found: list[Any] = []  # raised after the walk: an exception inside the callback would cross the FFI

    def check(st: Any) -> Any:
        if not found and any(uses(e) for e in own_exprs(st)):
            found.append(st.span)
        return st

    tvm_ffi.structural_map(func.body, [(t, check) for t in (tirx.BufferStore, tirx.IfThenElse, tirx.While,
                                                            tirx.For, tirx.Bind, tirx.Evaluate)])
    if found:
        raise TileLangCompileError(
            "T.get_thread_binding: per-thread code needs a thread index, and the CPU backend runs each block once as "
            "whole-tile code (not once per thread); write the block's work with T.Parallel / tile ops, or compile "
            "for CUDA (see docs/compat.md)", location_of(found[0]), stage="tl.LowerTileOpsCPU")


def _legalize_bool_compares(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``a != b`` / ``a == b`` on two bools (``mask[k] != 0`` on a bool fragment) compared as int8: TVM's LLVM
    codegen emitted an ``fcmp`` on ``i1`` for them (invalid IR, an internal error reaching the user)."""

    def as_int(node: Any) -> Any:
        a, b = node.a, node.b
        if dtype_of(a) != "bool" or dtype_of(b) != "bool":
            return node
        cls = tirx.NE if isinstance(node, tirx.NE) else tirx.EQ
        return cls(tirx.Cast("int8", a), tirx.Cast("int8", b))

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.NE, as_int), (tirx.EQ, as_int)]))


def lower_tile_ops_cpu(func: tirx.PrimFunc, vector_bytes: int = 32) -> tirx.PrimFunc:
    _refuse_thread_index(func)
    return LowerTileOpsCPU(vector_bytes).run(_legalize_bool_compares(func))


def _isnan(x: Any) -> Any:
    """``isnan`` for any float dtype (TVM has none for bfloat16: tested in float32, exact)."""
    return tirx.isnan(tirx.Cast("float32", x) if (dtype_of(x) or "").startswith("bfloat16") else x)

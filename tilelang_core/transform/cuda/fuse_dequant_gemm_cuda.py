"""Pass: fuse an int4 unpacking ``T.Parallel`` nest into the tensor-core ``T.gemm`` that consumes it (W4A16).

The classic dequantising GEMM stages its weights twice: the packed bytes are copied to shared memory, a
``T.Parallel`` nest unpacks them into an fp16 shared tile, and ``T.gemm`` reads that tile back::

    T.copy(B[bx * bn, k * bk // 2], B_packed)                 # uint8 (bn, bk/2): two int4 per byte
    for i, j in T.Parallel(bn, bk):
        B_shared[i, j] = T.cast(((B_packed[i, j // 2] >> 4 * (j % 2)) & 0xF) - z, "float16") * S(i, j)
    T.gemm(A_shared, B_shared, C_local, transpose_B=True)

Written out naively that is one shared-memory store and one ``ldmatrix`` read per weight, and a handful of
integer instructions per weight: at decode sizes (M <= 16) it runs well below fp16 cuBLAS, although it moves a
quarter of the bytes. This pass recognises the nest + gemm pair and replaces it with one call of
``tl::gemm_dq4`` (``include/tl/dequant.cuh``), which unpacks in registers: each lane loads 16 bytes (32 weights)
of its B row with one ``ld.shared.v4``, turns eight nibbles into four ``half2`` with the ``0x6400`` exponent trick
(``lop3``, then ``hsub2`` or — odd nibbles, no shift — ``hfma2`` by 1/16, then ``hmul2``: exact, and
bit-identical to the program's ``(q - z) * s`` in fp16), and feeds them straight to ``mma.sync`` as B fragments.
Because the order of a dot product's terms is free, the k indices of a fragment are permuted so that the nibbles a
lane needs sit in one 32-bit word; the A fragments are loaded with
the same permutation (16-byte ``ld.shared`` + ``prmt``). ``B_shared`` disappears (less shared memory, so deeper
pipelines fit). The scale expression ``S(i, j)`` is the program's own, evaluated in TIR for the rows this thread
holds (it must be constant over each lane's 32-wide k chunk: per-channel scales or groups that are multiples of 32).

**Weights straight from global memory.** At decode sizes (one warp row: ``warp_m == 1``, so no two warps need the
same weights) the packed shared tile is only a staging copy. When its one other use is the program's
``T.copy(B[...], B_packed)``, that copy and the tile go, and ``tl::gemm_dq4g`` loads each lane's 16-byte chunks
from global memory itself (``ld.global.nc``, zeros outside the tensor as the copy gave). When the k loop advances
the tile by a constant ``block_K / 2`` bytes, the weights go through a register ring (allocated before the loop):
the first tile's loads are issued before the loop — ahead of the A pipeline's prologue — and each iteration issues
the next tile's loads before it computes on the current one; scales that do not depend on the k loop are loaded
once, before it. Options (``pass_configs``): ``tl.cuda.dq4_direct=False`` keeps the shared-memory staging,
``tl.cuda.dq4_depth`` sets the tiles in flight (1).

**Per-channel scales scale the accumulators.** When the scale does not depend on k (one per output channel) and
the weights come straight from global memory, the mma consumes ``q - z`` (exact in fp16) and each call multiplies
its fp32 partial sums by the channel's scale once — four ``hmul2`` per 32-bit word fewer, 21.2–21.6 → 19.5–19.8 µs
at 16×8192×8192 (16×128×512 tiles) on the H200 (Marlin applies per-channel scales the same way). The result is
the exact product ``sum_k a_k (q_k - z) s`` rounded in fp32, where the program's order rounds every weight
``(q - z) s`` to fp16 first: the two differ by that rounding (~2^-12 relative per term), and the fused result is the
closer of the two to the exact answer. ``tl.cuda.dq4_late_scale=False`` keeps the program's per-weight
rounding (bit-identical weights). Decision and measurements: docs/design.md, docs/cuda.md.

**Split-K.** At decode sizes the grid is small (N / block_N blocks) and every block re-reads the whole A through L2
and shared memory, so wide N tiles are cheaper — but they leave SMs idle. When the fused loop is long and the grid
fills less than half the SMs (weights from global memory: less than two blocks per SM, since resident warps are
then the only loads in flight — and as long as the split grid still runs in one wave by the kernel's estimated
registers), the K loop is split over ``S`` blocks (``S`` = 2, 4 or 8, a new ``blockIdx.z``).
Each accumulates its share of K; ``tl::splitk_global_reduce`` stores the partials to a workspace in the kernel's
module, and the last block of each tile (a counter; one acquire-release atomic) adds them in rank order
(deterministic, fp32, one launch) and runs the program's own epilogue ``T.copy(C_local, C[...])``. (A "ticket"
variant — tickets taken as blocks start, partials stored with their launch's epoch in one 64-bit word so that the
last ticket holder needs no atomic after its loop — measured slower on the H200: docs/cuda.md.)
``tl.cuda.split_k_reduce='cluster'`` instead makes the ``S`` blocks one thread-block cluster
(``__cluster_dims__(1, 1, S)``, sm_90) reducing through distributed shared memory — measured slower on the H200,
where the cluster launch left SMs without blocks. ``tl.cuda.split_k`` = 1 turns splitting off, = S
forces a split.

Anything that does not match exactly — other dtypes, a nest that also writes elsewhere, a tile used by other
statements, shapes the template cannot tile — is left alone and compiles the generic way
(``tl.cuda.fuse_dequant=False`` turns the pass off, to measure what it buys).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import Region, dtype_of
from ...language.loops import PARALLEL_ATTR, STAGES_ATTR
from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.notes import add_notes, at_line
from ..common.regions import in_bounds_conds, is_global
from ..common.rewriter import Rewriter, and_all, const_int, new_var, tile_op_name
from .common import (
    ATTR_LAUNCH,
    calls_extern,
    count_uses,
    eviction_of,
    extern,
    extern_name,
    find_thread_var,
    gemm_operands,
    is_fragment,
    is_shared,
    is_whole_tile,
    launch_info,
    layouts_of,
    loads_in,
    locals_of,
    mentions,
    parallel_nest,
    substitute,
    swizzles_of,
    thread_count,
)

WORKSPACE_LIMIT = 64 << 20  # bytes of split-K partials a kernel may keep in global memory (else: a cluster)
ATTR_CLUSTER = "tl.cluster_dims"  # [x, y, z]: compile-time thread-block cluster shape (codegen adds __cluster_dims__)
CHUNK_K = 32  # weights per lane per 16-byte load
LANES_K = 4 * CHUNK_K  # k covered by the four lanes of a quad


def _strip_casts(e: Any) -> Any:
    """``e`` without the casts around it."""
    while isinstance(e, tirx.Cast):
        e = e.value
    return e


def _inline_scalars(body: Any) -> tuple[Any, Any] | None:
    """The single shared-tile store of a nest body, with one-element local scalars (``q = ...``) inlined.

    Returns ``(store, inlined value)`` or None when the body does anything else."""
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    scalars: dict[Any, Any] = {}
    out = None
    for s in stmts:
        if isinstance(s, tirx.AllocBuffer) and s.buffer.scope() in ("local", "local.var") and \
                [const_int(x) for x in s.buffer.shape] == [1]:
            continue
        if not isinstance(s, tirx.BufferStore) or out is not None:
            return None
        if s.buffer.scope() in ("local", "local.var") and [const_int(x) for x in s.buffer.shape] == [1]:
            scalars[s.buffer] = _subst_scalars(s.value, scalars)
            continue
        if not is_shared(s.buffer):
            return None
        out = (s, _subst_scalars(s.value, scalars))
    return out


def _subst_scalars(e: Any, scalars: dict[Any, Any]) -> Any:
    """Replace loads of the one-element scalars in ``scalars`` by their values."""
    if not scalars:
        return e

    def load(ld: Any) -> Any:
        return scalars.get(ld.source, ld)

    return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])


def looks_like_dequant(loop: Any) -> bool:
    """``loop`` unpacks an 8-bit integer tensor (a shift or mask applied to a uint8/int8 load): worth a note when
    it does not fuse with the gemm after it."""
    hit: list[Any] = []

    def op(e: Any) -> Any:
        if any(str(ld.source.dtype) in ("uint8", "int8") for ld in loads_in(e)):
            hit.append(e)
        return e

    tvm_ffi.structural_map(loop.body, [(tirx.BitwiseAnd, op), (tirx.RShift, op)])
    return bool(hit)


class FuseDequantGemmCUDA(Rewriter):
    """Replace each (unpack nest, T.gemm) pair of a statement sequence by the register-unpacking gemm."""

    pass_name = "tl.FuseDequantGemmCUDA"

    def __init__(self, func: tirx.PrimFunc, options: PassConfig = DEFAULT) -> None:
        super().__init__()
        self.options = options
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.swizzle = swizzles_of(func)
        self.uses = count_uses(func.body)
        self.tid = find_thread_var(func)
        self.removed: list[Any] = []
        self.fused_accumulators: list[Any] = []
        self.direct = False  # some fused gemm reads its weights straight from global memory
        self.loop_pre: dict[Any, list[Any]] = {}  # loop -> statements to place just before it (registers, scales)
        self.prefetch_vars: list[Any] = []  # the first k of each loop whose first weight tiles load before it
        self.est_regs = 0  # registers per thread the direct kernel is expected to need (for the split-K choice)
        self.reason: str | None = None  # why the last candidate pair did not fuse (see try_fuse)
        self.notes: list[str] = []  # fusions declined for dequant-looking pairs (tl.notes)

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        out = super().visit_For(s)
        pre = self.loop_pre.pop(s, None)
        if not pre:
            return out
        return tirx.SeqStmt(pre + [out])

    def visit_SeqStmt(self, s: Any) -> Any:  # noqa: N802
        s = super().visit_SeqStmt(s)
        if not isinstance(s, tirx.SeqStmt):
            return s
        stmts = list(s.seq)
        out: list[Any] = []
        i = 0
        while i < len(stmts):
            if i + 1 < len(stmts):
                fused = self.try_fuse(stmts[i], stmts[i + 1], stmts[:i])
                if fused is not None:
                    stmt, drop = fused
                    if drop is not None:  # the weights' copy to shared memory: the fused gemm reads global memory
                        out = [x for x in out if not x.same_as(drop)]
                    out.append(stmt)
                    i += 2
                    continue
            out.append(stmts[i])
            i += 1
        return tirx.SeqStmt(out, span=s.span) if len(out) > 1 else out[0]

    # -- matching ------------------------------------------------------------------------------------------
    def _no(self, why: str) -> None:
        """Record why the candidate pair does not fuse; returns None (``return self._no(...)``)."""
        self.reason = why
        return None

    def try_fuse(self, nest: Any, gemm: Any, before: list[Any]) -> tuple[Any, Any] | None:
        """``(fused statement, statement to drop or None)`` for ``nest`` followed by ``gemm`` (``before``: the
        statements ahead of them in the same sequence), or None when they do not match — then, when the pair
        looks like a dequantisation feeding the gemm (a loop unpacking an 8-bit tensor with shifts or masks), a
        note says which condition failed."""
        if not (isinstance(nest, tirx.For) and isinstance(gemm, tirx.Evaluate) and tile_op_name(gemm) == "tl.gemm"):
            return None
        self.reason = None
        out = self._match(nest, gemm, before)
        if out is None and self.reason is not None and looks_like_dequant(nest):
            ops = gemm_operands(gemm, self.ana)
            head = f"{at_line(gemm)}T.gemm {ops['M']}x{ops['N']}x{ops['K']} is not fused with the dequantisation"
            if self.options[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS]:  # the general fusion comes next, with its notes
                self.notes.append(f"{head} by the W4A16 recogniser ({self.reason}); the general producer fusion "
                                  "(tl.cuda.dequant_fragments) is tried next")
            else:
                self.notes.append(f"{head} before it ({ops['b'].buffer.name} stays an fp16 tile in shared memory): "
                                  f"{self.reason}")
        return out

    def _match(self, nest: Any, gemm: Any, before: list[Any]) -> tuple[Any, Any] | None:
        """The matching behind :meth:`try_fuse`; each refusal goes through :meth:`_no`."""
        if PARALLEL_ATTR not in nest.annotations:
            return self._no("the unpacking loop is not a T.Parallel nest")
        vs, exts, body = parallel_nest(nest, PARALLEL_ATTR)
        if len(vs) != 2:
            return self._no(f"the unpacking T.Parallel nest has {len(vs)} loop variables, not 2 (rows, k)")
        exts_c = [const_int(e) for e in exts]
        for v, e in zip(vs, exts):
            self.bind_loop(v, tirx.IntImm("int32", 0), e)
        got = _inline_scalars(body)
        if got is None:
            return self._no("the unpacking nest does more than store one shared-memory tile (one-element "
                            "local scalars aside)")
        store, value = got
        W = store.buffer
        if not (len(store.indices) == 2 and store.indices[0].same_as(vs[0]) and store.indices[1].same_as(vs[1])):
            return self._no(f"the nest does not store {W.name}[i, j] at its own loop variables")
        if [const_int(x) for x in W.shape] != exts_c:
            return self._no(f"the nest does not cover the whole tile {W.name}")
        if str(W.dtype) != "float16":
            return self._no(f"{W.name} is {W.dtype}; the fused gemm unpacks to float16")
        if self.uses.get(W, 0) != 2:
            return self._no(f"{W.name} is used by statements besides the unpacking nest and this T.gemm")
        ops = gemm_operands(gemm, self.ana)
        a, b, c = ops["a"], ops["b"], ops["c"]
        if not b.buffer.same_as(W):
            return self._no(f"the T.gemm's B operand is {b.buffer.name}, not the unpacked tile {W.name}")
        if not ops["tb"] or ops["ta"]:
            return self._no("the fused gemm needs transpose_B=True and transpose_A=False (weights as (N, K) rows)")
        if not is_whole_tile(b):
            return self._no(f"the T.gemm reads part of {W.name}, not the whole tile")
        if not (is_shared(a.buffer) and is_whole_tile(a) and len(a.buffer.shape) == 2 and str(a.buffer.dtype) ==
                "float16"):
            return self._no("A is not a whole 2-D float16 shared-memory tile")
        lay = self.layouts.get(c.buffer) if is_fragment(c.buffer) else None
        if lay is None or lay.kind != "mma":
            return self._no(f"the accumulator {c.buffer.name} does not have the mma.sync layout "
                            f"({'not a fragment' if lay is None else lay.kind})")
        if str(c.buffer.dtype) != "float32":
            return self._no(f"the accumulator is {c.buffer.dtype}; the fused gemm accumulates in float32")
        if ops["clear"]:
            return self._no("clear_accum=True")
        N, K = ops["N"], ops["K"]
        if [N, K] != exts_c:
            return self._no(f"the nest's extents {exts_c} are not the gemm's (N, K) = ({N}, {K})")
        if K % LANES_K:
            return self._no(f"block K = {K} is not a multiple of {LANES_K}")
        if (N // lay.warp_n) % 8:
            return self._no(f"each warp's share of N ({N} // {lay.warp_n} warps) is not a multiple of 8")
        pat = self.match_value(value, vs[0], vs[1], N, K)
        if pat is None:
            return None
        P, zp, scale = pat
        return self.emit(gemm, ops, lay, P, zp, scale, vs, before)

    def match_value(self, value: Any, i: Any, j: Any, N: int, K: int) -> tuple[Any, int, Any] | None:
        """``cast(q - z) * S`` with ``q`` the nibble ``(P[i, j // 2] >> 4 * (j % 2)) & 15``: (P, z, S or None)."""
        if dtype_of(value) != "float16":
            return self._no(f"the unpacked value is {dtype_of(value)}, not float16")
        found: list[Any] = []

        def nib(e: Any) -> Any:
            if isinstance(e, tirx.BitwiseAnd) and const_int(e.b) == 15 and isinstance(e.a, tirx.RShift):
                found.append(e)
            return e

        tvm_ffi.structural_map(value, [(tirx.BitwiseAnd, nib)])
        if len(found) != 1:
            return self._no("the value is not one int4 nibble (P[i, j // 2] >> 4 * (j % 2)) & 0xF "
                            f"({len(found)} shift-and-mask terms found)")
        e = found[0]
        ld = _strip_casts(e.a.a)
        if not isinstance(ld, tvm.ir.TensorLoad):
            return self._no("the nibble is not shifted out of a tensor load")
        P = ld.source
        if not (is_shared(P) and str(P.dtype) == "uint8" and [const_int(x) for x in P.shape] == [N, K // 2]):
            return self._no(f"the packed weights {P.name} are not a uint8 shared tile of shape ({N}, {K // 2}) "
                            "(two int4 per byte along k)")
        pi, pj = list(ld.indices)
        shift = e.a.b
        m = new_var("m")
        self.bind_loop(m, tirx.IntImm("int32", 0), tirx.IntImm("int32", K // 2))
        if not self.prove(tirx.EQ(pi, i)):
            return self._no(f"the packed tile is not read at row i ({P.name}[i, ...])")
        for r in (0, 1):
            sub = {j: m * 2 + r}
            if not (self.prove(tirx.EQ(substitute(pj, sub), m)) and
                    self.prove(tirx.EQ(substitute(shift, sub), 4 * r))):
                return self._no(f"the nibble is not {P.name}[i, j // 2] >> 4 * (j % 2) (even k in the low "
                                "nibble, odd k in the high one)")
        qv = new_var("qv")
        rest = tvm_ffi.structural_map(value, [(tirx.BitwiseAnd, lambda x: qv if x.same_as(e) else x)])

        def q_side(x: Any) -> int | None:
            """z when ``x`` is ``cast(q - z)`` (casts anywhere), else None."""
            x = _strip_casts(x)
            if isinstance(x, tvm.ir.Var) and x.same_as(qv):
                return 0
            if isinstance(x, tirx.Sub) and isinstance(_strip_casts(x.a), tvm.ir.Var) and _strip_casts(x.a).same_as(qv):
                zc = _strip_casts(x.b)
                if isinstance(zc, tirx.IntImm) or (isinstance(zc, tirx.FloatImm) and float(zc.value).is_integer()):
                    return int(zc.value)
            return None

        def mentions_q(x: Any) -> bool:
            hit = []
            tvm_ffi.structural_map(x, [(tvm.ir.Var, lambda v: (hit.append(v), v)[1] if v.same_as(qv) else v)])
            return bool(hit)

        z = q_side(rest)
        scale = None
        if z is None:
            if not isinstance(rest, tirx.Mul):
                return self._no("the value is not cast(q - zero) * scale")
            for qs, ss in ((rest.a, rest.b), (rest.b, rest.a)):
                z = q_side(qs)
                if z is not None and not mentions_q(ss):
                    scale = ss
                    break
            else:
                return self._no("the value is not cast(q - zero) * scale with an integer zero point")
            if dtype_of(scale) != "float16" or dtype_of(qs) != "float16":
                return self._no("the scale or the dequantised nibble is not float16")
            if any(not is_global(ld.source) for ld in loads_in(scale)):
                return self._no("the scale reads a tile that is not in global memory")
        if z is None or not -512 <= z < 1024:
            return self._no(f"the zero point {z} is outside [-512, 1024)")
        return P, z, scale

    def scale_varies(self, scale: Any, i: Any, j: Any, K: int) -> bool | None:
        """False: S does not depend on j; True: it is constant over each lane's 32-wide chunk; None: neither."""
        jr = new_var("jr")
        self.bind_loop(jr, tirx.IntImm("int32", 0), tirx.IntImm("int32", K))
        if not mentions(self.ana.simplify(substitute(scale, {j: jr})), jr):
            return False
        self.bind_loop(jr, tirx.IntImm("int32", 0), tirx.IntImm("int32", CHUNK_K))
        for c0 in range(0, K, CHUNK_K):
            if mentions(self.ana.simplify(substitute(scale, {j: c0 + jr})), jr):
                return None
        return True

    # -- emission ------------------------------------------------------------------------------------------
    def direct_source(self, P: Any, before: list[Any], K: int) -> tuple[Region, Any, int] | None:
        """The global region, copy statement and register double-buffer distance (bytes the k loop advances per
        iteration, 0 = no double buffer) when the packed tile ``P`` is only a staging copy of global memory that
        the fused gemm can read directly (see the module doc)."""
        if not self.options[PassConfigKey.TL_CUDA_DQ4_DIRECT] or self.uses.get(P, 0) != 2:
            return None
        copy = None
        for st in reversed(before):
            if isinstance(st, tirx.Evaluate) and tile_op_name(st) == "tl.copy":
                dst = st.value.args[1]
                if isinstance(dst, tvm.ir.TensorRegion) and dst.source.same_as(P):
                    copy = st
                    break
        if copy is None or not isinstance(copy.value.args[0], tvm.ir.TensorRegion):
            return None
        src, dst = Region.of(copy.value.args[0]), Region.of(copy.value.args[1])
        shape = [const_int(x) for x in P.shape]
        if not (is_global(src.buffer) and str(src.buffer.dtype) == "uint8" and len(src.mins) == 2):
            return None
        if [const_int(x) for x in dst.mins] != [0, 0] or [const_int(x) for x in dst.extents] != shape or \
                [const_int(x) for x in src.extents] != shape:
            return None
        row_bytes = const_int(src.buffer.shape[1])
        if row_bytes is None or row_bytes % 16 or not self.prove(tirx.EQ(tirx.floormod(src.mins[1], 16), 0)):
            return None
        nxt = 0
        loop = self.loop_stack[-1] if self.loop_stack else None
        if loop is not None and STAGES_ATTR in loop.annotations:
            k = loop.loop_var
            step = const_int(self.ana.simplify(substitute(src.mins[1], {k: k + 1}) - src.mins[1]))
            nxt = K // 2 if step == K // 2 else 0
        return src, copy, nxt

    def emit(self, gemm: Any, ops: dict[str, Any], lay: Any, P: Any, zp: int, scale: Any, vs: list[Any],
             before: list[Any]) -> tuple[Any, Any] | None:
        """This thread's scales (TIR, from the program's expression) and the ``tl::gemm_dq4`` (weights from shared
        memory) or ``tl::gemm_dq4g`` (weights from global memory) call, and the statement that call replaces."""
        a, c = ops["a"], ops["c"]
        M, N, K = ops["M"], ops["N"], ops["K"]
        wn = lay.warp_n
        NT = N // wn // 8
        i, j = vs
        if scale is None:
            scale = tirx.const(1.0, "float16")
        varies = self.scale_varies(scale, i, j, K)
        if varies is None:
            return self._no(f"the scale changes within a lane's {CHUNK_K}-wide k chunk (per-channel scales or "
                            f"groups that are multiples of {CHUNK_K} fuse)")
        NC = K // LANES_K if varies else 1
        swa = self.swizzle.get(a.buffer, 0)
        direct = self.direct_source(P, before, K) if lay.warp_m == 1 and swa in (0, (2 * K).bit_length() - 1) \
            else None
        # per-channel scales on the direct path multiply the accumulators once per call (NC = 0) instead of every
        # weight: the exact product (q - z) * s, where the program rounds each weight to fp16 first (see the
        # module doc; pass_configs tl.cuda.dq4_late_scale=False keeps the program's rounding)
        # (scales that change along k are applied per weight: scaling each 128-wide chunk's sum instead measured
        # no faster for groups of 128 on the H200 — docs/cuda.md)
        late = direct is not None and not varies and self.options[PassConfigKey.TL_CUDA_DQ4_LATE_SCALE]
        sc, stmts, after = self.scale_loads(scale, i, j, wn, N // wn, NT, NC, late,
                                            direct is not None and direct[2] > 0)
        n_scales = NT * (2 if late else NC) * (2 if varies and direct is not None and direct[2] > 0 else 1)
        if late:
            NC = 0
        magic = int(np.float16(1024 + zp).view(np.uint16))  # the even nibbles' 1024 + q, minus 1024 + z
        magic_hi = int(np.float16(-(64 + zp)).view(np.uint16))  # the odd nibbles' (1024 + 16 q) / 16, minus 64 + z
        # independent accumulator sets: at least 4 mma.sync chains per warp (decode tiles have 1 or 2 accumulators)
        chains = (M // lay.warp_m // 16) * NT
        sets = max(1, min(4, 4 // chains))
        zero = tirx.IntImm("int32", 0)
        a_ptr = tirx.address_of(tirx.BufferLoad(a.buffer, list(a.mins)))
        sc_ptr = tirx.address_of(tirx.BufferLoad(sc, [zero]))
        c_ptr = tirx.address_of(tirx.BufferLoad(self.locals[c.buffer], [zero]))
        drop = None
        if direct is not None:
            src, drop, nxt = direct
            row_bytes = const_int(src.buffer.shape[1])
            rows_left = self.ana.simplify(src.buffer.shape[0] - src.mins[0])
            cols_left = self.ana.simplify(src.buffer.shape[1] - src.mins[1])
            depth = int(self.options[PassConfigKey.TL_CUDA_DQ4_DEPTH]) if nxt else 1
            # the weights' L2 priority: the copy's eviction_policy when it gives one, else evict-first (read once)
            policy = eviction_of(drop)
            evict = "" if policy in (None, 1) else f", {policy}"
            name = (f"tl::gemm_dq4g<{M}, {N}, {K}, {wn}, {swa}, {magic}, {magic_hi}, {NC}, {sets}, "
                    f"{row_bytes}, {nxt}, {depth}{evict}>")
            if nxt:
                # the register ring (depth + 1 tiles); the first `depth` tiles load before the loop (so before the A
                # pipeline's prologue), from the loop's first k — a variable split_k_cluster can rebind
                loop = self.loop_stack[-1]
                k = loop.loop_var
                wbuf = tirx.decl_buffer((4 * NT * (K // LANES_K) * (depth + 1),), "uint32", "dq_wbuf",
                                        scope="local")
                wbuf_ptr = tirx.address_of(tirx.BufferLoad(wbuf, [zero]))
                k0 = new_var("dq_k0")
                at0 = {k: k0}
                self.loop_pre.setdefault(loop, []).extend([
                    tirx.AllocBuffer(wbuf), tirx.LetStmt(k0, loop.min),
                    extern(f"tl::gemm_dq4g_prefetch<{N}, {K}, {wn}, {row_bytes}, {nxt}, {depth}{evict}>",
                           tirx.address_of(tirx.BufferLoad(src.buffer, [substitute(m, at0) for m in src.mins])),
                           self.ana.simplify(substitute(rows_left, at0)), self.ana.simplify(substitute(cols_left, at0)),
                           wbuf_ptr, loop.extent)])
                self.prefetch_vars.append(k0)
                tail = [wbuf_ptr, self.ana.simplify(k - loop.min), self.ana.simplify(loop.min + loop.extent - 1 - k)]
            else:
                tail = [tirx.reinterpret("handle", tirx.IntImm("uint64", 0)), zero, zero]
            stmts.append(extern(name, a_ptr, tirx.address_of(tirx.BufferLoad(src.buffer, list(src.mins))),
                                rows_left, cols_left, sc_ptr, c_ptr, *tail))
            self.removed.append(P)
            self.direct = True
            self.est_regs = max(self.est_regs, estimated_registers(M, NT, K, depth if nxt else 0, sets, late,
                                                                   n_scales))
        else:
            name = f"tl::gemm_dq4<{M}, {N}, {K}, {lay.warp_m}, {wn}, {swa}, {magic}, {magic_hi}, {NC}, {sets}>"
            stmts.append(extern(name, a_ptr, tirx.address_of(tirx.BufferLoad(P, [zero, zero])), sc_ptr, c_ptr))
        self.removed.append(ops["b"].buffer)
        self.fused_accumulators.append(c.buffer)
        stmts += after
        return (tirx.SeqStmt(stmts, span=gemm.span) if len(stmts) > 1 else stmts[0]), drop

    def scale_loads(self, scale: Any, i: Any, j: Any, wn: int, WN: int, NT: int, NC: int, late: bool,
                    ring: bool) -> tuple[Any, list[Any], list[Any]]:
        """This thread's scales: the buffer, the statements before the fused call and those after it (statements
        that belong before the k loop go to ``loop_pre``). Rows are the thread's B columns ``ni * 8 + lane / 4``
        (``late``: its accumulator columns ``ni * 8 + 2 (lane % 4) + 0, 1``) of warp column ``warp % wn`` (``WN``
        columns each), one scale per 128-wide k chunk when
        ``NC`` > 1. Scales that do not change with the k loop (per-channel) are loaded once, before it; scales that
        do (groups) are software-pipelined when the weights stream through the register ring: iteration k loads
        k + 1's into ``dq_scale_next`` before its call and moves them into ``dq_scale`` after it, so their latency
        hides behind a whole tile's work."""
        lane = tirx.floormod(self.tid, 32)
        wc = tirx.floormod(tirx.floordiv(self.tid, 32), wn)
        per_row = 2 if late else NC
        sc = tirx.decl_buffer((NT * per_row,), "float16", "dq_scale", scope="local")
        vals: list[Any] = []
        for ni in range(NT):
            for n in range(per_row):
                if late:  # sc[ni * 2 + c]: accumulator column 2 q + c of atom ni
                    row = wc * WN + ni * 8 + tirx.floormod(lane, 4) * 2 + n
                    col = tirx.IntImm("int32", 0)
                else:
                    row = wc * WN + ni * 8 + tirx.floordiv(lane, 4)
                    col = n * LANES_K + tirx.floormod(lane, 4) * CHUNK_K
                vals.append(self.ana.simplify(substitute(scale, {i: row, j: col})))

        def stores(buf: Any, sub: dict[Any, Any] | None = None) -> list[Any]:
            return [tirx.BufferStore(buf, self.guard_loads(self.ana.simplify(substitute(v, sub)) if sub else v),
                                     [tirx.IntImm("int32", n)]) for n, v in enumerate(vals)]

        loop = self.loop_stack[-1] if self.loop_stack else None
        if loop is None or STAGES_ATTR not in loop.annotations:
            return sc, [tirx.AllocBuffer(sc)] + stores(sc), []
        k = loop.loop_var
        if not any(mentions(v, k) for v in vals):
            self.loop_pre.setdefault(loop, []).extend([tirx.AllocBuffer(sc)] + stores(sc))
            return sc, [], []
        if not ring:
            return sc, [tirx.AllocBuffer(sc)] + stores(sc), []
        ks0 = new_var("dq_ks0")  # the loop's first k (split_k_cluster rebinds it to the block's share)
        nxt = tirx.decl_buffer(sc.shape, "float16", "dq_scale_next", scope="local")
        self.loop_pre.setdefault(loop, []).extend(
            [tirx.AllocBuffer(sc), tirx.AllocBuffer(nxt), tirx.LetStmt(ks0, loop.min)] + stores(sc, {k: ks0}))
        self.prefetch_vars.append(ks0)
        moves = [tirx.BufferStore(sc, tirx.BufferLoad(nxt, [tirx.IntImm("int32", n)]), [tirx.IntImm("int32", n)])
                 for n in range(len(vals))]
        return sc, stores(nxt, {k: k + 1}), moves

    def guard_loads(self, e: Any) -> Any:
        """Bounds-guard the global loads of ``e`` (0 outside the tensor), as the nest would have been."""
        def fix(ld: Any) -> Any:
            if not is_global(ld.source):
                return ld
            conds = in_bounds_conds(ld.source, list(ld.indices), self.ana)
            return tirx.if_then_else(and_all(conds), ld, tirx.const(0, dtype_of(ld))) if conds else ld

        return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, fix)])


def fuse_dequant_gemm_cuda(func: tirx.PrimFunc, arch: str = "sm_90", options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    """Run the pass (see the module doc); fused W tiles lose their allocation, then maybe split K. Options:
    ``tl.cuda.fuse_dequant``, ``dq4_direct``, ``dq4_late_scale``, ``dq4_depth``, ``split_k``, ``split_k_reduce``."""
    if not options[PassConfigKey.TL_CUDA_FUSE_DEQUANT]:
        return func
    pass_ = FuseDequantGemmCUDA(func, options)
    out = add_notes(pass_.run(func), pass_.notes)
    if not pass_.removed:
        return out
    gone = pass_.removed

    def drop(s: Any) -> Any:
        if any(s.buffer.same_as(g) for g in gone):
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return s

    out = out.with_body(tvm_ffi.structural_map(out.body, [(tirx.AllocBuffer, drop)]))
    return split_k_cluster(out, arch, pass_.fused_accumulators, pass_.direct, pass_.prefetch_vars, pass_.est_regs,
                           options)


NUM_SMS = {"sm_90": 132, "sm_90a": 132}  # the H100/H200 SXM count; clusters need sm_90
REGISTERS_PER_SM = 65536
REG_BASE = 56  # addresses, loop state, A fragments: calibrated on ptxas's counts for 16 x {32..256} x {128..1024}


def estimated_registers(M: int, NT: int, K: int, depth: int, sets: int, late: bool, n_scales: int) -> int:
    """Registers per thread of a direct ``tl::gemm_dq4g`` kernel, before ptxas: the weight ring (``depth + 1``
    tiles of ``4 NT K/128`` words; one tile when ``depth`` is 0), the accumulator sets (plus the per-call sum when
    scales are late), the scales (halves, two to a register). Within ~10 % of ptxas on the H200 configs."""
    ring = 4 * NT * (K // LANES_K) * (depth + 1)
    accs = (M // 16) * NT * 4 * (sets + (1 if late else 0))
    return min(255, ring + accs + (n_scales + 1) // 2 + REG_BASE)


def _split_factor(blocks: int, n: int, stages: int, arch: str, direct: bool = False, regs: int = 0,
                  threads: int = 128, forced: int = 0) -> int:
    """Blocks per cluster. Weights through shared memory: double while the grid stays under half the SMs and each
    share keeps >= 2x stages (at least 4) k-tiles. Weights from global memory (``direct``): the loads in flight
    come from resident warps alone, so double while the grid is under two blocks per SM, each share keeps at
    least ``max(2, stages)`` k-tiles and — when the kernel's registers per thread are known (``regs``, estimated)
    — the doubled grid still runs in one wave (16×128×256 at ~150 registers fits three blocks per SM: split 8
    would make two waves, 27 µs instead of 21.6 on the H200). ``forced`` (pass_configs ``tl.cuda.split_k``)
    forces a value (1 = off)."""
    sms = NUM_SMS.get(arch)
    if sms is None:
        return 1
    if forced:
        ok = forced in (1, 2, 4, 8) and n % forced == 0 and n // forced >= stages
        return forced if ok else 1
    s = 1
    if direct:
        per_thread = -(-max(regs, 1) // 8) * 8  # allocated in steps of 8 per thread
        per_sm = max(1, REGISTERS_PER_SM // (per_thread * threads)) if regs else 1 << 30
        while (s < 8 and blocks * s < 2 * sms and n % (s * 2) == 0 and n // (s * 2) >= max(2, stages)
               and blocks * s * 2 <= sms * per_sm):
            s *= 2
        return s
    while (s < 8 and blocks * s * 2 <= sms and n % (s * 2) == 0 and n // (s * 2) >= max(4, 2 * stages)):
        s *= 2
    return s


def split_k_cluster(func: tirx.PrimFunc, arch: str, accs: list[Any], direct: bool = False,
                    prefetch_vars: list[Any] | None = None, est_regs: int = 0,
                    options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    """Split the fused K loop over a cluster of blocks when the grid leaves most SMs idle (see the module doc).
    When a split was forced (``tl.cuda.split_k`` > 1) or the grid fills less than half the SMs but the kernel's
    shape rules splitting out, a note (``tl.notes``) says why."""
    grid, threads = launch_info(func)
    forced = int(options[PassConfigKey.TL_CUDA_SPLIT_K])
    sms = NUM_SMS.get(arch)
    small = all(isinstance(g, int) for g in grid) and sms is not None and grid[0] * grid[1] * 2 <= sms

    def skip(why: str, at: Any = None) -> tirx.PrimFunc:
        if forced > 1 or (small and forced != 1):
            return add_notes(func, [f"{at_line(at) if at is not None else ''}split-K not applied to the fused "
                                    f"dequant GEMM: {why}"])
        return func

    if not all(isinstance(g, int) for g in grid) or grid[2] != 1:  # not for a symbolic grid
        return skip("the grid is symbolic or already uses blockIdx.z")
    if len(accs) != 1:
        return skip(f"the kernel has {len(accs)} fused gemms (split-K handles one)")
    acc = accs[0]
    tloops: list[Any] = []
    tvm_ffi.structural_map(func.body, [(tirx.For, lambda f: (tloops.append(f), f)[1] if f.thread_binding is not None
                                        and str(f.thread_binding.thread_tag) == "threadIdx.x" else f)])
    if len(tloops) != 1:
        return skip("the kernel does not have exactly one threadIdx.x loop")
    tloop = tloops[0]
    stmts = list(tloop.body.seq) if isinstance(tloop.body, tirx.SeqStmt) else [tloop.body]
    idx = None
    for i, st in enumerate(stmts):
        if isinstance(st, tirx.For) and STAGES_ATTR in st.annotations and calls_extern(st, "tl::gemm_dq4"):
            idx = i
    if idx is None:
        return skip("the fused gemm is not in a T.Pipelined loop at the kernel's top level")
    loop = stmts[idx]
    epilogue = "the loop is not followed directly by T.copy(accumulator, a global tensor) (the epilogue the " \
        "last block of a tile runs)"
    if idx + 1 >= len(stmts):
        return skip(epilogue, loop)
    epi = stmts[idx + 1]
    if not (isinstance(epi, tirx.Evaluate) and tile_op_name(epi) == "tl.copy"):
        return skip(epilogue, loop)
    args = list(epi.value.args)
    if not (isinstance(args[0], tvm.ir.TensorRegion) and isinstance(args[1], tvm.ir.TensorRegion)
            and args[0].source.same_as(acc) and is_global(args[1].source)):
        return skip(epilogue, loop)
    if any(_touches(x, acc) for x in stmts[idx + 2:]):
        return skip("statements after the epilogue touch the accumulator", loop)
    n = const_int(loop.extent)
    stages = int(loop.annotations[STAGES_ATTR])
    if n is None:
        return skip("the k loop's trip count is not a constant", loop)
    S = _split_factor(grid[0] * grid[1], n, stages, arch, direct, est_regs, thread_count(func), forced)
    if S == 1:
        if forced > 1:
            return skip(f"pass_configs 'tl.cuda.split_k'={forced} needs a k loop whose {n} iterations divide "
                        f"by {forced} with at least num_stages={stages} per share", loop)
        return func
    bz = tvm.ir.Var("bz_split", "int32")
    chunk = n // S
    lo = loop.min + bz * chunk
    new_loop = tirx.For(loop.loop_var, lo, tirx.IntImm("int32", chunk), loop.kind,
                        _rebound_dq4g(loop.body, loop.loop_var, lo, lo + chunk), loop.thread_binding,
                        loop.annotations, loop.step, loop.span)
    layouts, locs = layouts_of(func), locals_of(func)
    regs = layouts[acc].num_regs
    loc = locs[acc]
    zero = tirx.IntImm("int32", 0)
    acc_ptr = tirx.address_of(tirx.BufferLoad(loc, [zero]))
    tiles = grid[0] * grid[1]
    use_cluster = options[PassConfigKey.TL_CUDA_SPLIT_K_REDUCE] == "cluster" or \
        S * tiles * regs * threads * 4 > WORKSPACE_LIMIT
    if use_cluster:
        scratch = tirx.decl_buffer((regs * thread_count(func),), "float32", "splitk_smem", scope="shared")
        reduce = extern(f"tl::cluster_splitk_reduce<{regs}, {S}, {threads}>", acc_ptr,
                        tirx.address_of(tirx.BufferLoad(scratch, [zero])))
        new_epi = tirx.SeqStmt([tirx.AllocBuffer(scratch), reduce, tirx.IfThenElse(tirx.EQ(bz, 0), epi, None)])
    else:  # partials through a workspace in global memory; the last block of the tile runs the epilogue
        last = tirx.call_extern("bool", f"tl::splitk_global_reduce<{regs}, {S}, {threads}, {tiles}>", acc_ptr)
        new_epi = tirx.IfThenElse(last, epi, None)
    stmts[idx], stmts[idx + 1] = new_loop, new_epi
    body = _rebound_prefetch(tirx.SeqStmt(stmts), prefetch_vars or [], lo, chunk)
    new_t = tirx.For(tloop.loop_var, tloop.min, tloop.extent, tloop.kind, body, tloop.thread_binding,
                     tloop.annotations, tloop.step, tloop.span)
    iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, S), bz, tirx.IterVar.ThreadIndex, "blockIdx.z")
    zloop = tirx.For(bz, zero, tirx.IntImm("int32", S), tirx.ForKind.THREAD_BINDING, new_t, iv, None, None, None)

    def swap(f: Any) -> Any:
        return zloop if f.same_as(tloop) else f

    out = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, swap)]))
    out = out.with_attr(ATTR_LAUNCH, {"grid": [grid[0], grid[1], S], "threads": threads})
    return out.with_attr(ATTR_CLUSTER, [1, 1, S]) if use_cluster else out


def _rebound_dq4g(body: Any, k: Any, lo: Any, hi: Any) -> Any:
    """``body`` with the (it, more) arguments of its ``tl::gemm_dq4g`` calls (the last two: the iteration from the
    loop's start, the iterations after this one) recomputed for the loop bounds ``[lo, hi)`` of k (the register
    ring must follow the split loop; ``_rebound_prefetch`` moves the loads hoisted before it)."""
    def fix(c: Any) -> Any:
        if not (extern_name(c) or "").startswith("tl::gemm_dq4g<"):
            return c
        args = list(c.args)
        args[-2], args[-1] = k - lo, hi - 1 - k
        return tirx.call_extern(dtype_of(c) or "int32", *args)

    return tvm_ffi.structural_map(body, [(tvm.ir.Call, fix)])


def _rebound_prefetch(body: Any, k0s: list[Any], lo: Any, n: Any) -> Any:
    """``body`` with the loads hoisted before a split loop (``tl::gemm_dq4g_prefetch``) starting at the block's
    own share: its first-k variable rebound to ``lo``, its tile count set to the share's ``n`` iterations."""
    def let(st: Any) -> Any:
        return tirx.LetStmt(st.var, lo) if any(st.var.same_as(v) for v in k0s) else st

    def call(c: Any) -> Any:
        if (extern_name(c) or "").startswith("tl::gemm_dq4g_prefetch<"):
            return tirx.call_extern(dtype_of(c) or "int32", *list(c.args)[:-1], tirx.IntImm("int32", int(n)))
        return c

    return tvm_ffi.structural_map(body, [(tirx.LetStmt, let), (tvm.ir.Call, call)])


def _touches(node: Any, buf: Any) -> bool:
    """``node`` reads or writes ``buf`` (tile-op regions, loads, stores)."""
    hit: list[Any] = []

    def region(r: Any) -> Any:
        if r.source.same_as(buf):
            hit.append(r)
        return r

    def load(ld: Any) -> Any:
        if ld.source.same_as(buf):
            hit.append(ld)
        return ld

    def store(st: Any) -> Any:
        if st.buffer.same_as(buf):
            hit.append(st)
        return st

    tvm_ffi.structural_map(node, [(tvm.ir.TensorRegion, region), (tvm.ir.TensorLoad, load),
                                  (tirx.BufferStore, store)])
    return bool(hit)


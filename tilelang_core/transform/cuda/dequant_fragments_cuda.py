"""Pass: B fragments of a mma.sync ``T.gemm`` computed in registers from the tiles its ``T.Parallel`` producer reads.

A dequantising GEMM written the ordinary way decodes its packed weights into a shared fp16/bf16 tile, then
``T.gemm`` reads that tile back::

    T.copy(B[bx * bn, k * bk // 2], B_p)                      # packed bytes, pipelined by cp.async
    for i, j in T.Parallel(bn, bk):
        B_s[i, j] = <any elementwise expression of loaded values at (i, j)>
    T.gemm(A_s, B_s, C_f, transpose_B=True)

Each decoded weight is one shared store and one ``ldmatrix`` read. When the tile ``B_s`` is written only by that
nest and read only by that gemm (its B operand), this pass (``pass_configs["tl.cuda.dequant_fragments"]``, off by
default) does not materialise it: every thread evaluates the nest's expression at the ``(n, k)`` of the B fragment
elements it holds in ``mma.sync.m16n8k16`` (lane ``l``: column ``l / 4`` of an 8-wide n atom), straight from the
tiles the expression reads, and issues the mma with them (``tl::gemm_rb_step``, ``include/tl/gemm_frag.cuh``). The
expression is the program's own, so nibble order, shifts and masks, lookups, zero points, scales and casts are all
whatever the user wrote, and the weights are the same fp16/bf16 values the nest would have stored.

**The k permutation.** Inside a tile the order of a dot product's k terms is free as long as A and B agree, so a
k-step's four elements of lane ``l`` (``q = l % 4``; the logical rows 2q, 2q+1, 2q+8, 2q+9) are put at physical
``k = g·4·CH + q·CH + t·4 + e`` (``e`` = 0..3, step ``kk = g·CH/4 + t``, ``CH`` = 32 where ``4·CH`` divides the
tile's K, else 16, 8, 4). Over a group of ``CH/4`` steps each lane's k are one contiguous run of ``CH``: its share
of every tile the expression reads contiguously (``B_q[i, j]``) or packed (``B_p[i, j // 2]``) is staged into
registers with vector loads of up to 16 bytes (32 int4 weights: 16 bytes), and a value the run does not change (a
per-channel scale, a group's scale or zero point) is loaded once; the template loads A with the same permutation
(one 8-byte shared load per row and step instead of ``ldmatrix``). Global loads are bounds-guarded as the nest's
were (a ragged N reads zeros).

**Word pairs.** The two halves of each B register may be paired ``D`` apart inside the run (``D = 4``: nibbles
``i`` and ``i + 4`` of one 32-bit word, 16 bits apart; ``D = 2``: bytes ``i`` and ``i + 2``); where the nest's
value is a bit field of a staged byte (or a whole int8) cast to fp16/bf16 (plus a shared integer, times shared
values), both halves are decoded by one word operation in ``half2``/``bfloat162`` (``fragment_pairs.py``). The
pass takes the first ``D`` of 4, 2 for which the first register qualifies, else ``D = 1``.

Conditions (each refusal of a gemm whose B tile a nest writes is a note at the gemm's line): a 2-D
``T.Parallel`` nest storing one shared tile at its own loop variables over the whole tile (one-element scalars such
as ``q = ...`` inlined), followed directly by the ``T.gemm`` that reads that whole tile as B; the tile used by no
other statement; A a whole 2-D shared tile of the same type (float16 or bfloat16), not transposed; the accumulator a
float32 fragment in the ``mma`` layout (the mma.sync path: not wgmma) with one warp along M (decode tiles, M = 16:
with several warp rows each would decode the same weights, where the shared tile decodes each once); the expression
reads only global or shared tiles and calls only pure operators. The option is on by default (measured on the
H200: BENCHMARKS.md, docs/cuda.md); ``tl.FuseDequantGemmCUDA`` (the W4A16 recogniser, ``tl.cuda.fuse_dequant``) runs
first and keeps the one spelling it takes, still faster there; ``tl.cuda.fuse_dequant=False`` sends that spelling
here too.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of
from ...language.loops import PARALLEL_ATTR
from ..common.notes import add_notes, at_line
from ..common.regions import Region, in_bounds_conds, is_global
from ..common.rewriter import Rewriter, and_all, const_int, new_var, seq, tile_op_name, with_span
from .common import (
    ATTR_SWIZZLE,
    buffers_touched,
    count_uses,
    extern,
    find_thread_var,
    gemm_operands,
    is_fragment,
    is_shared,
    is_whole_tile,
    layouts_of,
    loads_in,
    locals_of,
    mentions,
    parallel_nest,
    substitute,
    swizzles_of,
)
from .fragment_pairs import pair_value
from .fragment_tables import table_pair
from .layouts import dtype_bytes, packed_swizzle_code, run_swizzle_code
from .split_k_cuda import accesses, gemm_stmts, has_buffer, tile_ops, touches_outside_tile_ops

PURE_OPS = {"tirx.if_then_else", "prim.if_then_else", "tirx.shift_left", "tirx.shift_right", "tirx.bitwise_and",
            "tirx.bitwise_or", "tirx.bitwise_xor", "tirx.bitwise_not", "tirx.reinterpret", "tirx.exp", "tirx.exp2",
            "tirx.log", "tirx.sqrt", "tirx.rsqrt", "tirx.fabs", "tirx.floor", "tirx.ceil", "tirx.round", "tirx.pow",
            "tirx.fma", "tirx.tanh", "tirx.sigmoid", "tirx.isnan"}


def lane_run(K: int) -> int:
    """``CH``: the k run of one lane per group of k-steps (the largest of 32, 16, 8, 4 with ``4 CH | K``)."""
    for ch in (32, 16, 8, 4):
        if K % (4 * ch) == 0:
            return ch
    raise ValueError(f"K = {K} is not a multiple of 16")


def run_offset(t: int, e: int, d: int) -> int:
    """Where element ``e`` (0..3) of step ``t`` of a group sits in a lane's k run (include/tl/gemm_frag.cuh): the
    register pair ``p = 2t + e // 2`` holds ``2d (p // d) + p % d`` and that ``+ d``."""
    p = 2 * t + e // 2
    return 2 * d * (p // d) + p % d + d * (e % 2)


class NestValue:
    """The value a nest body stores: ``store`` (the one buffer store), ``value`` (its value with every one-element
    scalar of the body inlined, for analysis) and ``lets``/``raw`` (the scalars a body uses more than once and not
    in an index, in order, and the stored value, with only the other scalars inlined: emitted as per-element
    ``let``s, so a decode such as fp4's ``q``, ``e``, ``mag`` is computed once per element)."""

    def __init__(self, store: Any, value: Any, lets: list[tuple[Any, Any]], raw: Any) -> None:
        self.store, self.value, self.lets, self.raw = store, value, lets, raw


def single_store(body: Any) -> NestValue | None:
    """The one buffer store of a nest body and its scalars (``q = ...`` as a ``Bind``/``LetStmt`` or a one-element
    local); None if the body does anything else."""
    binds: list[tuple[Any, Any]] = []  # (var, value as written: may use earlier scalars)
    bufs: dict[Any, Any] = {}  # one-element local -> its var in binds
    out: list[Any] = []

    def as_vars(e: Any) -> Any:
        if not bufs:
            return e
        return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, lambda ld: bufs.get(ld.source, ld))])

    def walk(s: Any) -> bool:
        if isinstance(s, tirx.SeqStmt):
            return all(walk(x) for x in s.seq)
        if isinstance(s, tirx.Bind):
            binds.append((s.var, as_vars(s.value)))
            return True
        if isinstance(s, tirx.LetStmt):
            binds.append((s.var, as_vars(s.value)))
            return walk(s.body)
        if isinstance(s, tirx.AllocBuffer) and s.buffer.scope() in ("local", "local.var") and \
                [const_int(x) for x in s.buffer.shape] == [1]:
            return True
        if isinstance(s, tirx.DeclBuffer):
            return walk(s.body) if getattr(s, "body", None) is not None else True
        if isinstance(s, tirx.Evaluate) and const_int(s.value) == 0:
            return True
        if not isinstance(s, tirx.BufferStore):
            return False
        if s.buffer.scope() in ("local", "local.var") and [const_int(x) for x in s.buffer.shape] == [1]:
            if s.buffer in bufs:
                return False  # a scalar stored twice: not a plain value
            v = tvm.ir.Var(s.buffer.name, str(s.buffer.dtype))
            binds.append((v, as_vars(s.value)))
            bufs[s.buffer] = v
            return True
        if out:
            return False
        out.append((s, as_vars(s.value)))
        return True

    if not walk(body) or not out:
        return None
    store, raw = out[0]
    exprs = [v for _, v in binds] + [raw]
    in_index = [x for e in exprs for ld in loads_in(e) for i in ld.indices for x in _vars(i)]
    uses = [x for e in exprs for x in _vars(e, unique=False)]
    inline: dict[Any, Any] = {}
    full: dict[Any, Any] = {}
    lets = []
    for var, val in binds:
        full[var] = substitute(val, full)
        if any(var.same_as(x) for x in in_index) or sum(var.same_as(x) for x in uses) <= 1:
            inline[var] = substitute(val, inline)
        else:
            lets.append((var, substitute(val, inline)))
    return NestValue(store, substitute(raw, full), lets, substitute(raw, inline))


def _vars(e: Any, unique: bool = True) -> list[Any]:
    """The variables ``e`` mentions (each once, or every occurrence)."""
    found: list[Any] = []

    def rec(v: Any) -> Any:
        if not unique or not any(v.same_as(x) for x in found):
            found.append(v)
        return v

    tvm_ffi.structural_map(e, [(tvm.ir.Var, rec)])
    return found


def _impure(e: Any) -> bool:
    bad: list[Any] = []

    def rec(c: Any) -> Any:
        if not (isinstance(c.op, tvm.ir.Op) and str(c.op.name) in PURE_OPS):
            bad.append(c)
        return c

    tvm_ffi.structural_map(e, [(tvm.ir.Call, rec)])
    return bool(bad)


def _lanes(dtype: str, n: int) -> int:
    """Elements per explicit vector access of a staged run of ``n``: up to 16 bytes, at most 8 lanes of an 8-bit
    type (the widest 8-bit vector TVM's CUDA printer takes, as in tl.LowerParallelCUDA), a power of two dividing n."""
    cap = 8 if dtype_bytes(dtype) == 1 else 16 // dtype_bytes(dtype)
    lanes = max(1, min(n, cap))
    while n % lanes:
        lanes //= 2
    return lanes


class DequantFragmentsCUDA(Rewriter):
    """Replace each (producer nest, T.gemm) pair whose B tile the nest writes by per-thread fragment code."""

    pass_name = "tl.DequantFragmentsCUDA"

    def __init__(self, func: tirx.PrimFunc, direct: bool = False, tables: bool = False,
                 swizzle_packed: bool = False, sets: int = 1, a_swizzle: bool = False) -> None:
        super().__init__()
        self.a_swizzle = a_swizzle  # tl.cuda.fragment_a_swizzle: A tiles read in 64-byte runs get run_swizzle_code
        self.a_swizzled: list[tuple[Any, int]] = []  # (A tile, its new swizzle code)
        self.direct = direct
        self.sets = sets  # tl.cuda.accumulator_sets: the k-steps of a fused gemm take turns over this many sets
        # the enclosing serial loops, innermost last: (loop, the accumulators only its one gemm touches)
        self.serial: list[tuple[Any, list[Any]]] = []
        self.around: list[tuple[Any, list[Any], list[Any]]] = []  # (loop, statements before it, statements after it)
        self.ldg: list[tuple[Any, Any, int, Any, list[Any], Any]] = []  # this gemm's (stmt, arr, at, src, idx, pred)
        self.swizzle_packed = swizzle_packed  # tl.cuda.swizzle_packed_tiles: staged tiles swizzled, 16-byte reads
        self.staged_shared: list[tuple[Any, int]] = []  # (shared tile, bytes of a lane's run) read by tl::lds16
        self.tables = tables  # tl.cuda.dequant_fragment_tables: nibble-indexed decodes looked up (fragment_tables)
        self.dropped: list[Any] = []  # the T.copy statements of packed tiles now read from global memory (direct)
        self.layouts = layouts_of(func)
        self.locals = locals_of(func)
        self.swizzle = swizzles_of(func)
        self.uses = count_uses(func.body)
        self.tid = find_thread_var(func)
        self.removed: list[Any] = []
        self.notes: list[str] = []
        self.reason: str | None = None

    def visit_SeqStmt(self, s: Any) -> Any:  # noqa: N802
        s = super().visit_SeqStmt(s)
        if not isinstance(s, tirx.SeqStmt):
            return s
        stmts = list(s.seq)
        out: list[Any] = []
        i = 0
        while i < len(stmts):
            if i + 1 < len(stmts):
                self.prior = stmts[:i]
                got = self.try_pair(stmts[i], stmts[i + 1])
                if got is not None:
                    out.append(got)
                    i += 2
                    continue
            out.append(stmts[i])
            i += 1
        out = [x for x in out if not any(x.same_as(c) for c in self.dropped)] or [tirx.Evaluate(0)]
        return tirx.SeqStmt(out, span=s.span) if len(out) > 1 else out[0]

    def _no(self, why: str) -> None:
        self.reason = why
        return None

    def visit_For(self, s: Any) -> Any:  # noqa: N802
        """A serial loop comes out with what its fused gemms put around it: the extra accumulator sets allocated and
        zeroed before it and added into the accumulator right after it (tl.cuda.accumulator_sets: before any
        statement that reads the sums, a split-K reduction, a scale, the epilogue), the register ring's slots and
        first loads before it (tl.cuda.dequant_fragments_direct)."""
        serial = s.thread_binding is None and PARALLEL_ATTR not in s.annotations
        if serial:
            self.serial.append((s, _sole_gemm_accumulators(s) if self.sets > 1 else []))
        out = super().visit_For(s)
        if serial:
            self.serial.pop()
        mine = [x for x in self.around if x[0].same_as(s)]
        if not mine:
            return out
        self.around = [x for x in self.around if not x[0].same_as(s)]
        pre = [st for _, p, _ in mine for st in p]
        post = [st for _, _, q in mine for st in q]
        return tirx.SeqStmt([*pre, out, *post], span=s.span)

    def accumulator_sets(self, gemm: Any, ops: dict[str, Any], lay: Any, acc: Any) -> list[Any]:
        """The extra accumulator sets of this fused gemm (empty: the k-steps all add into ``acc``), with a note
        either way when the option asks for more than one."""
        if self.sets <= 1:
            return []
        where = f"{at_line(gemm)}T.gemm {ops['M']}x{ops['N']}x{ops['K']}: "
        steps = ops["K"] // 16
        why = ("the T.gemm has clear_accum=True (each k-step would have to clear every set)" if ops["clear"] else
               "it is not inside a serial loop" if not self.serial else
               f"the loop reads or writes {ops['c'].buffer.name} other than as this T.gemm's destination"
               if not has_buffer(self.serial[-1][1], ops["c"].buffer) else
               f"the tile has {steps} k-step{'s' if steps != 1 else ''}" if steps < 2 else None)
        if why:
            self.notes.append(f"{where}one accumulator set, not {self.sets} (tl.cuda.accumulator_sets): {why}")
            return []
        n = min(self.sets, steps)
        bufs = [tirx.decl_buffer((lay.num_regs,), "float32", f"dq_acc_set{i}", scope="local") for i in range(1, n)]
        zero = tirx.const(0.0, "float32")
        pre = [st for b in bufs for st in [tirx.AllocBuffer(b)] + [tirx.BufferStore(b, zero, [tirx.IntImm("int32", r)])
                                                                  for r in range(lay.num_regs)]]
        post = []
        for r in range(lay.num_regs):
            at = [tirx.IntImm("int32", r)]
            total = tirx.BufferLoad(acc, at)
            for b in bufs:
                total = tirx.Add(total, tirx.BufferLoad(b, at))
            post.append(tirx.BufferStore(acc, total, at))
        self.around.append((self.serial[-1][0], pre, post))
        self.notes.append(f"{where}its {steps} k-steps take turns over {n} accumulator sets, added into "
                          f"{ops['c'].buffer.name} after the loop (tl.cuda.accumulator_sets)")
        return bufs

    def try_pair(self, nest: Any, gemm: Any) -> Any:
        """The fragment code for ``nest`` + ``gemm``, or None (then a note when the nest writes the gemm's B)."""
        if not (isinstance(nest, tirx.For) and PARALLEL_ATTR in nest.annotations and isinstance(gemm, tirx.Evaluate)
                and tile_op_name(gemm) == "tl.gemm"):
            return None
        ops = gemm_operands(gemm, self.ana)
        written = []
        tvm_ffi.structural_map(nest, [(tirx.BufferStore, lambda st: (written.append(st.buffer), st)[1])])
        if not any(b.same_as(ops["b"].buffer) for b in written):
            return None
        self.reason = None
        out = self._match(nest, gemm, ops)
        if out is None and self.reason is not None:
            self.notes.append(f"{at_line(gemm)}T.gemm {ops['M']}x{ops['N']}x{ops['K']}: B fragments are not "
                              f"computed from the nest that writes {ops['b'].buffer.name} (tl.cuda.dequant_fragments; "
                              f"it stays a shared tile): {self.reason}")
        return out

    def _match(self, nest: Any, gemm: Any, ops: dict[str, Any]) -> Any:
        vs, exts, body = parallel_nest(nest, PARALLEL_ATTR)
        if len(vs) != 2:
            return self._no(f"the nest has {len(vs)} loop variables, not 2")
        exts_c = [const_int(e) for e in exts]
        for v, e in zip(vs, exts):
            self.bind_loop(v, tirx.IntImm("int32", 0), e)
        got = single_store(body)
        if got is None:
            return self._no("the nest does more than store one tile (one-element scalars aside)")
        store, value = got.store, got.value
        W = store.buffer
        a, b, c = ops["a"], ops["b"], ops["c"]
        if not W.same_as(b.buffer):
            return self._no(f"the nest stores {W.name}, not the gemm's B operand")
        if not (len(store.indices) == 2 and store.indices[0].same_as(vs[0]) and store.indices[1].same_as(vs[1])):
            return self._no(f"the nest does not store {W.name}[i, j] at its own loop variables")
        if [const_int(x) for x in W.shape] != exts_c:
            return self._no(f"the nest does not cover the whole tile {W.name}")
        if not is_shared(W) or self.uses.get(W, 0) != 2:
            return self._no(f"{W.name} is used by statements besides the nest and this T.gemm")
        dt = str(W.dtype)
        if dt not in ("float16", "bfloat16") or dtype_of(value) != dt:
            return self._no(f"{W.name} is {dt}, not float16 or bfloat16")
        if not is_whole_tile(b) or len(W.shape) != 2:
            return self._no(f"the T.gemm reads part of {W.name}, not the whole 2-D tile")
        if ops["ta"]:
            return self._no("transpose_A=True")
        if not (is_shared(a.buffer) and is_whole_tile(a) and len(a.buffer.shape) == 2 and str(a.buffer.dtype) == dt):
            return self._no(f"A is not a whole 2-D {dt} shared-memory tile")
        lay = self.layouts.get(c.buffer) if is_fragment(c.buffer) else None
        if lay is None or lay.kind != "mma":
            return self._no(f"the accumulator {c.buffer.name} does not have the mma.sync layout "
                            f"({'not a fragment' if lay is None else lay.kind})")
        if str(c.buffer.dtype) != "float32":
            return self._no(f"the accumulator is {c.buffer.dtype}, not float32")
        M, N, K = ops["M"], ops["N"], ops["K"]
        if lay.warp_m != 1:
            return self._no(f"the accumulator is spread over {lay.warp_m} warps along M: each would decode the same "
                            "B fragments (the shared tile decodes each weight once); decode tiles have one warp row")
        if K % 16 or (M // lay.warp_m) % 16 or (N // lay.warp_n) % 8:
            return self._no(f"the tile {M}x{N}x{K} does not fit m16n8k16 steps on the {lay.warp_m}x{lay.warp_n} "
                            "warp grid")
        for ld in loads_in(value):
            src = ld.source
            if src.same_as(W):
                return self._no(f"the nest reads {W.name} itself")
            if not (is_global(src) or is_shared(src)):
                return self._no(f"the nest reads {src.name} ({src.scope()}), not a global or shared tile")
            if any(loads_in(i) for i in ld.indices):
                return self._no(f"the nest reads {src.name} at an index that is itself loaded")
        if _impure(value):
            return self._no("the nest calls something other than a pure operator")
        if self.direct:
            got = self.direct_reads(nest, got, gemm)
        n_var, k_var = (vs[0], vs[1]) if ops["tb"] else (vs[1], vs[0])
        return self.emit(gemm, ops, lay, got, n_var, k_var)

    def direct_reads(self, nest: Any, got: NestValue, gemm: Any) -> NestValue:
        """``tl.cuda.dequant_fragments_direct``: the nest's reads of each shared tile that is only a staging copy of
        global memory (filled by a whole-tile ``T.copy`` earlier in the same statement list, used by that copy and
        this nest alone) become reads of the global tensor at the copy's region; the copy and the tile go. A tile
        that does not qualify stays (a note says why)."""
        sub: dict[Any, tuple[Any, list[Any]]] = {}
        for ld in loads_in(got.value):
            P = ld.source
            if not is_shared(P) or any(P.same_as(x) for x in sub):
                continue
            copy = next((st for st in reversed(self.prior) if isinstance(st, tirx.Evaluate)
                         and tile_op_name(st) == "tl.copy" and Region.of(st.value.args[1]).buffer.same_as(P)), None)
            if copy is None:
                continue
            src, dst = Region.of(copy.value.args[0]), Region.of(copy.value.args[1])
            shape = [const_int(x) for x in P.shape]
            why = None
            if not is_global(src.buffer):
                why = f"{P.name} is not copied from a global tensor"
            elif [const_int(x) for x in dst.mins] != [0] * len(shape) or \
                    [const_int(x) for x in dst.extents] != shape or [const_int(x) for x in src.extents] != shape:
                why = f"the T.copy into {P.name} is not a whole tile of the same shape as its global region"
            elif str(src.buffer.dtype) != str(P.dtype):
                why = f"the T.copy into {P.name} converts {src.buffer.dtype} to {P.dtype}"
            elif self.uses.get(P, 0) != count_uses(copy).get(P, 0) + count_uses(nest).get(P, 0):
                why = f"{P.name} is read by statements besides this nest"
            elif any(b.same_as(src.buffer) for st in self.prior[[x.same_as(copy) for x in self.prior].index(True) + 1:]
                     for b in buffers_touched(st)):
                why = f"{src.buffer.name} is accessed between the T.copy into {P.name} and the nest"
            if why is not None:
                self.notes.append(f"{at_line(gemm)}tl.cuda.dequant_fragments_direct: {P.name} stays in shared memory "
                                  f"(cp.async staging): {why}")
                continue
            sub[P] = (src.buffer, list(src.mins))
            self.dropped.append(copy)
            self.removed.append(P)
        if not sub:
            return got

        def to_global(ld: Any) -> Any:
            for P, (G, mins) in sub.items():
                if ld.source.same_as(P):
                    return tirx.BufferLoad(G, [self.ana.simplify(m + i) for m, i in zip(mins, ld.indices)])
            return ld

        def rw(e: Any) -> Any:
            return tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, to_global)])

        return NestValue(got.store, rw(got.value), [(v, rw(x)) for v, x in got.lets], rw(got.raw))

    def whole_16(self, ld: Any, u: Any, n: int) -> bool:
        """The run of ``n`` elements of ``ld`` is whole 16-byte chunks of its tensor, each 16-byte aligned."""
        chunk = 16 // dtype_bytes(dtype_of(ld))
        last = const_int(ld.source.shape[-1])
        base = self.ana.simplify(substitute(ld.indices[-1], {u: tirx.IntImm("int32", 0)}))
        return n % chunk == 0 and last is not None and last % chunk == 0 and \
            self.prove(tirx.EQ(tirx.floormod(base, chunk), 0))

    def ldg16(self, arr: Any, at: int, src: Any, idx: list[Any]) -> Any:
        """``tl::ldg_cs16``: 16 bytes of ``src`` from ``idx`` into ``arr[at:]``, one evict-first 128-bit global load
        (zeros where the chunk is outside the tensor, as the T.copy's zero fill: it is wholly in or out)."""
        conds = in_bounds_conds(src, idx, self.ana)
        pred = and_all(conds) if conds else None
        st = _ldg_cs16(arr, at, src, idx, pred)
        self.ldg.append((st, arr, at, src, idx, pred))
        return st

    def vector_load(self, arr: Any, src: Any, idx: list[Any], dst: Any, lanes: int) -> Any:
        """``arr[dst] = src[idx]`` (``lanes`` wide); from a global tensor bounds-guarded as the T.copy was (zeros
        outside: the run is aligned to its vector and the tensor's last extent a multiple of it, so the vector is
        wholly inside or outside)."""
        store = tirx.BufferStore(arr, tirx.BufferLoad(src, idx), [dst])
        if not is_global(src):
            return store
        first = [i.base if isinstance(i, tirx.Ramp) else i for i in idx]
        conds = in_bounds_conds(src, first, self.ana)
        if not conds:
            return store
        zero: Any = tirx.const(0, str(src.dtype))
        if lanes > 1:
            zero = tirx.Broadcast(zero, lanes)
        return tirx.IfThenElse(and_all(conds), store, tirx.BufferStore(arr, zero, [dst]))

    # -- emission ------------------------------------------------------------------------------------------
    def emit(self, gemm: Any, ops: dict[str, Any], lay: Any, nv: NestValue, n_var: Any, k_var: Any) -> Any:
        a, c = ops["a"], ops["c"]
        M, N, K = ops["M"], ops["N"], ops["K"]
        dt = str(ops["b"].buffer.dtype)
        WN = N // lay.warp_n
        NT = WN // 8
        ch = lane_run(K)
        steps = ch // 4
        lane = tirx.floormod(self.tid, 32)
        wc = tirx.floormod(tirx.floordiv(self.tid, 32), lay.warp_n)
        zero = tirx.IntImm("int32", 0)
        acc = self.locals[c.buffer]
        bfrag = tirx.decl_buffer((NT * 4,), dt, "dq_bfrag", scope="local")
        stmts: list[Any] = [tirx.AllocBuffer(bfrag)]
        if ops["clear"]:
            stmts += [tirx.BufferStore(acc, tirx.const(0.0, "float32"), [tirx.IntImm("int32", r)])
                      for r in range(lay.num_regs)]
        swa = self.swizzle.get(a.buffer, 0)
        a_ptr = tirx.address_of(tirx.BufferLoad(a.buffer, list(a.mins)))
        b_ptr = tirx.address_of(tirx.BufferLoad(bfrag, [zero]))
        c_ptrs = [tirx.address_of(tirx.BufferLoad(x, [zero]))
                  for x in [acc, *self.accumulator_sets(gemm, ops, lay, acc)]]
        head: list[Any] = []  # direct: every group's staging loads first, so they are all in flight before the mmas
        self.ldg = []
        u = new_var("dq_u")
        d = None  # the pair distance of the k permutation (include/tl/gemm_frag.cuh), chosen on the first group
        table_note = False  # tl.cuda.dequant_fragment_tables fell back to elements: said once per gemm
        for g in range(K // (4 * ch)):
            elems: list[list[Any]] = []  # [ni][u]: (statements, value) at k = run + u
            for ni in range(NT):
                n = wc * WN + ni * 8 + tirx.floordiv(lane, 4)
                jb = g * 4 * ch + tirx.floormod(lane, 4) * ch
                self.bind_loop(u, zero, tirx.IntImm("int32", ch))
                sub = {n_var: n, k_var: jb + u}
                rep, pre = self.stage(self.ana.simplify(substitute(nv.value, sub)), u, ch, f"{g}_{ni}")
                if self.direct:
                    head += pre
                else:
                    stmts += pre
                lets = []
                for var, val in nv.lets:
                    arr = tirx.decl_buffer((ch,), dtype_of(var), f"dq_{var.name}_{g}_{ni}", scope="local")
                    stmts.append(tirx.AllocBuffer(arr))
                    lets.append((var, rep(self.ana.simplify(substitute(val, sub))), arr))
                raw = rep(self.ana.simplify(substitute(nv.raw, sub)))
                # every scalar inlined, per element: what the tables evaluate (only computed when they are asked for)
                full = rep(self.ana.simplify(substitute(nv.value, sub))) if self.tables else None
                elems.append([(*self.element(lets, raw, u, x), None if full is None else self.ana.simplify(
                    substitute(full, {u: tirx.IntImm("int32", x)}))) for x in range(ch)])
            if d is None:  # fields 16 bits apart in a register's two halves (nibbles: 4 k apart, bytes: 2), where
                # one word operation makes both; else (D = 1: a register's two k adjacent, so its two nibbles
                # share a 16-bit group of the word) a nibble-indexed decode is looked up in its table (fragment_tables)
                d = next((c for c in (4, 2) if ch % (2 * c) == 0 and self.paired(elems[0], 0, 0, c, False)
                          is not None), 1)
            for t in range(steps):
                kk = g * steps + t
                for ni in range(NT):
                    for e in (0, 2):
                        pair = self.paired(elems[ni], t, e, d)
                        if pair is None and self.tables and not table_note:
                            table_note = True
                            self.notes.append(
                                f"{at_line(gemm)}tl.cuda.dequant_fragment_tables: {ops['b'].buffer.name} is decoded "
                                "one element at a time: its value is not a function of one nibble field of a packed "
                                "byte that the compiler can evaluate exactly at every field value (a load or "
                                "variable besides the field and shared factors, a transcendental, or a denormal "
                                "float32 intermediate)")
                        if pair is not None:
                            stmts.append(tirx.BufferStore(bfrag, pair, [tirx.Ramp(tirx.IntImm("int32", ni * 4 + e),
                                                                                   tirx.IntImm("int32", 1), 2)]))
                            continue
                        for h in (0, 1):
                            pre_h, value, _ = elems[ni][run_offset(t, e + h, d)]
                            stmts += pre_h + [tirx.BufferStore(bfrag, value, [tirx.IntImm("int32", ni * 4 + e + h)])]
                if kk == 0:
                    swa = self.run_swizzle(gemm, a.buffer, swa, ch, d)
                name = f"tl::gemm_rb_step<{M}, {N}, {K}, {lay.warp_m}, {lay.warp_n}, {swa}, {ch}, {kk}, {d}>"
                stmts.append(extern(name, a_ptr, b_ptr, c_ptrs[kk % len(c_ptrs)]))
        self.removed.append(ops["b"].buffer)
        if self.ldg:
            ring = self.ring(head, stmts, gemm)
            if ring is not None:
                return with_span(ring, gemm.span)
        return seq(head + stmts, gemm.span)

    def ring(self, head: list[Any], stmts: list[Any], gemm: Any) -> Any:
        """The direct loads one K tile ahead (tl.cuda.dequant_fragments_direct): two register slots per staged
        array, allocated before the K loop with the first tile's loads; the loop body, instantiated once per slot
        (a branch on the iteration's parity, so every register index stays a compile-time constant and no register
        with a load in flight is copied), first issues the next tile's loads into the other slot (none after the
        last iteration), then decodes and multiplies from its own. (ptxas schedules these predicated loads late in
        the body, after most of its mmas; forcing them first — volatile PTX under a branch of their own — measured
        slower on the H200, 0.81-0.86x: BENCHMARKS.md, 2026-12-04.) None (the loads stay at the top of the step, with
        a note) where the gemm is not in a serial loop or the loads' addresses use a variable bound inside it."""
        where = f"{at_line(gemm)}tl.cuda.dequant_fragments_direct: "
        if not self.serial:
            self.notes.append(f"{where}the T.gemm is not inside a serial loop: its weights load at each step, with "
                              "no register ring")
            return None
        loop = self.serial[-1][0]
        k, end = loop.loop_var, self.ana.simplify(loop.min + loop.extent)
        inner = _bound_inside(loop.body)
        if any(mentions(e, v) for _, _, _, _, idx, pred in self.ldg for e in [*idx, *([pred] if pred is not None
                                                                                          else [])] for v in inner):
            self.notes.append(f"{where}a weight address uses a variable bound inside the K loop: its weights load "
                              "at each step, with no register ring")
            return None
        arrs: list[Any] = []
        for _, arr, *_rest in self.ldg:
            if not any(arr.same_as(x) for x in arrs):
                arrs.append(arr)
        slots = [[tirx.decl_buffer(a.shape, a.dtype, f"{a.name}_r{r}", scope="local") for a in arrs] for r in (0, 1)]
        ldg_stmts = [e[0] for e in self.ldg]
        rest = [st for st in head if not any(st.same_as(x) for x in ldg_stmts)
                and not (isinstance(st, tirx.AllocBuffer) and any(st.buffer.same_as(a) for a in arrs))]

        def loads(slot: int, at_k: Any, cond: Any) -> list[Any]:
            out = []
            for _, arr, at, src, idx, pred in self.ldg:
                dst = slots[slot][next(i for i, a in enumerate(arrs) if a.same_as(arr))]
                p = [substitute(pred, {k: at_k})] if pred is not None else []
                out.append(_ldg_cs16(dst, at, src, [self.ana.simplify(substitute(i, {k: at_k})) for i in idx],
                                     and_all(p + [cond])))
            return out

        def body(cur: int) -> Any:
            nxt = k + 1
            swapped = _swap_buffers(seq(rest + stmts), dict(zip(arrs, slots[cur])))
            return seq(loads(1 - cur, nxt, tirx.LT(nxt, end)) + [swapped])

        first = loads(0, loop.min, tirx.GT(loop.extent, 0))
        self.around.append((loop, [tirx.AllocBuffer(b) for sl in slots for b in sl] + first, []))
        self.notes.append(f"{where}the weights of the next K tile load into registers during this one (a ring of "
                          f"2 slots of {len(arrs)} arrays)")
        return tirx.IfThenElse(tirx.EQ(tirx.floormod(k - loop.min, 2), 0), body(0), body(1))

    def run_swizzle(self, gemm: Any, A: Any, swa: int, ch: int, d: int) -> int:
        """``tl.cuda.fragment_a_swizzle``: the swizzle code the A tile is read with (its new one where it changes)."""
        if not self.a_swizzle:
            return swa
        code = run_swizzle_code(swa) if ch == 32 and d == 4 and 0 < swa < 100 else 0
        why = ("its lanes do not read it in 16-byte loads of 64-byte runs" if not code else
               "it is used by statements besides its T.copy and this T.gemm" if self.uses.get(A, 0) != 2 else
               "another fused gemm reads it" if any(b.same_as(A) for b, _ in self.a_swizzled) else None)
        if why:
            self.notes.append(f"{at_line(gemm)}tl.cuda.fragment_a_swizzle: {A.name} keeps its swizzle: {why}")
            return swa
        self.a_swizzled.append((A, code))
        self.notes.append(f"{at_line(gemm)}tl.cuda.fragment_a_swizzle: {A.name} is swizzled for 64-byte lane runs "
                          "(no bank conflicts on the fragment loads)")
        return code

    def paired(self, elems: list[tuple[list[Any], Any, Any]], t: int, e: int, d: int, tables: bool = True) -> Any:
        """Elements ``e`` and ``e + 1`` of step ``t`` as one two-lane value: one word operation (fragment_pairs.py),
        else (``tables``) a lookup in the table of a nibble-indexed decode (fragment_tables.py); or None."""
        (pre0, v0, full0), (pre1, v1, full1) = elems[run_offset(t, e, d)], elems[run_offset(t, e + 1, d)]
        got = pair_value(v0, v1, self.ana) if not pre0 and not pre1 else None
        if got is None and tables and self.tables:
            got = table_pair(full0, full1, self.ana)
        return got

    def element(self, lets: list[tuple[Any, Any, Any]], raw: Any, u: Any, x: int) -> tuple[list[Any], Any]:
        """The value at ``u = x`` and the statements before it: the nest's multiply-used scalars stored into
        element ``x`` of their register arrays (``lets``: var, value, array; as tl.LowerParallelCUDA gives each
        lane's scalars a slot: a bound variable would be substituted into every use by TVM's simplifier)."""
        xi = tirx.IntImm("int32", x)
        at: dict[Any, Any] = {u: xi}
        stores = []
        for var, val, arr in lets:
            stores.append(tirx.BufferStore(arr, self.ana.simplify(substitute(val, at)), [xi]))
            at[var] = tirx.BufferLoad(arr, [xi])
        return stores, self.ana.simplify(substitute(raw, at))

    def stage(self, e: Any, u: Any, ch: int, tag: str) -> tuple[Any, list[Any]]:
        """Stage the loads of ``e`` (the value at ``k = run base + u``, ``u`` in ``[0, ch)``): each load that the run
        reads contiguously or packed (``[..., base + u // c]``, shared tiles) into a register array by vector loads,
        each load the run does not move (one address) into one register. Returns a function that rewrites an
        expression's loads to read the arrays (global loads bounds-guarded; other loads stay, read per element)
        and the statements that fill the arrays."""
        staged: list[tuple[Any, Any, int]] = []
        pre: list[Any] = []
        zero = tirx.IntImm("int32", 0)
        for ld in loads_in(e):
            if any(tvm_ffi.structural_equal(ld, x) for x, _, _ in staged):
                continue
            kind = self.run_kind(ld, u, ch)
            if kind is None or (is_global(ld.source) and kind != 0 and not self.direct):
                continue
            n = 1 if kind == 0 else ch // kind
            arr = tirx.decl_buffer((n,), dtype_of(ld), f"dq_{ld.source.name}_{tag}", scope="local")
            pre.append(tirx.AllocBuffer(arr))
            if kind == 0:
                pre.append(tirx.BufferStore(arr, self.guard(substitute(ld, {u: zero})), [zero]))
            elif self.direct and is_global(ld.source) and self.whole_16(ld, u, n):
                chunk = 16 // dtype_bytes(dtype_of(ld))
                for p in range(n // chunk):
                    idx = [self.ana.simplify(substitute(i, {u: tirx.IntImm("int32", p * chunk * kind)}))
                           for i in ld.indices]
                    pre.append(self.ldg16(arr, p * chunk, ld.source, idx))
            elif self.swizzle_packed and is_shared(ld.source) and self.whole_16(ld, u, n):
                chunk = 16 // dtype_bytes(dtype_of(ld))
                for p in range(n // chunk):
                    idx = [self.ana.simplify(substitute(i, {u: tirx.IntImm("int32", p * chunk * kind)}))
                           for i in ld.indices]
                    pre.append(extern("tl::lds16", tirx.address_of(tirx.BufferLoad(arr, [tirx.IntImm("int32",
                                                                                                      p * chunk)])),
                                      tirx.address_of(tirx.BufferLoad(ld.source, idx))))
                self.staged_shared.append((ld.source, n * dtype_bytes(dtype_of(ld))))
            else:
                lanes = _lanes(dtype_of(ld), n)
                for p in range(n // lanes):
                    idx = [self.ana.simplify(substitute(i, {u: tirx.IntImm("int32", p * lanes * kind)}))
                           for i in ld.indices]
                    dst: Any = tirx.IntImm("int32", p * lanes)
                    if lanes > 1:
                        idx[-1] = tirx.Ramp(idx[-1], tirx.IntImm("int32", 1), lanes)
                        dst = tirx.Ramp(dst, tirx.IntImm("int32", 1), lanes)
                    pre.append(self.vector_load(arr, ld.source, idx, dst, lanes))
            staged.append((ld, arr, kind))

        def from_array(ld: Any) -> Any:
            for x, arr, kind in staged:
                if tvm_ffi.structural_equal(ld, x):
                    return tirx.BufferLoad(arr, [zero if kind == 0 else tirx.floordiv(u, kind) if kind > 1 else u])
            return self.guard(ld) if is_global(ld.source) else ld

        def replace(x: Any) -> Any:
            return tvm_ffi.structural_map(x, [(tvm.ir.TensorLoad, from_array)])

        return replace, pre

    def run_kind(self, ld: Any, u: Any, ch: int) -> int | None:
        """How load ``ld`` moves along the run ``u`` in ``[0, ch)``: 0 one address, 1 contiguous, ``c`` > 1
        element ``u // c`` of the last dimension, each aligned to its vector accesses; None otherwise."""
        zero = tirx.IntImm("int32", 0)
        idx = list(ld.indices)
        if any(mentions(i, u) for i in idx[:-1]):
            return None
        base = self.ana.simplify(substitute(idx[-1], {u: zero}))
        diff = self.ana.simplify(idx[-1] - base)
        if const_int(diff) == 0 or not mentions(diff, u) or all(
                self.prove(tirx.EQ(substitute(idx[-1], {u: tirx.IntImm("int32", x)}), base)) for x in range(1, ch)):
            return 0
        if isinstance(diff, tvm.ir.Var) and diff.same_as(u):
            kind = 1
        elif (isinstance(diff, tirx.FloorDiv) and isinstance(diff.a, tvm.ir.Var) and diff.a.same_as(u)
              and (const_int(diff.b) or 0) > 1 and ch % const_int(diff.b) == 0):
            kind = const_int(diff.b)
        else:
            return None
        lanes = _lanes(dtype_of(ld), ch // kind)
        last = const_int(ld.source.shape[-1])
        if last is None or last % lanes or not self.prove(tirx.EQ(tirx.floormod(base, lanes), 0)):
            return None
        return kind

    def guard(self, ld: Any) -> Any:
        """A global load bounds-guarded (0 outside the tensor), as the nest's loads were."""
        if not is_global(ld.source):
            return ld
        conds = in_bounds_conds(ld.source, list(ld.indices), self.ana)
        return tirx.if_then_else(and_all(conds), ld, tirx.const(0, dtype_of(ld))) if conds else ld


def _ldg_cs16(arr: Any, at: int, src: Any, idx: list[Any], pred: Any) -> Any:
    """``tl::ldg_cs16(&arr[at], &src[idx], pred)`` (pred None: always)."""
    p = tirx.Cast("int32", pred) if pred is not None else tirx.IntImm("int32", 1)
    return extern("tl::ldg_cs16", tirx.address_of(tirx.BufferLoad(arr, [tirx.IntImm("int32", at)])),
                  tirx.address_of(tirx.BufferLoad(src, idx)), p)


def _swap_buffers(node: Any, bmap: dict[Any, Any]) -> Any:
    """``node`` with every load, store and allocation of a key of ``bmap`` on its value instead."""
    def pick(b: Any) -> Any:
        return next((v for k, v in bmap.items() if k.same_as(b)), None)

    def load(ld: Any) -> Any:
        b = pick(ld.source)
        return ld if b is None else tirx.BufferLoad(b, list(ld.indices))

    def store(st: Any) -> Any:
        b = pick(st.buffer)
        return st if b is None else tirx.BufferStore(b, st.value, list(st.indices), span=st.span)

    def alloc(st: Any) -> Any:
        b = pick(st.buffer)
        return st if b is None else tirx.AllocBuffer(b)

    return tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                         (tirx.AllocBuffer, alloc)])


def _bound_inside(node: Any) -> list[Any]:
    """The variables a loop or binding inside ``node`` defines."""
    found: list[Any] = []

    def loop(f: Any) -> Any:
        found.append(f.loop_var)
        return f

    def bind(b: Any) -> Any:
        found.append(b.var)
        return b

    maps: list[Any] = [(tirx.For, loop)]
    if hasattr(tirx, "Bind"):
        maps.append((tirx.Bind, bind))
    if hasattr(tirx, "LetStmt"):
        maps.append((tirx.LetStmt, bind))
    tvm_ffi.structural_map(node, maps)
    return found


def _sole_gemm_accumulators(loop: Any) -> list[Any]:
    """The accumulators of ``loop``'s T.gemm statements that nothing else in the loop reads or writes (one gemm
    each): their sums may be split over sets inside the loop and added up after it."""
    gemms = gemm_stmts(loop.body)
    out = []
    for g in gemms:
        acc = Region.of(g.value.args[2]).buffer
        others = [s for s in tile_ops(loop.body) if not s.same_as(g)]
        if any(has_buffer(accesses(s)[0] + accesses(s)[1], acc) for s in others) or \
                touches_outside_tile_ops(loop.body, acc):
            continue
        out.append(acc)
    return out


def dequant_fragments_cuda(func: tirx.PrimFunc, direct: bool = False, tables: bool = False,
                           swizzle_packed: bool = False, sets: int = 1, a_swizzle: bool = False) -> tirx.PrimFunc:
    """Run the pass (see the module doc): replaced B tiles lose their allocation; notes say why a pair was not.
    ``direct`` (``tl.cuda.dequant_fragments_direct``): packed tiles that only stage global memory are read from it.
    ``tables`` (``tl.cuda.dequant_fragment_tables``): a decode of one nibble field whose two elements of a register
    no word operation pairs is looked up in its 16-entry table by byte permutes (``fragment_tables.py``)."""
    pass_ = DequantFragmentsCUDA(func, direct, tables, swizzle_packed, sets, a_swizzle)
    out = pass_.run(func)
    out = add_notes(out, pass_.notes)  # a kernel with no nest-written B tile has nothing to say
    if not pass_.removed:
        return out
    if pass_.a_swizzled:
        swz = dict(swizzles_of(out))
        swz.update(dict(pass_.a_swizzled))
        out = out.with_attr(ATTR_SWIZZLE, swz)
    if swizzle_packed:
        out = _swizzle_staged(out, pass_)
    gone = pass_.removed

    def drop(s: Any) -> Any:
        if any(s.buffer.same_as(g) for g in gone):
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return s

    return out.with_body(tvm_ffi.structural_map(out.body, [(tirx.AllocBuffer, drop)]))


def _swizzle_staged(func: tirx.PrimFunc, pass_: DequantFragmentsCUDA) -> tirx.PrimFunc:
    """``tl.cuda.swizzle_packed_tiles``: each shared tile the fragment code reads with ``tl::lds16``, used by nothing
    but its ``T.copy`` and the fused nest and not swizzled yet, gets the packed staging swizzle
    (``layouts.packed_swizzle_code``: the odd rows' 16-byte chunks moved to the other half of the banks), so the
    two rows eight lanes read at once no longer conflict (unswizzled rows of 128 bytes or more all start on bank 0).
    Every access of the tile, the ``T.copy``'s ``cp.async`` included, goes through ``tl.LowerSharedMemoryCUDA``'s
    physical offsets, so writers and readers agree."""
    swz = dict(swizzles_of(func))
    added = False
    for buf, run in pass_.staged_shared:
        shape = [const_int(x) for x in buf.shape]
        widths = {r for b, r in pass_.staged_shared if b.same_as(buf)}
        if swz.get(buf, 0) or pass_.uses.get(buf, 0) != 2 or len(shape) != 2 or None in shape or len(widths) != 1:
            continue
        code = packed_swizzle_code(shape[-1] * dtype_bytes(str(buf.dtype)), shape[-2], run)
        if code:
            swz[buf] = code
            added = True
    return func.with_attr(ATTR_SWIZZLE, swz) if added else func

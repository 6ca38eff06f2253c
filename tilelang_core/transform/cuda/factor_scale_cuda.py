"""Pass: a scale of a ``T.gemm``'s B operand that no k changes is applied once to the float32 sums after the K loop.

A dequantising GEMM with one scale per output channel decodes every weight as ``q(n, k) * S[n]`` and multiplies
each decoded value by the same ``S[n]`` in fp16/bf16, once per k::

    T.clear(C_f)
    for k in T.Pipelined(K // bk, num_stages=s):
        ...
        for i, j in T.Parallel(bn, bk):
            B_s[i, j] = <decode of the packed bytes at (i, j)> * S[bx * bn + i, (k * bk + j) // K]
        T.gemm(A_s, B_s, C_f, transpose_B=True)

Since ``sum_k A[m, k] q(n, k) S[n] = S[n] sum_k A[m, k] q(n, k)``, the product can leave the reduction: with
``pass_configs["tl.cuda.factor_scale"]`` the nest stores the decode alone and one ``T.Parallel`` nest right after
the loop multiplies the float32 accumulator by ``S[n]`` (cast to float32) — one multiply per output instead of one
per weight, and no load of the scale in the loop. The sums differ from the program's only by rounding: the
program rounds each ``q * S`` to fp16/bf16, this pass multiplies the exact fp32 sum (for integer decodes such as
int4 ``q - 8`` or int8 the product of one weight is exact in fp32, so a one-hot row of A gives the program's value
bit for bit).

The factor is found, not spelled: any top-level product of the stored value with a load of a tensor that the
kernel does not write (a global input, or a shared tile no statement of the loop writes) at indices that, with the
loop's bounds, mention neither the K loop's variable nor the nest's k variable (``(k * bk + j) // K`` is 0 for
every in-range ``k, j``; a per-group ``// 128`` is not, and such a scale stays in the decode, with a note).
Conditions, as split-K's for the accumulator: one ``threadIdx.x`` launch; the K loop a top-level loop of it with
one ``T.gemm``, whose B tile a 2-D ``T.Parallel`` nest writes at its own loop variables and only that gemm reads;
the accumulator a whole float32 fragment, zeroed before the loop (``T.clear``), touched in the loop only as that
gemm's destination; and the B tile one the fragment fusion (``tl.cuda.dequant_fragments``) computes in registers —
the decode tiles, where every warp decodes its weights once per k-step: a tile decoded into shared memory (the
prefill tiles) decodes each weight once per block, and on the H200 factoring its scale made those kernels slower
(BENCHMARKS.md). It runs after the W4A16 recogniser (which keeps its one spelling when on) and before split-K
(whose last block then scales the full sum once) and the fragment fusion (which decodes the nest as it is now).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language.loops import PARALLEL_ATTR
from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.notes import add_notes, at_line
from ..common.regions import Region, is_global
from ..common.rewriter import const_int, make_for, new_var
from .common import (
    count_uses,
    gemm_operands,
    is_fragment,
    is_shared,
    is_whole_tile,
    loads_in,
    mentions,
    parallel_nest,
    substitute,
)
from .dequant_fragments_cuda import single_store
from .split_k_cuda import (
    accesses,
    gemm_stmts,
    has_buffer,
    prologue_problem,
    thread_loops,
    tile_ops,
    top_stmts,
    touches_outside_tile_ops,
)

KEY = PassConfigKey.TL_CUDA_FACTOR_SCALE


def factor_scale_cuda(func: tirx.PrimFunc, options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    """Run the pass (see the module doc); ``func`` unchanged when the option is off."""
    if not options[KEY]:
        return func
    tloops = thread_loops(func.body)
    if len(tloops) != 1:
        return func
    tloop = tloops[0]
    stmts = top_stmts(tloop)
    notes: list[str] = []
    fused = _fused_b_tiles(func, options)
    written = accesses(func.body)[1]
    uses = count_uses(func.body)
    out: list[Any] = []
    changed = False
    for idx, s in enumerate(stmts):
        out.append(s)
        if not (isinstance(s, tirx.For) and s.thread_binding is None and PARALLEL_ATTR not in s.annotations
                and gemm_stmts(s)):
            continue
        got = _factor(s, stmts[:idx], written, uses, notes, fused)
        if got is not None:
            out[-1:] = list(got)
            changed = True
    if not changed:
        return add_notes(func, notes) if notes else func
    new_body = tirx.SeqStmt(out)
    new_t = tirx.For(tloop.loop_var, tloop.min, tloop.extent, tloop.kind, new_body, tloop.thread_binding,
                     tloop.annotations, tloop.step, tloop.span)

    def swap(f: Any) -> Any:
        return new_t if f.same_as(tloop) else f

    return add_notes(func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, swap)])), notes)


def _loads_of(e: Any) -> bool:
    return isinstance(e, tvm.ir.TensorLoad)


def _fused_b_tiles(func: tirx.PrimFunc, options: PassConfig) -> list[Any]:
    """The B tiles ``tl.DequantFragmentsCUDA`` will compute in registers (its own analysis, run on ``func``)."""
    if not options[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS]:
        return []
    from .dequant_fragments_cuda import DequantFragmentsCUDA

    probe = DequantFragmentsCUDA(func, bool(options[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS_DIRECT]))
    probe.run(func)
    return list(probe.removed)


def _factor(loop: Any, before: list[Any], written: list[Any], uses: dict[Any, int],
            notes: list[str], fused: list[Any]) -> tuple[Any, Any] | None:
    """(the loop with the scale taken out of its nest, the nest scaling the accumulator), or None."""
    gemms = gemm_stmts(loop)
    if len(gemms) != 1:
        return None
    gemm = gemms[0]
    ana = tvm.sym.Analyzer()
    ops = gemm_operands(gemm, ana)
    b, c = ops["b"].buffer, ops["c"]
    body = loop.body.seq if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
    nests = [x for x in body if isinstance(x, tirx.For) and PARALLEL_ATTR in x.annotations
             and has_buffer(accesses(x)[1], b)]
    if len(nests) != 1:
        return None
    nest = nests[0]
    vs, exts, nbody = parallel_nest(nest, PARALLEL_ATTR)
    got = single_store(nbody)
    if len(vs) != 2 or got is None or not got.store.buffer.same_as(b) or not isinstance(got.value, tirx.Mul):
        return None
    store = got.store
    if not (len(store.indices) == 2 and store.indices[0].same_as(vs[0]) and store.indices[1].same_as(vs[1])
            and [const_int(x) for x in b.shape] == [const_int(e) for e in exts] and is_shared(b)
            and uses.get(b, 0) == 2 and is_whole_tile(ops["b"])):
        return None
    n_var, k_var = (vs[0], vs[1]) if ops["tb"] else (vs[1], vs[0])
    ana.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    for v, e in zip(vs, exts):
        ana.bind(v, tvm.ir.Range.from_min_extent(0, e))
    where = f"{at_line(gemm)}T.gemm {ops['M']}x{ops['N']}x{ops['K']}: "
    loop_writes = accesses(loop.body)[1]
    for side, factor in (("b", got.value.b), ("a", got.value.a)):
        if not _loads_of(factor):
            continue
        src = factor.source
        read_only = (is_global(src) and not has_buffer(written, src)) or (
            is_shared(src) and not has_buffer(loop_writes, src))
        if not read_only:
            continue
        idx = [ana.simplify(i) for i in factor.indices]
        if any(mentions(i, loop.loop_var) or mentions(i, k_var) for i in idx):
            notes.append(f"{where}the scale {src.name} changes with k (a scale per group of k): it stays in the "
                         "decode, once per weight (tl.cuda.factor_scale)")
            return None
        if any(loads_in(i) for i in idx):
            return None
        real = store.value  # the store as written: its operand on the factor's side must be that very load
        gone = getattr(real, side, None) if isinstance(real, tirx.Mul) else None
        if not (_loads_of(gone) and gone.source.same_as(src)):
            return None
        kept = real.a if side == "b" else real.b
        why = _acc_problem(loop, before, c.buffer, gemm, ops) or (
            None if has_buffer(fused, b) else f"{b.name} stays a shared tile (the fragment fusion does not take this "
            "T.gemm), where the decode runs once per block and the multiply costs little")
        if why:
            notes.append(f"{where}the scale {src.name} stays in the decode (tl.cuda.factor_scale): {why}")
            return None
        return _rewrite(loop, store, kept, c, src, idx, n_var, ops, where, notes)
    return None


def _acc_problem(loop: Any, before: list[Any], acc: Any, gemm: Any, ops: dict[str, Any]) -> str | None:
    if not (is_fragment(acc) and str(acc.dtype) == "float32"):
        return f"the accumulator {acc.name} is not a float32 fragment"
    if ops["clear"]:
        return "the T.gemm has clear_accum=True"
    if not is_whole_tile(ops["c"]) or [const_int(x) for x in acc.shape] != [ops["M"], ops["N"]]:
        return f"the T.gemm writes part of {acc.name}"
    others = [s for s in tile_ops(loop.body) if not s.same_as(gemm)]
    if any(has_buffer(accesses(s)[0] + accesses(s)[1], acc) for s in others) or \
            touches_outside_tile_ops(loop.body, acc):
        return f"the K loop reads or writes {acc.name} other than as the T.gemm destination"
    return prologue_problem(before, acc)


def _rewrite(loop: Any, store: Any, kept: Any, c: Region, src: Any, idx: list[Any], n_var: Any,
             ops: dict[str, Any], where: str, notes: list[str]) -> tuple[Any, Any]:
    def take_out(st: Any) -> Any:
        if st.same_as(store):
            return tirx.BufferStore(st.buffer, kept, st.indices, span=st.span)
        return st

    new_loop = tvm_ffi.structural_map(loop, [(tirx.BufferStore, take_out)])
    acc = c.buffer
    m, n = new_var("m_scale"), new_var("n_scale")
    scale = tirx.BufferLoad(src, [substitute(i, {n_var: n}) for i in idx])
    if str(src.dtype) != "float32":
        scale = tirx.Cast("float32", scale)
    upd = tirx.BufferStore(acc, tirx.Mul(tirx.BufferLoad(acc, [m, n]), scale), [m, n])
    nest = make_for(m, ops["M"], make_for(n, ops["N"], upd, tirx.ForKind.PARALLEL, None, {PARALLEL_ATTR: 1}),
                    tirx.ForKind.PARALLEL, None, {PARALLEL_ATTR: 1})
    notes.append(f"{where}the scale {src.name} does not change with k: applied once to the float32 sums of "
                 f"{acc.name} after the K loop, not to each weight (tl.cuda.factor_scale)")
    return new_loop, nest

"""Tuning spaces for GEMM-like programs on NVIDIA GPUs: which tile, stage, thread and lowering choices are worth
timing on sm_90a (H100/H200: wgmma, TMA, warp specialisation, persistent blocks, split-K) and on sm_80 (mma.sync).

Why this module exists: :func:`~.space.default_space` knows only names (``block_M`` is a tile size); on a Hopper GPU
most of its grid cannot compile or cannot win — a tile wgmma cannot take, a ring of stages larger than the 227 KiB a
block may have, an accumulator larger than a thread's registers — and the choices that matter most (how many
warpgroups, with or without a producer warpgroup, persistent or not, split-K for small grids) are not factory
arguments at all but ``pass_configs``. :func:`gemm_space` enumerates them for a problem ``M x N x K`` and keeps
only the configurations that fit, by the compiler's own rules where it has them:

* the wgmma plan — tile made of ``m64nNk16`` steps, a swizzled shared layout for A and B, a warpgroup grid that
  divides the tile — is :func:`tilelang_core.transform.cuda.layouts.plan_wgmma` (sm_80: ``plan_gemm``, mma.sync);
* the shared memory a block may use is the architecture's limit in
  :mod:`tilelang_core.backend.cuda.resources` (227 KiB per block on sm_90, 163 KiB on sm_80); the pipeline keeps
  ``num_stages`` copies of the A and B tiles (``tl.PipelineCUDA``), plus a little for its barriers;
* the registers a consumer thread may hold come from the warp-specialisation pass's own split
  (:func:`tilelang_core.transform.cuda.warp_specialize_cuda.register_split`: ``setmaxnreg`` 232 per consumer
  thread with two consumer warpgroups), else the launch's equal share of the 64 K register file; the fp32
  accumulator (``block_M * block_N / threads`` registers per thread) plus :data:`REGISTER_MARGIN` must fit;
* a persistent grid only changes a warp-specialised kernel with more output tiles than SMs; split-K only a grid of
  at most half the SMs (``tl.SplitKCUDA``'s rule and SM count), and only a split whose shares keep at least
  ``num_stages`` K steps each.

A configuration is a dict of the factory's arguments (``block_M``, ``block_N``, ``block_K``, ``num_stages``,
``threads``; renamed with ``names=``) plus, where it differs from the defaults, ``pass_configs``: the options the
tuner compiles that configuration with (``tl.disable_warp_specialized``, ``tl.cuda.persistent``,
``tl.cuda.split_k``; see :func:`~.workers.compile_config`). ``threads`` is the program's thread count: the
consumer warpgroups (1-3); a warp-specialised kernel launches one producer warpgroup more.

``options=`` (sm_90a only; default none, so the space is unchanged unless asked) adds the Hopper options whose value
is not the default, one key per candidate, as twins of the kept configurations where
the compiler would take the option (predicted from the rule its pass applies; a twin it would refuse is dropped
with the reason): ``"cluster"`` (``tl.cuda.cluster`` (2, 1) and (1, 2), full level (2, 2) too: warp-specialised,
not split-K, a grid of at least the cluster's blocks along each axis that the cluster rounds up by at most
:data:`QUICK_PADDING`, the accumulator within the clustered register split), ``"gemm_pingpong"``
(``tl.cuda.gemm_pingpong``: ``threads=128``, warp-specialised and persistent, the accumulator within ``setmaxnreg``
232) and ``"tma_store"`` (``tl.cuda.tma_store=False``, the register epilogue: the key is on by default, so the twin
is kept where the default takes TMA stores: not split-K, output rows a multiple of 16 bytes, a persistent kernel's
staging slab fitting beside its ring); ``options="hopper"`` is all three. At ``level="quick"`` only the
deepest ring's configurations get twins. The W4A16 dequantising GEMM's split-K reduction through distributed
shared memory (``tl.cuda.split_k_reduce="cluster"``, measured slower on the H200) is not this program's path.

``level="quick"`` keeps the part of the space worth a short sweep (``bench/gpu/h200_defaults_sweep.py``): K tiles of
one 128-byte swizzle row (64 fp16/bf16 elements; 128 too for decode-sized M); power-of-two tiles no larger than the
problem (192 for three warpgroups where it pads by at most 4 %; at M > 256 no tile under 128x128); the two deepest
rings of at least 3 stages that fit (wgmma keeps a group in flight from 3); the warp-specialised form, plus the
producer-less form at the deepest ring; persistent on and off only for the widest tiles; one consumer warpgroup at
decode sizes (M <= 16: a 64-row tile is mostly padding); split-K 0/1/2/4. ``level="full"`` is everything that fits.

At decode sizes (M <= :data:`NARROW_M`) sm_90a also gets tiles of 16 or 32 rows: no wgmma plan takes them, so the
compiler lowers their ``T.gemm`` to mma.sync fed by cp.async (:func:`_sm90_narrow_candidates`; quick: block_N 32-128,
block_K 128/256, the two deepest rings and the deepest that lets two blocks share an SM; the compiler's split-K and
none where the grid leaves half the SMs idle).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .workers import PASS_CONFIGS  # the key a configuration carries its own pass_configs under

REGISTER_MARGIN = 40  # registers a consumer thread needs besides its accumulators (addresses, counters, epilogue)
SMEM_SLACK = 2048  # bytes of a block's shared memory beyond the stage ring: mbarriers, static scratch, alignment
LEVELS = ("full", "quick")
TENSOR_CORE_DTYPES = ("float16", "bfloat16")

SM90_BLOCK_MN = (64, 128, 192, 256)
SM90_BLOCK_K = (32, 64, 128)
SM90_STAGES = (2, 3, 4, 5, 6)
SM90_THREADS = (128, 256, 384)  # 1, 2, 3 consumer warpgroups
SPLITS = (0, 1, 2, 4, 8)  # tl.cuda.split_k: 0 the compiler's choice, 1 off, else forced
QUICK_SPLITS = (0, 1, 2, 4)
QUICK_PADDING = 0.04  # quick: a 192-wide tile only where it pads the dimension by at most 4 %
QUICK_MIN_TILE = 128 * 128  # quick, M > 256 (compute-bound): no tile smaller than this many outputs

NARROW_M = 32  # sm_90a, M up to this: mma.sync tiles of 16 or 32 rows as well (a 64-row wgmma tile is padding)
NARROW_BLOCK_M = (16, 32)
NARROW_BLOCK_N = (32, 64, 128, 256)
NARROW_BLOCK_K = (64, 128, 256)
NARROW_STAGES = (2, 3, 4, 5, 6, 8)
NARROW_THREADS = (128, 256)
QUICK_NARROW_BLOCK_N = (32, 64, 128)
QUICK_NARROW_BLOCK_K = (128, 256)
QUICK_NARROW_SPLITS = (0, 1)

SM80_BLOCK_MN = (32, 64, 128, 256)
SM80_BLOCK_K = (32, 64)
SM80_STAGES = (2, 3, 4)
SM80_THREADS = (128, 256)

KEY_WS_OFF = "tl.disable_warp_specialized"
KEY_PERSISTENT = "tl.cuda.persistent"
KEY_SPLIT_K = "tl.cuda.split_k"
KEY_CLUSTER = "tl.cuda.cluster"
KEY_GEMM_PINGPONG = "tl.cuda.gemm_pingpong"
KEY_TMA_STORE = "tl.cuda.tma_store"
GEMM_OPTIONS = ("cluster", "gemm_pingpong", "tma_store")  # options=: the sm_90a keys offered as axes
HOPPER = "hopper"  # options="hopper": every option of the space
CLUSTERS = ((2, 1), (1, 2))  # both levels; the full level adds (2, 2)
PINGPONG_CONSUMERS = 256  # a ping-pong block runs two consumer warpgroups of the program's 128 threads


@dataclass(frozen=True)
class Candidate:
    """One point of the space and why it was dropped (``reason`` empty: kept)."""

    config: dict[str, Any]
    reason: str = ""

    @property
    def kept(self) -> bool:
        return not self.reason


def _check_dim(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"gemm_space: {name} must be a positive int (the problem's size), got {value!r}")
    return value


def _arch(target: Any) -> str:
    """The CUDA architecture of ``target`` (``"cuda"``, ``"cuda -arch=sm_80"``, a dict, or ``"sm_90a"``)."""
    from ..machine import target_kind
    from ..target import cuda_target

    if isinstance(target, str) and target.strip().startswith("sm_"):
        target = {"kind": "cuda", "arch": target.strip()}
    if target_kind(target) != "cuda":
        raise ValueError(f"gemm_space: target must be a CUDA target ('cuda', 'cuda -arch=sm_80', 'sm_90a'), got "
                         f"{target!r}: the CPU has no tensor-core space (use default_space(factory, args))")
    return cuda_target(target)["arch"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def sms_of(arch: str) -> int | None:
    """SMs of the architecture's reference part (132 on an H100/H200 SXM), as ``tl.SplitKCUDA`` counts them."""
    from ..transform.cuda.split_k_cuda import NUM_SMS

    return NUM_SMS.get(arch)


def smem_bytes(block_M: int, block_N: int, block_K: int, num_stages: int, dtype: str) -> int:
    """Shared memory of the pipeline's ring: ``num_stages`` A tiles and B tiles, plus :data:`SMEM_SLACK`."""
    from ..transform.cuda.layouts import dtype_bytes

    return num_stages * (block_M * block_K + block_K * block_N) * dtype_bytes(dtype) + SMEM_SLACK


def register_budget(threads: int, warp_specialized: bool, clustered: bool = False) -> int:
    """Registers one consumer thread may hold: after ``setmaxnreg`` where the warp-specialisation pass moves them
    (two or more consumer warpgroups; ``clustered``: a cluster's producer keeps more), else the launch's equal share
    (producer warpgroup included), at most 255."""
    from ..transform.cuda.sm90.warp_specialize import PRODUCER_THREADS
    from ..transform.cuda.warp_specialize_cuda import REGISTER_FILE, register_split

    if warp_specialized:
        split = register_split(threads, clustered=clustered)
        if split is not None:
            return split[1]
        total = threads + PRODUCER_THREADS
    else:
        total = threads
    return min(255, REGISTER_FILE // total) // 8 * 8


def _tile_values(axis: tuple[int, ...], dim: int, quick: bool, floor: int) -> list[int]:
    """Tile sizes along a dimension of ``dim``: none more than one power of two past it (a 64-row tile for M = 16),
    and in quick mode only powers of two or sizes that pad ``dim`` by at most :data:`QUICK_PADDING`."""
    cap = max(floor, _pow2_at_least(dim))
    out = [v for v in axis if v <= cap]
    if quick:  # a tile that is not a power of two only where the padding it adds is small
        out = [v for v in out if v & (v - 1) == 0 or _ceil_div(dim, v) * v <= dim * (1 + QUICK_PADDING)]
    return out


def options_of(options: Any, known: tuple[str, ...], caller: str) -> tuple[str, ...]:
    """The option names ``options`` asks for: ``None``/``()`` none, ``"hopper"`` all of ``known``, a name or an
    iterable of names (each one of ``known``)."""
    if options is None:
        return ()
    names = (options,) if isinstance(options, str) else tuple(options)
    if HOPPER in names:
        return known
    bad = [n for n in names if n not in known]
    if bad or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{caller}: options must be {HOPPER!r} or names among {', '.join(map(repr, known))}, "
                         f"got {options!r}")
    return tuple(n for n in known if n in names)


def _option_twins(options: tuple[str, ...], cfg: dict[str, Any], M: int, N: int, dtype: str, tiles: int,
                  sms: int, smem_limit: int, quick: bool) -> Iterator[Candidate]:
    """The twins of a kept sm_90a configuration ``cfg`` with one option key each, or the reason the compiler would
    refuse it (its pass's rule: see the module docstring)."""
    from ..transform.cuda.layouts import dtype_bytes, plan_wgmma

    bm, bn, bk, st, threads = (cfg[k] for k in ("block_M", "block_N", "block_K", "num_stages", "threads"))
    pcs = cfg.get(PASS_CONFIGS, {})
    ws = not pcs.get(KEY_WS_OFF, False)
    split = ws and tiles * 2 <= sms and pcs.get(KEY_SPLIT_K, 0) != 1  # tl.SplitKCUDA splits this grid
    persistent = ws and tiles > sms and pcs.get(KEY_PERSISTENT, 0) != -1
    acc = bm * bn // threads

    def twin(key: str, value: Any, why: str) -> Candidate:
        return Candidate({**cfg, PASS_CONFIGS: {**pcs, key: value}}, why)

    if "cluster" in options:
        grid = (_ceil_div(N, bn), _ceil_div(M, bm))  # blockIdx.x along N, blockIdx.y along M
        for shape in CLUSTERS + (() if quick else ((2, 2),)):
            value = list(shape)
            if not ws:
                yield twin(KEY_CLUSTER, value, "cluster: no producer warpgroup (multicast needs one)")
            elif split:
                yield twin(KEY_CLUSTER, value, "cluster: a split-K grid")
            elif any(g < c for g, c in zip(grid, shape)):
                yield twin(KEY_CLUSTER, value, f"cluster: a {grid[0]}x{grid[1]} grid smaller than the cluster")
            elif any(_ceil_div(g, c) * c > g * (1 + QUICK_PADDING) for g, c in zip(grid, shape)):
                yield twin(KEY_CLUSTER, value, f"cluster: rounding the {grid[0]}x{grid[1]} grid up to the cluster "
                                               f"adds more than {QUICK_PADDING:.0%} idle blocks")
            elif acc + REGISTER_MARGIN > register_budget(threads, True, clustered=True):
                yield twin(KEY_CLUSTER, value, f"cluster: registers: {acc} accumulators + {REGISTER_MARGIN} > "
                                               f"{register_budget(threads, True, clustered=True)} per thread")
            else:
                yield twin(KEY_CLUSTER, value, "")
    if "gemm_pingpong" in options:
        budget = register_budget(PINGPONG_CONSUMERS, True)
        if threads != 128:
            yield twin(KEY_GEMM_PINGPONG, True, "gemm_pingpong: threads=128 only (one warpgroup's tile)")
        elif not persistent:
            yield twin(KEY_GEMM_PINGPONG, True, "gemm_pingpong: not a persistent warp-specialised kernel")
        elif acc + REGISTER_MARGIN > budget:
            yield twin(KEY_GEMM_PINGPONG, True, f"gemm_pingpong: registers: {acc} accumulators + {REGISTER_MARGIN} "
                                                f"> {budget} per thread")
        else:
            yield twin(KEY_GEMM_PINGPONG, True, "")
    if "tma_store" in options:
        plan, _why = plan_wgmma(bm, bn, bk, dtype, dtype, "float32", threads, 0, (bm, bk), (bk, bn), False, False)
        slab = bm * 128 * (plan.warp_n if plan is not None else 1)  # one 128-byte column block per warpgroup column
        same = "the default keeps register stores here already"  # the twin (the register epilogue) changes nothing
        if split:
            yield twin(KEY_TMA_STORE, False, f"tma_store: a split-K epilogue: {same}")
        elif N * dtype_bytes(dtype) % 16:
            yield twin(KEY_TMA_STORE, False, f"tma_store: output rows not a multiple of 16 bytes: {same}")
        elif persistent and smem_bytes(bm, bn, bk, st, dtype) + slab > smem_limit:
            yield twin(KEY_TMA_STORE, False, f"tma_store: a {slab}-byte staging slab does not fit beside the ring: "
                                             f"{same}")
        else:
            yield twin(KEY_TMA_STORE, False, "")


def _sm90_candidates(M: int, N: int, K: int, dtype: str, accum_dtype: str, arch: str,
                     quick: bool, options: tuple[str, ...] = ()) -> Iterator[Candidate]:
    from ..backend.cuda.resources import limits_for
    from ..transform.cuda.layouts import dtype_bytes, plan_wgmma

    limit = limits_for(arch).smem_per_block
    sms = sms_of(arch) or 132
    swizzle_k = 128 // dtype_bytes(dtype)  # one 128-byte swizzle row of the K tile
    decode = M <= 16
    block_k = [k for k in SM90_BLOCK_K if k <= max(16, K)]
    if quick:
        block_k = [k for k in block_k if k == swizzle_k or (decode and k == 2 * swizzle_k)] or block_k[-1:]
    for bm, bn, bk in itertools.product(_tile_values(SM90_BLOCK_MN, M, quick, 64),
                                        _tile_values(SM90_BLOCK_MN, N, quick, 64), block_k):
        tiles = _ceil_div(M, bm) * _ceil_div(N, bn)
        k_steps = _ceil_div(K, bk)
        fits = [s for s in SM90_STAGES if smem_bytes(bm, bn, bk, s, dtype) <= limit]
        stages = [s for s in fits if s >= 3][-2:] if quick else list(SM90_STAGES)
        threads_axis = SM90_THREADS[:1] if quick and decode else SM90_THREADS
        for threads, ws, st in itertools.product(threads_axis, (True, False), stages):
            base = {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": threads}
            cand = dict(base)
            if not ws:
                cand[PASS_CONFIGS] = {KEY_WS_OFF: True}
            plan, why = plan_wgmma(bm, bn, bk, dtype, dtype, accum_dtype, threads, 0, (bm, bk), (bk, bn),
                                   False, False)
            if plan is None:
                yield Candidate(cand, f"wgmma: {why}")
                continue
            acc = bm * bn // threads
            why = _resources_why(bm, bn, bk, st, dtype, acc, limit, register_budget(threads, ws))
            if why:
                yield Candidate(cand, why)
                continue
            if quick and not ws and st != stages[-1]:
                yield Candidate(cand, "quick: the producer-less form only at the deepest ring")
                continue
            if quick and acc < 32:
                yield Candidate(cand, f"quick: {acc} accumulators per thread leave the tensor cores idle")
                continue
            if quick and M > 256 and bm * bn < QUICK_MIN_TILE:
                yield Candidate(cand, f"quick: a {bm}x{bn} tile reloads A and B too often for M = {M}")
                continue
            if quick and 192 in (bm, bn) and threads != 384:
                yield Candidate(cand, "quick: 192-wide tiles only for three consumer warpgroups")
                continue
            variants: list[dict[str, Any]] = [{}]
            if ws and tiles > sms:  # persistent blocks: the compiler's default (0) and one block per tile (-1)
                if not quick or bm * bn >= 128 * 256:
                    variants.append({KEY_PERSISTENT: -1})
            if ws and tiles * 2 <= sms:  # split-K: tl.SplitKCUDA's small-grid rule
                variants = [{KEY_SPLIT_K: s} for s in (QUICK_SPLITS if quick else SPLITS)
                            if s <= 1 or (k_steps % s == 0 and k_steps // s >= max(st, 2))]
            for extra in variants:
                pcs = {**cand.get(PASS_CONFIGS, {}), **extra}
                kept = {**base, PASS_CONFIGS: pcs} if pcs else dict(base)
                yield Candidate(kept)
                if options and (not quick or st == stages[-1]):
                    yield from _option_twins(options, kept, M, N, dtype, tiles, sms, limit, quick)


def _sm90_narrow_candidates(M: int, N: int, K: int, dtype: str, accum_dtype: str, arch: str,
                            quick: bool) -> Iterator[Candidate]:
    """sm_90a at decode sizes (M <= :data:`NARROW_M`): tiles of 16 or 32 rows, which no ``m64nNk16`` wgmma plan
    takes, so the compiler lowers their ``T.gemm`` to mma.sync fed by a cp.async ring (no producer warpgroup).
    With fewer padded rows a block streams its B columns with less work and fewer registers per byte, and a
    narrow ``block_N`` spreads the N columns over more blocks. Split-K: the compiler's choice (0) and off (1);
    the full level forces splits too."""
    from ..backend.cuda.resources import limits_for
    from ..transform.cuda.layouts import plan_gemm, plan_wgmma

    lim = limits_for(arch)
    limit = lim.smem_per_block
    sms = sms_of(arch) or 132
    block_n = QUICK_NARROW_BLOCK_N if quick else NARROW_BLOCK_N
    block_k = [k for k in (QUICK_NARROW_BLOCK_K if quick else NARROW_BLOCK_K) if k <= max(64, K)]
    for bm, bn, bk in itertools.product(_tile_values(NARROW_BLOCK_M, M, quick, 16),
                                        _tile_values(block_n, N, quick, 32), block_k):
        fits = [s for s in NARROW_STAGES if smem_bytes(bm, bn, bk, s, dtype) <= limit]
        if quick:  # the two deepest rings, and the deepest of which two blocks share an SM
            pair = [s for s in fits if s >= 3 and 2 * (smem_bytes(bm, bn, bk, s, dtype) + lim.smem_reserved_per_block)
                    <= lim.smem_per_sm]
            stages = sorted(set([s for s in fits if s >= 3][-2:] + pair[-1:]))
        else:
            stages = fits
        k_steps = _ceil_div(K, bk)
        tiles = _ceil_div(M, bm) * _ceil_div(N, bn)
        for threads in NARROW_THREADS[:1] if quick else NARROW_THREADS:
            for st in stages or NARROW_STAGES[-1:]:
                base = {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": threads}
                if plan_wgmma(bm, bn, bk, dtype, dtype, accum_dtype, threads, 0, (bm, bk), (bk, bn), False,
                              False)[0] is not None:
                    continue  # a wgmma tile: the wgmma space has it
                if plan_gemm(bm, bn, bk, dtype, dtype, accum_dtype, threads, 0, True, True).kind != "mma":
                    yield Candidate(base, "mma.sync: the tile does not divide into the warps' 16x8 steps")
                    continue
                why = _resources_why(bm, bn, bk, st, dtype, bm * bn // threads, limit,
                                     register_budget(threads, False))
                if why:
                    yield Candidate(base, why)
                    continue
                if tiles * 2 > sms:  # tl.SplitKCUDA leaves a grid this large alone
                    yield Candidate(base)
                    continue
                for s in QUICK_NARROW_SPLITS if quick else SPLITS:
                    if s > 1 and (k_steps % s or k_steps // s < max(st, 2)):
                        continue
                    yield Candidate({**base, PASS_CONFIGS: {KEY_SPLIT_K: s}})


def _resources_why(bm: int, bn: int, bk: int, stages: int, dtype: str, acc: int, smem_limit: int,
                   reg_budget: int) -> str:
    """Why a tile does not fit a block's shared memory or a thread's registers ('' when it fits)."""
    need = smem_bytes(bm, bn, bk, stages, dtype)
    if need > smem_limit:
        return f"shared memory: {need} bytes > {smem_limit} per block"
    if acc + REGISTER_MARGIN > reg_budget:
        return f"registers: {acc} accumulators + {REGISTER_MARGIN} > {reg_budget} per thread"
    return ""


def _sm80_candidates(M: int, N: int, K: int, dtype: str, accum_dtype: str, arch: str,
                     quick: bool) -> Iterator[Candidate]:
    from ..backend.cuda.resources import limits_for
    from ..transform.cuda.layouts import plan_gemm

    try:
        limit = limits_for(arch).smem_per_block
    except ValueError:
        raise ValueError(f"gemm_space: no shared-memory limit is known for {arch} (backend/cuda/resources.py "
                         "LIMITS); give one of its architectures") from None
    block_k = [k for k in SM80_BLOCK_K if k <= max(16, K)]
    for bm, bn, bk, st, threads in itertools.product(_tile_values(SM80_BLOCK_MN, M, quick, 16),
                                                     _tile_values(SM80_BLOCK_MN, N, quick, 16), block_k,
                                                     SM80_STAGES, SM80_THREADS):
        cand = {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": threads}
        plan = plan_gemm(bm, bn, bk, dtype, dtype, accum_dtype, threads, 0, True, True)
        if plan.kind != "mma":
            yield Candidate(cand, "mma.sync: the tile does not divide into the warps' 16x8 steps")
            continue
        why = _resources_why(bm, bn, bk, st, dtype, bm * bn // threads, limit, min(255, 65536 // threads) // 8 * 8)
        if why:
            yield Candidate(cand, why)
            continue
        yield Candidate(cand)


def gemm_candidates(target: Any = "cuda", *, M: int, N: int, K: int, dtype: str = "float16",
                    accum_dtype: str = "float32", level: str = "full", options: Any = None) -> list[Candidate]:
    """Every point considered for :func:`gemm_space`, kept or not, with the reason a dropped one was dropped."""
    M, N, K = (_check_dim(n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    if level not in LEVELS:
        raise ValueError(f"gemm_space: level must be one of {', '.join(map(repr, LEVELS))}, got {level!r}")
    if dtype not in TENSOR_CORE_DTYPES:
        raise ValueError(f"gemm_space: dtype must be one of {', '.join(TENSOR_CORE_DTYPES)} (the tensor-core "
                         f"GEMM's operand types for this space), got {dtype!r}")
    if accum_dtype != "float32":
        raise ValueError(f"gemm_space: accum_dtype must be 'float32' (wgmma and this space accumulate in fp32), "
                         f"got {accum_dtype!r}")
    arch = _arch(target)
    quick = level == "quick"
    names = options_of(options, GEMM_OPTIONS, "gemm_space")
    if arch.startswith("sm_90") and arch.endswith("a"):
        out = list(_sm90_candidates(M, N, K, dtype, accum_dtype, arch, quick, names))
        if M <= NARROW_M:
            out += _sm90_narrow_candidates(M, N, K, dtype, accum_dtype, arch, quick)
        return out
    if names:
        raise ValueError(f"gemm_space: options {names} are sm_90a's (TMA, wgmma, clusters), not {arch}'s")
    return list(_sm80_candidates(M, N, K, dtype, accum_dtype, arch, quick))


def gemm_space(target: Any = "cuda", *, M: int, N: int, K: int, dtype: str = "float16",
               accum_dtype: str = "float32", level: str = "full",
               names: dict[str, str] | None = None, options: Any = None) -> list[dict[str, Any]]:
    """The configurations worth timing for a GEMM of ``M x N x K`` on ``target``'s architecture (see the module
    docstring): sm_90a gets the wgmma space (1-3 consumer warpgroups, with and without the producer warpgroup,
    persistent or not, split-K for small grids), sm_80-sm_89 and a plain sm_90 the mma.sync space. ``names`` maps
    the space's argument names to the factory's (``{"block_M": "BLOCK_M"}``); ``pass_configs`` is never renamed.
    ``options``: ``"hopper"`` or some of ``"cluster"``, ``"gemm_pingpong"``, ``"tma_store"`` (sm_90a) also
    offers those keys, each where the compiler would apply it (the module docstring); default none.

    ``gemm_space("cuda", M=4096, N=4096, K=4096, dtype="float16", level="quick")`` -> ``[{"block_M": 128, ...}]``,
    ready for ``tune(matmul_relu, configs, args=dict(M=4096, N=4096, K=4096, dtype="float16"), target="cuda")``.
    """
    rename = dict(names or {})
    unknown = set(rename) - {"block_M", "block_N", "block_K", "num_stages", "threads"}
    if unknown:
        raise ValueError(f"gemm_space: names may rename block_M, block_N, block_K, num_stages, threads; got "
                         f"{sorted(unknown)}")
    kept = [c.config for c in gemm_candidates(target, M=M, N=N, K=K, dtype=dtype, accum_dtype=accum_dtype,
                                              level=level, options=options) if c.kept]
    return [{rename.get(k, k): v for k, v in c.items()} for c in kept]


def summary(candidates: list[Candidate]) -> dict[str, int]:
    """How many points were kept, and how many each kind of reason dropped (``"wgmma"``, ``"shared memory"``...)."""
    out: dict[str, int] = {"kept": 0}
    for c in candidates:
        key = "kept" if c.kept else c.reason.split(":", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out


__all__ = ["gemm_space", "gemm_candidates", "Candidate", "summary", "smem_bytes", "register_budget", "sms_of",
           "options_of", "PASS_CONFIGS", "REGISTER_MARGIN", "SMEM_SLACK", "GEMM_OPTIONS", "HOPPER"]

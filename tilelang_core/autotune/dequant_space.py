"""The tuning space of the dequantising GEMM (``C = A @ dequant(B)^T``, the weight decode an ordinary ``T.Parallel``
nest: ``bench/gpu/dequant_variants.py``'s programs) on NVIDIA GPUs: its tiles and the compiler options of issue 17,
each as a twin at the value that is not its default.

Why this module exists: those options are not factory arguments but ``pass_configs``, and which of them a kernel
can take depends on its tile:

* ``tl.cuda.dequant_fragments`` (B fragments computed in registers from the decode nest; on by default) is a rule
  over an ``mma.sync`` gemm whose warps form one row along M (else every warp row would decode the same
  fragments): the decode tiles, not the prefill's. Its twin ``False`` (the decode into the shared tile) is kept
  where the default takes the fragments;
* ``tl.cuda.wgmma_written_tiles`` (the written B tile on wgmma; on by default) needs a tile wgmma takes (64 rows
  per warpgroup: not the decode's 16). Its twin ``False`` (mma.sync on the shared tile) is kept where the default
  takes wgmma: the prefill tiles on sm_90a;
* ``tl.cuda.tma_plain_tiles`` (the packed weight tile, a plain uint8/int8 tile, as a TMA box; off by default)
  changes only a loop whose loads become TMA, i.e. one that fills a wgmma tile (the default's prefill), with and
  without the producer warpgroup (``tl.disable_warp_specialized``: the register split ptxas ignores there, C7508);
  the latter only where the compiler would specialise (the loop's shared memory, counted with ``weight_bits`` per
  packed weight, leaves room for one block per SM).
* ``tl.cuda.dequant_fragment_tables`` (a nibble decode no word operation pairs, such as fp4 e2m1, looked up by
  byte permutes; on by default) works inside the fragments: its twin ``False`` is kept where they apply (the
  decode tiles); for a decode that pairs by word operations (int4, int8) it changes nothing.
* ``tl.cuda.factor_scale`` (a per-channel scale applied once to the float32 sums after the K loop, not to each
  weight; off by default) applies with the fragments only (the decode tiles): its twin ``True`` is kept there. On
  the H200 it was 1.12-1.20x faster at 16 x 128 x 256 and 0.87-0.89x at 16 x 64 x 512 (ptxas schedules the smaller
  loop worse), so it is the tuner's choice, per tile; for a scale per group of k the compiler notes that it does not
  apply and the twin is the default's kernel.
* ``tl.cuda.wgmma_double_buffer`` (the decoded tile in two copies, the wgmma group in flight; off by default) needs
  the prefill's wgmma loop with at least 3 stages: its twin ``True`` is kept there. On the H200 1.03-1.30x faster at
  most prefill tiles (128 x 256 x 64: 220 -> 170 us) and 0.78-0.99x at 128 x 128 x 64 s4, so the tuner's choice.

The fragments and wgmma are alternatives for the same gemm, never combined. Tiles (the bench's, so the sweep starts
from what was measured): decode (``M <= 16``) 16 x 128 x ``block_K`` on 128 threads, 4 stages (3 too; and 4
stages on 256 threads), and 16 x 64 with a K step of at least 512 (a multiple of the program's ``block_K``), 3
stages (4 too); prefill 128 x 64 x ``min(block_K, 128)`` on 256 threads, 3 stages (2 too), and the wider 128 x 128
(4 stages) and 128 x 256 (3 stages) with a K step of ``min(block_K, 64)``. A tile whose loop
does not fit one block's shared memory, or whose K step does not divide ``K``, is dropped with the reason. Without
``options`` the space is those tiles only; ``options="hopper"`` (or some of ``"dequant_fragments"``,
``"wgmma_written_tiles"``, ``"tma_plain_tiles"``, ``"dequant_fragment_tables"``, ``"factor_scale"``,
``"wgmma_double_buffer"``) adds the keys' twins; on sm_80
only the fragments apply. (The W4A16 recogniser, ``tl.cuda.fuse_dequant``, runs before the fragments and keeps the
one spelling it takes: for that program the fragments twin changes nothing.)
"""

from __future__ import annotations

from typing import Any

from .spaces import Candidate, _arch, _check_dim, options_of
from .workers import PASS_CONFIGS

DEQUANT_OPTIONS = ("dequant_fragments", "wgmma_written_tiles", "tma_plain_tiles", "dequant_fragment_tables",
                   "factor_scale", "wgmma_double_buffer")
KEY_FRAGMENTS = "tl.cuda.dequant_fragments"
KEY_WRITTEN = "tl.cuda.wgmma_written_tiles"
KEY_PLAIN_TILES = "tl.cuda.tma_plain_tiles"
KEY_TABLES = "tl.cuda.dequant_fragment_tables"
KEY_FACTOR = "tl.cuda.factor_scale"
KEY_DOUBLE = "tl.cuda.wgmma_double_buffer"
KEY_WS_OFF = "tl.disable_warp_specialized"
DECODE_MAX_M = 16


WIDE_K = 512  # the decode tiles' long K step: 16 x 64 x 512 was the fastest decode tile on the H200 (BENCHMARKS.md)


def dequant_tiles(M: int, block_K: int) -> list[dict[str, int]]:
    """The tiles of the space for ``M`` rows and the program's ``block_K`` (the module docstring)."""
    if M <= DECODE_MAX_M:
        tiles = [{"block_M": 16, "block_N": 128, "block_K": block_K, "num_stages": s, "threads": 128} for s in (4, 3)]
        # two warps per 16 columns: the fp4 decode's best tile on the H200 (more warps to hide its latency)
        tiles.append({"block_M": 16, "block_N": 128, "block_K": block_K, "num_stages": 4, "threads": 256})
        # half the columns and a K step of at least WIDE_K, a multiple of the program's (its group alignment holds):
        # more independent decode and mma work per warp between the loop's barriers
        wide = block_K * max(1, WIDE_K // block_K) if block_K < WIDE_K and WIDE_K % block_K == 0 else block_K
        return tiles + [{"block_M": 16, "block_N": 64, "block_K": wide, "num_stages": s, "threads": 128}
                        for s in (3, 4)]
    prefill = [{"block_M": 128, "block_N": 64, "block_K": min(block_K, 128), "num_stages": s, "threads": 256}
               for s in (3, 2)]
    # wider tiles with a short K step (split-K fills the SMs): 0.79x / 0.80x fp16 cuBLAS on the H200 against the
    # bench tile's 0.59x at 128x8192x28672 (BENCHMARKS.md, 2026-12-04)
    short = min(block_K, 64)
    return prefill + [{"block_M": 128, "block_N": 128, "block_K": short, "num_stages": 4, "threads": 256},
                      {"block_M": 128, "block_N": 256, "block_K": short, "num_stages": 3, "threads": 256}]


def loop_smem(tile: dict[str, int], weight_bits: int, dtype_bytes: int = 2, decoded: bool = True) -> int:
    """Bytes of shared memory of the program's loop: ``num_stages`` A tiles and packed B tiles, and one decoded B tile
    unless ``decoded`` is False (the fragments fusion decodes into registers and drops that tile)."""
    bm, bn, bk, st = (tile[k] for k in ("block_M", "block_N", "block_K", "num_stages"))
    return st * (bm * bk * dtype_bytes + bn * bk * weight_bits // 8) + (bn * bk * dtype_bytes if decoded else 0)


def _too_big(tile: dict[str, int], K: int, smem: int, limit: int, arch: str, what: str = "") -> str:
    """Why ``tile`` is dropped ("" when it is kept): its K step must divide ``K`` and its loop fit one block."""
    name = f"tile {tile['block_M']}x{tile['block_N']}x{tile['block_K']} s{tile['num_stages']}{what}"
    if K % tile["block_K"]:
        return f"{name}: block_K {tile['block_K']} does not divide K = {K}"
    if smem > limit:
        return (f"{name}: its loop needs {smem // 1024} KB of shared memory, more than a block's {limit // 1024} KB "
                f"on {arch}")
    return ""


def dequant_candidates(target: Any = "cuda", *, M: int, N: int, K: int, block_K: int = 256, weight_bits: int = 4,
                       options: Any = None) -> list[Candidate]:
    """Every point considered for :func:`dequant_space`, kept or not, with the reason a dropped one was dropped."""
    M, N, K, block_K = (_check_dim(n, v) for n, v in (("M", M), ("N", N), ("K", K), ("block_K", block_K)))
    if weight_bits not in (4, 8):
        raise ValueError(f"dequant_space: weight_bits must be 4 (int4, fp4) or 8 (int8), got {weight_bits!r}")
    try:
        arch = _arch(target)
        names = options_of(options, DEQUANT_OPTIONS, "dequant_space")
    except ValueError as e:
        raise ValueError(str(e).replace("gemm_space", "dequant_space")) from None
    from ..backend.cuda.resources import limits_for

    hopper = arch.startswith("sm_90") and arch.endswith("a")
    lim = limits_for(arch.rstrip("a"))
    out: list[Candidate] = []
    for tile in dequant_tiles(M, block_K):
        rows = tile["block_M"] // 16  # mma.sync's 16-row steps: more than one is more than one warp row
        # one warp row: the fragments fusion (on by default) decodes into registers, with no decoded B tile
        why = _too_big(tile, K, loop_smem(tile, weight_bits, decoded=rows > 1), lim.smem_per_block, arch)
        out.append(Candidate(dict(tile), why))
        if why:
            continue
        takes_wgmma = hopper and tile["block_M"] >= 64 and tile["threads"] % 128 == 0
        if "dequant_fragments" in names:  # the twin: the shared-tile decode
            frag = {**tile, PASS_CONFIGS: {KEY_FRAGMENTS: False}}
            out.append(Candidate(frag, _too_big(tile, K, loop_smem(tile, weight_bits), lim.smem_per_block, arch,
                                                " with the decoded B tile (dequant_fragments False)") if rows == 1
                                 else f"dequant_fragments: {rows} warp rows along M would each decode the same B "
                                      "fragments, so the default keeps the shared tile here already"))
        if "dequant_fragment_tables" in names:  # the twin: nibble decodes one element at a time (tables on by default)
            cfg = {**tile, PASS_CONFIGS: {KEY_TABLES: False}}
            out.append(Candidate(cfg, "" if rows == 1 else "dequant_fragment_tables: the fragments do not apply to "
                                                         f"{rows} warp rows along M, so the key changes nothing"))
        if "factor_scale" in names:  # the twin: the per-channel scale after the K loop (with the fragments only)
            cfg = {**tile, PASS_CONFIGS: {KEY_FACTOR: True}}
            out.append(Candidate(cfg, "" if rows == 1 else "factor_scale: the fragments do not apply to "
                                                         f"{rows} warp rows along M, and the key needs them"))
        if "wgmma_double_buffer" in names:  # the twin: the decoded tile twice, the wgmma group in flight
            cfg = {**tile, PASS_CONFIGS: {KEY_DOUBLE: True}}
            extra = tile["block_N"] * tile["block_K"] * 2  # the second copy of the decoded fp16/bf16 tile
            why = ("" if takes_wgmma and tile["num_stages"] >= 3 else
                   "wgmma_double_buffer: " + ("the gemm is not on wgmma here" if not takes_wgmma else
                                             "num_stages < 3 keeps wait_group 0 anyway"))
            why = why or _too_big(tile, K, loop_smem(tile, weight_bits) + extra, lim.smem_per_block, arch,
                                  " with a second decoded tile (wgmma_double_buffer)")
            out.append(Candidate(cfg, why))
        specialised = lim.smem_per_sm // (loop_smem(tile, weight_bits) + lim.smem_reserved_per_block) < 2
        if "wgmma_written_tiles" in names:  # the twin: mma.sync on the written tile
            cfg = {**tile, PASS_CONFIGS: {KEY_WRITTEN: False}}
            out.append(Candidate(cfg, "" if takes_wgmma else "wgmma_written_tiles: the default keeps mma.sync here "
                                 "already (" + (f"{arch} has no wgmma" if not hopper else
                                                f"a {tile['block_M']}-row tile on {tile['threads']} threads: wgmma "
                                                "needs 64 rows per warpgroup") + ")"))
        wgmma = []
        if "tma_plain_tiles" in names:
            wgmma += [{KEY_PLAIN_TILES: True}, {KEY_PLAIN_TILES: True, KEY_WS_OFF: True}]
        for pcs in wgmma:
            cfg = {**tile, PASS_CONFIGS: pcs}
            if not hopper:
                out.append(Candidate(cfg, f"wgmma: {arch} has no wgmma or TMA"))
            elif not takes_wgmma:
                out.append(Candidate(cfg, f"wgmma: a {tile['block_M']}-row tile on {tile['threads']} threads "
                                          "(wgmma needs 64 rows per warpgroup)"))
            elif KEY_WS_OFF in pcs and not specialised:
                out.append(Candidate(cfg, "warp specialisation: the compiler does not specialise this loop (room "
                                          "for two blocks per SM), so the key changes nothing"))
            else:
                out.append(Candidate(cfg))
    return out


def dequant_space(target: Any = "cuda", *, M: int, N: int, K: int, block_K: int = 256, weight_bits: int = 4,
                  options: Any = None) -> list[dict[str, Any]]:
    """The configurations worth timing for a dequantising GEMM of ``M x N x K`` whose program decodes ``block_K``
    weights per step (``weight_bits`` each: 4 for int4/fp4, 8 for int8), for ``program(variant, M, N, K, **cfg)``
    of ``bench/gpu/dequant_variants.py`` (its ``pass_configs`` given to the compile):
    ``dequant_space("cuda", M=128, N=8192, K=28672, options="hopper")``."""
    return [c.config for c in dequant_candidates(target, M=M, N=N, K=K, block_K=block_K, weight_bits=weight_bits,
                                                 options=options) if c.kept]


__all__ = ["dequant_space", "dequant_candidates", "dequant_tiles", "loop_smem", "DEQUANT_OPTIONS"]

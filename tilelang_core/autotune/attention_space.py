"""The tuning space of the flash-attention forward (``examples/flash_attention.py``'s arguments) on NVIDIA GPUs.

Why this module exists: :func:`~.space.default_space` sees ``block_M``, ``block_N``, ``num_stages`` and ``threads``
as independent names, but on a Hopper GPU most of their grid either cannot compile or cannot win. The query tile
and the K/V ring must fit in shared memory (the output staging tile reuses the ring's bytes after the loop:
``tl.LowerSharedMemoryCUDA``); the two accumulators (``O``: ``block_M x dim``, ``S``: ``block_M x block_N``, and
the half-precision copy of ``S`` the second gemm reads) must fit in a consumer thread's registers; the warpgroups
run along M (``GemmWarpPolicy.FullRow``: 64 rows each at least). And one choice that matters is not an argument:
whether a producer warpgroup feeds the loop. The compiler decides it from occupancy (docs/cuda.md: none where
shared memory leaves room for two blocks per SM); the ``full`` level also carries each such configuration with
``pass_configs={"tl.cuda.ws_keep_occupancy": False}``, so the tuner can check that decision on the machine.

A configuration is a dict of ``block_M``, ``block_N``, ``num_stages``, ``threads`` (the consumer threads) and,
where it differs from the compiler's choice, ``pass_configs``. ``level="quick"`` keeps tiles of 128 query rows (64
for short sequences), 2-3 stages and the compiler's own warp-specialisation choice.

``options="hopper"`` (or ``("attention_overlap",)``; sm_90a only, default none) adds a twin with
``tl.cuda.attention_overlap`` (the softmax under the previous block's ``P V``; off by default, not measured on a
GPU) of every kept configuration that has a producer warpgroup — the compiler's choice, or forced with
``tl.cuda.ws_keep_occupancy=False`` (the rule needs the producer's empty barriers; at the quick level too) — except
one consumer warpgroup at ``dim >= 128``, whose build spills with ``P V`` in flight (docs/cuda.md).
"""

from __future__ import annotations

from typing import Any

from .spaces import SMEM_SLACK, Candidate, _arch, options_of, register_budget
from .workers import PASS_CONFIGS

BLOCK_M = (64, 128, 256)
BLOCK_N = (64, 128)
STAGES = (2, 3)
THREADS = (128, 256)  # one or two consumer warpgroups along M
LEVELS = ("full", "quick")
DTYPES = ("float16", "bfloat16")
KEY_KEEP_OCCUPANCY = "tl.cuda.ws_keep_occupancy"
KEY_OVERLAP = "tl.cuda.attention_overlap"
ATTENTION_OPTIONS = ("attention_overlap",)
# registers of a consumer thread = its share of O, S and P (counted as 32-bit values) + this; calibrated on ptxas:
# 128 x 64 tiles at d 128 with one warpgroup take 252 registers and no spills, which the sum alone counts as 224
REGISTER_MARGIN = 0


def _check(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"attention_space: {name} must be a positive int, got {value!r}")
    return value


def loop_smem(block_M: int, block_N: int, num_stages: int, dim: int, dtype_bytes: int) -> int:
    """Bytes of shared memory the loop holds: the Q tile and ``num_stages`` K and V tiles (1024-byte aligned)."""
    def tile(rows: int) -> int:
        return -(-rows * dim * dtype_bytes // 1024) * 1024

    return tile(block_M) + num_stages * 2 * tile(block_N)


def _overlap_twin(cfg: dict[str, Any], dim: int) -> Candidate:
    """``cfg`` (which has a producer warpgroup) with the attention overlap, or why it is not worth timing."""
    twin = {**cfg, PASS_CONFIGS: {**cfg.get(PASS_CONFIGS, {}), KEY_OVERLAP: True}}
    if cfg["threads"] == 128 and dim >= 128:
        return Candidate(twin, "attention_overlap: one consumer warpgroup at d >= 128 spills with P V in flight")
    return Candidate(twin)


def attention_candidates(target: Any = "cuda", *, seq_len: int, dim: int, dtype: str = "float16",
                         level: str = "full", options: Any = None) -> list[Candidate]:
    """Every point considered for :func:`attention_space`, kept or not, with the reason a dropped one was dropped."""
    from ..backend.cuda.resources import limits_for

    seq_len, dim = _check("seq_len", seq_len), _check("dim", dim)
    if level not in LEVELS:
        raise ValueError(f"attention_space: level must be one of {', '.join(map(repr, LEVELS))}, got {level!r}")
    if dtype not in DTYPES:
        raise ValueError(f"attention_space: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dim % 16:
        raise ValueError(f"attention_space: dim must be a multiple of 16 (a wgmma k-step), got {dim}")
    try:
        arch = _arch(target)
    except ValueError as e:  # the same check as gemm_space's, named for this function
        raise ValueError(str(e).replace("gemm_space", "attention_space")) from None
    hopper = arch.startswith("sm_90") and arch.endswith("a")
    overlap = "attention_overlap" in options_of(options, ATTENTION_OPTIONS, "attention_space")
    if overlap and not hopper:
        raise ValueError(f"attention_space: options are sm_90a's (a producer warpgroup, wgmma), not {arch}'s")
    lim = limits_for(arch.rstrip("a"))
    smem_limit = lim.smem_per_block - SMEM_SLACK
    quick = level == "quick"
    out: list[Candidate] = []
    for bm in BLOCK_M:
        for bn in BLOCK_N:
            for stages in STAGES:
                for threads in THREADS:
                    cfg: dict[str, Any] = {"block_M": bm, "block_N": bn, "num_stages": stages, "threads": threads}
                    wgs = threads // 128
                    if bm % (64 * wgs):
                        out.append(Candidate(cfg, f"warpgroups: {wgs} warpgroup(s) along M need block_M a "
                                                  f"multiple of {64 * wgs}"))
                        continue
                    if bm > 2 * max(64, seq_len) or bn > 2 * max(64, seq_len):
                        out.append(Candidate(cfg, f"size: a tile past the sequence ({seq_len})"))
                        continue
                    if quick and (bm != (128 if seq_len > 128 else 64) or (bn == 64 and dim <= 64)):
                        out.append(Candidate(cfg, "quick: 128 query rows (64 for short sequences), 128 keys "
                                                  "at d <= 64"))
                        continue
                    smem = loop_smem(bm, bn, stages, dim, 2)
                    if smem > smem_limit:
                        out.append(Candidate(cfg, f"shared memory: {smem} bytes in the loop, more than "
                                                  f"{smem_limit}"))
                        continue
                    blocks = lim.smem_per_sm // (smem + lim.smem_reserved_per_block)
                    specialised = hopper and blocks < 2  # the compiler's occupancy rule (tl.PipelineCUDA)
                    rows = bm // wgs  # query rows of one warpgroup
                    regs = (rows * dim + rows * bn * 3 // 2) // 128 + REGISTER_MARGIN  # O, S and P (halves)
                    budget = register_budget(threads, specialised) if hopper else min(255, 65536 // threads)
                    if regs > budget:
                        out.append(Candidate(cfg, f"registers: ~{regs} a consumer thread, more than {budget}"))
                        continue
                    out.append(Candidate(cfg))
                    forced = {**cfg, PASS_CONFIGS: {KEY_KEEP_OCCUPANCY: False}}
                    can_force = hopper and not specialised and regs <= register_budget(threads, True)
                    if can_force and not quick:
                        out.append(Candidate(forced))
                    if overlap and (specialised or can_force):
                        out.append(_overlap_twin(cfg if specialised else forced, dim))
    return out


def attention_space(target: Any = "cuda", *, seq_len: int, dim: int, dtype: str = "float16",
                    level: str = "full", options: Any = None) -> list[dict[str, Any]]:
    """The configurations worth timing for the flash-attention forward of sequence length ``seq_len`` and head
    dimension ``dim`` on ``target``'s architecture (see the module docstring), for
    ``tune(flash_attention, attention_space("cuda", seq_len=4096, dim=128), args=dict(batch=..., ...))``.
    ``options="hopper"``: also the ``tl.cuda.attention_overlap`` twins (the module docstring)."""
    return [c.config for c in attention_candidates(target, seq_len=seq_len, dim=dim, dtype=dtype, level=level,
                                                   options=options) if c.kept]


__all__ = ["attention_space", "attention_candidates", "loop_smem", "ATTENTION_OPTIONS"]

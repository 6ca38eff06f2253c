"""Flash attention with both products on wgmma on the GPU (issue 16, part 1): the classic program through
``@jit(target="cuda")`` (sm_90a on a Hopper GPU: ``Q K^T`` as SS wgmma, ``P V`` as register-A wgmma, the online
softmax on the ``wgmma_row`` layout) against SDPA in float64, fp16 and bf16, at the tilings the benchmark picks
(one and two warpgroups, one and two m64 blocks per warpgroup, d = 64 and 128), causal and ragged included; the
SASS shows HGMMA and no HMMA, so a fallback to mma.sync cannot pass unnoticed; and the same tiles with
``pass_configs={"tl.cuda.wgmma": False}`` give the same result within rounding."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import randn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples import flash_attention as fa  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float16": 2e-2, "bfloat16": 3e-2}
CASES = [  # batch, heads, seq, dim, causal, block_M, block_N, stages, threads
    (2, 4, 1000, 128, False, 128, 64, 2, 256),   # two warpgroups along M, ragged
    (2, 4, 1000, 128, True, 128, 64, 2, 128),    # one warpgroup, two m64 blocks (wgmma_row of 4 registers)
    (1, 8, 777, 64, False, 128, 128, 2, 256),    # the d = 64 benchmark tile, ragged
    (1, 8, 512, 64, True, 64, 128, 2, 128),
    (1, 2, 640, 128, True, 256, 64, 2, 256),     # two warpgroups, two m64 blocks each
    (2, 4, 1000, 128, True, 128, 128, 2, 256),   # the d = 128 benchmark tile: a producer warpgroup, ragged
]


def _build(case: tuple, dtype: str, pass_configs: dict | None = None):
    B, H, S, D, causal, bm, bn, st, th = case
    factory = tilelang.jit(out_idx=fa.flash_attention.out_idx, target="cuda", pass_configs=pass_configs)(
        fa.flash_attention.factory)
    return factory(B, H, S, D, causal, block_M=bm, block_N=bn, num_stages=st, threads=th, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:4])) + ("_causal" if c[4] else "")
                         + f"_{c[5]}x{c[6]}t{c[8]}")
def test_wgmma_flash_attention_matches_sdpa_and_the_mma_sync_build(case, dtype):
    B, H, S, D, causal = case[:5]
    kern = _build(case, dtype)
    if torch.cuda.get_device_capability() >= (9, 0):
        sass = kern.get_kernel_source("sass")
        assert "HGMMA" in sass and "HMMA" not in sass, "the attention fell back to mma.sync"
    q, k, v = (randn(B, S, H, D, dtype=DT[dtype]) * 2 for _ in range(3))
    out = kern(q, k, v)
    ref = fa.reference(q.double(), k.double(), v.double(), causal)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])
    mma = _build(case, dtype, {"tl.cuda.wgmma": False})(q, k, v)
    torch.testing.assert_close(out.double(), mma.double(), rtol=TOL[dtype], atol=TOL[dtype])


SCHEDULES = {  # the same arithmetic in every warpgroup, only the schedule differs: results are bit for bit equal
    "cp.async, no producer warpgroup": {"tl.disable_tma_lower": True},
    "TMA, no producer warpgroup": {"tl.disable_warp_specialized": True},
    "ping-pong": {"tl.cuda.pingpong": True},
    "the softmax under the previous P V": {"tl.cuda.attention_overlap": True, "tl.cuda.ws_keep_occupancy": False},
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in CASES if c[8] == 256], ids=lambda c: "x".join(map(str, c[:4]))
                         + ("_causal" if c[4] else "") + f"_{c[5]}x{c[6]}t{c[8]}")
def test_tma_producer_warpgroup_and_pingpong_schedules_give_the_same_bits(case, dtype):
    # the default on sm_90a: K/V as 4-D TMA boxes on mbarriers, fed by a producer warpgroup
    B, H, S, D, causal = case[:5]
    kern = _build(case, dtype)
    if torch.cuda.get_device_capability() >= (9, 0):
        sass = kern.get_kernel_source("sass")
        assert "UTMALDG" in sass and "LDGSTS" not in sass, "the K/V loads are not TMA"
    q, k, v = (randn(B, S, H, D, dtype=DT[dtype]) * 2 for _ in range(3))
    out = kern(q, k, v)
    ref = fa.reference(q.double(), k.double(), v.double(), causal)
    torch.testing.assert_close(out.double(), ref, rtol=TOL[dtype], atol=TOL[dtype])
    for name, pc in SCHEDULES.items():
        other = _build(case, dtype, pc)(q, k, v)
        assert torch.equal(other, out), f"{name}: max |diff| {float((other.float() - out.float()).abs().max())}"

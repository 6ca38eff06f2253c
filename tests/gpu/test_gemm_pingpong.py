"""The ping-pong persistent GEMM on the GPU (issue 15 part 4, ``pass_configs={"tl.cuda.gemm_pingpong": True}``,
``transform/cuda/sm90/gemm_pingpong.py``): two consumer warpgroups, each with the program's 128-thread tile and its
own accumulator, take alternate tiles of a persistent block's walk and turns at the mainloop. Cases: fp16 and bf16,
ragged M/N/K, transposed operands, 2 stages (wait_group 0) and 4-5 (one group in flight), 128x128 and 128x192 tiles,
odd and even tile counts per block (``tl.cuda.persistent`` = n blocks), ``T.use_swizzle`` rasterisation. Each
against torch in float64 into a poisoned output and bit for bit against the same program with the key off (the same
wgmma on the same tile in the same k order: one consumer warpgroup per block). Repeated calls must agree (a turn out
of order or a stage read before it landed shows as an intermittent wrong tile or a hang: the suite's per-test
watchdog). Not run on a GPU yet (written 2026-12-02 without one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_cuda_gemm_pingpong import gemm_rastered  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
KEY = "tl.cuda.gemm_pingpong"
CASES = [  # (M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype), blocks
    ((2048, 2048, 1024, 128, 128, 64, False, False, 4, 128, "float16"), 0),  # 256 tiles over 132 SMs
    ((2048, 2048, 1024, 128, 128, 64, False, False, 4, 128, "bfloat16"), 0),
    ((1000, 1400, 520, 128, 128, 64, False, False, 3, 128, "float16"), 7),  # ragged: 8 x 11 tiles, 7 blocks
    ((1024, 768, 512, 128, 128, 64, True, True, 4, 128, "bfloat16"), 5),  # both transposed, 48 tiles / 5
    ((1024, 1152, 512, 128, 192, 64, False, False, 4, 128, "float16"), 6),  # 128 x 192: 48 tiles / 6 (even)
    ((768, 1024, 320, 128, 128, 64, False, False, 2, 128, "float16"), 5),  # 2 stages (wait_group 0), 5 k-steps
    ((4096, 4096, 512, 128, 128, 64, False, False, 5, 128, "float16"), 0),  # 1024 tiles: 7-8 per block
]


def _kernel(case, pass_configs):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pass_configs)(gemm_t.factory)(*case)


def _operands(case):
    M, N, K, ta, tb, dtype = case[0], case[1], case[2], case[6], case[7], case[10]
    dt = DT[dtype]
    a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    return a, b, ref


@pytest.mark.parametrize("case,blocks", CASES, ids=["x".join(map(str, c[:6])) + f"-s{c[8]}-{c[10]}"
                                                    + ("-tA" if c[6] else "") + ("-tB" if c[7] else "")
                                                    + f"-p{b}" for c, b in CASES])
def test_ping_pong_gemm_matches_torch_and_the_one_warpgroup_kernel(case, blocks):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the gemm ping-pong is built for sm_90a (wgmma, TMA, setmaxnreg)")
    M, N, dtype = case[0], case[1], case[10]
    base = {"tl.cuda.persistent": blocks, "tl.cuda.split_k": 1}
    on = _kernel(case, {**base, KEY: True})
    src = on.get_kernel_source("cuda")
    assert "tl::pingpong_wait(" in src, "; ".join(n for n in on.notes if "pingpong" in n)
    off = _kernel(case, base)
    a, b, ref = _operands(case)
    c = poisoned((M, N), DT[dtype])
    on(a, b, c)
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, torch.relu(ref).to(DT[dtype]), rtol=tol, atol=tol * 4)
    assert torch.equal(c, off(a, b)), "the ping-pong kernel differs from the one-warpgroup kernel"
    for _ in range(5):
        assert torch.equal(on(a, b), c), "a repeated call of the ping-pong kernel gave another result"


@pytest.mark.parametrize("panel", [4, 16])
def test_ping_pong_gemm_with_rasterised_tiles_matches_torch_and_the_one_warpgroup_kernel(panel):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the gemm ping-pong is built for sm_90a (wgmma, TMA, setmaxnreg)")
    M, N, K = 3072, 2048, 512  # 24 x 16 tiles of 128 x 128 over 132 blocks
    prog = gemm_rastered.get_program(M, N, K, 128, 128, 64, 4, panel)
    on = tilelang.compile(prog, out_idx=[-1], target="cuda", pass_configs={KEY: True})
    assert "tl::pingpong_wait(" in on.get_kernel_source("cuda")
    off = tilelang.compile(prog, out_idx=[-1], target="cuda")
    a, b = randn(M, K, dtype=torch.float16), randn(K, N, dtype=torch.float16)
    c = poisoned((M, N), torch.float16)
    on(a, b, c)
    assert_written_and_close(c, (a.double() @ b.double()).half(), rtol=5e-3, atol=2e-2)
    assert torch.equal(c, off(a, b)), "the ping-pong kernel differs from the one-warpgroup kernel"

"""The wgmma GEMM on the GPU (issue 15 part 1): the quickstart GEMM + ReLU and its transposed variants through
``@jit(target="cuda")`` (sm_90a on a Hopper GPU) against torch, fp16 and bf16, several tiles, ragged shapes; each
with one wgmma group in flight across k-steps (the default) and with ``tl.cuda.wgmma_pipeline=False``
(wait_group 0 in every k-step)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wgmma_kernels import gemm_t  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
CASES = [  # M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
    (512, 512, 512, 128, 128, 64, False, False, 3, 128, "float16"),
    (1000, 1030, 1000, 128, 128, 64, False, False, 3, 128, "float16"),
    (1000, 1030, 1000, 128, 256, 64, False, False, 3, 256, "bfloat16"),
    (777, 515, 333, 128, 128, 64, False, False, 2, 256, "float16"),
    (512, 384, 256, 64, 64, 32, False, False, 2, 128, "bfloat16"),
    (512, 512, 512, 128, 128, 64, True, False, 2, 128, "float16"),
    (500, 520, 260, 128, 128, 64, False, True, 2, 256, "bfloat16"),
    (384, 256, 320, 128, 128, 32, True, True, 2, 128, "float16"),
    (256, 512, 256, 64, 256, 64, False, False, 2, 256, "float16"),
    # a group in flight with 4 and 5 stages, ragged K, transposed operands, a single k-step
    (1000, 1030, 1000, 128, 128, 64, False, False, 4, 128, "float16"),
    (777, 515, 1000, 128, 256, 64, False, False, 4, 256, "bfloat16"),
    (500, 520, 700, 128, 128, 32, True, True, 5, 256, "float16"),
    (384, 384, 50, 128, 128, 64, False, False, 3, 128, "float16"),
]
IN_FLIGHT = {"in_flight": None, "wait0": {"tl.cuda.wgmma_pipeline": False}}


def _kernel(case, pass_configs=None):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pass_configs)(gemm_t.factory)(*case)


@pytest.mark.parametrize("pipeline", list(IN_FLIGHT))
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:6])) + f"-s{c[8]}-t{c[9]}-{c[10]}"
                                              + ("-tA" if c[6] else "") + ("-tB" if c[7] else "") for c in CASES])
def test_wgmma_gemm_matches_torch(case, pipeline):
    M, N, K, ta, tb, dtype = case[0], case[1], case[2], case[6], case[7], case[10]
    kernel = _kernel(case, IN_FLIGHT[pipeline])
    src = kernel.get_kernel_source("cuda")
    if torch.cuda.get_device_capability() == (9, 0):
        assert "tl::wgmma_gemm_ss<" in src, "expected the wgmma path on a Hopper GPU"
        in_flight = pipeline == "in_flight" and case[8] >= 3
        assert ("tl::wgmma_drain<" in src) == in_flight
    dt = DT[dtype]
    a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
    c = poisoned((M, N), dt)
    kernel(a, b, c)
    ref = torch.relu((a.T if ta else a).float() @ (b.T if tb else b).float())
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, ref.to(dt), rtol=tol, atol=tol * 4)


def test_wgmma_off_gives_the_same_result_with_mma_sync():
    case = (640, 384, 320, 128, 128, 64, False, False, 3, 128, "float16")
    off = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.wgmma": False})(gemm_t.factory)(*case)
    on = _kernel(case)
    assert "tl::wgmma_gemm_ss" not in off.get_kernel_source("cuda")
    a, b = randn(640, 320, dtype=torch.float16), randn(320, 384, dtype=torch.float16)
    c_on, c_off = on(a, b), off(a, b)
    torch.testing.assert_close(c_on.float(), c_off.float(), rtol=5e-3, atol=2e-2)

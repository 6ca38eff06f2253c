"""Split-K as a general transform (tl.SplitKCUDA) on the GPU: decode-shaped ``T.gemm`` kernels with an epilogue
(bias + ReLU + cast), the automatic choice and forced factors, ragged M and N, repeated launches (the tile counters
must be back at zero after every launch), and the dequantised-GEMM variants of bench/gpu/dequant_variants.py that
the W4A16 recogniser does not take (split, with their nests lowered lane by lane from packed words:
tests/test_cuda_packed_nests.py), ragged shapes included.

Written without a GPU and not yet run on one (the CUDA side is checked by tests/test_cuda_split_k.py: nvcc and the
CUDA emulator); run with ``bash bench/gpu/test_suite.sh -k split_k`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from test_cuda_split_k import gemm_bias_relu  # noqa: E402


def _kernel(args, kwargs, split):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.split_k": split})(
        gemm_bias_relu.factory)(*args, **kwargs)


@pytest.mark.parametrize("M,N,K", [(16, 1024, 4096), (5, 1000, 4096), (13, 200, 8192)])
@pytest.mark.parametrize("split", [0, 1, 2, 8])
def test_split_gemm_with_epilogue_matches_torch(M, N, K, split):
    kernel = _kernel((M, N, K, 16, 128, 64), dict(num_stages=3), split)
    grid = kernel.artifact.extra["cuda"]["grid"]
    if split:
        assert grid[2] == split
    A, B = randn(M, K, dtype=torch.float16), randn(N, K, dtype=torch.float16)
    bias = randn(N)
    ref = torch.relu(A.double() @ B.double().T + bias.double())
    for _ in range(3):  # the counters reset by each launch's last blocks: every launch is the same
        C = poisoned((M, N), torch.float16)
        kernel(A, B, bias, C)
        assert_written_and_close(C, ref, 1e-2, 5e-2)


def test_split_results_are_deterministic_across_launches():
    kernel = _kernel((16, 1024, 4096, 16, 128, 64), dict(num_stages=3), 4)
    A, B, bias = randn(16, 4096, dtype=torch.float16), randn(1024, 4096, dtype=torch.float16), randn(1024)
    first = kernel(A, B, bias)
    for _ in range(5):
        assert torch.equal(kernel(A, B, bias), first)  # partials summed in rank order, whoever arrives last


@pytest.mark.parametrize("M,N,K", [(7, 1024, 4096), (5, 1000, 2048)])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_match_torch_at_a_decode_shape(v, M, N, K):
    kernel = dv.compile_variant(v, M, N, K)
    args = dv.inputs(v, M, N, K)
    got = kernel(*args)
    ref = dv.reference(v, args[0], *args[1:])
    assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

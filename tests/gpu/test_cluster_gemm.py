"""Thread-block clusters with TMA multicast on the GPU (issue 15, ``pass_configs={"tl.cuda.cluster": (x, y)}``,
``transform/cuda/sm90/cluster.py``): the warp-specialised wgmma GEMM launched in 2x1, 1x2 and 2x2 clusters, the
shared operand tile multicast in slices, in fp16 and bf16, ragged M/N/K, a grid the cluster does not divide
(rounded up: the extra blocks store nothing), persistent blocks in 1-D clusters walking the tiles together,
transposed operands, one and two consumer warpgroups, with TMA stores. Each against torch in float64 into a poisoned
output and bit for bit against the same program without clusters (the same wgmma on the same tiles). Repeated calls
must agree (a release that reached only one block would show as an intermittent wrong tile or a hang: the suite's
per-test watchdog)."""

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
BASE = {"tl.cuda.split_k": 1}  # a small grid would split K; the cluster is for the plain grid
CASES = [  # M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
    (1024, 1024, 1024, 128, 256, 64, False, False, 4, 256, "float16"),  # the H200 fp16 4096^3 default tile
    (2048, 2048, 512, 256, 128, 64, False, False, 4, 256, "bfloat16"),  # the bf16 default tile
    (1000, 1000, 520, 128, 128, 64, False, False, 3, 128, "float16"),  # ragged M, N and K (8 x 8 tiles)
    (1024, 768, 512, 128, 128, 64, True, True, 4, 256, "bfloat16"),  # both operands transposed
    (4096, 4096, 512, 128, 256, 64, False, False, 4, 256, "float16"),  # 512 tiles: persistent 1-D clusters
    (1000, 1400, 256, 128, 128, 64, False, False, 3, 128, "float16"),  # 11 x 8 tiles: the grid rounded up
]
SHAPES = [(2, 1), (1, 2), (2, 2)]


def _kernel(case, pass_configs=None):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **(pass_configs or {})})(
        gemm_t.factory)(*case)


def _operands(case):
    M, N, K, ta, tb, dtype = case[0], case[1], case[2], case[6], case[7], case[10]
    dt = DT[dtype]
    a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    return a, b, ref


def _needs_hopper(src, shape):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("clusters with TMA multicast need an sm_90 GPU")
    assert f"__cluster_dims__({shape[0]}, {shape[1]}, 1)" in src and "tl::tma_load_2d_multicast(" in src, \
        "expected a clustered kernel with multicast loads"


@pytest.mark.parametrize("extra", [{}, {"tl.cuda.tma_store": True}], ids=["register_epilogue", "tma_store"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:6])) + f"-s{c[8]}-t{c[9]}-{c[10]}"
                                              + ("-tA" if c[6] else "") + ("-tB" if c[7] else "") for c in CASES])
def test_clustered_gemm_matches_torch_and_the_unclustered_kernel(case, shape, extra):
    M, N, dtype = case[0], case[1], case[10]
    on = _kernel(case, {"tl.cuda.cluster": shape, **extra})
    src = on.get_kernel_source("cuda")
    _needs_hopper(src, (shape[0] * shape[1], 1) if "tile_iter" in src else shape)
    off = _kernel(case, extra)
    a, b, ref = _operands(case)
    c = poisoned((M, N), DT[dtype])
    on(a, b, c)
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, torch.relu(ref).to(DT[dtype]), rtol=tol, atol=tol * 4)
    assert torch.equal(c, off(a, b)), "the clustered kernel differs from the unclustered one"
    for _ in range(3):
        assert torch.equal(on(a, b), c), "a repeated call of the clustered kernel gave another result"

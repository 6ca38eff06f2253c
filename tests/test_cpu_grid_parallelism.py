"""The CPU grid: blocks run in parallel across cores, unless the whole grid is too little work to split."""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.transform.serialize_small_grids_cpu import MIN_PARALLEL_WORK


@tilelang.jit(out_idx=[-1])
def scale_rows(M, N, block_M):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 3.0

    return main


def test_tiny_grid_runs_serially_and_matches_torch():
    kernel = scale_rows(64, 64, 8)  # 4096 element updates in all: less than a fork/join is worth
    assert 64 * 64 < MIN_PARALLEL_WORK
    assert "T.parallel" not in kernel.get_kernel_source("tir")
    x = torch.randn(64, 64)
    torch.testing.assert_close(kernel(x), 3 * x)


def test_large_grid_is_a_parallel_loop_and_matches_torch():
    kernel = scale_rows(1000, 512, 8)  # ragged: 125 blocks of 8 rows
    assert 1000 * 512 >= MIN_PARALLEL_WORK
    assert "T.parallel" in kernel.get_kernel_source("tir")
    x = torch.randn(1000, 512)
    torch.testing.assert_close(kernel(x), 3 * x)

"""``tl.cuda.tma_mma_tiles`` on the GPU: the quickstart GEMM+ReLU at 16 x 64 x 64 tiles loaded by TMA (SWIZZLE_128B
boxes into the mma.sync tiles' XOR layout, mbarriers) matches torch, ragged M, N and K included, fp16 and bf16,
over repeated launches (the ring's barrier phases wrap)."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.quickstart import matmul_relu, reference


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,stages", [((16, 8192, 8192), 8), ((13, 1000, 1000), 6), ((16, 2048, 4096), 16)],
                         ids=["decode-s8", "ragged-s6", "s16"])
def test_tma_loaded_16_row_tiles_give_torchs_result(shape, stages, dtype):
    M, N, K = shape
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(M + N + K + stages)
    a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
    b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
    kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.tma_mma_tiles": True})(
        matmul_relu.factory)(M, N, K, 16, 64, 64, stages, 128, dtype, "float32")
    assert "tl::tma_load_2d(" in kernel.get_kernel_source()
    ref = reference(a, b).float()
    for _ in range(3):
        torch.testing.assert_close(kernel(a, b).float(), ref, rtol=2e-2, atol=2e-1 if dtype == "float16" else 5e-1)

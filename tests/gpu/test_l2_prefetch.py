"""``tl.cuda.l2_prefetch`` on the GPU: the quickstart GEMM+ReLU fed by cp.async (16-row mma.sync tiles, ragged N
and K included) with every prefetch size matches torch; the hint changes caching, never results."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.quickstart import matmul_relu, reference


@pytest.mark.parametrize("prefetch", [0, 64, 128, 256])
@pytest.mark.parametrize("shape", [(16, 2048, 4096), (13, 1000, 1000)], ids=["16x2048x4096", "13x1000x1000"])
def test_every_prefetch_size_gives_torchs_result(prefetch, shape):
    M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(M + N + K + prefetch)
    a = torch.randn(M, K, device="cuda", generator=g).half()
    b = torch.randn(K, N, device="cuda", generator=g).half()
    kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.l2_prefetch": prefetch})(
        matmul_relu.factory)(M, N, K, 16, 64, 128, 4, 128, "float16", "float32")
    torch.testing.assert_close(kernel(a, b).float(), reference(a, b).float(), rtol=2e-2, atol=2e-1)

"""On the GPU: a bfloat16 scalar parameter reaches the kernel rounded to nearest even, as torch rounds it (the
launcher used to pass the truncated float32 bits). Not yet run on a GPU."""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1], target="cuda")
def scaled(N):
    @T.prim_func
    def main(alpha: T.bfloat16, X: T.Tensor((N,), "bfloat16"), Y: T.Tensor((N,), "bfloat16")):
        with T.Kernel(1, threads=128) as _bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * alpha

    return main


def test_cuda_bf16_scalar_parameter_is_rounded_like_torch():
    kernel = scaled(128)
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(128, generator=g) * 4).to(torch.bfloat16).cuda()
    for alpha in [1.01171875, 1.0 + 2**-8 + 2**-20, -3.3, 0.1]:
        want = x * torch.tensor(alpha, dtype=torch.bfloat16, device="cuda")
        torch.testing.assert_close(kernel(alpha, x), want, rtol=0, atol=0)

"""LayerNorm with weight and bias, classic spelling: mean and variance by ``T.reduce_sum`` over a row fragment,
the affine part reading the global ``W`` / ``Bias`` directly inside ``T.Parallel``."""

import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=[-1])
def layer_norm(M, N, blk_m, eps=1e-5, dtype="float32"):
    @T.prim_func
    def main(
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        Bias: T.Tensor((N,), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
            x = T.alloc_fragment((blk_m, N), dtype)
            sq = T.alloc_fragment((blk_m, N), dtype)
            mean = T.alloc_fragment((blk_m,), dtype)
            rstd = T.alloc_fragment((blk_m,), dtype)
            T.copy(X[bx * blk_m, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(blk_m):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] - mean[i]
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rstd, dim=1)
            for i in T.Parallel(blk_m):
                rstd[i] = T.rsqrt(rstd[i] / N + eps)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = x[i, j] * rstd[i] * W[j] + Bias[j]
            T.copy(x, Y[bx * blk_m, 0])

    return main


def run(device):
    M, N = 100, 192  # M not a multiple of blk_m: the last block is ragged
    x = torch.randn(M, N, device=device) * 3 + 1
    w, b = torch.randn(N, device=device), torch.randn(N, device=device)
    y = layer_norm(M, N, 8)(x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (N,), w, b, eps=1e-5), rtol=1e-4, atol=1e-4)

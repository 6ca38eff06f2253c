"""RMSNorm, eager spelling (TileLang's examples/norm/rms_norm.py): a whole row per fragment, TileLang's slice
copies ``A[bx * blk_m:(bx + 1) * blk_m, :]``, ``T.rsqrt``; also compiled by sizes with ``.compile``."""

import tilelang
import tilelang.language as T
import torch


@tilelang.jit
def rms_norm(A, blk_m):
    M, N = T.const("M, N")
    dtype = T.float

    A: T.Tensor((M, N), dtype)
    B = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
        A_local = T.alloc_fragment((blk_m, N), dtype)
        A_pow_local = T.alloc_fragment((blk_m, N), dtype)
        A_powsum = T.alloc_fragment((blk_m,), dtype)

        T.copy(A[bx * blk_m:(bx + 1) * blk_m, :], A_local)
        for i, j in T.Parallel(blk_m, N):
            A_pow_local[i, j] = A_local[i, j] * A_local[i, j]
        T.reduce_sum(A_pow_local, A_powsum, dim=1)
        for i in T.Parallel(blk_m):
            A_powsum[i] = T.rsqrt(A_powsum[i] / N + 1e-12)
        for i, j in T.Parallel(blk_m, N):
            A_local[i, j] *= A_powsum[i]
        T.copy(A_local, B[bx * blk_m:(bx + 1) * blk_m, :])

    return B


def ref_program(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-12)


def run(device):
    M, N = 96, 256
    kernel = rms_norm.compile(M=M, N=N, blk_m=8)
    a = torch.randn(M, N, device=device)
    torch.testing.assert_close(kernel(a), ref_program(a), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rms_norm(a, 8), ref_program(a), rtol=1e-5, atol=1e-5)

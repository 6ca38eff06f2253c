"""GEMV ``C = B @ A`` (TileLang's examples/gemv, tile form), eager spelling: a block owns ``BLOCK_N`` rows of B,
products accumulate in a fragment over the K loop and ``T.reduce_sum`` folds them; fp16 in, fp32 accumulate."""

import tilelang as tl
import tilelang.language as T
import torch


@tl.jit
def gemv(A, B, BLOCK_N: int, BLOCK_K: int, dtype: T.dtype = T.float16, accum_dtype: T.dtype = T.float):
    N, K = T.const("N, K")
    A: T.Tensor((K,), dtype)
    B: T.Tensor((N, K), dtype)
    C = T.empty((N,), dtype)

    with T.Kernel(T.ceildiv(N, BLOCK_N), threads=128) as bn:
        A_shared = T.alloc_shared((BLOCK_K,), dtype)
        B_shared = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
        acc = T.alloc_fragment((BLOCK_N, BLOCK_K), accum_dtype)
        C_local = T.alloc_fragment((BLOCK_N,), accum_dtype)
        T.clear(acc)
        for bk in T.Pipelined(T.ceildiv(K, BLOCK_K), num_stages=2):
            T.copy(A[bk * BLOCK_K], A_shared)
            T.copy(B[bn * BLOCK_N, bk * BLOCK_K], B_shared)
            for i, k in T.Parallel(BLOCK_N, BLOCK_K):
                acc[i, k] += T.cast(A_shared[k], accum_dtype) * T.cast(B_shared[i, k], accum_dtype)
        T.reduce_sum(acc, C_local, dim=1)
        T.copy(C_local, C[bn * BLOCK_N])

    return C


def run(device):
    N, K = 320, 512
    a = torch.randn(K, device=device, dtype=torch.float16)
    b = torch.randn(N, K, device=device, dtype=torch.float16)
    c = gemv(a, b, 32, 64)
    torch.testing.assert_close(c.float(), b.float() @ a.float(), rtol=1e-2, atol=2e-2)

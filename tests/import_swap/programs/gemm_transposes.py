"""GEMM with transposed operands (TileLang's test_tilelang_kernel_gemm idiom): the layout of A and B is a
compile-time choice of the factory, the shapes and copies follow it, ``T.gemm(..., trans_A, trans_B)``."""

import itertools

import tilelang
import tilelang.language as T
import torch


@tilelang.jit(out_idx=-1)
def matmul(M, N, K, block_M, block_N, block_K, trans_A, trans_B, in_dtype, out_dtype, accum_dtype):
    A_shape = (K, M) if trans_A else (M, K)
    B_shape = (N, K) if trans_B else (K, N)
    A_shared_shape = (block_K, block_M) if trans_A else (block_M, block_K)
    B_shared_shape = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, in_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared(A_shared_shape, in_dtype)
            B_shared = T.alloc_shared(B_shared_shape, in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, trans_A, trans_B)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def run(device):
    M, N, K = 128, 96, 64
    for trans_A, trans_B in itertools.product([False, True], repeat=2):
        kernel = matmul(M, N, K, 32, 32, 32, trans_A, trans_B, T.float16, T.float32, T.float32)
        a = torch.randn(*((K, M) if trans_A else (M, K)), device=device, dtype=getattr(torch, T.float16))
        b = torch.randn(*((N, K) if trans_B else (K, N)), device=device, dtype=getattr(torch, T.float16))
        c = kernel(a, b)
        ref = (a.T if trans_A else a).float() @ (b.T if trans_B else b).float()
        torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-3)

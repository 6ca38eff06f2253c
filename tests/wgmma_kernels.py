"""GEMM programs for the wgmma tests (CPU codegen checks and the GPU suite): the quickstart GEMM + ReLU as the
README spells it, and a variant with transposed operands (``T.gemm(..., transpose_A=, transpose_B=)``)."""

from __future__ import annotations

from typing import Any

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def gemm_t(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, trans_A: bool, trans_B: bool,
           num_stages: int = 2, threads: int = 128, dtype: str = "float16", relu: bool = True) -> Any:
    """``C = relu(op(A) @ op(B))`` with A stored (K, M) when ``trans_A`` and B stored (N, K) when ``trans_B``;
    C is ``dtype``, accumulated in float32."""
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    as_shape = (block_K, block_M) if trans_A else (block_M, block_K)
    bs_shape = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_s)
                else:
                    T.copy(A[by * block_M, k * block_K], A_s)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_A, transpose_B=trans_B)
            if relu:
                for i, j in T.Parallel(block_M, block_N):
                    C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main

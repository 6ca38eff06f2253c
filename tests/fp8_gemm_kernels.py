"""The float8 GEMM program of the fp8 wgmma tests (CPU and nvcc checks here, the GPU twins in tests/gpu/, the
benchmark in bench/gpu/fp8_gemm.py): the quickstart GEMM with float8 A and B (each float8_e4m3fn or float8_e5m2),
a float32 accumulator and a float16/bfloat16 (or float32) C. ``trans_B=True`` stores B as N x K, the K-major form
fp8 wgmma reads; ``trans_B=False`` (B stored K x N) is the form it cannot take."""

from __future__ import annotations

from typing import Any

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def fp8_gemm(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, a_dtype: str = "float8_e4m3fn",
             b_dtype: str = "float8_e4m3fn", out_dtype: str = "bfloat16", num_stages: int = 3, threads: int = 128,
             trans_B: bool = True, relu: bool = False) -> Any:
    """``C = A @ op(B)`` (``op(B) = B.T`` when ``trans_B``), float8 in, float32 accumulation, ``out_dtype`` out."""
    b_shape = (N, K) if trans_B else (K, N)
    bs_shape = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def main(A: T.Tensor((M, K), a_dtype), B: T.Tensor(b_shape, b_dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), a_dtype)
            B_s = T.alloc_shared(bs_shape, b_dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=trans_B)
            if relu:
                for i, j in T.Parallel(block_M, block_N):
                    C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main

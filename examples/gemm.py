"""Matrix multiply examples: TileLang's quickstart ``matmul_relu`` and a plain ``matmul``.

This is the first kernel most people write in TileLang, spelled exactly as in its quickstart, so it doubles as
a check that classic TileLang code compiles unchanged for the CPU. On the CPU each block of the grid is one unit
of parallel work (an OpenMP task) and ``T.gemm`` on the shared tiles becomes a register-blocked micro-kernel;
``block_M``/``block_N``/``block_K`` pick how much of A and B each block keeps hot in cache.

Run ``python examples/gemm.py`` to check both kernels against torch.
"""

from __future__ import annotations

from typing import Any

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")
# Block sizes that did best for fp32 on a 2-core AVX-512 machine (see bench/cpu_kernels.py and BENCHMARKS.md); on
# CUDA a 128-deep fp32 k tile would not fit shared memory twice (2 stages x 128 KiB), so k tiles are 32 deep there.
DEFAULT_BLOCKS = ({"block_M": 128, "block_N": 128, "block_K": 128} if DEVICE == "cpu"
                  else {"block_M": 128, "block_N": 128, "block_K": 32})


@tilelang.jit(out_idx=[-1])
def matmul_relu(M, N, K, block_M, block_N, block_K, num_stages=2, threads=128, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M, block_N, block_K, num_stages=2, threads=128, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main


def reference_relu(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """torch reference for :func:`matmul_relu`."""
    return torch.relu(A @ B)


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """torch reference for :func:`matmul`."""
    return A @ B


def check(kernel: Any, ref: Any, rtol: float = 1e-3, atol: float = 1e-3) -> None:
    kernel.get_profiler().assert_allclose(ref, rtol=rtol, atol=atol, max_mismatched_ratio=0)


def main() -> None:
    for M, N, K in ((1024, 1024, 1024), (300, 200, 130)):  # the second shape is ragged on purpose
        k_relu = matmul_relu(M, N, K, **DEFAULT_BLOCKS)
        check(k_relu, reference_relu)
        k_plain = matmul(M, N, K, **DEFAULT_BLOCKS)
        check(k_plain, reference)
        print(f"matmul_relu / matmul {M}x{N}x{K}: OK")
    k = matmul_relu(1024, 1024, 1024, **DEFAULT_BLOCKS)
    prof = k.get_profiler()
    c = torch.empty(1024, 1024, device=DEVICE)  # preallocated output for both sides: time the math, not page faults
    ms = prof.do_bench(lambda a, b: k(a, b, c))
    ref_ms = prof.do_bench(lambda a, b: torch.mm(a, b, out=c).relu_())
    flops = 2 * 1024**3
    print(f"matmul_relu 1024^3: {ms:.3f} ms ({flops / ms / 1e6:.1f} GFLOP/s); torch {ref_ms:.3f} ms")


if __name__ == "__main__":
    main()

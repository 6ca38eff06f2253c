"""Element-wise addition ``C = A + B`` over 2-D tensors, in the two styles TileLang programs use.

``add_tiled`` stages tiles through fragments with ``T.copy`` (the style that carries over to GPUs, where the
copies become vectorised global loads); ``add_direct`` indexes the global tensors straight from a
``T.Parallel`` nest. Both are memory-bound: on the CPU the point is to keep the innermost loop contiguous and
long enough for LLVM to emit full-width vector loads/stores, and the block small enough to stay in L1/L2.

Run ``python examples/elementwise.py`` to check both against torch.
"""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")


# Best on the 2-core AVX-512 dev machine for 4096x4096 fp32 (see BENCHMARKS.md): a few full rows per block.
DEFAULT_BLOCKS = {"block_M": 8, "block_N": 4096}


@tilelang.jit(out_idx=[-1])
def add_tiled(M, N, block_M=8, block_N=1024, threads=128, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_f = T.alloc_fragment((block_M, block_N), dtype)
            B_f = T.alloc_fragment((block_M, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], A_f)
            T.copy(B[by * block_M, bx * block_N], B_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = A_f[i, j] + B_f[i, j]
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main


@tilelang.jit(out_idx=[-1])
def add_direct(M, N, block_M=8, block_N=1024, threads=128, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j])
    return main


def reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """torch reference: ``A + B``."""
    return A + B


def main() -> None:
    for M, N in ((4096, 4096), (1000, 1030)):  # the second shape is ragged on purpose
        for factory in (add_tiled, add_direct):
            k = factory(M, N, block_M=8, block_N=1024)
            k.get_profiler().assert_allclose(reference, rtol=0, atol=0, max_mismatched_ratio=0)
            print(f"{factory.__name__} {M}x{N}: OK")
    k = add_direct(4096, 4096, **DEFAULT_BLOCKS)
    prof = k.get_profiler()
    c = torch.empty(4096, 4096, device=DEVICE)  # preallocated output for both sides: time the math, not page faults
    ms = prof.do_bench(lambda a, b: k(a, b, c))
    ref_ms = prof.do_bench(lambda a, b: torch.add(a, b, out=c))
    gbytes = 3 * 4096 * 4096 * 4 / 1e9
    print(f"add_direct 4096x4096: {ms:.3f} ms ({gbytes / ms * 1e3:.1f} GB/s); torch {ref_ms:.3f} ms")


if __name__ == "__main__":
    main()

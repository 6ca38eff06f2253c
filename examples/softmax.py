"""Row softmax ``y = softmax(x, dim=-1)``: each block holds ``block_M`` full rows in a fragment.

The classic tile program: ``T.reduce_max`` along the row, ``exp(x - max)`` in a ``T.Parallel`` nest,
``T.reduce_sum``, then the rows times the reciprocal of their sum, stored straight to ``Y`` (a separate scaling
pass plus ``T.copy`` out costs one more sweep over the tile). A row of N floats lives in the fragment
throughout, so x is read from memory once and y written once; on the CPU the reductions along the contiguous
dimension use SIMD partial accumulators and the element-wise loops are vectorised by LLVM. ``exp(x - max)``
is computed as ``exp2(x * log2(e) - max * log2(e))`` — the form TileLang's own softmax uses (one FMA).

Run ``python examples/softmax.py`` to check it against ``torch.softmax``.
"""

from __future__ import annotations

import math

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")


LOG2E = math.log2(math.e)

# Good on the 2-core AVX-512 dev machine (see BENCHMARKS.md): one row per block (a 4-16 KiB tile in L1).
DEFAULT_BLOCK_M = 1


@tilelang.jit(out_idx=[-1])
def softmax(M, N, block_M=DEFAULT_BLOCK_M, threads=128, dtype="float32", accum_dtype="float32"):
    scale = LOG2E

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), accum_dtype)
            row_max = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2(x[i, j] * scale - row_max[i] * scale)
            T.reduce_sum(x, row_sum, dim=1)
            for i in T.Parallel(block_M):
                row_sum[i] = 1.0 / row_sum[i]
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = T.cast(x[i, j] * row_sum[i], dtype)
    return main


def reference(X: torch.Tensor) -> torch.Tensor:
    """torch reference: ``softmax(X, dim=-1)``."""
    return torch.softmax(X, dim=-1)


def main() -> None:
    for M, N in ((4096, 4096), (8192, 1024), (1001, 333)):  # the last shape is ragged on purpose
        k = softmax(M, N)
        k.get_profiler().assert_allclose(reference, rtol=1e-5, atol=1e-6, max_mismatched_ratio=0)
        print(f"softmax {M}x{N}: OK")
    k = softmax(4096, 4096)
    prof = k.get_profiler()
    y = torch.empty(4096, 4096, device=DEVICE)  # preallocated output for both sides: time the math, not page faults
    ms = prof.do_bench(lambda x: k(x, y))
    ref_ms = prof.do_bench(lambda x: torch.softmax(x, -1, out=y))
    gbytes = 2 * 4096 * 4096 * 4 / 1e9
    print(f"softmax 4096x4096: {ms:.3f} ms ({gbytes / ms * 1e3:.1f} GB/s); torch {ref_ms:.3f} ms")


if __name__ == "__main__":
    main()

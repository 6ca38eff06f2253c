"""Matrix-vector product ``y = A @ x`` with ``A`` of shape (N, K): the decode-time shape of an LLM layer.

Each block owns ``block_N`` rows of A. It walks K in ``block_K`` steps, multiplying an A tile by the matching
slice of x into a ``(block_N, block_K)`` accumulator tile with a vectorised ``T.Parallel`` nest (A and x are read
straight from global memory; guards appear only where a ragged K needs them), and reduces the accumulator
along K once at the end with ``T.reduce_sum``. GEMV reads every element of A once, so it is memory-bound: the
target is the machine's read bandwidth, not its FLOP rate.

Run ``python examples/gemv.py`` to check it against torch.
"""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")


# Good on the 2-core AVX-512 dev machine for 8192x8192 fp32 (see BENCHMARKS.md).
# An 8x64 accumulator is 32 vectors of 16 floats: small enough for LLVM to keep it in zmm registers.
DEFAULT_BLOCKS = {"block_N": 8, "block_K": 64}


@tilelang.jit(out_idx=[-1])
def gemv(N, K, block_N=8, block_K=64, threads=128, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N, K), dtype), x: T.Tensor((K,), dtype), y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bn:
            acc = T.alloc_fragment((block_N, block_K), accum_dtype)
            y_f = T.alloc_fragment((block_N,), accum_dtype)
            T.clear(acc)
            for k in T.serial(T.ceildiv(K, block_K)):
                for i, j in T.Parallel(block_N, block_K):
                    acc[i, j] += T.cast(A[bn * block_N + i, k * block_K + j], accum_dtype) * T.cast(
                        x[k * block_K + j], accum_dtype)
            T.reduce_sum(acc, y_f, dim=1)
            T.copy(y_f, y[bn * block_N])
    return main


def reference(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """torch reference: ``A @ x``."""
    return A @ x


def main() -> None:
    for N, K in ((8192, 8192), (1000, 1030)):  # the second shape is ragged on purpose
        k = gemv(N, K, **DEFAULT_BLOCKS)
        k.get_profiler().assert_allclose(reference, rtol=1e-3, atol=1e-3, max_mismatched_ratio=0)
        print(f"gemv {N}x{K}: OK")
    k = gemv(8192, 8192, **DEFAULT_BLOCKS)
    prof = k.get_profiler()
    y = torch.empty(8192, device=DEVICE)
    ms = prof.do_bench(lambda a, x: k(a, x, y))
    ref_ms = prof.do_bench(lambda a, x: torch.mv(a, x, out=y))
    gbytes = 8192 * 8192 * 4 / 1e9
    print(f"gemv 8192x8192: {ms:.3f} ms ({gbytes / ms * 1e3:.1f} GB/s); torch {ref_ms:.3f} ms")


if __name__ == "__main__":
    main()

"""RMSNorm ``y = x * rsqrt(mean(x^2, dim=-1) + eps) * w`` over the rows of a 2-D tensor.

The normalisation layer of most current LLMs, and a good probe of the row-reduction path: each block squares
``block_M`` full rows of ``X`` into a fragment, ``T.reduce_sum``s it along the contiguous dimension (SIMD
partial sums on the CPU), and writes the scaled rows in one vectorised pass. ``X`` and ``w`` are read straight
from global memory inside the ``T.Parallel`` nests (the second read of the rows hits the cache; no bounds
guards are needed: ``j < N`` is provable, and a ragged M is guarded by the compiler). Staging the rows in a
fragment with ``T.copy`` first measured ~10% slower on the CPU: one more tile competing for L1.

Run ``python examples/rmsnorm.py`` to check it against ``torch.nn.functional.rms_norm``.
"""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")


EPS = 1e-6
# Good on the 2-core AVX-512 dev machine (see BENCHMARKS.md).
DEFAULT_BLOCK_M = 8


@tilelang.jit(out_idx=[-1])
def rms_norm(M, N, block_M=DEFAULT_BLOCK_M, eps=EPS, threads=128, dtype="float32", accum_dtype="float32"):
    inv_n = 1.0 / N

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            sq = T.alloc_fragment((block_M, N), accum_dtype)
            ss = T.alloc_fragment((block_M,), accum_dtype)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = T.cast(X[bx * block_M + i, j], accum_dtype) * T.cast(X[bx * block_M + i, j], accum_dtype)
            T.reduce_sum(sq, ss, dim=1)
            for i in T.Parallel(block_M):
                ss[i] = T.rsqrt(ss[i] * inv_n + eps)
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = T.cast(X[bx * block_M + i, j] * ss[i] * W[j], dtype)
    return main


def reference(X: torch.Tensor, W: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """torch reference: ``rms_norm(X, (N,), W, eps)``."""
    return torch.nn.functional.rms_norm(X, (X.shape[-1],), W, eps)


def main() -> None:
    for M, N in ((4096, 4096), (1001, 333)):  # the second shape is ragged on purpose
        k = rms_norm(M, N)
        k.get_profiler().assert_allclose(reference, rtol=1e-4, atol=1e-5, max_mismatched_ratio=0)
        print(f"rms_norm {M}x{N}: OK")
    k = rms_norm(4096, 4096)
    prof = k.get_profiler()
    y = torch.empty(4096, 4096, device=DEVICE)  # preallocated kernel output (torch's rms_norm has no out=)
    ms = prof.do_bench(lambda x, w: k(x, w, y))
    ref_ms = prof.do_bench(reference)
    gbytes = 2 * 4096 * 4096 * 4 / 1e9
    print(f"rms_norm 4096x4096: {ms:.3f} ms ({gbytes / ms * 1e3:.1f} GB/s); torch {ref_ms:.3f} ms")


if __name__ == "__main__":
    main()

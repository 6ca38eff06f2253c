"""W4A16 dequantized GEMM ``C = A @ dequant(B)^T``: int4 weights packed two per byte, fp16 (CPU: fp32) scales.

Weight layout (the same on every target):

* ``B``: ``uint8`` of shape ``(N, K // 2)``, one row per output channel. Byte ``B[n, k // 2]`` holds weight
  ``(n, k)``: even ``k`` in the low nibble, odd ``k`` in the high nibble. A nibble ``q`` in ``[0, 15]`` is the
  signed int4 value ``q - 8``.
* ``Scale``: shape ``(N, K // group_size)``; ``group_size=-1`` means one scale per output channel
  (shape ``(N, 1)``), ``group_size=128`` one per channel and group of 128 consecutive ``k``.
* ``W[n, k] = (q[n, k] - 8) * Scale[n, k // group_size]`` and ``C = A @ W^T`` (``A`` is ``(M, K)``).

The program: each block owns a ``block_M x block_N`` tile of C. For each K step it copies the A tile and the
packed B tile (``block_N x block_K / 2`` bytes) into shared memory, unpacks the nibbles with shifts and masks in a
``T.Parallel`` nest (cast to int, subtract 8, multiply by the scale) into a ``block_N x block_K`` tile of
``dtype``, and feeds that to ``T.gemm(..., transpose_B=True)``. The weights cross memory at a quarter of fp16's
bytes (an eighth of fp32's), which is what matters in the decode shape (``M`` = 1..16), where a GEMM is
memory-bound.

Run ``python examples/dequant_gemm.py`` to check it against torch on the dequantized weights.
"""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.profiler import bench, bench_cuda
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")


@tilelang.jit(out_idx=[-1])
def dequant_gemm(M, N, K, group_size=-1, block_M=16, block_N=64, block_K=128, num_stages=2, threads=128,
                 dtype="float32", accum_dtype="float32"):
    group = K if group_size == -1 else group_size
    if K % 2 != 0 or K % group != 0:
        raise ValueError(f"dequant_gemm: K={K} must be even and a multiple of group_size={group}")
    num_groups = K // group

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"),
             Scale: T.Tensor((N, num_groups), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_packed = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_packed)
                for i, j in T.Parallel(block_N, block_K):
                    q = (B_packed[i, j // 2] >> (4 * (j % 2))) & 0xF  # unsigned nibble 0..15
                    B_shared[i, j] = (T.cast(T.cast(q, "int32") - 8, dtype)
                                      * Scale[bx * block_N + i, (k * block_K + j) // group])
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def quantize(W: torch.Tensor, group_size: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int4 quantisation of ``W`` (N, K) into the kernel's layout: returns ``(B_packed, Scale)``."""
    N, K = W.shape
    group = K if group_size == -1 else group_size
    Wg = W.float().reshape(N, K // group, group)
    scale = Wg.abs().amax(dim=-1).clamp_min(1e-8) / 7.0
    q = torch.clamp(torch.round(Wg / scale[..., None]), -8, 7).to(torch.int32).reshape(N, K) + 8
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    return packed.contiguous(), scale.to(W.dtype).contiguous()


def dequantize(B: torch.Tensor, Scale: torch.Tensor) -> torch.Tensor:
    """The weights the kernel computes with: ``(q - 8) * scale`` as an (N, K) tensor of Scale's dtype."""
    N, half = B.shape
    K = 2 * half
    q = torch.stack([(B & 0xF), (B >> 4)], dim=-1).reshape(N, K).to(torch.int32) - 8
    group = K // Scale.shape[1]
    return (q.to(torch.float32) * Scale.float().repeat_interleave(group, dim=1)).to(Scale.dtype)


def random_packed(N: int, K: int, group_size: int = -1, dtype: torch.dtype = torch.float32,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random packed weights (every byte value possible) and positive random scales."""
    num_groups = 1 if group_size == -1 else K // group_size
    B = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=generator)
    Scale = (torch.rand(N, num_groups, generator=generator) * 0.1 + 0.01).to(dtype)
    return B, Scale


def reference(A: torch.Tensor, B: torch.Tensor, Scale: torch.Tensor) -> torch.Tensor:
    """torch reference: ``A @ dequantize(B, Scale)^T``."""
    return (A.float() @ dequantize(B, Scale).float().T).to(A.dtype)


def main() -> None:
    for M, N, K, group_size in ((64, 256, 512, -1), (64, 256, 512, 128), (1, 512, 1024, 128), (100, 200, 384, -1)):
        kernel = dequant_gemm(M, N, K, group_size)
        A = torch.randn(M, K)
        B, Scale = random_packed(N, K, group_size)
        out = kernel(A.to(DEVICE), B.to(DEVICE), Scale.to(DEVICE)).cpu()
        torch.testing.assert_close(out, reference(A, B, Scale), rtol=1e-4, atol=1e-3)
        print(f"dequant_gemm M={M} N={N} K={K} group_size={group_size}: OK")
    M, N, K = 16, 4096, 4096
    kernel = dequant_gemm(M, N, K, 128)
    A = torch.randn(M, K)
    B, Scale = random_packed(N, K, 128)
    W = dequantize(B, Scale)
    A, B, Scale, W = (t.to(DEVICE) for t in (A, B, Scale, W))
    C = torch.empty(M, N, device=DEVICE)
    timer = bench_cuda if DEVICE == "cuda" else bench  # CUDA events time the GPU, not the launch
    ms = timer(lambda: kernel(A, B, Scale, C))
    ref_ms = timer(lambda: torch.mm(A, W.T, out=C))
    print(f"dequant_gemm {M}x{N}x{K} (group 128): {ms:.3f} ms, {N * K / 2 / ms / 1e6:.1f} GB/s of int4 weights; "
          f"torch.mm on fp32 weights {ref_ms:.3f} ms, {N * K * 4 / ref_ms / 1e6:.1f} GB/s")


if __name__ == "__main__":
    main()

"""CPU lowering added for attention and dequantized GEMM: the register transpose that packs a transposed B for
``T.gemm``, and the split of ``T.Parallel`` loops whose variable is divided by a constant (nibble unpacking).
Each is checked against torch, and against the lowered TIR so a silent fallback to the slow path shows up."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend import cpu as cpu_backend


@tilelang.jit(out_idx=[-1])
def gemm_bt(M, N, K, block_M, block_N, block_K):
    """C = A @ B^T with B stored (N, K), as attention's Q K^T and the dequantized weights are."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((N, K), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_N, block_K), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("vector_bytes", [16, 32, 64], ids=["sse", "avx2", "avx512"])
@pytest.mark.parametrize("M,N,K,blocks", [
    (64, 64, 64, (32, 32, 32)),   # multiples of every SIMD width: register transpose
    (40, 72, 90, (16, 48, 24)),   # block_K=24 is not a multiple of 16 lanes: element-wise pack where it must
])
def test_transposed_b_gemm_for_every_simd_width(monkeypatch, vector_bytes, M, N, K, blocks):
    monkeypatch.setenv("TILELANG_CORE_DISABLE_CACHE", "1")  # the lane width is not part of the cache keys
    monkeypatch.setattr(gemm_bt, "_memory", {})
    monkeypatch.setattr(cpu_backend, "vector_bytes", lambda: vector_bytes)
    kernel = gemm_bt(M, N, K, *blocks)
    a, b = torch.randn(M, K), torch.randn(N, K)
    torch.testing.assert_close(kernel(a, b), a @ b.T, rtol=1e-4, atol=1e-4)
    tir = kernel.get_kernel_source("tir")
    lanes = vector_bytes // 4
    expect_shuffles = blocks[1] % lanes == 0 and blocks[2] % lanes == 0
    assert ("T.Shuffle" in tir) == expect_shuffles, tir


@tilelang.jit(out_idx=[-1])
def unpack(N, K, per_byte):
    """Sub-byte fields spelled TileLang's way: element j of a row is field j % per_byte of byte j // per_byte."""
    bits = 8 // per_byte
    mask = (1 << bits) - 1

    @T.prim_func
    def main(B: T.Tensor((N, K // per_byte), "uint8"), W: T.Tensor((N, K), "float32")):
        with T.Kernel(T.ceildiv(N, 8)) as bx:
            packed = T.alloc_shared((8, K // per_byte), "uint8")
            w = T.alloc_fragment((8, K), "float32")
            T.copy(B[bx * 8, 0], packed)
            for i, j in T.Parallel(8, K):
                w[i, j] = T.cast((packed[i, j // per_byte] >> (bits * (j % per_byte))) & mask, "float32")
            T.copy(w, W[bx * 8, 0])

    return main


def reference_unpack(B: torch.Tensor, per_byte: int) -> torch.Tensor:
    bits = 8 // per_byte
    fields = [(B >> (bits * f)) & ((1 << bits) - 1) for f in range(per_byte)]
    return torch.stack(fields, dim=-1).reshape(B.shape[0], -1).float()


@pytest.mark.parametrize("per_byte", [2, 4, 8])
def test_div_mod_parallel_loop_is_split_and_matches_torch(per_byte):
    N, K = 20, 64
    B = torch.randint(0, 256, (N, K // per_byte), dtype=torch.uint8)
    kernel = unpack(N, K, per_byte)
    assert torch.equal(kernel(B), reference_unpack(B, per_byte))
    lowered = kernel.trace.stage("tl.SplitDivModCPU").text
    assert f"for j_i in T.unroll({per_byte})" in lowered and f"j // {per_byte}" not in lowered


@tilelang.jit(out_idx=[-1])
def mixed_divisors(N):
    """j // 2 and j % 4 in one loop: no single split fits, the loop is left as written."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for j in T.Parallel(N):
                Y[j] = X[j // 2] + T.cast(j % 4, "float32")

    return main


def test_loops_with_several_divisors_are_left_alone():
    x = torch.randn(48)
    j = torch.arange(48)
    kernel = mixed_divisors(48)
    torch.testing.assert_close(kernel(x), x[j // 2] + (j % 4).float())
    assert "j_i" not in kernel.trace.stage("tl.SplitDivModCPU").text


@tilelang.jit(out_idx=[-1])
def odd_extent(N):
    @T.prim_func
    def main(X: T.Tensor((N // 2 + 1,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            for j in T.Parallel(N):
                Y[j] = X[j // 2] * T.cast(j % 2 + 1, "float32")

    return main


def test_extent_not_divisible_by_the_divisor_is_left_alone():
    x = torch.randn(19)
    j = torch.arange(37)
    kernel = odd_extent(37)
    torch.testing.assert_close(kernel(x), x[j // 2] * (j % 2 + 1).float())
    assert "j_i" not in kernel.trace.stage("tl.SplitDivModCPU").text


@tilelang.jit(out_idx=[-1])
def decode_gemm_bt(M, N, K, block_M, block_N, block_K, clear_each_step=False):
    """C = A @ B^T with one or two rows per tile (decode): the dot-product kernel."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((N, K), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_N, block_K), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            C_sum = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_sum)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                if clear_each_step:  # clear_accum=True: C_f holds this step's product only
                    T.gemm(A_s, B_s, C_f, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(block_M, block_N):
                        C_sum[i, j] += C_f[i, j]
                else:
                    T.gemm(A_s, B_s, C_sum, transpose_B=True)
            T.copy(C_sum, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("vector_bytes", [16, 32, 64], ids=["sse", "avx2", "avx512"])
@pytest.mark.parametrize("M,block_M", [(1, 1), (5, 2)])
@pytest.mark.parametrize("clear_each_step", [False, True], ids=["accumulate", "clear_accum"])
def test_decode_gemm_uses_dot_products(monkeypatch, vector_bytes, M, block_M, clear_each_step):
    monkeypatch.setenv("TILELANG_CORE_DISABLE_CACHE", "1")
    monkeypatch.setattr(decode_gemm_bt, "_memory", {})
    monkeypatch.setattr(cpu_backend, "vector_bytes", lambda: vector_bytes)
    N, K = 96, 200  # ragged K: the last tile is zero-padded
    kernel = decode_gemm_bt(M, N, K, block_M, 32, 64, clear_each_step)
    a, b = torch.randn(M, K), torch.randn(N, K)
    torch.testing.assert_close(kernel(a, b), a @ b.T, rtol=1e-4, atol=1e-4)
    tir = kernel.get_kernel_source("tir")
    assert "C_dot0" in tir and "B_packed" not in tir


@tilelang.jit(out_idx=[-1])
def unpack_global(N):
    """The split loop reads and writes global tensors directly; a ragged N needs bounds guards after the split."""

    @T.prim_func
    def main(B: T.Tensor(((N + 1) // 2,), "uint8"), W: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for j in T.Parallel(64):
                W[bx * 64 + j] = T.cast((B[bx * 32 + j // 2] >> (4 * (j % 2))) & 0xF, "int32")

    return main


@pytest.mark.parametrize("N", [256, 203])
def test_split_loop_over_global_tensors_keeps_bounds_guards(N):
    B = torch.randint(0, 256, ((N + 1) // 2,), dtype=torch.uint8)
    kernel = unpack_global(N)
    ref = torch.stack([B & 0xF, B >> 4], dim=-1).reshape(-1)[:N].int()
    assert torch.equal(kernel(B), ref)
    assert "j_i" in kernel.trace.stage("tl.SplitDivModCPU").text

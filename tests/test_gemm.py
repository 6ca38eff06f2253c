"""T.gemm against torch.matmul: plain, fused ReLU, transposed operands, mixed precision, ragged shapes."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def matmul_relu(M, N, K, block_M, block_N, block_K, num_stages=2, threads=128, dtype="float32",
                accum_dtype="float32"):
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
def matmul(M, N, K, block_M, block_N, block_K, trans_A=False, trans_B=False, in_dtype="float32",
           out_dtype="float32", accum_dtype="float32", swizzle=False):
    A_shape = (K, M) if trans_A else (M, K)
    B_shape = (N, K) if trans_B else (K, N)
    A_tile = (block_K, block_M) if trans_A else (block_M, block_K)
    B_tile = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def main(A: T.Tensor(A_shape, in_dtype), B: T.Tensor(B_shape, in_dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            if swizzle:
                T.use_swizzle(panel_size=4)
            A_s = T.alloc_shared(A_tile, in_dtype)
            B_s = T.alloc_shared(B_tile, in_dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_s)
                else:
                    T.copy(A[by * block_M, k * block_K], A_s)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_A, transpose_B=trans_B)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def matmul_a_fragment(M, N, K, block_M, block_N, block_K, scale):
    """C = (scale * A) @ B with the scaled A tile held in a fragment as the gemm A operand."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_f = T.alloc_fragment((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.serial(T.ceildiv(K, block_K)):
                T.copy(A[by * block_M, k * block_K], A_f)
                for i, j in T.Parallel(block_M, block_K):
                    A_f[i, j] = A_f[i, j] * scale
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_f, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def matmul_clear_accum(M, N, K, block_M, block_N):
    """Single K tile: clear_accum=True must overwrite whatever the fragment held (here: a fill of 1e3)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_s = T.alloc_shared((block_M, K), "float32")
            B_s = T.alloc_shared((K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.fill(C_f, 1000.0)
            T.copy(A[by * block_M, 0], A_s)
            T.copy(B[0, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def batched_matmul(batch, M, N, K, block_M, block_N, block_K):
    """3-D grid; tiles copied out of 3-D tensors with a unit batch dimension."""

    @T.prim_func
    def main(A: T.Tensor((batch, M, K), "float32"), B: T.Tensor((batch, K, N), "float32"),
             C: T.Tensor((batch, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), batch) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bz, by * block_M, k * block_K], A_s)
                T.copy(B[bz, k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bz, by * block_M, bx * block_N])

    return main


RAGGED_AND_ALIGNED = [(256, 256, 256), (200, 136, 72), (129, 65, 33)]


@pytest.mark.parametrize("M,N,K", RAGGED_AND_ALIGNED)
def test_gemm_relu_matches_torch_on_aligned_and_ragged_shapes(M, N, K):
    kernel = matmul_relu(M, N, K, 64, 64, 32)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    c = kernel(a, b)
    assert c.shape == (M, N) and c.dtype == torch.float32
    torch.testing.assert_close(c, torch.relu(a @ b), rtol=1e-4, atol=1e-4)
    assert (c == 0).any() and (c > 0).any(), "ReLU output should contain both clipped and positive values"


@pytest.mark.parametrize("block_M,block_N,block_K", [(32, 32, 32), (64, 32, 16), (16, 128, 64), (128, 64, 8),
                                                     (48, 40, 24)])
def test_gemm_matches_torch_for_several_block_configs_on_ragged_shape(block_M, block_N, block_K):
    M, N, K = 200, 136, 72
    kernel = matmul(M, N, K, block_M, block_N, block_K)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("trans_A,trans_B", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (200, 136, 72), (129, 65, 33)])
def test_gemm_with_transposed_operands_matches_torch(trans_A, trans_B, M, N, K):
    kernel = matmul(M, N, K, 64, 64, 32, trans_A=trans_A, trans_B=trans_B)
    a = torch.randn(K, M) if trans_A else torch.randn(M, K)
    b = torch.randn(N, K) if trans_B else torch.randn(K, N)
    ref = (a.T if trans_A else a) @ (b.T if trans_B else b)
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,N,K", [(256, 128, 128), (129, 65, 33)])
def test_fp16_gemm_with_fp32_accumulation_matches_torch_fp32(M, N, K):
    kernel = matmul(M, N, K, 64, 64, 32, in_dtype="float16", out_dtype="float32", accum_dtype="float32")
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    c = kernel(a, b)
    assert c.dtype == torch.float32
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_fp16_gemm_with_fp16_output_matches_torch_within_half_precision():
    M, N, K = 200, 136, 72
    kernel = matmul(M, N, K, 64, 64, 32, in_dtype="float16", out_dtype="float16", accum_dtype="float32")
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    c = kernel(a, b)
    assert c.dtype == torch.float16
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=2e-2)


def test_fp16_gemm_transposed_b_with_fp32_accumulation_matches_torch():
    M, N, K = 129, 65, 33
    kernel = matmul(M, N, K, 64, 64, 32, trans_B=True, in_dtype="float16", out_dtype="float32")
    a = torch.randn(M, K).half()
    b = torch.randn(N, K).half()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def test_bf16_gemm_with_fp32_accumulation_matches_torch_fp32():
    M, N, K = 128, 96, 64
    kernel = matmul(M, N, K, 64, 32, 32, in_dtype="bfloat16", out_dtype="float32")
    a = torch.randn(M, K).bfloat16()
    b = torch.randn(K, N).bfloat16()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("M,N,K,block_M,block_N,block_K,out_dtype", [
    (256, 256, 256, 64, 64, 32, "bfloat16"),  # tiles multiples of the SIMD width: the register-transpose pack
    (128, 96, 64, 64, 32, 32, "float32"),
    (2, 128, 128, 2, 64, 64, "float32"),      # two rows of C: the dot-product (decode) kernel
])
def test_bf16_gemm_with_transposed_b_compiles_and_matches_torch(M, N, K, block_M, block_N, block_K, out_dtype):
    """bf16 T.gemm(transpose_B=True) used to fail LLVM codegen (TVM's bf16 legalisation left bf16 loads bound to
    variables): the B^T register transpose and the dot kernel's A vector now avoid it."""
    kernel = matmul(M, N, K, block_M, block_N, block_K, trans_B=True, in_dtype="bfloat16", out_dtype=out_dtype)
    a = torch.randn(M, K).bfloat16()
    b = torch.randn(N, K).bfloat16()
    ref = a.float() @ b.float().T
    out = kernel(a, b)
    if out_dtype == "bfloat16":
        torch.testing.assert_close(out, ref.bfloat16(), rtol=1.6e-2, atol=1e-2)
    else:
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_float64_gemm_matches_torch_to_double_precision():
    M, N, K = 130, 70, 50
    kernel = matmul(M, N, K, 64, 32, 16, in_dtype="float64", out_dtype="float64", accum_dtype="float64")
    a = torch.randn(M, K, dtype=torch.float64)
    b = torch.randn(K, N, dtype=torch.float64)
    c = kernel(a, b)
    assert c.dtype == torch.float64
    torch.testing.assert_close(c, a @ b, rtol=1e-12, atol=1e-12)


def test_int8_gemm_with_int32_accumulation_is_exact():
    M, N, K = 100, 72, 40
    kernel = matmul(M, N, K, 32, 32, 16, in_dtype="int8", out_dtype="int32", accum_dtype="int32")
    a = torch.randint(-100, 100, (M, K), dtype=torch.int8)
    b = torch.randint(-100, 100, (K, N), dtype=torch.int8)
    c = kernel(a, b)
    assert c.dtype == torch.int32
    torch.testing.assert_close(c, (a.long() @ b.long()).int(), rtol=0, atol=0)


def test_gemm_with_fragment_a_operand_matches_torch():
    M, N, K = 200, 136, 72
    kernel = matmul_a_fragment(M, N, K, 64, 64, 32, 0.5)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    torch.testing.assert_close(kernel(a, b), (0.5 * a) @ b, rtol=1e-4, atol=1e-4)


def test_gemm_clear_accum_discards_previous_fragment_contents():
    M, N, K = 96, 80, 24
    kernel = matmul_clear_accum(M, N, K, 32, 16)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_gemm_with_use_swizzle_hint_is_still_correct():
    M, N, K = 200, 136, 72
    kernel = matmul(M, N, K, 64, 64, 32, swizzle=True)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_batched_gemm_on_3d_grid_matches_torch_bmm():
    batch, M, N, K = 3, 100, 72, 40
    kernel = batched_matmul(batch, M, N, K, 32, 32, 16)
    a = torch.randn(batch, M, K)
    b = torch.randn(batch, K, N)
    torch.testing.assert_close(kernel(a, b), torch.bmm(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,N,K", [(200, 136, 72), (129, 65, 33)])
def test_ragged_gemm_never_writes_past_the_output_tensor(M, N, K):
    kernel = matmul_relu(M, N, K, 64, 64, 32)
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    storage = torch.randn(M * N + 8192)
    sentinel = storage[M * N:].clone()
    c = storage[: M * N].view(M, N)  # contiguous view with live memory right after it
    out = kernel(a, b, c)
    assert out.data_ptr() == c.data_ptr()
    torch.testing.assert_close(c, torch.relu(a @ b), rtol=1e-4, atol=1e-4)
    assert torch.equal(storage[M * N:], sentinel), "the kernel wrote past the end of C"


def test_gemm_kernel_gives_fresh_correct_results_on_repeated_calls():
    M, N, K = 129, 65, 33
    kernel = matmul(M, N, K, 64, 64, 32)
    for _ in range(3):
        a = torch.randn(M, K)
        b = torch.randn(K, N)
        torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)

"""Element-wise kernels: 1-D and 2-D grids, direct global indexing inside T.Parallel, tiles via T.copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def add_1d(N, block_N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = A[bx * block_N + i] + B[bx * block_N + i]

    return main


@tilelang.jit(out_idx=[-1])
def add_2d_direct(M, N, block_M, block_N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j] + \
                    B[by * block_M + i, bx * block_N + j]

    return main


@tilelang.jit(out_idx=[-1])
def add_2d_tiles(M, N, block_M, block_N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_s = T.alloc_shared((block_M, block_N), dtype)
            B_f = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], A_s)
            T.copy(B[by * block_M, bx * block_N], B_f)
            for i, j in T.Parallel(block_M, block_N):
                B_f[i, j] += A_s[i, j]
            T.copy(B_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def axpy_slices(M, N, block_M, alpha):
    """Explicit-slice T.copy form: A[a:b, c:d] on both the load and the store."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            y = T.alloc_fragment((block_M, N), "float32")
            T.copy(X[bx * block_M:(bx + 1) * block_M, 0:N], x)
            T.copy(Y[bx * block_M:(bx + 1) * block_M, 0:N], y)
            for i, j in T.Parallel(block_M, N):
                y[i, j] = alpha * x[i, j] + y[i, j]
            T.copy(y, Z[bx * block_M:(bx + 1) * block_M, 0:N])

    return main


@tilelang.jit(out_idx=[-1])
def bias_add_broadcast(M, N, block_M, block_N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), bias: T.Tensor((N,), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            b_s = T.alloc_shared((block_N,), "float32")
            T.copy(bias[bx * block_N], b_s)
            for i, j in T.Parallel(block_M, block_N):
                Y[by * block_M + i, bx * block_N + j] = X[by * block_M + i, bx * block_N + j] + b_s[j]

    return main


@pytest.mark.parametrize("N,block_N", [(1024, 128), (1000, 128), (77, 32), (5, 64)])
def test_add_1d_grid_matches_torch_including_ragged_tail(N, block_N):
    kernel = add_1d(N, block_N)
    a = torch.randn(N)
    b = torch.randn(N)
    torch.testing.assert_close(kernel(a, b), a + b, rtol=0, atol=0)


def test_add_1d_ragged_never_writes_past_output():
    N, block_N = 1000, 128
    kernel = add_1d(N, block_N)
    a, b = torch.randn(N), torch.randn(N)
    storage = torch.randn(N + 4 * block_N)
    sentinel = storage[N:].clone()
    kernel(a, b, storage[:N])
    torch.testing.assert_close(storage[:N], a + b, rtol=0, atol=0)
    assert torch.equal(storage[N:], sentinel)


@pytest.mark.parametrize("M,N", [(256, 128), (300, 130), (65, 33)])
def test_add_2d_direct_global_indexing_matches_torch_on_ragged_shapes(M, N):
    kernel = add_2d_direct(M, N, 64, 32)
    a, b = torch.randn(M, N), torch.randn(M, N)
    torch.testing.assert_close(kernel(a, b), a + b, rtol=0, atol=0)


def test_add_2d_direct_ragged_never_writes_past_output():
    M, N = 130, 70
    kernel = add_2d_direct(M, N, 64, 32)
    a, b = torch.randn(M, N), torch.randn(M, N)
    storage = torch.randn(M * N + 4096)
    sentinel = storage[M * N:].clone()
    c = storage[: M * N].view(M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    assert torch.equal(storage[M * N:], sentinel)


@pytest.mark.parametrize("M,N", [(128, 128), (200, 136)])
def test_add_2d_through_shared_and_fragment_tiles_matches_torch(M, N):
    kernel = add_2d_tiles(M, N, 64, 64)
    a, b = torch.randn(M, N), torch.randn(M, N)
    torch.testing.assert_close(kernel(a, b), a + b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype,tdtype", [("float16", torch.float16), ("bfloat16", torch.bfloat16),
                                          ("float64", torch.float64)])
def test_add_2d_in_other_float_dtypes_matches_torch(dtype, tdtype):
    M, N = 100, 72
    kernel = add_2d_tiles(M, N, 32, 32, dtype=dtype)
    a = torch.randn(M, N, dtype=torch.float32).to(tdtype)
    b = torch.randn(M, N, dtype=torch.float32).to(tdtype)
    c = kernel(a, b)
    assert c.dtype == tdtype
    torch.testing.assert_close(c, a + b)


@pytest.mark.parametrize("dtype,tdtype", [("int32", torch.int32), ("int64", torch.int64), ("int8", torch.int8),
                                          ("uint8", torch.uint8)])
def test_add_1d_in_integer_dtypes_is_exact(dtype, tdtype):
    N = 300
    kernel = add_1d(N, 64, dtype=dtype)
    lo, hi = (0, 100) if dtype == "uint8" else (-60, 60)
    a = torch.randint(lo, hi, (N,), dtype=tdtype)
    b = torch.randint(lo, hi, (N,), dtype=tdtype)
    torch.testing.assert_close(kernel(a, b), a + b, rtol=0, atol=0)


def test_copy_with_explicit_slices_matches_torch_axpy_on_ragged_rows():
    M, N = 150, 48
    kernel = axpy_slices(M, N, 32, 1.5)
    x, y = torch.randn(M, N), torch.randn(M, N)
    torch.testing.assert_close(kernel(x, y), 1.5 * x + y, rtol=1e-6, atol=1e-6)


def test_bias_add_broadcasts_a_1d_shared_tile_over_rows():
    M, N = 130, 100
    kernel = bias_add_broadcast(M, N, 32, 64)
    x, bias = torch.randn(M, N), torch.randn(N)
    torch.testing.assert_close(kernel(x, bias), x + bias, rtol=0, atol=0)


def _misaligned_numpy(n, offset_bytes, rng):
    raw = np.empty(n * 4 + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    arr = raw[start:start + n * 4].view(np.float32)
    arr[...] = rng.standard_normal(n)
    return arr


def check_elementwise_numpy_inputs_and_output_at_any_alignment():
    N = 1000
    kernel = add_1d(N, 128)
    rng = np.random.default_rng(0)
    for off in (0, 4, 8, 16, 32):
        a, b, c = (_misaligned_numpy(N, off, rng) for _ in range(3))
        out = kernel(a, b)
        assert isinstance(out, torch.Tensor)
        np.testing.assert_array_equal(out.numpy(), a + b)
        kernel(a, b, c)  # numpy output, written in place
        np.testing.assert_array_equal(c, a + b)


def check_elementwise_offset_views_at_any_alignment():
    M, N = 65, 33
    kernel = add_2d_tiles(M, N, 32, 32)
    for off_elems in (0, 1, 3, 5, 8):
        storage = torch.randn(3 * M * N + 64)
        a, b, c = (storage[off_elems + k * M * N: off_elems + (k + 1) * M * N].view(M, N) for k in range(3))
        kernel(a, b, c)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@pytest.fixture(scope="module")
def child_results(run_isolated_together):
    """The alignment checks in one child interpreter (a crash fails the checks it stopped, not the run)."""
    return run_isolated_together([check_elementwise_numpy_inputs_and_output_at_any_alignment,
                                  check_elementwise_offset_views_at_any_alignment])


def test_elementwise_numpy_inputs_and_outputs_at_any_alignment_match_numpy(child_results):
    child_results.check(check_elementwise_numpy_inputs_and_output_at_any_alignment)


def test_elementwise_contiguous_offset_views_match_torch(child_results):
    child_results.check(check_elementwise_offset_views_at_any_alignment)

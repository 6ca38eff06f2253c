"""The profiler: correctness checks against a reference and timing results (checked for shape, not speed)."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.profiler import BenchResult


@tilelang.jit(out_idx=[-1])
def matmul_relu(M, N, K, block_M, block_N, block_K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[1, 2])
def split_sign(N, block_N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Pos: T.Tensor((N,), "float32"), Neg: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            for i in T.Parallel(block_N):
                Pos[bx * block_N + i] = T.max(X[bx * block_N + i], 0)
                Neg[bx * block_N + i] = T.min(X[bx * block_N + i], 0)

    return main


@tilelang.jit(out_idx=[-1])
def int_add(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32"), C: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = A[bx * 64 + i] + B[bx * 64 + i]

    return main


M, N, K = 129, 65, 33


@pytest.fixture(scope="module")
def kernel():
    return matmul_relu(M, N, K, 64, 64, 32)


def relu_matmul_ref(a, b):
    return torch.relu(a @ b)


def matmul_ref_missing_relu(a, b):
    return a @ b


def test_assert_allclose_passes_for_a_correct_reference(kernel):
    kernel.get_profiler().assert_allclose(relu_matmul_ref, rtol=1e-4, atol=1e-4)


def test_assert_allclose_raises_for_a_reference_missing_the_relu(kernel):
    with pytest.raises(AssertionError, match="output 'C' differs from the reference"):
        kernel.get_profiler().assert_allclose(matmul_ref_missing_relu, rtol=1e-4, atol=1e-4)


def test_assert_allclose_raises_when_output_counts_differ(kernel):
    with pytest.raises(AssertionError, match="the kernel returned 1 output"):
        kernel.get_profiler().assert_allclose(lambda a, b: (a @ b, a @ b))


def test_assert_allclose_checks_every_output_of_a_multi_output_kernel():
    prof = split_sign(500, 128).get_profiler()
    prof.assert_allclose(lambda x: (x.clamp(min=0), x.clamp(max=0)), rtol=0, atol=0)
    with pytest.raises(AssertionError, match="output 'Neg' differs"):
        prof.assert_allclose(lambda x: (x.clamp(min=0), x.clamp(min=0)), rtol=0, atol=0)


def test_profiler_inputs_are_random_non_zero_and_match_parameter_specs(kernel):
    prof = kernel.get_profiler()
    a, b = prof.make_inputs()
    assert a.shape == (M, K) and b.shape == (K, N)
    assert a.dtype == b.dtype == torch.float32
    assert a.abs().sum() > 0 and b.abs().sum() > 0
    assert a.std() > 0.5  # normally distributed, not a constant
    a2, _ = prof.make_inputs()
    assert not torch.equal(a, a2), "each check should see fresh inputs"


def test_profiler_integer_inputs_are_random_and_assert_allclose_is_exact():
    prof = int_add(300).get_profiler()
    a, b = prof.make_inputs()
    assert a.dtype == torch.int32 and len(torch.unique(a)) > 1
    prof.assert_allclose(lambda x, y: x + y, rtol=0, atol=0)
    with pytest.raises(AssertionError):
        prof.assert_allclose(lambda x, y: x - y, rtol=0, atol=0)


def test_assert_allclose_uses_given_inputs(kernel):
    a, b = torch.randn(M, K), torch.randn(K, N)
    seen = []

    def ref(x, y):
        seen.append((x, y))
        return torch.relu(x @ y)

    kernel.get_profiler().assert_allclose(ref, inputs=[a, b], rtol=1e-4, atol=1e-4)
    assert seen[0][0] is a and seen[0][1] is b


def test_max_error_is_small_for_correct_and_large_for_wrong_reference(kernel):
    prof = kernel.get_profiler()
    good = prof.max_error(relu_matmul_ref)
    bad = prof.max_error(matmul_ref_missing_relu)
    assert set(good) == {"max_abs", "max_rel"}
    assert good["max_abs"] < 1e-4
    assert bad["max_abs"] > 1.0


def test_do_bench_returns_a_positive_bench_result_with_spread(kernel):
    result = kernel.get_profiler().do_bench(warmup=5, rep=20)
    assert isinstance(result, BenchResult) and isinstance(result, float)
    assert result > 0
    assert result.runs >= 10
    assert float(result) == result.median_ms
    assert 0 < result.min_ms <= result.p20_ms <= result.median_ms <= result.p80_ms
    assert "ms (median of" in repr(result)


def test_do_bench_times_a_reference_function_on_the_same_inputs(kernel):
    prof = kernel.get_profiler()
    seen = []

    def ref(a, b):
        seen.append((a.data_ptr(), b.data_ptr()))
        return torch.relu(a @ b)

    result = prof.do_bench(ref, warmup=5, rep=20)
    assert isinstance(result, BenchResult) and result > 0 and result.runs >= 10
    assert len(seen) >= result.runs
    assert len(set(seen)) == 1, "every timed call should reuse the same inputs"
    a, b = prof.inputs()
    assert seen[0] == (a.data_ptr(), b.data_ptr())


def test_bench_result_statistics_follow_the_samples():
    r = BenchResult([5.0, 1.0, 3.0, 2.0, 4.0])
    assert r == 3.0 and r.median_ms == 3.0 and r.min_ms == 1.0 and r.runs == 5
    assert r.p20_ms <= r.median_ms <= r.p80_ms


def test_unknown_tensor_supply_is_rejected(kernel):
    with pytest.raises(ValueError, match="tensor_supply"):
        kernel.get_profiler(tensor_supply="zeros")

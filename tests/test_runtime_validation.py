"""Bad inputs to a compiled kernel are rejected before launch with a message naming the parameter."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M, block_N, block_K):
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
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


M, N, K = 96, 80, 48


@pytest.fixture(scope="module")
def kernel():
    return matmul(M, N, K, 32, 32, 16)


@pytest.fixture
def a():
    return torch.randn(M, K)


@pytest.fixture
def b():
    return torch.randn(K, N)


def test_valid_inputs_run_and_match_torch(kernel, a, b):
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad_dtype", [torch.float64, torch.float16, torch.int32, torch.bfloat16])
def test_wrong_dtype_raises_type_error_naming_parameter_expected_and_given(kernel, a, b, bad_dtype):
    given = str(bad_dtype).replace("torch.", "")
    with pytest.raises(TypeError, match=rf"argument 'B': expected dtype float32, got {given}"):
        kernel(a, b.to(bad_dtype))


def test_wrong_shape_raises_value_error_naming_parameter_expected_and_given(kernel, a):
    with pytest.raises(ValueError, match=re.escape(f"argument 'B': expected shape [{K}, {N}], got [{K}, {N + 1}]")):
        kernel(a, torch.randn(K, N + 1))


def test_transposed_shape_raises_value_error(kernel, a):
    with pytest.raises(ValueError, match=re.escape(f"argument 'A': expected shape [{M}, {K}], got [{K}, {M}]")):
        kernel(torch.randn(K, M), torch.randn(K, N))


@pytest.mark.parametrize("shape", [(M * K,), (1, M, K)])
def test_wrong_rank_raises_value_error_naming_parameter_expected_and_given(kernel, b, shape):
    rank = len(shape)
    expected = re.escape(f"argument 'A': expected a rank-2 tensor of shape [{M}, {K}], got rank {rank} with shape "
                         f"{list(shape)}")
    with pytest.raises(ValueError, match=expected):
        kernel(torch.randn(*shape), b)


def test_non_contiguous_input_raises_value_error_suggesting_contiguous(kernel, b):
    a_t = torch.randn(K, M).t()  # right shape, column-major strides
    assert a_t.shape == (M, K) and not a_t.is_contiguous()
    with pytest.raises(ValueError, match=re.escape(f"argument 'A': expected a contiguous tensor, got strides "
                                                   f"[1, {M}] for shape [{M}, {K}]")) as err:
        kernel(a_t, b)
    assert ".contiguous()" in str(err.value)


def test_strided_slice_input_is_rejected_as_non_contiguous(kernel, a):
    wide = torch.randn(K, 2 * N)
    with pytest.raises(ValueError, match="argument 'B': expected a contiguous tensor"):
        kernel(a, wide[:, ::2])


def test_contiguous_copy_of_a_rejected_input_is_accepted(kernel, b):
    a_t = torch.randn(K, M).t()
    torch.testing.assert_close(kernel(a_t.contiguous(), b), a_t @ b, rtol=1e-4, atol=1e-4)


def test_tensor_on_another_device_raises_value_error_naming_device(kernel, b):
    a_meta = torch.empty(M, K, device="meta")
    with pytest.raises(ValueError, match="argument 'A': expected a tensor on cpu, got one on meta"):
        kernel(a_meta, b)


@pytest.mark.parametrize("n_args", [0, 1, 4])
def test_wrong_number_of_arguments_raises_type_error_listing_inputs(kernel, n_args):
    args = [torch.randn(2, 2) for _ in range(n_args)]
    msg = re.escape(f"expected 2 input tensor(s) (A, B) or all 3 including outputs, got {n_args}")
    with pytest.raises(TypeError, match=msg):
        kernel(*args)


@pytest.mark.parametrize("value,type_name", [([[1.0]], "list"), (3.0, "float"), (None, "NoneType")])
def test_non_tensor_argument_raises_type_error_naming_parameter_and_type(kernel, a, value, type_name):
    with pytest.raises(TypeError, match=re.escape(f"argument 'B': expected a torch.Tensor of float32 with shape "
                                                  f"[{K}, {N}], got {type_name}")):
        kernel(a, value)


def test_bad_preallocated_output_is_rejected_naming_the_output(kernel, a, b):
    with pytest.raises(ValueError, match=re.escape(f"argument 'C': expected shape [{M}, {N}], got [{N}, {M}]")):
        kernel(a, b, torch.randn(N, M))
    with pytest.raises(TypeError, match="argument 'C': expected dtype float32, got float64"):
        kernel(a, b, torch.randn(M, N, dtype=torch.float64))
    with pytest.raises(ValueError, match="argument 'C': expected a contiguous tensor"):
        kernel(a, b, torch.randn(N, M).t())


def test_rejected_call_leaves_preallocated_output_untouched(kernel, a, b):
    c = torch.randn(M, N)
    before = c.clone()
    with pytest.raises(TypeError):
        kernel(a.double(), b, c)
    assert torch.equal(c, before)


def test_numpy_input_with_wrong_dtype_raises_type_error(kernel, b):
    a64 = np.random.default_rng(0).standard_normal((M, K))  # float64
    with pytest.raises(TypeError, match="argument 'A': expected dtype float32, got float64"):
        kernel(a64, b)


def test_non_contiguous_numpy_input_raises_value_error(kernel, b):
    a_f = np.asfortranarray(np.random.default_rng(4).standard_normal((M, K)).astype(np.float32))
    with pytest.raises(ValueError, match="argument 'A': expected a contiguous tensor"):
        kernel(a_f, b)


def test_requires_grad_inputs_are_accepted(kernel, a, b):
    a_g = a.clone().requires_grad_(True)
    torch.testing.assert_close(kernel(a_g, b), (a @ b), rtol=1e-4, atol=1e-4)


# -- memory alignment -----------------------------------------------------------------------------------------
# A contiguous tensor need not start on a 64-byte boundary: numpy allocates with 16-byte alignment, and a
# contiguous slice of a torch tensor starts wherever the slice starts. Such inputs pass every documented check
# (dtype, rank, shape, device, contiguity) and must give correct results, never crash. These checks run in a child
# process so a crash is reported as a failure of that test alone.

ALIGN_OFFSETS_BYTES = (0, 4, 16, 32, 48)


def _numpy_at_offset(shape, offset_bytes, rng):
    """A C-contiguous float32 numpy array whose data starts ``offset_bytes`` past a 64-byte boundary."""
    nbytes = int(np.prod(shape)) * 4
    raw = np.empty(nbytes + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    arr = raw[start:start + nbytes].view(np.float32).reshape(shape)
    arr[...] = rng.standard_normal(shape)
    assert arr.flags["C_CONTIGUOUS"] and arr.ctypes.data % 64 == offset_bytes
    return arr


def _torch_at_offset(shape, offset_bytes):
    """A contiguous float32 torch view whose data starts ``offset_bytes`` past a 64-byte boundary."""
    n = int(np.prod(shape))
    storage = torch.randn(n + 64)
    start = ((-storage.data_ptr()) % 64 + offset_bytes) // 4
    t = storage[start:start + n].view(*shape)
    assert t.is_contiguous() and t.data_ptr() % 64 == offset_bytes
    return t


def check_numpy_inputs_at_any_alignment_match_torch():
    kernel = matmul(M, N, K, 32, 32, 16)
    rng = np.random.default_rng(3)
    for off in ALIGN_OFFSETS_BYTES:
        a = _numpy_at_offset((M, K), off, rng)
        b = _numpy_at_offset((K, N), off, rng)
        c = kernel(a, b)
        torch.testing.assert_close(c, torch.from_numpy(a) @ torch.from_numpy(b), rtol=1e-4, atol=1e-4,
                                   msg=lambda m, o=off: f"inputs at 64B boundary + {o} bytes: {m}")


def check_contiguous_torch_views_at_any_alignment_match_torch():
    kernel = matmul(M, N, K, 32, 32, 16)
    for off in ALIGN_OFFSETS_BYTES:
        a = _torch_at_offset((M, K), off)
        b = _torch_at_offset((K, N), off)
        c = _torch_at_offset((M, N), off)
        out = kernel(a, b, c)
        assert out.data_ptr() == c.data_ptr()
        torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4,
                                   msg=lambda m, o=off: f"tensors at 64B boundary + {o} bytes: {m}")


def check_numpy_output_is_written_in_place():
    kernel = matmul(M, N, K, 32, 32, 16)
    rng = np.random.default_rng(5)
    for off in ALIGN_OFFSETS_BYTES:
        a = _numpy_at_offset((M, K), 0, rng)
        b = _numpy_at_offset((K, N), 0, rng)
        c = _numpy_at_offset((M, N), off, rng)
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def child_results(run_isolated_together):
    """The alignment checks in one child interpreter (a crash fails the checks it stopped, not the run)."""
    return run_isolated_together([check_numpy_inputs_at_any_alignment_match_torch,
                                  check_contiguous_torch_views_at_any_alignment_match_torch,
                                  check_numpy_output_is_written_in_place])


def test_numpy_inputs_at_any_alignment_match_torch(child_results):
    child_results.check(check_numpy_inputs_at_any_alignment_match_torch)


def test_contiguous_torch_views_at_any_alignment_match_torch(child_results):
    child_results.check(check_contiguous_torch_views_at_any_alignment_match_torch)


def test_numpy_output_array_is_written_in_place_zero_copy(child_results):
    child_results.check(check_numpy_output_is_written_in_place)


def test_64_byte_aligned_numpy_inputs_are_accepted_zero_copy(kernel):
    rng = np.random.default_rng(6)
    a = _numpy_at_offset((M, K), 0, rng)
    b = _numpy_at_offset((K, N), 0, rng)
    c = _numpy_at_offset((M, N), 0, rng)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# -- outputs that share memory with an argument; lazily negated views -----------------------------------------


def test_output_that_is_an_input_is_refused_naming_both(kernel, b):
    """C = A @ B written into A (same shape when K == N) used to be silently wrong: the kernel overwrote rows of A it
    still had to read. torch refuses out= arguments that overlap an input too."""
    sq = matmul(64, 64, 64, 32, 32, 16)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    a_before = a.clone()
    with pytest.raises(ValueError, match="argument 'C' \\(an output\\) overlaps input 'A' in memory"):
        sq(a, b, a)
    with pytest.raises(ValueError, match="argument 'C' \\(an output\\) overlaps input 'B' in memory"):
        sq(a, b, b)
    assert torch.equal(a, a_before)  # refused before the launch: nothing written
    out = torch.empty(64, 64)
    torch.testing.assert_close(sq(a, b, out), a @ b, rtol=1e-4, atol=1e-4)  # a separate output still works


def test_output_partly_overlapping_an_input_is_refused(kernel, a, b):
    storage = torch.randn(M * K + M * N)
    a_view = storage[:M * K].view(M, K)
    c_view = storage[M * K - 16:M * K - 16 + M * N].view(M, N)  # shares A's last 16 elements
    with pytest.raises(ValueError, match="overlaps input 'A'"):
        kernel(a_view, b, c_view)
    c_ok = storage[M * K:].view(M, N)  # adjacent, not overlapping
    torch.testing.assert_close(kernel(a_view, b, c_ok), a_view @ b, rtol=1e-4, atol=1e-4)


def test_lazily_negated_views_are_refused_not_read_without_their_sign(kernel, a, b):
    """torch._neg_view(a) shares a's memory with a negative bit; the kernel read the raw memory: +a instead of -a."""
    with pytest.raises(ValueError, match="argument 'A': got a lazily negated view.*resolve_neg"):
        kernel(torch._neg_view(a), b)
    with pytest.raises(ValueError, match="argument 'C': got a lazily negated view"):
        kernel(a, b, torch._neg_view(torch.empty(M, N)))
    torch.testing.assert_close(kernel(torch._neg_view(a).resolve_neg(), b), -a @ b, rtol=1e-4, atol=1e-4)

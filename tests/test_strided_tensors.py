"""Non-contiguous tensors (issue 18). Decision, as TileLang: a plain ``T.Tensor`` parameter is contiguous and a
strided view is refused by name (with the way out in the message); ``T.StridedTensor(shape, strides, dtype)``
declares a layout — a column slice ``x[:, :64]``, a transpose ``x.t()`` — that the kernel reads and writes in place,
on the CPU. The runtime checks the exact strides, allocates ``out_idx`` outputs in the declared layout, and the
profiler draws inputs in it. CUDA refuses strided parameters at compile time for now. Before: any non-contiguous
stride was refused at the annotation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError

THIS_FILE = Path(__file__).resolve()
M, N, LD = 64, 64, 96


def marker_line(tag: str) -> int:
    hits = [n for n, text in enumerate(THIS_FILE.read_text().splitlines(), start=1)
            if text.rstrip().endswith(f"# DIAG:{tag}")]
    assert len(hits) == 1, hits
    return hits[0]


@tilelang.jit(out_idx=[-1], target="cpu")
def strided_gemm(block_M=32, block_N=32, block_K=32):
    @T.prim_func
    def main(A: T.StridedTensor((M, N), (LD, 1), "float32"),  # columns 0..63 of an (M, 96) tensor
             B: T.StridedTensor((N, N), (1, LD), "float32"),  # a transposed slice
             C: T.StridedTensor((M, N), (1, M), "float32")):  # column-major output
        with T.Kernel(N // block_N, M // block_M) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(N // block_K, num_stages=1):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = C_f[i, j] + A[by * block_M + i, bx * block_N + j]  # a direct strided read too
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def _views(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, LD, generator=g)[:, :N]
    b = torch.randn(N, LD, generator=g)[:, :N].t()
    return a, b


def test_strided_parameters_are_read_and_written_in_their_layout():
    kernel = strided_gemm()
    a, b = _views()
    assert a.stride() == (LD, 1) and b.stride() == (1, LD)
    c = kernel(a, b)
    assert c.stride() == (1, M)  # the out_idx output is allocated in its declared layout
    torch.testing.assert_close(c, a @ b + a, rtol=1e-5, atol=1e-4)
    out = torch.empty_strided((M, N), (1, M))
    kernel(a, b, out)
    torch.testing.assert_close(out, a @ b + a, rtol=1e-5, atol=1e-4)


def test_a_tensor_with_other_strides_than_declared_is_refused_by_name():
    kernel = strided_gemm()
    a, b = _views()
    with pytest.raises(ValueError, match=r"argument 'A': expected strides \[96, 1\] \(its T.StridedTensor\), "
                                         r"got \[64, 1\]"):
        kernel(a.contiguous(), b)
    with pytest.raises(ValueError, match=r"argument 'C': expected strides \[1, 64\]"):
        kernel(a, b, torch.empty(M, N))


def test_the_profiler_draws_inputs_in_the_declared_layout():
    prof = strided_gemm().get_profiler()
    a, b = prof.inputs()
    assert a.stride() == (LD, 1) and b.stride() == (1, LD)
    prof.assert_allclose(lambda x, y: x @ y + x, rtol=1e-5, atol=1e-4, max_mismatched_ratio=0)


@tilelang.jit(out_idx=[-1], target="cpu")
def plain_copy(N):
    @T.prim_func
    def main(A: T.Tensor((N, N), "float32"), B: T.Tensor((N, N), "float32")):
        with T.Kernel(1) as _bx:
            for i, j in T.Parallel(N, N):
                B[i, j] = A[i, j]

    return main


def test_a_plain_tensor_parameter_refuses_a_strided_view_and_names_the_way_out():
    kernel = plain_copy(16)
    x = torch.randn(16, 32)[:, :16]
    with pytest.raises(ValueError, match=r"argument 'A': expected a contiguous tensor, got strides \[32, 1\].*"
                                         r"T.StridedTensor\(shape, strides, dtype\)"):
        kernel(x)


def test_contiguous_strides_give_a_plain_tensor():
    @T.prim_func
    def main(A: T.StridedTensor((8, 4), (4, 1), "float32"), B: T.Tensor((8, 4), "float32")):
        with T.Kernel(1) as _bx:
            for i, j in T.Parallel(8, 4):
                B[i, j] = A[i, j]

    assert "strides" not in main.script()


@tilelang.jit(out_idx=[-1], target="cpu")
def symbolic_stride(N):
    s = T.symbolic("s")

    @T.prim_func
    def main(A: T.StridedTensor((N, N), (s, 1), "float32"),  # DIAG:symbolic-stride
             B: T.Tensor((N, N), "float32")):
        with T.Kernel(1) as _bx:
            for i, j in T.Parallel(N, N):
                B[i, j] = A[i, j]

    return main


def test_a_symbolic_stride_is_a_located_error():
    with pytest.raises(TileLangCompileError) as e:
        symbolic_stride(8)
    assert "expected constant positive ints" in str(e.value)
    assert e.value.location is not None and e.value.location.line == marker_line("symbolic-stride")


def test_cuda_refuses_a_strided_parameter_at_compile_time():
    func = strided_gemm.get_program()
    with pytest.raises(TileLangCompileError, match=r"kernel parameter A: a T.StridedTensor with strides \[96, 1\] "
                                                   r"is supported on the CPU only"):
        tilelang.compile(func, out_idx=[-1], target="cuda")

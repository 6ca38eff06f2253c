"""Element-wise T.max / T.min / ReLU skip a NaN operand wherever it sits (tl.NanSkippingMinMax), as the reductions
do (docs/design.md, "NaN in max/min"): before, the CPU let the second operand win (T.max(NaN, 0) = 0 but
T.max(0, NaN) = NaN) and CUDA half's __hgt(a, b) ? a : b did the same; the kernels stay vectorised."""

from __future__ import annotations

import re

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@tilelang.jit(out_idx=[-1])
def minmax_both_orders(M, N, dtype):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((6, M, N), dtype)):
        with T.Kernel(T.ceildiv(M, 16), threads=128) as bx:
            for i, j in T.Parallel(16, N):
                a = A[bx * 16 + i, j]
                b = B[bx * 16 + i, j]
                C[0, bx * 16 + i, j] = T.max(a, b)
                C[1, bx * 16 + i, j] = T.max(b, a)
                C[2, bx * 16 + i, j] = T.min(a, b)
                C[3, bx * 16 + i, j] = T.min(b, a)
                C[4, bx * 16 + i, j] = T.max(a, T.cast(0, dtype))  # ReLU, both spellings
                C[5, bx * 16 + i, j] = T.max(T.cast(0, dtype), a)

    return main


def _inputs(M: int, N: int, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(8)
    A = torch.randn(M, N, generator=g).to(dt)
    B = torch.randn(M, N, generator=g).to(dt)
    A[::3, ::2] = float("nan")  # NaN in a only, in b only, in both
    B[1::3, 1::2] = float("nan")
    B[::5, ::4] = float("nan")
    return A, B


def _expected(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    zero = torch.zeros_like(A)
    return torch.stack([torch.fmax(A, B), torch.fmax(A, B), torch.fmin(A, B), torch.fmin(A, B),
                        torch.fmax(A, zero), torch.fmax(A, zero)])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_elementwise_max_min_and_relu_skip_nan_in_either_operand(dtype):
    M, N = 48, 40
    A, B = _inputs(M, N, DTYPES[dtype])
    out = minmax_both_orders(M, N, dtype)(A, B)
    torch.testing.assert_close(out, _expected(A, B), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(out[4].isnan(), torch.zeros_like(out[4], dtype=torch.bool))  # ReLU(NaN) = 0


@tilelang.jit(out_idx=[-1])
def relu_rows(M, N, block_M):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            X = T.alloc_fragment((block_M, N), "float32")
            T.copy(A[bx * block_M, 0], X)
            for i, j in T.Parallel(block_M, N):
                X[i, j] = T.max(X[i, j], 0.0)
            T.copy(X, B[bx * block_M, 0])

    return main


def test_relu_kernel_stays_vectorised_on_the_cpu():
    ir = relu_rows(64, 256, 16).get_kernel_source("llvm")
    assert re.search(r"fcmp (ogt|olt|uno) <\d+ x float>", ir), "no vector compare"
    assert re.search(r"select <\d+ x i1> .*<\d+ x float>", ir), "no vector select"


def test_softmax_and_gemm_relu_examples_stay_vectorised_on_the_cpu():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples import gemm, softmax  # noqa: PLC0415

    for kernel in (softmax.softmax(256, 512, 4), gemm.matmul_relu(128, 128, 128, 64, 64, 32)):
        ir = kernel.get_kernel_source("llvm")
        assert re.search(r"<\d+ x float>.*(fcmp|select|maxnum|maximum)|(fcmp|select).*<\d+ x float>", ir)
        assert re.search(r"select <\d+ x i1>", ir) or "llvm.maxnum.v" in ir or "llvm.maximum.v" in ir


def test_cuda_half_max_checks_for_nan_and_float32_uses_fmaxf():
    from tilelang_core.backend.cuda import codegen as cuda_codegen

    def source(dtype: str) -> str:
        src = cuda_codegen.generate(cuda_codegen.lower(minmax_both_orders.factory(32, 32, dtype))).source
        return src[src.find('extern "C" __global__'):]

    # was max(half, half), TVM's __hgt(a, b) ? a : b (a NaN in b won); now CUDA's max/min of floats (fmaxf/fminf)
    half = [line for line in source("float16").splitlines() if re.search(r"\b(max|min|fmaxf|fminf)\(", line)]
    assert len(half) >= 8 and all("float" in line and "half" not in line for line in half), half
    f32 = source("float32")  # fmaxf / fminf already skip NaN: left as they were
    assert re.search(r"\b(max|fmaxf)\(", f32) and "(float)" not in f32 and "isnan" not in f32


def test_cuda_half_max_min_on_eight_lane_vectors_compile_and_pack_the_broadcast_lanes():
    """48×40 fp16 with 128 threads vectorises by 8: the ReLU's zero became a float32x8 broadcast that TVM printed as
    ``make_ulonglong4`` of eight floats, which NVRTC and nvcc reject (it failed on the H200)."""
    from tilelang_core.backend.cuda.codegen import _packed_broadcasts

    kernel = tilelang.jit(out_idx=[-1], target="cuda")(minmax_both_orders.factory)(48, 40, "float16")
    src = kernel.get_kernel_source()
    assert "tl::pack_lanes<ulonglong4>(" in src and not re.search(r"make_ulonglong4\(([^,()]*,){7}", src)
    fixed = _packed_broadcasts("x = make_ulonglong4(f(1, 2), b, c, d); y = make_ulonglong4(a,b,c,d,e,f(g),h,i);")
    assert fixed == "x = make_ulonglong4(f(1, 2), b, c, d); y = tl::pack_lanes<ulonglong4>(a,b,c,d,e,f(g),h,i);"

"""CUDA backend on a GPU: the CPU issue's kernels through ``@jit(target="cuda")`` against torch, outputs poisoned
first. Skipped, with the reason shown, on machines without a CUDA GPU (CI); bench/gpu/run.py runs the full set on
the H200 from prebuilt artifacts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import find_nvcc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import elementwise, gemm, rmsnorm, softmax  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible: GPU execution tests skipped "
                                                            "(codegen is covered by test_cuda_codegen.py)"),
    pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: cannot build CUDA kernels here"),
]


def _cuda(factory):
    return tilelang.jit(out_idx=factory.out_idx, target="cuda")(factory.factory)


@pytest.mark.parametrize("M,N,K,dtype", [(1024, 1024, 1024, "float16"), (300, 200, 136, "float16"),
                                         (300, 200, 130, "float32")])
def test_quickstart_gemm_relu_matches_torch_on_the_gpu(M, N, K, dtype):
    kern = _cuda(gemm.matmul_relu)(M, N, K, 128 if dtype == "float16" else 64, 128 if dtype == "float16" else 64, 32,
                                   dtype=dtype)
    td = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=td)
    b = torch.randn(K, N, device="cuda", dtype=td)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=td)
    kern(a, b, c)
    ref = torch.relu(a.double() @ b.double())
    tol = 2e-2 if dtype == "float16" else 1e-4
    torch.testing.assert_close(c.double(), ref, rtol=tol, atol=tol)


def test_softmax_rmsnorm_and_add_match_torch_on_ragged_shapes():
    x = torch.randn(1001, 333, device="cuda")
    torch.testing.assert_close(_cuda(softmax.softmax)(1001, 333)(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    w = torch.randn(333, device="cuda")
    ref = torch.nn.functional.rms_norm(x, (333,), w, 1e-6)
    torch.testing.assert_close(_cuda(rmsnorm.rms_norm)(1001, 333)(x, w), ref, rtol=1e-4, atol=1e-5)
    y = torch.randn(1001, 333, device="cuda")
    torch.testing.assert_close(_cuda(elementwise.add_direct)(1001, 333)(x, y), x + y, rtol=0, atol=0)


def test_profiler_times_a_cuda_kernel_with_events():
    kern = _cuda(elementwise.add_tiled)(1024, 1024)
    prof = kern.get_profiler()
    prof.assert_allclose(lambda a, b: a + b, rtol=0, atol=0)
    assert prof.do_bench() > 0

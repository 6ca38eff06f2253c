"""On a GPU: float8 kernels against torch's CUDA conversions, dtype-object kernels, and the testing / profiler
helpers that behave differently where a GPU is visible (requires_cuda runs, do_bench uses CUDA events)."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tests.test_compat_dtypes import _all_bytes, _hard_floats, fp8_gemm, fp8_roundtrip, fp8_tile_dequant, scaled_add

from .conftest import cuda

FP8 = [T.float8_e4m3fn, T.float8_e5m2]


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_decode_on_the_gpu_equals_torch(fp8):
    x = _hard_floats(2048).cuda()
    n = x.numel()
    a = _all_bytes(fp8).repeat(n // 256 + 1)[:n].contiguous().cuda()
    d, e = cuda(fp8_roundtrip)(n, fp8)(a, x)
    ref = a.float()
    assert torch.equal(d.isnan(), ref.isnan())
    ok = ~ref.isnan()
    assert torch.equal(d[ok], ref[ok])
    # encoding: torch's bytes (NaN keeps its sign, e5m2 overflows to inf). e4m3fn beyond 448 saturates as torch
    # 2.13 does; the GPU host's torch 2.11 gives NaN there (bench/gpu/fp8_probe.py): compare where it is finite
    want = x.to(fp8.as_torch())
    finite = want.float().isfinite() | x.isnan()
    assert torch.equal(e.view(torch.uint8)[finite], want.view(torch.uint8)[finite])


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_tiles_and_gemm_on_the_gpu(fp8):
    a = torch.cat([_all_bytes(fp8).view(2, 128)] * 32).contiguous().cuda()
    s = (torch.rand(64) + 0.5).cuda()
    c = cuda(fp8_tile_dequant)(64, 128, fp8)(a, s)
    ref = (a.float() * s[:, None]).to(torch.bfloat16)
    ok = ~ref.float().isnan()
    assert torch.equal(c[ok], ref[ok])
    x, y = torch.randn(64, 64).to(fp8.as_torch()).cuda(), torch.randn(64, 64).to(fp8.as_torch()).cuda()
    torch.testing.assert_close(cuda(fp8_gemm)(64, 64, 64, fp8)(x, y), x.float() @ y.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [T.float16, T.bfloat16])
def test_dtype_objects_on_the_gpu(dtype):
    a = torch.randn(64, 32, device="cuda").to(getattr(torch, dtype))
    b = torch.randn(64, 32, device="cuda")
    c = cuda(scaled_add)(64, 32, dtype)(a, b)
    torch.testing.assert_close(c, (a.float() * 2 + b).to(c.dtype), rtol=1e-2, atol=1e-2)


@tilelang.testing.requires_cuda
@tilelang.testing.requires_cuda_compute_version_ge(8, 0)
def test_requires_cuda_runs_where_a_gpu_is_visible():
    assert torch.cuda.is_available()


def test_do_bench_times_gpu_work_with_events():
    a = torch.randn(2048, 2048, device="cuda")
    t = tilelang.profiler.do_bench(lambda: a @ a, _n_warmup=3, _n_repeat=10)
    assert 0 < t < 1000
    lo, hi = tilelang.profiler.do_bench(lambda: a @ a, _n_repeat=10, quantiles=[0.0, 1.0])
    assert lo <= hi

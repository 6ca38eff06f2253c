"""Issue 18's frontend items on the GPU: the kernels of tests/test_compat_frontend.py compiled for CUDA and run on
the device, every output poisoned first and compared with torch and with the CPU build. Scalar parameters and
symbolic sizes go through the CUDA launcher's argument binding (scalars packed by dtype, the grid evaluated per
call); the exported module is checked too. Not yet run on a GPU when written (no GPU on the dev machine)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from .conftest import assert_written_and_close, cpu, cuda, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_compat_frontend import (  # noqa: E402
    axpy_subscript,
    chained,
    copy_strided,
    flat_plus_one,
    gemm_dynamic_m,
    rows_plus_bias,
    scale_shift,
    var_scalars,
)
from test_compat_frontend_cuda import if_range  # noqa: E402


def test_subscript_annotation_and_strided_tensor():
    x, y = randn(40, 16), randn(40, 16)
    z = poisoned((40, 16), torch.float32)
    cuda(axpy_subscript)(40, 16)(x, y, z)
    assert_written_and_close(z, 2 * x + y, 1e-6, 1e-6)
    assert_written_and_close(cuda(copy_strided)(4, 8, (8, 1))(x[:4, :8].contiguous()), x[:4, :8] + 1, 0, 0)


def test_scalar_parameters():
    k = cuda(scale_shift)(50)
    x = randn(50)
    for alpha, n in ((1.5, 3), (-0.25, -7)):
        y = poisoned((50,), torch.float32)
        k(x, alpha, n, y)
        assert_written_and_close(y, x * alpha + n, 1e-6, 1e-6)
    with pytest.raises(TypeError, match="argument 'n': expected an integer"):
        k(x, 1.0, 2.5)


@pytest.mark.parametrize("m", [1, 13, 1000, 4099])
def test_symbolic_rows_one_kernel(m):
    k = cuda(rows_plus_bias)(64)
    x, b = randn(m, 64), randn(64)
    y = poisoned((m, 64), torch.float32)
    k(x, b, y)
    assert_written_and_close(y, x + b, 1e-6, 1e-6)
    assert k(x, b).shape == (m, 64)
    assert cuda(rows_plus_bias)(64) is not None


def test_symbolic_size_mismatch_is_refused_before_the_launch():
    k = cuda(rows_plus_bias)(64)
    with pytest.raises(ValueError, match="symbolic size m"):
        k(randn(10, 64), randn(64), torch.empty(11, 64, device="cuda"))


def test_view_chained_assignment_and_alloc_var():
    a = randn(4, 8)
    assert_written_and_close(cuda(flat_plus_one)(4, 8)(a), a.reshape(-1) + 1, 1e-6, 1e-6)
    a = randn(24)
    for got, want in zip(cuda(chained)(24)(a), (a + 1, a + 1, (2 * a) ** 2)):
        assert_written_and_close(got, want, 1e-6, 1e-6)
    a = torch.randn(20)
    idx = torch.tensor([7], dtype=torch.int32)
    ref = cpu(var_scalars)(20)(a, idx)
    assert_written_and_close(cuda(var_scalars)(20)(a.cuda(), idx.cuda()), ref, 1e-5, 1e-5)


@pytest.mark.parametrize("M,N", [(128, 128), (100, 40)])
def test_let_bound_chained_comparison(M, N):
    a = randn(M, N, dtype=torch.float16)
    ref = a * 0.5
    ref[17:96] = a[17:96] * 2
    assert_written_and_close(cuda(if_range)(M, N, 32, 32)(a), ref, 1e-3, 1e-3)


def test_exported_kernel_with_scalars_and_symbolic_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_EXPORT_CACHE_DIR", str(tmp_path / "cache"))
    path = cuda(rows_plus_bias)(64).export(tmp_path / "rows_bias_cuda.py")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for m in (3, 777):
        x, b = randn(m, 64), randn(64)
        assert_written_and_close(mod.kernel(x, b), x + b, 1e-6, 1e-6)


@pytest.mark.parametrize("m", [1, 100, 1000])
def test_gemm_with_a_dynamic_m(m):
    a, b = randn(m, 64, dtype=torch.float16), randn(64, 128, dtype=torch.float16)
    c = poisoned((m, 128), torch.float32)
    cuda(gemm_dynamic_m)(128, 64)(a, b, c)
    assert_written_and_close(c, a.float() @ b.float(), 1e-2, 1e-2)

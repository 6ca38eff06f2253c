"""bfloat16 max/min/absmax reductions: TVM has no bfloat16 infinity or isnan, and its CUDA codegen spells a
bfloat16 inf constant ``inff``; each used to end in an internal error (found on the H200 by tests/gpu)."""

from __future__ import annotations

import math

import pytest
import torch

import tilelang_core as tilelang
from tests import compat_ops_kernels as ops
from tilelang_core.backend.cuda.nvcc import find_nvcc, nvrtc_available

KINDS = {"max": lambda x: x.amax(1), "min": lambda x: x.amin(1), "absmax": lambda x: x.abs().amax(1)}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_bf16_nan_propagating_reduce_matches_torch_on_the_cpu(kind):
    x = torch.randn(32, 128).bfloat16()
    x[5, 9] = math.nan
    f = tilelang.jit(out_idx=[-1], target="cpu")(ops.row_reduce_options.factory)
    y = f(32, 128, kind, True, 4, "bfloat16")(x)
    torch.testing.assert_close(y, KINDS[kind](x), equal_nan=True, rtol=0, atol=0)


@pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(), reason="no CUDA compiler (nvcc or NVRTC)")
@pytest.mark.parametrize("nan_propagate", [True, False])
def test_bf16_reduce_compiles_for_cuda(nan_propagate):
    f = tilelang.jit(out_idx=[-1], target="cuda")(ops.row_reduce_options.factory)
    kernel = f(32, 128, "max", nan_propagate, 4, "bfloat16")
    assert "__global__" in kernel.get_kernel_source()

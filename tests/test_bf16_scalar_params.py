"""bfloat16 scalar kernel parameters (``alpha: T.bfloat16``), issue 18: the value a kernel receives is the caller's
number rounded as torch rounds it (to float32, then to nearest even in bfloat16; NaN the canonical quiet NaN;
overflow to infinity). Before: the CUDA launcher packed the truncated upper half of the float32 bits (1.0117 became
1.0078), and on the CPU every kernel with such a parameter failed LLVM code generation (tl.Bf16ScalarParams)."""

from __future__ import annotations

import math

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.runtime.exported import scalar_bits


def _torch_bf16_bits(values: list[float]) -> list[int]:
    t = torch.tensor(values, dtype=torch.float64).to(torch.float32).to(torch.bfloat16)
    return [int(b) & 0xFFFF for b in t.view(torch.int16).tolist()]


def _sample_values() -> list[float]:
    g = torch.Generator().manual_seed(18)
    bits = torch.randint(-(2**31), 2**31, (20000,), dtype=torch.int64, generator=g).to(torch.int32)
    floats = bits.view(torch.float32).tolist()  # every exponent, subnormals, NaN payloads, infinities
    ties = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 2.0**-130 + 2.0**-138]  # exactly halfway: to even
    return floats + ties + [0.0, -0.0, math.inf, -math.inf, math.nan, 3.4e38, -3.4e38, 1e39, 1e-45, 0.1]


def test_bf16_scalar_bits_round_to_nearest_even_like_torch():
    values = _sample_values()
    got = [scalar_bits(v, "bfloat16") for v in values]
    want = _torch_bf16_bits(values)
    def is_nan(b: int) -> bool:
        return (b & 0x7F80) == 0x7F80 and b & 0x7F != 0

    # a NaN stays a NaN (torch's own conversions disagree on which NaN: 0x7fc0 scalar, sign and payload vectorised)
    bad = [(v, hex(g), hex(w)) for v, g, w in zip(values, got, want)
           if (g != w and not math.isnan(v)) or (math.isnan(v) and not (is_nan(g) and is_nan(w)))]
    assert not bad, bad[:10]


@pytest.mark.parametrize("dtype, fmt_inf", [("float32", 0x7F800000), ("float16", 0x7C00)])
def test_a_float_scalar_beyond_its_range_packs_as_infinity(dtype, fmt_inf):
    assert scalar_bits(1e39, dtype) == fmt_inf  # was struct.error for float32
    assert scalar_bits(-1e39, dtype) == fmt_inf | (1 << (31 if dtype == "float32" else 15))


@tilelang.jit(out_idx=[-1], target="cpu")
def fill_scaled(N):
    @T.prim_func
    def main(alpha: T.bfloat16, X: T.Tensor((N,), "bfloat16"), Y: T.Tensor((N,), "bfloat16")):
        with T.Kernel(1) as _bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * alpha

    return main


def test_cpu_kernel_with_a_bf16_scalar_parameter_receives_it_rounded_like_torch():
    kernel = fill_scaled(32)  # was: LLVM code generation failed (a float argument bound to a bfloat16 variable)
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(32, generator=g) * 4).to(torch.bfloat16)
    for alpha in [1.01171875, 1.0 + 2**-8 + 2**-20, -3.3, 0.1, 7.0e37]:
        want = x * torch.tensor(alpha, dtype=torch.bfloat16)
        got = kernel(alpha, x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)

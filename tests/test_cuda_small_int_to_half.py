"""int → float16 casts of proven-small integers on CUDA without ``I2F`` (tl.SmallIntToHalfCUDA), without a GPU.

``reinterpret<half>(0x6400 | (x - lo)) - (1024 - lo)`` is exact for ``x`` in ``[lo, lo + 1024)``. Checked here:
every value of the ranges a dequantising nest casts (a nibble minus 8, a whole byte, a nibble minus a zero point)
in tests/cuda_emulator.py bit for bit against torch's casts, the generated code (no conversion left for a bounded
value; an unbounded one keeps its cast)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402
from test_compat_language_ops_cuda import cuda_source  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


@tilelang.jit(out_idx=[-1])
def casts(N, form):
    """Y[:, 0] = cast of a small integer made from X (the form), Y[:, 1] = cast of the unbounded int32 Z."""

    @T.prim_func
    def main(X: T.Tensor((N,), "uint8"), Z: T.Tensor((N,), "int32"), Y: T.Tensor((N, 2), "float16")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(N):
                if form == 0:
                    Y[i, 0] = T.cast(T.cast(X[i] & 0xF, "int32") - 8, "float16")  # int4 weight: [-8, 7]
                elif form == 1:
                    Y[i, 0] = T.cast(X[i], "float16")  # a byte: [0, 255]
                else:
                    Y[i, 0] = T.cast(T.cast(X[i] >> 4, "int32") - T.cast(X[i] & 0xF, "int32"), "float16")  # [-15, 15]
                Y[i, 1] = T.cast(Z[i], "float16")

    return main


def _reference(X: torch.Tensor, Z: torch.Tensor, form: int) -> torch.Tensor:
    x = X.to(torch.int32)
    small = [(x & 0xF) - 8, x, (x >> 4) - (x & 0xF)][form]
    return torch.stack([small.half(), Z.half()], dim=1)


@pytest.mark.parametrize("form", [0, 1, 2])
def test_small_integer_casts_are_exact_in_the_emulator(form):
    X = torch.arange(256, dtype=torch.int32).to(torch.uint8)  # every byte value
    Z = torch.randint(-70000, 70000, (256,), dtype=torch.int32, generator=torch.Generator().manual_seed(form))
    (Y,) = emulate(casts, (256, form), {}, [X, Z])
    assert torch.equal(Y, _reference(X, Z, form))


@needs_nvcc
def test_a_bounded_cast_uses_the_exponent_bits_and_an_unbounded_one_keeps_its_conversion(tmp_path):
    src = cuda_source(tmp_path, casts, 256, 0)
    assert "(ushort)25600" in src  # 0x6400
    conversions = re.findall(r"\(\(half\)(\w+)", src)
    assert conversions and set(conversions) == {"Z_ptr"}  # only the unbounded Z keeps a conversion

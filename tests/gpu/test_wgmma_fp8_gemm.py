"""The fp8 wgmma GEMM on the GPU (issue 15, part 6): float8_e4m3fn / float8_e5m2 A and B (and the mixes), fp32
accumulation, bf16/fp16/fp32 out, through ``@jit(target="cuda")`` (sm_90a on a Hopper GPU: ``wgmma m64nNk32``,
TMA loads of 1-byte tiles) against torch's ``a.float() @ b.float().T``; ragged M, N and K (TMA zero fill, and K
rows that are not 16-byte multiples on cp.async), one wgmma group in flight and ``wait_group 0``, and the FMA
fallback of a B stored K x N.

Tolerance: the products of float8 values are exact in float32, but Hopper's fp8 tensor cores keep fewer
accumulator bits than an fp32 FMA chain (DeepSeek-V3 reports about 14), so results are compared with a bound
relative to the result's scale, far below the O(1) errors a wrong layout or descriptor gives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import poisoned

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fp8_gemm_kernels import fp8_gemm  # noqa: E402

E4, E5 = "float8_e4m3fn", "float8_e5m2"
DT = {E4: torch.float8_e4m3fn, E5: torch.float8_e5m2, "bfloat16": torch.bfloat16, "float16": torch.float16,
      "float32": torch.float32}
CASES = [  # M, N, K, block_M, block_N, block_K, a_dtype, b_dtype, out_dtype, stages, threads[, trans_B]
    (512, 512, 512, 128, 128, 128, E4, E4, "bfloat16", 3, 128),
    (1000, 1030, 1024, 128, 128, 128, E4, E4, "bfloat16", 3, 128),    # ragged M, N (TMA zero fill)
    (1000, 1030, 1040, 128, 256, 128, E4, E5, "float16", 4, 256),     # mixed, ragged K tail of 16 (TMA)
    (777, 515, 1000, 128, 128, 64, E5, E5, "float32", 4, 128),        # K rows of 1000 bytes: cp.async, ragged
    (384, 256, 320, 64, 128, 64, E5, E4, "bfloat16", 2, 128),         # wait_group 0 (two stages), 64B swizzle
    (256, 512, 256, 128, 256, 128, E4, E4, "float32", 3, 256),        # two warpgroups, n256 instructions
    (384, 384, 96, 128, 128, 128, E4, E4, "float32", 3, 128),         # a single (partial) k-tile
    (256, 256, 192, 64, 64, 64, E4, E4, "float32", 2, 128, False),    # B stored K x N: the FMA loops
]
IN_FLIGHT = {"in_flight": None, "wait0": {"tl.cuda.wgmma_pipeline": False}}


def _ids(c: tuple) -> str:
    tb = c[11] if len(c) > 11 else True
    return "x".join(map(str, c[:6])) + f"-s{c[9]}-t{c[10]}-{c[6][6:]}x{c[7][6:]}-{c[8]}" + ("" if tb else "-KxN")


@pytest.mark.parametrize("pipeline", list(IN_FLIGHT))
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_fp8_wgmma_gemm_matches_torch(case, pipeline):
    M, N, K, a_dt, b_dt, out = case[0], case[1], case[2], case[6], case[7], case[8]
    tb = case[11] if len(case) > 11 else True
    kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=IN_FLIGHT[pipeline])(fp8_gemm.factory)(*case)
    src = kernel.get_kernel_source("cuda")
    if torch.cuda.get_device_capability() == (9, 0):
        assert ("tl::wgmma_gemm_ss<" in src) == tb, "fp8 wgmma takes K-major B only"
    g = torch.Generator(device="cuda").manual_seed(M + 3 * N + 7 * K)
    a = torch.randn(M, K, device="cuda", generator=g).to(DT[a_dt])
    b = torch.randn(*((N, K) if tb else (K, N)), device="cuda", generator=g).to(DT[b_dt])
    c = poisoned((M, N), DT[out])
    kernel(a, b, c)
    ref = a.float() @ (b.float().T if tb else b.float())
    assert not torch.isnan(c).any(), "output elements never written"
    scale = ref.abs().max().item()
    rounding = {"float32": 0.0, "bfloat16": 2 ** -8, "float16": 2 ** -11}[out]
    err = (c.float() - ref).abs()
    assert err.max().item() <= 1e-2 * scale + rounding * ref.abs().max().item(), err.max().item()
    assert (err.norm() / ref.norm()).item() < 5e-3 + rounding


def test_fp8_wgmma_and_the_fma_loops_agree():
    """The same product through wgmma (B stored N x K) and through the FMA loops (the same B stored K x N)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(256, 192, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(128, 192, device="cuda", generator=g).to(torch.float8_e4m3fn)
    wg = tilelang.jit(out_idx=[-1], target="cuda")(fp8_gemm.factory)(256, 128, 192, 128, 128, 64, E4, E4,
                                                                      "float32", 3, 128)
    fma = tilelang.jit(out_idx=[-1], target="cuda")(fp8_gemm.factory)(256, 128, 192, 64, 64, 64, E4, E4,
                                                                       "float32", 2, 128, False)
    c_wg, c_fma = wg(a, b), fma(a, b.T.contiguous())
    torch.testing.assert_close(c_wg, c_fma, rtol=1e-2, atol=1e-2 * c_fma.abs().max().item())

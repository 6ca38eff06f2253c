"""``tl.cuda.wgmma_written_tiles`` on the H200: the dequantised-GEMM variants of bench/gpu/dequant_variants.py at
prefill tiles (128 x 64, 256 threads) with their weight nests writing the wgmma swizzled tile, against torch, ragged
shapes included, and identical to the mma.sync build of the same program within the same tolerance.

Written without a GPU and not yet run on one (the CPU side: tests/test_cuda_wgmma_written_tiles.py, the CUDA
emulator); run with ``bash bench/gpu/test_suite.sh -k wgmma_written_tiles`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

VARIANTS = {v.name: v for v in dv.VARIANTS}


def _kernel(v, M, N, K, on: bool):
    func = dv.program(v, M, N, K, **dv.tiles(128, v))
    return tilelang.compile(func, out_idx=[-1], target="cuda",
                            pass_configs={"tl.cuda.wgmma_written_tiles": on, "tl.cuda.fuse_dequant": False})


@pytest.mark.parametrize("name", ["example_bk256", "bf16", "bk64", "hi_first", "zp_g128", "g128", "fp4_e2m1_g32",
                                  "int8"])
@pytest.mark.parametrize("M,N,K", [(128, 1024, 2048), (200, 1000, 1024)])
def test_wgmma_dequant_prefill_matches_torch(name, M, N, K):
    v = VARIANTS[name]
    kernel = _kernel(v, M, N, K, True)
    assert "wgmma" in kernel.get_kernel_source(), kernel.notes
    ins = dv.inputs(v, M, N, K)
    ref = dv.reference(v, *ins)
    out = poisoned((M, N), getattr(torch, v.dtype))
    kernel(*ins, out)
    assert_written_and_close(out, ref, 2e-2, 2e-2)
    plain = _kernel(v, M, N, K, False)(*ins)
    assert_written_and_close(plain, ref, 2e-2, 2e-2)

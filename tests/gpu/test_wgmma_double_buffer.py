"""``tl.cuda.wgmma_double_buffer`` on the GPU: the dequantised prefill (bench/gpu/dequant_variants.py at 128-row
tiles, wgmma on the decoded tile) with the decoded tile in two copies and its wgmma group in flight, every variant,
ragged M and N, three and four stages, against torch over repeated launches. Also checked without a GPU by
tests/test_cuda_wgmma_double_buffer.py (the CUDA emulator)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

ON = {"tl.cuda.wgmma_double_buffer": True}


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("M,N,K", [(128, 8192, 4096), (100, 1000, 2048)], ids=["prefill", "ragged"])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_double_buffered_prefill_matches_torch(v, M, N, K, stages):
    tile = {**dv.tiles(128, v), "num_stages": stages}
    kernel = dv.compile_variant(v, M, N, K, ON, tile=tile)
    src = kernel.get_kernel_source()
    assert "tl::wgmma_drain<" in src or "gemm_dq4" in src, kernel.notes
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

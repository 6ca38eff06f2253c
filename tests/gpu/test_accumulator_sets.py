"""``tl.cuda.accumulator_sets`` on the GPU: every variant of bench/gpu/dequant_variants.py at decode shapes (ragged M
and N included, 16x128 tiles on 128 and 256 threads, split-K where the compiler splits, with and without the scale
after the loop) with 2 and 4 sets, against torch, over repeated launches. The CUDA side is also checked without a
GPU (tests/test_cuda_accumulator_sets.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

GENERAL = {"tl.cuda.fuse_dequant": False}
KEYS = {"s2": {"tl.cuda.accumulator_sets": 2}, "s4": {"tl.cuda.accumulator_sets": 4},
        "s2-factor": {"tl.cuda.accumulator_sets": 2, "tl.cuda.factor_scale": True}}
TILES = {"16x128x256-t256": {"block_N": 128, "block_K": 256, "num_stages": 4, "threads": 256},
         "16x128x256-t128": {"block_N": 128, "block_K": 256, "num_stages": 4, "threads": 128}}


@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("keys", list(KEYS))
@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1000, 4096)], ids=["decode", "ragged"])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_over_accumulator_sets_match_torch(v, M, N, K, keys, tile):
    t = {**dv.tiles(M, v), **TILES[tile]}
    if v.group > 0 and t["block_K"] % v.group and v.group % t["block_K"]:
        pytest.skip("the group does not tile block_K")
    kernel = dv.compile_variant(v, M, N, K, {**GENERAL, **KEYS[keys]}, tile=t)
    src = kernel.get_kernel_source()
    assert "tl::gemm_rb_step<" in src and "dq_acc_set1" in src, kernel.notes
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

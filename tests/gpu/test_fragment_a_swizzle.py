"""``tl.cuda.fragment_a_swizzle`` on the GPU: every variant of bench/gpu/dequant_variants.py at decode shapes
(ragged M and N included, 16x128 tiles on 128 and 256 threads, split-K where the compiler splits, with the scale after
the loop and with the weights read from global memory) with the run-swizzled A tile where it applies, against
torch, over repeated launches. The CUDA side is also checked without a GPU (tests/test_cuda_fragment_a_swizzle.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

GENERAL = {"tl.cuda.fuse_dequant": False}
KEYS = {"swz": {"tl.cuda.fragment_a_swizzle": True},
        "swz-factor": {"tl.cuda.fragment_a_swizzle": True, "tl.cuda.factor_scale": True},
        "swz-direct": {"tl.cuda.fragment_a_swizzle": True, "tl.cuda.dequant_fragments_direct": True}}
TILES = {"16x128x256-t256": {"block_N": 128, "block_K": 256, "num_stages": 4, "threads": 256},
         "16x128x256-t128": {"block_N": 128, "block_K": 256, "num_stages": 4, "threads": 128}}


@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("keys", list(KEYS))
@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1000, 4096)], ids=["decode", "ragged"])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_on_the_run_swizzled_a_tile_match_torch(v, M, N, K, keys, tile):
    t = {**dv.tiles(M, v), **TILES[tile]}
    if v.group > 0 and t["block_K"] % v.group and v.group % t["block_K"]:
        pytest.skip("the group does not tile block_K")
    kernel = dv.compile_variant(v, M, N, K, {**GENERAL, **KEYS[keys]}, tile=t)
    src = kernel.get_kernel_source()
    assert "tl::gemm_rb_step<" in src, kernel.notes
    assert ("tl::gemm_rb_step<16, 128, 256, 1, 8, 209," in src or "tl::gemm_rb_step<16, 128, 256, 1, 4, 209," in src) \
        == any("A_s is swizzled for 64-byte lane runs" in n for n in kernel.notes)
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

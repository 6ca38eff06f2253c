"""``tl.cuda.factor_scale`` and ``tl.cuda.swizzle_packed_tiles`` on the GPU: every variant of
bench/gpu/dequant_variants.py at decode shapes (ragged M and N included, 16-row tiles of 128- and 256-byte packed
rows, split-K where the compiler splits) with each key and both, against torch, over repeated launches. The CUDA
side is also checked without a GPU (tests/test_cuda_factor_scale.py, tests/test_cuda_swizzle_packed_tiles.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

GENERAL = {"tl.cuda.fuse_dequant": False}
KEYS = {"factor": {"tl.cuda.factor_scale": True}, "swizzle": {"tl.cuda.swizzle_packed_tiles": True},
        "both": {"tl.cuda.factor_scale": True, "tl.cuda.swizzle_packed_tiles": True}}
TILES = {"16x128x256": {"block_N": 128, "block_K": 256, "num_stages": 4},
         "16x64x512": {"block_N": 64, "block_K": 512, "num_stages": 3}}


@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("keys", list(KEYS))
@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1000, 4096)], ids=["decode", "ragged"])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_with_the_scale_and_swizzle_keys_match_torch(v, M, N, K, keys, tile):
    t = {**dv.tiles(M, v), **TILES[tile]}
    if v.group > 0 and t["block_K"] % v.group and v.group % t["block_K"]:
        pytest.skip("the group does not tile block_K")
    kernel = dv.compile_variant(v, M, N, K, {**GENERAL, **KEYS[keys]}, tile=t)
    assert "tl::gemm_rb_step<" in kernel.get_kernel_source(), kernel.notes
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

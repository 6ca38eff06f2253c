"""Packed weights read straight from global memory by the fragment decode (``tl.cuda.dequant_fragments_direct``)
on the GPU: every variant of bench/gpu/dequant_variants.py at decode shapes (ragged M and N included) against torch
and against the fragments kernel that stages the packed tile in shared memory; launches repeated.

The CUDA side is also checked without a GPU (tests/test_cuda_dequant_fragments_direct.py:
the CUDA emulator and nvcc); run with ``bash bench/gpu/test_suite.sh -k dequant_fragments_direct`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

STAGED = {"tl.cuda.dequant_fragments": True, "tl.cuda.fuse_dequant": False}
DIRECT = {**STAGED, "tl.cuda.dequant_fragments_direct": True}


@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1024, 4096), (5, 1000, 2048)])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_with_weights_from_global_memory_match_torch(v, M, N, K):
    kernel = dv.compile_variant(v, M, N, K, DIRECT)
    src = kernel.get_kernel_source()
    assert "tl::gemm_rb_step<" in src, kernel.artifact.extra.get("notes")
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2
    staged = dv.compile_variant(v, M, N, K, STAGED)(*args)  # the same weights, the same k permutation
    assert ((got.double() - staged.double()).abs().max() / ref.abs().max()).item() <= 1e-3


@pytest.mark.parametrize("threads", [128, 256])
@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1000, 3328)], ids=["decode", "ragged-odd-tiles"])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_the_register_ring_with_the_scale_after_the_loop_matches_torch(v, M, N, K, threads):
    # 16x128x256 tiles (the recogniser's best decode tile on 256 threads); K = 3328 is 13 K tiles: an odd count,
    # so the ring ends on its first slot (and split-K shares, where the compiler splits, get odd counts too)
    tile = {**dv.tiles(M, v), "block_N": 128, "block_K": 256, "num_stages": 4, "threads": threads}
    kernel = dv.compile_variant(v, M, N, K, {**DIRECT, "tl.cuda.factor_scale": True}, tile=tile)
    src = kernel.get_kernel_source()
    assert "tl::ldg_cs16(" in src and "_r1_ptr" in src, kernel.notes
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2

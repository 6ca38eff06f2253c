"""B fragments computed in registers from the decode nest (``tl.cuda.dequant_fragments``) on the GPU: every variant
of bench/gpu/dequant_variants.py at decode shapes (ragged M and N included) against torch, and against the default
path's kernel; launches repeated.

Written without a GPU and not yet run on one (the CUDA side is checked by tests/test_cuda_dequant_fragments.py:
the CUDA emulator and nvcc); run with ``bash bench/gpu/test_suite.sh -k dequant_fragments`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

# the general path alone (the W4A16 recogniser, run first by default, would take the example's spelling)
ON = {"tl.cuda.dequant_fragments": True, "tl.cuda.fuse_dequant": False, "tl.cuda.dequant_fragment_tables": False}


@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1024, 4096), (5, 1000, 2048)])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_with_fragments_in_registers_match_torch(v, M, N, K):
    kernel = dv.compile_variant(v, M, N, K, ON)
    assert "tl::gemm_rb_step<" in kernel.get_kernel_source(), kernel.artifact.extra.get("notes")
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2
    default = dv.compile_variant(v, M, N, K, {"tl.cuda.dequant_fragments": False})(*args)  # the recogniser or the
    # shared-tile decode: the same weights
    assert ((got.double() - default.double()).abs().max() / ref.abs().max()).item() <= 1e-2


@pytest.mark.parametrize("M,N,K", [(16, 8192, 8192), (7, 1024, 4096), (5, 1000, 2048)])
def test_fp4_with_nibble_tables_matches_torch_and_the_element_by_element_kernel(M, N, K):
    # tl.cuda.dequant_fragment_tables (on by default, spelt out): the fp4 e2m1 decode looked up by byte permutes
    v = next(x for x in dv.VARIANTS if x.name == "fp4_e2m1_g32")
    kernel = dv.compile_variant(v, M, N, K, {**ON, "tl.cuda.dequant_fragment_tables": True})
    assert "tl::nib_lut4<" in kernel.get_kernel_source()
    args = dv.inputs(v, M, N, K)
    ref = dv.reference(v, args[0], *args[1:])
    for _ in range(3):
        got = kernel(*args)
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2
    plain = dv.compile_variant(v, M, N, K, ON)(*args)  # the same weights, one element at a time
    assert ((got.double() - plain.double()).abs().max() / ref.abs().max()).item() <= 1e-2

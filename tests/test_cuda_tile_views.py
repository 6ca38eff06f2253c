"""``T.reshape`` / ``T.view`` of shared tiles on CUDA, without a GPU: the programs compile for sm_90 with nvcc and
their lowered CUDA TIR runs in tests/cuda_emulator.py against torch.

Before, the CUDA backend refused every view of an on-chip tile. Now tl.LowerTileViewsCUDA rewrites each access of a
shared view into its tile (row-major linearised index, ``reinterpret`` for a dtype of the same width) and a
``T.copy`` / ``T.fill`` of a view into a ``T.Parallel`` nest, before layout inference; what it cannot express
(another element width, other tile ops on a view, views of fragments) is a located error. The same programs run
on the GPU in gpu/test_cuda_gaps.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.errors import TileLangCompileError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compat_ops_kernels as ops  # noqa: E402
import cuda_gap_kernels as gaps  # noqa: E402
from cuda_emulator import emulate  # noqa: E402
from test_compat_language_ops_cuda import cuda_source  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA "
                                                             "toolkit, not a GPU")


def test_reshape_of_a_shared_tile_reads_the_same_elements_in_the_emulator():
    x = torch.randn(4, 8)
    (y,) = emulate(ops.reshape_shared, (4, 8), {}, [x])
    torch.testing.assert_close(y, x.reshape(8, 4), rtol=0, atol=0)


def test_view_of_a_shared_tile_as_another_dtype_reads_its_bits():
    v = torch.randn(64)
    (y,) = emulate(ops.view_bits, (64,), {}, [v])
    assert torch.equal(y, v.view(torch.int32))
    (y,) = emulate(gaps.view_of_view_bits, (64,), {}, [v])
    assert torch.equal(y, v.view(torch.int32).reshape(16, 4))


def test_writes_through_views_land_in_the_tile():
    x = torch.randn(8, 16)
    (y,) = emulate(gaps.write_through_view, (16, 8), {}, [x])
    ref = (x * 2).reshape(16, 8).clone()
    ref.view(-1)[:8] = 1.0
    torch.testing.assert_close(y, ref, rtol=0, atol=0)


@needs_nvcc
def test_views_compile_for_sm90_including_a_view_of_a_swizzled_gemm_operand(tmp_path):
    for sub in ("bits", "gemm"):
        (tmp_path / sub).mkdir()
    cuda_source(tmp_path / "bits", ops.view_bits, 64)
    src = cuda_source(tmp_path / "gemm", gaps.gemm_operand_viewed, 64, 64, 32)
    assert "tl::gemm_ss" in src or "wgmma" in src


@pytest.mark.parametrize("factory,message", [
    (gaps.view_wider_dtype, r"T\.view of shared tile s \(float16\) as float32: on CUDA a view of a shared tile must "
                            r"keep the element width"),
    (gaps.reduce_of_view, r"tl\.reduce of a T\.reshape / T\.view of shared tile s: not supported on CUDA .* T\.copy "
                          r"the view into a tile of its shape first"),
    (gaps.reshape_fragment, r"T\.reshape / T\.view of a local\.fragment tile is not supported on CUDA"),
])
def test_views_without_a_cuda_lowering_are_located_errors(tmp_path, factory, message):
    with pytest.raises(TileLangCompileError, match=message) as e:
        cuda_source(tmp_path, factory, 64, cubin=False)
    assert e.value.location is not None and e.value.location.file.endswith("cuda_gap_kernels.py")
    assert "docs/compat.md" in str(e.value)

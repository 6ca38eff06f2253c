"""``T.alloc_global`` on CUDA, without a GPU: a workspace the program allocates compiles for sm_90 with nvcc and
the lowered CUDA TIR runs in tests/cuda_emulator.py against torch and the CPU build.

Before, the CUDA backend refused ``T.alloc_global`` with a located error. Now tl.LowerGlobalWorkspacesCUDA
declares the buffer on a ``__device__`` array of the kernel's module (``tl::global_workspace``), and the launch
metadata orders the kernel's launches (``serial_streams``), as for split-K's workspace (docs/design.md). A
workspace of symbolic shape is a located error naming the alternative. On the GPU: gpu/test_cuda_gaps.py."""

from __future__ import annotations

import json
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


def test_workspace_round_trip_matches_torch_in_the_emulator():
    x = torch.randn(16, 32)
    (y,) = emulate(ops.through_global_workspace, (16, 32), {}, [x])
    torch.testing.assert_close(y, 2 * x + 1, rtol=0, atol=0)


def test_two_workspaces_through_tile_ops_match_the_cpu_build():
    x = torch.randn(40, 16).half()
    y, z = emulate(gaps.workspace_tiles, (40, 16, 16), {}, [x])
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)
    assert torch.equal(z, torch.arange(40, dtype=torch.int32)[:, None].expand(40, 16))
    cy, cz = gaps.workspace_tiles(40, 16, 16)(x)
    assert torch.equal(cy, y) and torch.equal(cz, z)


@needs_nvcc
def test_workspace_kernel_compiles_with_module_arrays_and_ordered_launches(tmp_path):
    src = cuda_source(tmp_path, gaps.workspace_tiles, 40, 16, 16)
    assert "tl::global_workspace<0, half, 640>" in src and "tl::global_workspace<1, int, 640>" in src
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["extra"]["cuda"]["serial_streams"] is True
    assert meta["extra"]["cuda"]["args"] == ["X", "Y", "Z"]  # no hidden argument


def test_workspace_of_symbolic_shape_is_a_located_error(tmp_path):
    with pytest.raises(TileLangCompileError, match=r"T\.alloc_global\(W\): on CUDA a workspace's shape must be a "
                                                   r"compile-time constant .* pass the workspace in") as e:
        cuda_source(tmp_path, gaps.workspace_symbolic, 16, cubin=False)
    assert e.value.location is not None and e.value.location.file.endswith("cuda_gap_kernels.py")

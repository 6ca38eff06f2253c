"""Issue 18's CUDA gaps on the GPU: TileLang's reducers (``T.alloc_reducer`` / ``T.finalize_reducer``) compiled
through ``@jit(target="cuda")``, run with poisoned outputs, against torch and the CPU build.

Written without a GPU and not yet run on one (the CUDA side is checked by tests/test_cuda_reducers.py: nvcc and
the CUDA emulator); run with ``bash bench/gpu/test_suite.sh -k cuda_gaps`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from .conftest import assert_written_and_close, cpu, cuda, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import compat_ops_kernels as ops  # noqa: E402
import cuda_gap_kernels as gaps  # noqa: E402


def test_reducer_over_a_distributed_fragment():
    x = randn(64, 64)
    y = cuda(ops.reducer_sums)(64, 64)(x)
    assert_written_and_close(y[0], x.sum(0), 1e-5, 1e-4)
    assert_written_and_close(y[1], x.amax(1), 0, 0)


@pytest.mark.parametrize("op,init", [("sum", 0.5), ("max", -float("inf")), ("min", float("inf"))])
@pytest.mark.parametrize("threads", [32, 128, 256])
def test_reducer_from_global_memory_many_blocks(op, init, threads):
    x = randn(1000, 64)
    y = cuda(gaps.reducer_rows_from_global)(1000, 64, 64, op, init, threads)(x)
    ref = cpu(gaps.reducer_rows_from_global)(1000, 64, 64, op, init, threads)(x.cpu())
    assert_written_and_close(y, ref, 1e-5, 1e-4)


def test_two_nests_update_one_reducer():
    x = randn(32, 64)
    y = cuda(gaps.reducer_two_updates)(32, 64)(x)
    assert_written_and_close(y[0], 2 * x.sum(0), 1e-5, 1e-4)
    assert_written_and_close(y[1, :32], x.amin(1), 0, 0)


def test_reducer_in_float16():
    x = randn(128, 32, dtype=torch.float16)
    y = cuda(gaps.reducer_rows_from_global)(128, 32, 128, "max", -float("inf"), 128, "float16")(x)
    assert_written_and_close(y[0], x.amax(0), 0, 0)


# -- T.reshape / T.view of shared tiles ---------------------------------------------------------------------------

def test_reshape_and_view_of_shared_tiles():
    x = randn(32, 64)
    assert_written_and_close(cuda(ops.reshape_shared)(32, 64)(x), x.reshape(64, 32), 0, 0)
    v = randn(256)
    assert torch.equal(cuda(ops.view_bits)(256)(v), v.view(torch.int32))
    assert torch.equal(cuda(gaps.view_of_view_bits)(256)(v), v.view(torch.int32).reshape(64, 4))


def test_writes_through_a_view():
    x = randn(32, 64)
    y = cuda(gaps.write_through_view)(64, 32)(x)
    ref = (x * 2).reshape(64, 32).clone()
    ref.view(-1)[:32] = 1.0
    assert_written_and_close(y, ref, 0, 0)


def test_view_of_a_swizzled_gemm_operand():
    a, b = randn(64, 32, dtype=torch.float16), randn(32, 64, dtype=torch.float16)
    c, a2 = cuda(gaps.gemm_operand_viewed)(64, 64, 32)(a, b)
    assert_written_and_close(c, a.float() @ b.float(), 1e-3, 1e-3)
    assert torch.equal(a2, a.reshape(-1, 16))


# -- T.alloc_global -----------------------------------------------------------------------------------------------

def test_workspaces_many_blocks_and_repeated_calls():
    x = randn(1000, 64, dtype=torch.float16)
    kern = cuda(gaps.workspace_tiles)(1000, 64, 32)
    for _ in range(3):  # the module's workspace is reused by every launch
        y, z = kern(x)
        assert_written_and_close(y, x + 1, 0, 0)
        assert torch.equal(z.cpu(), torch.arange(1000, dtype=torch.int32)[:, None].expand(1000, 64))
    x2 = randn(16, 32)
    assert_written_and_close(cuda(ops.through_global_workspace)(16, 32)(x2), 2 * x2 + 1, 0, 0)


def test_workspace_kernel_on_two_streams_is_ordered():
    x = randn(1000, 64, dtype=torch.float16)
    kern = cuda(gaps.workspace_tiles)(1000, 64, 32)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(s1):
        y1, _ = kern(x)
    with torch.cuda.stream(s2):
        y2, _ = kern(x * 2)
    torch.cuda.synchronize()
    assert_written_and_close(y1, x + 1, 0, 0)
    assert_written_and_close(y2, x * 2 + 1, 0, 0)

"""TileLang's reducers on CUDA, without a GPU: ``T.alloc_reducer`` / ``T.finalize_reducer`` programs compile for
sm_90 with nvcc and their lowered CUDA TIR runs in tests/cuda_emulator.py against torch (and the CPU build).

Before, the CUDA backend refused ``T.finalize_reducer`` with a located error. Now every thread keeps a replica, a
nest updating the reducer gives each iteration to one thread, a sum reducer's fill lands in thread 0's replica only,
and ``finalize_reducer`` all-reduces the replicas (transform/cuda/reducers_cuda.py). What cannot be given the CPU's
meaning stays a located error. The same programs run on the GPU in gpu/test_cuda_gaps.py."""

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
OPS = {"sum": lambda b: b.sum(0), "max": lambda b: b.amax(0), "min": lambda b: b.amin(0)}


def _block_refs(x: torch.Tensor, block_m: int, op: str, init: float) -> torch.Tensor:
    rows = [OPS[op](x[i:i + block_m]) for i in range(0, x.shape[0], block_m)]
    out = torch.stack(rows)
    return out + init if op == "sum" else out


@needs_nvcc
def test_reducer_program_compiles_for_sm90_with_a_block_allreduce(tmp_path):
    src = cuda_source(tmp_path, ops.reducer_sums, 32, 32)
    assert "tl::block_allreduce<tl::SumOp, 128, 32>" in src
    assert "tl::block_allreduce<tl::MaxOp, 128, 32>" in src


def test_reducer_over_a_distributed_fragment_matches_torch_in_the_emulator():
    x = torch.randn(32, 32)
    (y,) = emulate(ops.reducer_sums, (32, 32), {}, [x])
    torch.testing.assert_close(y[0], x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y[1], x.amax(1), rtol=0, atol=0)


@pytest.mark.parametrize("op,init", [("sum", 0.5), ("max", -float("inf")), ("min", float("inf"))])
def test_reducer_updated_from_global_memory_splits_iterations_over_threads(op, init):
    """A ragged last block (40 rows in blocks of 16), a sum fill that must be added once, not once per thread."""
    x = torch.randn(40, 8)
    (y,) = emulate(gaps.reducer_rows_from_global, (40, 8, 16, op, init), {}, [x])
    torch.testing.assert_close(y, _block_refs(x, 16, op, init), rtol=1e-5, atol=1e-5)


def test_reducer_sum_fill_matches_the_cpu_build():
    x = torch.randn(40, 8)
    cpu = gaps.reducer_rows_from_global(40, 8, 16, "sum", 0.5)(x)
    (emu,) = emulate(gaps.reducer_rows_from_global, (40, 8, 16, "sum", 0.5), {}, [x])
    torch.testing.assert_close(emu, cpu, rtol=1e-5, atol=1e-5)


def test_two_nests_update_one_reducer_and_a_min_reducer():
    x = torch.randn(16, 32)
    (y,) = emulate(gaps.reducer_two_updates, (16, 32), {}, [x])
    torch.testing.assert_close(y[0], 2 * x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y[1, :16], x.amin(1), rtol=0, atol=0)


@pytest.mark.parametrize("factory,message", [
    (gaps.reducer_bad_update, r"reducer r \(op 'sum'\) is updated by a statement that is not `r\[\.\.\.\] \+= value`"),
    (gaps.reducer_written_outside_parallel, r"reducer r is written outside T\.Parallel"),
    (gaps.reducer_and_local_in_one_nest, r"T\.Parallel updates a reducer and also writes the per-thread tile t"),
])
def test_reducer_writes_without_a_cuda_meaning_are_located_errors(tmp_path, factory, message):
    with pytest.raises(TileLangCompileError, match=message) as e:
        cuda_source(tmp_path, factory, 32, cubin=False)
    assert e.value.location is not None and e.value.location.file.endswith("cuda_gap_kernels.py")


def test_finalize_of_a_fragment_not_allocated_as_a_reducer_names_alloc_reducer():
    with pytest.raises(TileLangCompileError, match=r"T\.finalize_reducer reducer: expected a buffer from "
                                                   r"T\.alloc_reducer, got the fragment f") as e:
        gaps.finalize_plain_fragment.get_program(32)
    assert e.value.location is not None and e.value.location.file.endswith("cuda_gap_kernels.py")

"""TileLang's tile operations (issue 18) compiled for CUDA without a GPU: each kernel of compat_ops_kernels.py
lowers, generates CUDA C and compiles with nvcc for sm_90; the generated code uses what it should (tl::atomic_max,
tl::MaxNanOp, threadIdx for T.get_thread_binding); kernels without extern atomics run in the CUDA emulator
(tests/cuda_emulator.py) against torch; what the CUDA backend does not build is a located error naming the
alternative. The same kernels run on a GPU in gpu/test_compat_ops.py."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compat_ops_kernels as ops  # noqa: E402
from cuda_emulator import emulate  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC): the CUDA "
                                                             "compile tests need the CUDA toolkit, not a GPU")


def cuda_source(out: Path, factory, *args, cubin: bool = True, arch: str = "sm_90") -> str:
    func = factory.get_program(*args)
    specs = _param_specs(func)
    build_artifact(func, out, {"kind": "cuda", "arch": arch}, specs, _normalize_out_idx(factory.out_idx,
                                                                                         len(specs)),
                   compile_cubin=cubin)
    if cubin:
        assert (out / "kernel.cubin").stat().st_size > 0
    return (out / "kernel.cu").read_text()


# (name, factory, args, text the CUDA source must contain)
COMPILED = [
    ("clamp_align_up", ops.clamp_rows, (1000, -0.5, 0.5), "main_kernel"),
    ("cumsum_fragment", ops.scan_tile, (8, 16, 0, True, "sum", "fragment"), "__syncthreads"),
    ("cummax_shared", ops.scan_tile, (8, 16, 1, False, "max", "shared"), "__syncthreads"),
    ("let", ops.let_offset, (8, 64, 16, 2), "main_kernel"),
    ("any_all_of", ops.any_all_rows, (16, 8), "||"),
    ("transpose", ops.transpose_shared, (16, 32), "main_kernel"),
    ("reshape_global", ops.reshape_param, (16, 32), "main_kernel"),
    ("hints", ops.copy_with_hints, (16, 32), "main_kernel"),
    ("atomic_max_min_f32", ops.column_max_min, (16, 32), "tl::atomic_max"),
    ("atomic_max_min_f16", ops.column_max_min, (16, 32, "float16"), "tl::atomic_min"),
    ("atomic_max_min_bf16", ops.column_max_min, (16, 32, "bfloat16"), "tl::atomic_max"),
    ("atomic_max_min_i32", ops.column_max_min, (16, 32, "int32"), "tl::atomic_max"),
    ("atomic_max_min_i64", ops.column_max_min, (16, 32, "int64"), "tl::atomic_min"),
    ("atomic_max_tile", ops.tile_max, (64, 32, 16), "tl::atomic_max"),
    ("atomic_addx4", ops.column_sums_vectorised, (16, 32, 4), "tl::atomic_add_v4("),  # tl.cuda.vector_atomics
    ("reduce_batch", ops.row_reduce_options, (32, 64, "sum", False, 4), "block_allreduce"),
    ("reduce_nan_propagate_f16", ops.row_reduce_options, (32, 64, "max", True, 1, "float16"), "tl::MaxNanOp"),
    ("bool_fragment", ops.bool_mask_select, (16, 32), "main_kernel"),
    ("threads_1", ops.single_thread_kernel, (64,), "acc_ptr"),
    ("threads_16_reduce", ops.row_reduce_options, (8, 64, "sum", False, 1, "float32", 16),
     "block_allreduce<tl::SumOp, 16,"),
    ("get_thread_binding", ops.thread_ids, (64,), "threadIdx.x"),
]


@needs_nvcc
@pytest.mark.parametrize("name,factory,args,needle", COMPILED, ids=[c[0] for c in COMPILED])
def test_compiles_with_nvcc(tmp_path, name, factory, args, needle):
    assert needle in cuda_source(tmp_path, factory, *args)


def test_get_thread_binding_becomes_the_thread_index(tmp_path):
    src = cuda_source(tmp_path, ops.thread_ids, 64, cubin=False)
    assert "tl.thread_binding" not in src and "threadIdx.x" in src


# -- the CUDA-bound TIR run in the emulator (no extern atomics there) ----------------------------------------------

@pytest.mark.parametrize("scope,dim,reverse", [("shared", 1, False), ("fragment", 0, True)])
def test_emulated_scans_match_torch(scope, dim, reverse):
    x = torch.randn(8, 16)
    for kind in ("sum", "max"):
        got = emulate(ops.scan_tile, (8, 16, dim, reverse, kind, scope), {}, [x])[0]
        xs = x.flip(dim) if reverse else x
        ref = xs.cumsum(dim) if kind == "sum" else xs.cummax(dim).values
        torch.testing.assert_close(got, ref.flip(dim) if reverse else ref)


def test_emulated_nan_propagating_reduction_and_small_blocks():
    x = torch.randn(8, 64)
    x[3, 5] = math.nan
    got = emulate(ops.row_reduce_options, (8, 64, "max", True, 1), {}, [x])[0]
    torch.testing.assert_close(got, x.amax(1), equal_nan=True)
    assert torch.isnan(got[3]) and not torch.isnan(got[:3]).any()
    clean = x.nan_to_num()
    for threads in (1, 16):  # under a warp: block_allreduce through shared memory
        got = emulate(ops.row_reduce_options, (8, 64, "sum", False, 1, "float32", threads), {}, [clean])[0]
        torch.testing.assert_close(got, clean.sum(1))


def test_emulated_thread_index_any_all_and_single_thread():
    ids = emulate(ops.thread_ids, (64,), {}, [])[0]
    torch.testing.assert_close(ids, torch.arange(64, dtype=torch.int32) * 11)
    m = (torch.rand(4, 8) < 0.8).int()
    m[0], m[1] = 0, 1
    got = emulate(ops.any_all_rows, (4, 8), {}, [m])[0]
    torch.testing.assert_close(got[:, 0], m.any(1).int())
    torch.testing.assert_close(got[:, 1], m.all(1).int())
    x = torch.randn(4, 16)
    torch.testing.assert_close(emulate(ops.single_thread_kernel, (16,), {}, [x])[0], x.cumsum(1))


# (what the CUDA backend refused here before - views of shared tiles, T.alloc_global, reducers - is built now:
# tests/test_cuda_tile_views.py, test_cuda_global_workspaces.py, test_cuda_reducers.py)


@needs_nvcc
def test_sync_threads_orders_per_thread_code(tmp_path):
    """T.get_thread_binding + T.sync_threads: the emulator reports a shared-memory race if the barrier is missing."""
    assert "__syncthreads" in cuda_source(tmp_path, ops.reverse_through_shared, 64)
    x = torch.randn(64)
    assert torch.equal(emulate(ops.reverse_through_shared, (64,), {}, [x])[0], x.flip(0))


def test_emulated_gemm_in_a_block_under_one_warp():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(emulate(ops.small_block_gemm, (8, 16), {}, [a, b])[0], a @ b, rtol=1e-5, atol=1e-4)

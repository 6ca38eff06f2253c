"""The CPU grid: blocks run in parallel across cores, unless the whole grid is too little work to split."""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.transform.cpu.serialize_small_grids_cpu import MIN_PARALLEL_WORK


@tilelang.jit(out_idx=[-1])
def scale_rows(M, N, block_M):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 3.0

    return main


def test_tiny_grid_runs_serially_and_matches_torch():
    kernel = scale_rows(64, 64, 8)  # 4096 element updates in all: less than a fork/join is worth
    assert 64 * 64 < MIN_PARALLEL_WORK
    assert "T.parallel" not in kernel.get_kernel_source("tir")
    x = torch.randn(64, 64)
    torch.testing.assert_close(kernel(x), 3 * x)


def test_large_grid_is_a_parallel_loop_and_matches_torch():
    kernel = scale_rows(1000, 512, 8)  # ragged: 125 blocks of 8 rows
    assert 1000 * 512 >= MIN_PARALLEL_WORK
    assert "T.parallel" in kernel.get_kernel_source("tir")
    x = torch.randn(1000, 512)
    torch.testing.assert_close(kernel(x), 3 * x)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def test_parallel_launch_uses_our_openmp_shim_even_with_tvm_loaded():
    """TVM's runtime (loaded by compiling) would point the hook at its own pool, one thread on a 2-core VM."""
    import sys

    kernel = scale_rows(1000, 512, 8)
    assert "tvm" in sys.modules  # the situation that matters: the compiler is in the process
    lib = ctypes.CDLL(str(kernel.artifact.library_path))
    hook = ctypes.c_void_p.in_dll(lib, "__TVMBackendParallelLaunch").value
    info = _DlInfo()
    assert ctypes.CDLL(None).dladdr(ctypes.c_void_p(hook), ctypes.byref(info))
    assert Path(info.dli_fname.decode()).resolve() == Path(kernel.artifact.library_path).resolve()

"""The CUDA side of tests/test_compat_frontend.py (issue 18's frontend items): each kernel there compiles for CUDA
through the product (CUDA C, nvcc to a cubin; no GPU needed), the launch description carries scalar parameters and
symbolic grids, and the let-bound ``16 < row_idx < 96`` nest (was "Buffer row_idx is used before its definition")
runs correctly in the CUDA emulator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_compat_frontend import (  # noqa: E402
    chained,
    flat_plus_one,
    gemm_dynamic_m,
    rows_plus_bias,
    scale_shift,
    var_scalars,
)

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile checks need the CUDA "
                                                             "toolkit, not a GPU")


def cuda_source(factory, *args, **kwargs) -> str:
    """Compile ``factory`` for CUDA through @jit (CUDA C and an nvcc cubin, no GPU needed); its CUDA source."""
    k = tilelang.jit(out_idx=factory.out_idx, target="cuda",
                     pass_configs={"tl.cuda.compiler": "nvcc"})(factory.factory)(*args, **kwargs)
    assert k.artifact.library_path.stat().st_size > 0  # the cubin
    return k.get_kernel_source()


@tilelang.jit(out_idx=[1])
def if_range(M, N, block_M, block_N, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                row_idx = by * block_M + i
                col_idx = bx * block_N + j
                if 16 < row_idx < 96:
                    B[row_idx, col_idx] = A[row_idx, col_idx] * 2.0
                else:
                    B[row_idx, col_idx] = A[row_idx, col_idx] * 0.5

    return main


def _if_range_ref(a: torch.Tensor) -> torch.Tensor:
    r = a * 0.5
    r[17:96] = a[17:96] * 2
    return r


def test_chained_comparison_of_a_let_bound_index_on_cpu():
    a = torch.randn(128, 64, dtype=torch.float16)
    torch.testing.assert_close(tilelang.jit(out_idx=[1], target="cpu")(if_range.factory)(128, 64, 32, 32)(a),
                               _if_range_ref(a))


def test_let_bound_index_in_a_ragged_parallel_nest_emulates_correctly_for_cuda():
    """The CUDA nest's in-bounds test used to read row_idx before its definition; now the bound value is used
    (ragged sizes: the guarded path; the emulator runs the CUDA-bound TIR thread by thread)."""
    from cuda_emulator import emulate

    a = torch.randn(24, 20, dtype=torch.float16)  # one ragged 32 x 32 block: rows 0..16 and 17..23 take both branches
    out, = emulate(tilelang.jit(out_idx=[1], target="cuda")(if_range.factory), (24, 20, 32, 32), {}, [a])
    torch.testing.assert_close(out, _if_range_ref(a))


@needs_nvcc
@pytest.mark.parametrize("case", ["if_range", "scalars", "symbolic", "gemm_m", "view", "chained", "var"])
def test_compiles_for_cuda(case):
    if case == "if_range":
        src = cuda_source(if_range, 128, 128, 32, 32)  # was "Buffer row_idx is used before its definition"
        assert "(16 < " in src
    elif case == "scalars":
        src = cuda_source(scale_shift, 50)
        assert "float alpha" in src and "int n" in src
        k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.compiler": "nvcc"})(
            scale_shift.factory)(50)
        meta = k.artifact.extra["cuda"]
        assert dict(zip(meta["args"], meta["arg_dtypes"])) == {"X": "handle", "Y": "handle", "alpha": "float32",
                                                               "n": "int32"}
    elif case == "symbolic":
        k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.compiler": "nvcc"})(
            rows_plus_bias.factory)(16)
        meta = k.artifact.extra["cuda"]
        assert "m" in meta["args"] and meta["arg_dtypes"][meta["args"].index("m")] == "int32"
        assert meta["grid"][0] == "(m + 7) // 8"
        from tilelang_core.runtime.exported import launch_grid

        assert launch_grid(meta["grid"], {"m": 17}) == (3, 1, 1)
    elif case == "gemm_m":
        src = cuda_source(gemm_dynamic_m, 128, 64)  # a dynamic M: guarded ragged row tiles, grid (2, (m + 63) // 64)
        assert "int m" in src
    elif case == "view":
        src = cuda_source(flat_plus_one, 4, 8)
        assert "A_flat" in src or "A_ptr" in src
    elif case == "chained":
        cuda_source(chained, 24)
    else:
        cuda_source(var_scalars, 20)


def test_scalar_bits_pack_cuda_parameter_slots():
    import struct

    from tilelang_core.runtime.exported import scalar_bits

    assert scalar_bits(1.5, "float32") == struct.unpack("<I", struct.pack("<f", 1.5))[0]
    assert scalar_bits(-1, "int32") == 0xFFFFFFFF
    assert scalar_bits(-2.0, "float64") == struct.unpack("<Q", struct.pack("<d", -2.0))[0]
    assert scalar_bits(7, "int64") == 7

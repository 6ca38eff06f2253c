"""``tl.cuda.tma_mma_tiles``: a decode GEMM's 16-row mma.sync tiles loaded by TMA on sm_90.

A shared tile of 128-byte rows with our XOR swizzle (shift 7) is byte for byte a SWIZZLE_128B TMA box when each
stage starts on 1024 bytes, so with the key a ``T.Pipelined`` loop whose tiles are all such (the quickstart at
16 x 64 x 64) loads them by TMA completing on mbarriers, and ``ldmatrix`` reads them as before. Checked: the
generated source (TMA loads, no cp.async; the default keeps cp.async), the note when a tile does not qualify, and the
values in the CUDA emulator (whose TMA writes the hardware's swizzle of the shared address: a misplaced stage or a
different layout would read wrong values) against torch at ragged shapes, fp16 and bf16, and with split-K.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen
from tilelang_core.pass_config import resolve
from tilelang_core.quickstart import matmul_relu

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402

ON = {"tl.cuda.tma_mma_tiles": True}


def _kernel(tmp_path, monkeypatch, pass_configs, block_K=64, stages=8):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    return tilelang.jit(out_idx=[-1], target="cuda -arch=sm_90a", pass_configs=pass_configs)(matmul_relu.factory)(
        16, 256, 1024, 16, 64, block_K, stages, 128, "float16", "float32")


def test_the_16_row_tiles_of_128_byte_rows_load_by_tma_with_the_key(tmp_path, monkeypatch):
    src = _kernel(tmp_path, monkeypatch, ON).get_kernel_source()
    assert "tl::tma_load_2d(" in src and "tl::mbar_wait" in src and "cp_async_16" not in src
    assert '#include "tl/tl_sm90.cuh"' in src and "__align__(1024)" in src


def test_without_the_key_the_loop_keeps_cp_async(tmp_path, monkeypatch):
    src = _kernel(tmp_path, monkeypatch, None).get_kernel_source()
    assert "cp_async_16" in src and "tma_load" not in src
    assert resolve(None)["tl.cuda.tma_mma_tiles"] is False and resolve(ON).key() != resolve(None).key()


def test_a_tile_of_256_byte_rows_keeps_cp_async_and_the_note_says_which_tiles_qualified(tmp_path, monkeypatch):
    k = _kernel(tmp_path, monkeypatch, ON, block_K=128, stages=5)  # A_s is 16 x 128: 256-byte rows
    assert "tma_load" not in k.get_kernel_source()
    assert any("keep cp.async, not TMA: the shared tile A_s" in n and "128-byte rows only: B_s qualified" in n
               for n in k.notes), k.notes


@pytest.mark.parametrize("M,N,K,stages,dtype", [(16, 256, 1024, 8, "float16"), (5, 200, 1000, 6, "float16"),
                                                (16, 128, 512, 4, "bfloat16")])
def test_tma_loaded_16_row_tiles_match_torch_in_the_emulator(M, N, K, stages, dtype):
    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(M + N)
    a, b = torch.randn(M, K, generator=g).to(tdt), torch.randn(K, N, generator=g).to(tdt)
    (c,) = emulate(matmul_relu, (M, N, K, 16, 64, 64, stages, 128, dtype, "float32"), {}, [a, b], arch="sm_90a",
                   pass_configs=ON)
    ref = torch.relu(a.float() @ b.float())
    assert not torch.isnan(c.float()).any()
    rtol = 1e-2 if dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(c.float(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def test_a_split_k_loop_of_tma_loaded_16_row_tiles_matches_torch_in_the_emulator():
    # tl.SplitKCUDA splits the K loop before the pipeline: each blockIdx.z's TMA boxes start at its share of K, and
    # the last block to arrive sums the partials (tl::splitk_global_reduce, replayed by test_cuda_split_k's emulator)
    from test_cuda_split_k import SplitKEmulator

    M, N, K = 16, 128, 2048
    cfg = {**ON, "tl.cuda.split_k": 2}
    func = matmul_relu.get_program(M, N, K, 16, 64, 64, 4, 128, "float16", "float32")
    lowered = codegen.lower(func, None, "sm_90", cfg)["main"]
    assert lowered.attrs["tl.cuda_launch"]["grid"][2] == 2 and "tl::tma_load_2d" in str(lowered)
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([a, b, c])
    ref = torch.relu(a.float() @ b.float())
    torch.testing.assert_close(c.float(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def test_a_bad_value_for_the_key_is_an_error_naming_it():
    with pytest.raises(ValueError, match="tl.cuda.tma_mma_tiles"):
        resolve({"tl.cuda.tma_mma_tiles": "yes"})

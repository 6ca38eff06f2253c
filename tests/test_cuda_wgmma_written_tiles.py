"""``pass_configs={"tl.cuda.wgmma_written_tiles": True}``: a T.gemm whose shared B tile the program's threads write
(the dequantising ``T.Parallel`` nest of bench/gpu/dequant_variants.py) takes wgmma on sm_90a, the nest storing
into the wgmma swizzled layout the descriptors read; without the key such a gemm keeps mma.sync, with a note.

Checked here without a GPU: the lowered code (wgmma, no mma.sync, the note gone), ptxas accepts it, and the CUDA
emulator (``tests/cuda_emulator.py``, which reads wgmma operands through the swizzled layout of their descriptors)
runs the prefill-tiled variants against torch, a ragged M and N included. The GPU twin is
``tests/gpu/test_wgmma_written_tiles.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import resolve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import Emulator, is_close_fraction  # noqa: E402

ON = {"tl.cuda.wgmma_written_tiles": True}
OFF = {"tl.cuda.wgmma_written_tiles": False}
VARIANTS = {v.name: v for v in dv.VARIANTS}


def _program(name: str, M: int, N: int, K: int):
    v = VARIANTS[name]
    return v, dv.program(v, M, N, K, **dv.tiles(128, v))  # the prefill tiles: 128 x 64, 256 threads


def _lowered(name: str, pass_configs: dict | None) -> str:
    _, func = _program(name, 128, 128, 512)
    return cuda_codegen.lower(func, arch="sm_90a", options=resolve(pass_configs))["main"].script()


def test_a_gemm_on_a_tile_the_threads_write_takes_wgmma_by_default_and_the_key_off_keeps_mma_sync():
    assert resolve(None)["tl.cuda.wgmma_written_tiles"] is True
    assert "tl::wgmma_gemm_ss<" in _lowered("hi_first", None)
    text = _lowered("hi_first", OFF)
    assert "tl::wgmma_gemm" not in text
    kernel = tilelang.compile(_program("hi_first", 128, 128, 512)[1], out_idx=[-1],
                              target={"kind": "cuda", "arch": "sm_90a"}, pass_configs=OFF)
    assert any("is written by something other than T.copy" in n for n in kernel.notes), kernel.notes


@pytest.mark.parametrize("name", ["hi_first", "zp_g128", "int8"])
def test_with_the_key_the_gemm_on_the_written_tile_is_wgmma(name):
    text = _lowered(name, ON)
    assert "tl::wgmma_gemm_ss<" in text and "tl::gemm_ss<" not in text
    kernel = tilelang.compile(_program(name, 128, 128, 512)[1], out_idx=[-1],
                              target={"kind": "cuda", "arch": "sm_90a"}, pass_configs=ON)
    assert not any("written by something other" in n for n in kernel.notes), kernel.notes


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc/ptxas")
def test_ptxas_builds_the_wgmma_dequant_prefill_without_spills_or_serialised_wgmma():
    kernel = tilelang.compile(_program("hi_first", 128, 128, 512)[1], out_idx=[-1],
                              target={"kind": "cuda", "arch": "sm_90a"}, pass_configs=ON)
    res = kernel.resources()
    assert res is not None and res.spills == 0 and not res.warnings, res


@pytest.mark.parametrize("name,M,N,K", [
    ("hi_first", 128, 64, 256),
    ("bf16", 128, 64, 256),
    ("zp_g128", 128, 64, 256),
    ("int8", 128, 64, 256),
    ("fp4_e2m1_g32", 128, 64, 256),
    ("hi_first", 100, 96, 256),  # ragged M and N: a partial block in each
])
def test_emulated_wgmma_dequant_prefill_matches_torch(name, M, N, K):
    v, func = _program(name, M, N, K)
    ins = dv.inputs(v, M, N, K, device="cpu", seed=3)
    out = torch.full((M, N), float("nan"), dtype=getattr(torch, v.dtype))
    Emulator(func, "sm_90a", ON).run([*ins, out])
    ref = dv.reference(v, *ins)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, (out.double() - ref).abs().max()


def test_a_tile_neither_wgmma_nor_mma_sync_can_grid_says_both_in_its_note():
    # 128 x 256 on 384 threads: 3 warpgroups do not split 128 rows into m64 blocks, and no grid of 12 warps tiles
    # 128 x 256 in 16 x 8 steps, so the gemm runs as FMA loops (12 ms on the H200 where 256 threads take 170 us)
    v = VARIANTS["example_bk256"]
    func = dv.program(v, 128, 1024, 1024, block_M=128, block_N=256, block_K=64, num_stages=3, threads=384)
    kernel = tilelang.compile(func, out_idx=[-1], target={"kind": "cuda", "arch": "sm_90a"},
                              pass_configs={"tl.cuda.fuse_dequant": False})
    fma = [n for n in kernel.notes if "uses FMA loops" in n]
    assert len(fma) == 1 and "nor mma.sync: no grid of the 12 warps tiles 128x256" in fma[0], kernel.notes

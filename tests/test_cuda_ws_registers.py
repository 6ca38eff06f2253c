"""The register arithmetic of warp-specialised sm_90a GEMMs (``transform/cuda/sm90/registers.py``): the wgmma
instruction width capped to the kernel's entry registers, and the setmaxnreg split from the warpgroup count and
the accumulator size. The 192x256x64 s4 t384 GEMM (three consumer warpgroups + the producer: 512 threads, 128
registers at entry, 128 accumulators per consumer thread) failed to build before (ptxas C7602 on its
m64n256k16); it now builds with 0 spills, unclustered and clustered, fp16 and bf16, with and without TMA stores."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tilelang_core as tilelang
from tilelang_core.backend.cuda.nvcc import find_nvcc
from tilelang_core.errors import TileLangCompileError
from tilelang_core.quickstart import matmul_relu
from tilelang_core.transform.cuda.sm90.registers import entry_registers, register_split, wgmma_max_n

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the sm_90a compile tests need it")
SM90A = {"kind": "cuda", "arch": "sm_90a"}
BIG = (192, 256, 64, 4, 384)


def _build(dtype: str, pass_configs: dict, shape: tuple = (8192, 8192, 8192), cfg: tuple = BIG):
    return tilelang.compile(matmul_relu.get_program(*shape, *cfg, dtype), out_idx=[-1], target=SM90A,
                            pass_configs=pass_configs)


def test_the_entry_registers_and_the_widest_wgmma_they_allow():
    assert entry_registers(384) == 168 and entry_registers(512) == 128 and entry_registers(128) == 248
    assert wgmma_max_n(168) == 256 and wgmma_max_n(248) == 256  # every width: kernels that build keep theirs
    assert wgmma_max_n(128) == 200  # n256 (128 accumulators + 26) does not fit 128, n192 does


def test_the_split_gives_the_accumulators_room_and_keeps_the_old_splits_otherwise():
    assert register_split(256, 128) == (40, 232) and register_split(384, 128) == (24, 160)
    assert register_split(256, 128, 128, clustered=True) == (56, 224)
    assert register_split(384, 128, 96, clustered=True) == (56, 152)  # 192x192 t384: 96 accumulators fit 152
    assert register_split(384, 128, 128, clustered=True) == (32, 160)  # 192x256 t384: 128 do not
    assert register_split(384, 128, 128) == (24, 160)
    assert register_split(128, 128, 64) is None


@needs_nvcc
def test_the_uncapped_m64n256_instruction_is_refused_by_ptxas_at_512_threads(tmp_path: Path):
    # the cause of the failure: put the n256 instruction back into today's source and ptxas refuses it
    from tilelang_core.backend.cuda.nvcc import compile_cubin

    src = _build("float16", {"tl.cuda.persistent": -1}).get_kernel_source("cuda")
    assert "wgmma_gemm_ss<192, 256, 64, 3, 1, 128," in src
    cu = tmp_path / "kernel.cu"
    cu.write_text(src.replace("wgmma_gemm_ss<192, 256, 64, 3, 1, 128,", "wgmma_gemm_ss<192, 256, 64, 3, 1, 256,"))
    with pytest.raises(TileLangCompileError, match=r"C7602|Insufficient registers \(128\)"):
        compile_cubin(cu, tmp_path / "kernel.cubin", "sm_90a")


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("pass_configs,split", [
    ({"tl.cuda.persistent": -1}, (24, 160)),  # the usual split of three consumer warpgroups: no note
    ({"tl.cuda.persistent": 0}, (24, 160)),
    ({"tl.cuda.persistent": -1, "tl.cuda.tma_store": True}, (24, 160)),
    ({"tl.cuda.persistent": -1, "tl.cuda.cluster": (2, 1)}, (32, 160)),
    ({"tl.cuda.persistent": -1, "tl.cuda.cluster": (1, 2)}, (32, 160)),
    ({"tl.cuda.persistent": 0, "tl.cuda.cluster": (2, 1), "tl.cuda.tma_store": True}, (32, 160)),
])
def test_the_warp_specialised_192x256_t384_gemm_builds_without_spills(dtype, pass_configs, split):
    k = _build(dtype, pass_configs)
    src = k.get_kernel_source("cuda")
    assert f"tl::setmaxnreg_dec<{split[0]}>" in src and f"tl::setmaxnreg_inc<{split[1]}>" in src
    assert "wgmma_gemm_ss<192, 256, 64, 3, 1, 128," in src  # two m64n128k16 per k16 step
    res = k.resources()
    assert res is not None and res.spills == 0 and res.registers == 128, res
    assert not [w for w in res.warnings if "C7512" in w or "serialized" in w], res.warnings
    notes = " | ".join(k.notes)
    moved = f"setmaxnreg {split[0]} registers per producer thread, {split[1]} per consumer" in notes
    assert moved == ("tl.cuda.cluster" in pass_configs), notes  # noted where the accumulators moved the split
    assert "wgmma n128 instructions instead of n256" in notes


@needs_nvcc
@pytest.mark.parametrize("cfg,nc", [((128, 256, 64, 4, 256), 256), ((192, 192, 64, 4, 384), 192)])
def test_kernels_that_built_before_keep_their_instruction_width(cfg, nc):
    src = _build("float16", {"tl.cuda.persistent": -1}, cfg=cfg).get_kernel_source("cuda")
    m = re.search(r"wgmma_gemm_ss<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+),", src)
    assert m is not None and int(m.group(6)) == nc, m

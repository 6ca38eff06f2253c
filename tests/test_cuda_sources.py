"""What a CUDA kernel shows of its code, on a machine without a GPU: CUDA C by default (TileLang's
``get_kernel_source()``), PTX from the build's compiler, SASS from a disassembler, and the same kernel built by
NVRTC (the CUDA Python bindings) instead of nvcc."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tilelang_core as tilelang
from tilelang_core.backend import cuda as cuda_backend
from tilelang_core.backend.cuda.nvcc import compile_cubin, compile_ptx, find_nvcc, nvrtc_available, resolve_compiler
from tilelang_core.trace.model import find_disassembler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import gemm  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the toolkit")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not available (pip install cuda-bindings "
                                                               "nvidia-cuda-nvrtc)")


@pytest.fixture(scope="module")
def cuda_gemm():
    factory = tilelang.jit(out_idx=[-1], target="cuda")(gemm.matmul_relu.factory)
    return factory(256, 256, 128, 128, 128, 32, dtype="float16")


@needs_nvcc
def test_cuda_kernel_source_defaults_to_cuda_c(cuda_gemm):
    src = cuda_gemm.get_kernel_source()
    assert src == cuda_gemm.get_kernel_source("cuda") == cuda_gemm.get_kernel_source("cu")
    assert "__global__" in src and "tl::" in src


@needs_nvcc
def test_cuda_kernel_gives_ptx_with_the_kernel_entry(cuda_gemm):
    ptx = cuda_gemm.get_kernel_source("ptx")
    assert ".version" in ptx and f".entry {cuda_gemm.artifact.entry}" in ptx
    assert "wgmma.mma_async" in ptx or "mma.sync" in ptx  # the fp16 GEMM's tensor-core instruction (sm_90a / sm_80)
    assert "ptx" in cuda_gemm.source_kinds


@pytest.mark.skipif(find_disassembler() is None, reason="no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump)")
@needs_nvcc
def test_cuda_kernel_gives_sass_from_its_cubin(cuda_gemm):
    sass = cuda_gemm.get_kernel_source("sass")
    assert ("HGMMA" in sass or "HMMA" in sass) and cuda_gemm.artifact.entry in sass
    assert "sass" in cuda_gemm.source_kinds


@needs_nvcc
def test_unknown_source_kind_names_what_is_available(cuda_gemm):
    with pytest.raises(KeyError, match="available"):
        cuda_gemm.get_kernel_source("llvm")


@needs_nvrtc
def test_nvrtc_builds_the_template_kernel_to_a_cubin(cuda_gemm, tmp_path):
    src = cuda_gemm.artifact.path / cuda_gemm.artifact.sources["cuda"]
    arch = cuda_gemm.artifact.extra["cuda"]["arch"]
    cmd, log = compile_cubin(src, tmp_path / "k.cubin", arch, compiler="nvrtc")
    data = (tmp_path / "k.cubin").read_bytes()
    assert data[:4] == b"\x7fELF" and cmd[0] == "nvrtc" and any(c.startswith("-I") for c in cmd)
    ptx, _ = compile_ptx(src, arch, compiler="nvrtc")
    assert f".entry {cuda_gemm.artifact.entry}" in ptx


@needs_nvrtc
def test_nvrtc_build_records_its_options_in_the_launch_description(tmp_path):
    func = gemm.matmul_relu.get_program(128, 128, 64, 64, 64, 32, dtype="float16")
    mod = cuda_backend.lower(func)
    build = cuda_backend.build(mod, tmp_path, compiler="nvrtc")
    meta = build.launch_meta()
    assert meta["nvcc_command"][0] == "nvrtc" and build.cubin.read_bytes()[:4] == b"\x7fELF"


def test_compiler_choice_is_validated():
    with pytest.raises(ValueError, match=r"compiler: expected one of auto, nvcc, nvrtc, got 'clang'"):
        resolve_compiler("clang")

"""NVRTC's header cache: the precompiled header is made once per header set and options, reused after, and the
cubin is the same with or without it; ``compiler="auto"`` prefers NVRTC when it is installed."""

from __future__ import annotations

import tempfile

import pytest

import tilelang_core as tilelang
import tilelang_core.backend.cuda.nvcc as nvcc
from examples import gemm
from tilelang_core.backend.cuda.nvcc import compile_cubin, header_cache_dir, nvrtc_available, resolve_compiler

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not available (pip install cuda-bindings "
                                                              "nvidia-cuda-nvrtc)")


@pytest.fixture(scope="module")
def cuda_gemm():
    factory = tilelang.jit(out_idx=[-1], target="cuda -arch=sm_80")(gemm.matmul_relu.factory)
    return factory(256, 256, 128, 64, 64, 32, dtype="float16")


def test_auto_compiler_prefers_nvrtc_when_installed():
    assert resolve_compiler("auto") == "nvrtc"


def test_header_cache_is_created_once_and_keeps_the_cubin_identical(cuda_gemm, tmp_path):
    src = cuda_gemm.artifact.path / cuda_gemm.artifact.sources["cuda"]
    plain = tmp_path / "plain.cubin"
    compile_cubin(src, plain, "sm_80", compiler="nvrtc")
    cached = tmp_path / "cached.cubin"
    cmd, _ = compile_cubin(src, cached, "sm_80", compiler="nvrtc", header_cache=tmp_path / "hc")
    pchs = list((tmp_path / "hc" / "nvrtc-pch").glob("*/*.pch"))
    assert len(pchs) == 1, pchs
    made = pchs[0].stat().st_mtime_ns
    again = tmp_path / "again.cubin"
    compile_cubin(src, again, "sm_80", compiler="nvrtc", header_cache=tmp_path / "hc")
    assert list((tmp_path / "hc" / "nvrtc-pch").glob("*/*.pch")) == pchs and pchs[0].stat().st_mtime_ns == made
    assert plain.read_bytes() == cached.read_bytes() == again.read_bytes()
    assert "-pch" not in cmd  # the recorded command is the reproducible one (the header cache changes nothing)


def test_header_cache_folder_depends_on_headers_and_options(tmp_path, monkeypatch):
    a = header_cache_dir(tmp_path, ["--gpu-architecture=sm_90"])
    b = header_cache_dir(tmp_path, ["--gpu-architecture=sm_80"])
    assert a is not None and b is not None and a != b
    monkeypatch.setattr(nvcc, "_headers_digest", lambda: "edited headers")
    assert header_cache_dir(tmp_path, ["--gpu-architecture=sm_90"]) != a


def test_default_header_cache_is_private_to_the_process(cuda_gemm, tmp_path):
    src = cuda_gemm.artifact.path / cuda_gemm.artifact.sources["cuda"]
    compile_cubin(src, tmp_path / "k.cubin", "sm_80", compiler="nvrtc")
    root = nvcc._private_header_root()
    assert list(root.glob("nvrtc-pch/*/*.pch")) and str(root).startswith(tempfile.gettempdir())
    assert (root.stat().st_mode & 0o077) == 0  # mkdtemp: this user only


def test_unusable_header_cache_folder_means_no_header_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert header_cache_dir(blocker, ["--gpu-architecture=sm_90"]) is None

"""``pass_configs={"tl.cuda.l2_prefetch": n}``: the L2 prefetch size every cp.async global read of a CUDA kernel
carries, checked in the generated source, in the SASS of a real sm_90a build (``LDGSTS ... LTC256B``), in the kernel
cache key, and as a validated option. On the GPU, ``tests/gpu`` runs the quickstart with it against torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tilelang_core as tilelang
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.quickstart import matmul_relu

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda_wgmma import _cuobjdump  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")
DECODE = (16, 512, 1024, 16, 64, 128, 3, 128, "float16", "float32")  # a 16-row tile: mma.sync fed by cp.async


def _kernel(prefetch: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    pcs = {} if prefetch is None else {"tl.cuda.l2_prefetch": prefetch}
    return tilelang.jit(out_idx=[-1], target="cuda -arch=sm_90a", pass_configs=pcs)(matmul_relu.factory)(*DECODE)


def _ldgsts(kernel) -> set[str]:
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    cubin = Path(kernel.artifact.path) / kernel.artifact.library_path
    sass = subprocess.run([dis, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"LDGSTS[.\w]*", sass))


@needs_nvcc
def test_the_default_prefetches_128_bytes_and_256_reaches_the_sass(tmp_path, monkeypatch):
    default = _kernel(None, tmp_path, monkeypatch)
    assert "TL_L2_PREFETCH" not in default.get_kernel_source()
    assert _ldgsts(default) and all("LTC128B" in op for op in _ldgsts(default))
    wide = _kernel(256, tmp_path, monkeypatch)
    assert wide.get_kernel_source().startswith("#define TL_L2_PREFETCH 256\n")
    assert _ldgsts(wide) and all("LTC256B" in op for op in _ldgsts(wide))
    assert Path(wide.artifact.path) != Path(default.artifact.path)  # a different cache entry


@needs_nvcc
def test_a_kernel_without_cp_async_is_left_as_it_is_with_a_note(tmp_path, monkeypatch):
    import tilelang_core.language as T

    @tilelang.jit(out_idx=[-1], target="cuda -arch=sm_90a", pass_configs={"tl.cuda.l2_prefetch": 256})
    def add_one(N: int = 1024):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    Y[bx * 128 + i] = X[bx * 128 + i] + 1.0
        return main

    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    kernel = add_one()
    assert "TL_L2_PREFETCH" not in kernel.get_kernel_source()
    assert any("tl.cuda.l2_prefetch=256 changes nothing here: the kernel has no cp.async reads" in n
               for n in kernel.notes), kernel.notes
    assert not any("l2_prefetch" in n for n in _kernel(256, tmp_path, monkeypatch).notes)  # applied: no note


@pytest.mark.parametrize("bad", [512, 100, "256", True])
def test_a_prefetch_size_that_ptx_has_not_is_an_error_naming_the_key(bad, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"tl\.cuda\.l2_prefetch.*one of 0, 64, 128, 256"):
        _kernel(bad, tmp_path, monkeypatch)

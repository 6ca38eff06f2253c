"""A bfloat16 GEMM's epilogue stores its accumulator in column pairs (``nv_bfloat162``, one 4-byte store), as the
fp16 one does with ``half2``: element by element it had twice the stores and conversions (the bf16 quickstart ran
10-12 % behind fp16 on the H200). Checked in the generated CUDA for wgmma (sm_90a) and mma.sync (sm_80), and with
nvcc + the SASS store count; the values are checked on the GPU (tests/gpu: every bf16 GEMM case)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.quickstart import matmul_relu

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda_wgmma import _cuobjdump  # noqa: E402

ARGS = (512, 512, 256, 128, 128, 64, 3, 256)


def _source(dtype: str, arch: str) -> str:
    from tilelang_core.backend.cuda import codegen

    # the register epilogue (on sm_90a the default sends this tile out through TMA stores instead)
    func = matmul_relu.get_program(*ARGS, dtype, "float32")
    return codegen.generate(codegen.lower(func, arch=arch, options={"tl.cuda.tma_store": False}), arch).source


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_bf16_accumulator_stores_go_out_in_pairs_like_fp16(arch):
    for dtype, pair, scalar in (("bfloat16", "nv_bfloat162", "nv_bfloat16"), ("float16", "half2", "half")):
        src = _source(dtype, arch)
        pairs = len(re.findall(rf"\*\({pair}\*\)\(C_ptr", src))
        scalars = len(re.findall(rf"C_ptr\[[^\n]*\] = \(\({scalar}\)", src))
        assert pairs > 0 and scalars == 0, (dtype, arch, pairs, scalars)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")
def test_bf16_and_fp16_epilogues_have_the_same_stores_in_sass(tmp_path):
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    counts = {}
    for dtype in ("bfloat16", "float16"):
        func = matmul_relu.get_program(*ARGS, dtype, "float32")
        out = tmp_path / dtype
        out.mkdir()
        art = build_artifact(func, out, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                             _normalize_out_idx([-1], 3), compile_cubin=True)
        sass = subprocess.run([dis, "-sass", str(out / art.extra["cuda"]["cubin"])], capture_output=True,
                              text=True, check=True).stdout
        counts[dtype] = (len(re.findall(r"\bSTG\.E\b", sass)), len(re.findall(r"\bF2FP\.", sass)))
    assert counts["bfloat16"] == counts["float16"], counts

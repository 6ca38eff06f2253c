"""TMA loads in the pipelined wgmma GEMM on sm_90 (``transform/cuda/sm90/tma.py``), checked without a GPU: the
kernel's source and SASS, the tensor maps its artifact describes for the launcher, when TMA is refused and why,
and ``tl.disable_tma_lower``. The schedule itself is checked by the ordering model of test_cuda_wgmma_pipeline.py;
the GPU suite runs the kernels (tests/gpu/test_wgmma_gemm.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda_wgmma import _cuobjdump  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402


def _artifact(tmp_path, args, pass_configs=None, compile_cubin=True):
    """The loads only: the epilogue keeps its register stores (tl.cuda.tma_store, on by default, would add a store
    map; tests/test_cuda_tma_store.py checks it)."""
    func = gemm_t.get_program(*args)
    return build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                          _normalize_out_idx([-1], 3), compile_cubin=compile_cubin,
                          pass_configs={"tl.cuda.tma_store": False, **(pass_configs or {})})


def test_whole_tiles_of_a_pipelined_wgmma_gemm_load_through_tma(tmp_path):
    art = _artifact(tmp_path, (1024, 768, 512, 128, 256, 64, False, False, 4, 256, "float16"))
    src = (tmp_path / "kernel.cu").read_text()
    assert "const __grid_constant__ tl::TmaDescs<2> tl_tmaps)" in src and "cp_async" not in src
    assert src.count("tl::tma_load_2d(&tl_tmaps.m[0]") >= 1 and src.count("tl::tma_load_2d(&tl_tmaps.m[1]") >= 4
    maps = art.extra["cuda"]["tma"]
    # A (1024 x 512) in 128 x 64 boxes; B (512 x 768, N-major) in 64 x 64 boxes, four per 64 x 256 tile
    assert maps == [{"param": "A", "dtype": "float16", "dims": [512, 1024], "box": [64, 128], "swizzle": 128},
                    {"param": "B", "dtype": "float16", "dims": [768, 512], "box": [64, 64], "swizzle": 128}]
    assert "0 bytes spill stores" in art.extra["cuda"]["ptxas_info"]
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout
    assert "UTMALDG.2D" in sass and "LDGSTS" not in sass and "HGMMA.64x256x16.F32" in sass


def test_tma_is_switched_off_by_tilelangs_pass_config(tmp_path):
    art = _artifact(tmp_path, (1024, 768, 512, 128, 256, 64, False, False, 4, 256, "float16"),
                    {"tl.disable_tma_lower": True}, compile_cubin=False)
    src = (tmp_path / "kernel.cu").read_text()
    assert "tma_load" not in src and "tl_tmaps" not in src and "cp_async" in src and not art.extra["cuda"]["tma"]


def test_a_tensor_whose_rows_are_not_16_byte_multiples_keeps_cp_async_and_says_why(tmp_path):
    art = _artifact(tmp_path, (256, 256, 64 * 3 - 13, 128, 128, 64, False, False, 3, 128, "float16"),
                    compile_cubin=False)
    assert not art.extra["cuda"]["tma"] and "cp_async" in (tmp_path / "kernel.cu").read_text()
    notes = art.extra.get("notes") or []
    assert any("keep cp.async, not TMA" in n and "not a multiple of 16" in n for n in notes), notes

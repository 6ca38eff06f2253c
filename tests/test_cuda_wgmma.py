"""Hopper wgmma for T.gemm (issue 15, part 1), checked without a GPU.

* index math: the wgmma shared layouts (``cuda.layouts.wgmma_offset_py``) against the canonical layouts a
  shared-memory matrix descriptor describes (PTX ISA, "Shared memory matrix layout": 8-row core matrices, swizzle
  atoms, LBO/SBO strides), with the descriptor fields computed as ``tl::wgmma_operand_desc`` computes them; the
  ``wgmma`` accumulator layout against the PTX ISA's m64nNk16 D-fragment table;
* codegen: the quickstart GEMM for ``sm_90a`` calls ``tl::wgmma_gemm_ss``, nvcc compiles it, the SASS has HGMMA;
  sm_80, explicit sm_90, ``pass_configs={"tl.cuda.wgmma": False}`` and shapes wgmma cannot take keep mma.sync,
  with the reason noted on sm_90a; ``target="cuda"`` without a GPU is sm_90a.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.pass_config import resolve
from tilelang_core.target import cuda_target
from tilelang_core.transform.cuda.layouts import (
    WGMMA_SWIZZLE_BASE,
    FragmentLayout,
    plan_wgmma,
    wgmma_offset_py,
    wgmma_swizzle_bytes,
)

sys.path.insert(0, str(Path(__file__).parent))
from wgmma_kernels import gemm_t  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia.cu13  # type: ignore[import-not-found]

        p = Path(list(nvidia.cu13.__path__)[0]) / "bin" / "cuobjdump"
        return str(p) if p.is_file() else None
    except ImportError:
        return None


# -- index math ------------------------------------------------------------------------------------------------

def _desc_fields(rows: int, cols: int, mn_major: bool, swz: int, es: int, mn0: int, k0: int) -> tuple[int, int, int]:
    """(start byte offset, LBO, SBO) as tl::wgmma_operand_desc computes them (include/tl/wgmma.cuh)."""
    w = swz // es
    if not mn_major:
        return ((k0 // w) * rows * w + mn0 * w + k0 % w) * es, 16, 8 * swz
    return ((mn0 // w) * rows * w + k0 * w) * es, rows * swz, 8 * swz


def _hw_address(start: int, lbo: int, sbo: int, swz: int, es: int, mn_major: bool, mn: int, k: int) -> int:
    """The byte address the hardware reads for element (mn, k) of one instruction's operand block, from the
    canonical layouts of the PTX ISA (swizzled modes): K-major — core matrices of 8 rows x ``swz`` bytes, 8-row
    groups ``sbo`` apart, K contiguous inside a row; MN-major — ``swz`` bytes of MN contiguous per K row, K rows
    ``swz`` apart in groups of 8 ``sbo`` apart, the next ``swz`` bytes of MN ``lbo`` away. Then the swizzle XORs
    address bits [4, 4 + log2(swz/16)) with bits [7, ...) (the pattern repeats every 8 * swz bytes)."""
    w = swz // es
    if not mn_major:
        addr = start + (mn // 8) * sbo + (mn % 8) * swz + k * es
    else:
        addr = start + (mn // w) * lbo + (mn % w) * es + (k // 8) * sbo + (k % 8) * swz
    mask = swz // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


@pytest.mark.parametrize("rows,cols,dtype,mn_major,extent", [
    (128, 64, "float16", False, 64),    # A 128x64, K-major, 128B swizzle
    (128, 128, "bfloat16", False, 64),  # K = 128: two 64-wide K blocks
    (64, 32, "float16", False, 64),     # 64B swizzle
    (64, 16, "float16", False, 64),     # 32B swizzle
    (64, 128, "float16", True, 128),    # B 64x128 (K x N), MN-major, two 64-wide column blocks
    (32, 256, "bfloat16", True, 256),   # B with N = 256 in one instruction
    (64, 128, "float16", True, 64),     # A transposed (K x M), m64 blocks
    (32, 96, "float16", True, 32),      # 64B swizzle? 96*2 = 192 B rows: 64B atoms, n32 chunks
    # float8 (1-byte elements, k32 steps, K-major only): 128 elements per 128B atom row
    (128, 128, "float8_e4m3fn", False, 64),   # A 128x128, one column block, four k-steps inside each row
    (64, 256, "float8_e5m2", False, 64),      # K = 256: two 128-wide K blocks
    (64, 64, "float8_e4m3fn", False, 64),     # 64B swizzle: two k-steps per row
    (64, 96, "float8_e5m2", False, 64),       # 96-byte rows: 32B swizzle, three column blocks of one k-step
])
def test_wgmma_shared_layout_is_what_the_descriptors_address(rows, cols, dtype, mn_major, extent):
    es = 1 if dtype.startswith("float8") else 2
    ks = 32 // es  # one instruction's K: 32 bytes
    swz = wgmma_swizzle_bytes(rows, cols, dtype)
    assert swz in (128, 64, 32)
    code = WGMMA_SWIZZLE_BASE + swz
    # the layout is a permutation of the tile
    offs = {wgmma_offset_py(r, c, rows, code, dtype) for r in range(rows) for c in range(cols)}
    assert offs == set(range(rows * cols))
    # every instruction block (extent along M/N, 32 bytes along K) reads exactly the elements the stores put there
    mn_total = cols if mn_major else rows
    k_total = rows if mn_major else cols
    for mn0 in range(0, mn_total, extent):
        for k0 in range(0, k_total, ks):
            start, lbo, sbo = _desc_fields(rows, cols, mn_major, swz, es, mn0, k0)
            for mn in range(extent):
                for k in range(ks):
                    r, c = (k0 + k, mn0 + mn) if mn_major else (mn0 + mn, k0 + k)
                    want = wgmma_offset_py(r, c, rows, code, dtype) * es
                    assert _hw_address(start, lbo, sbo, swz, es, mn_major, mn, k) == want, (mn0, k0, mn, k)


@pytest.mark.parametrize("M,N,wg_m,wg_n,threads", [(64, 64, 1, 1, 128), (128, 128, 1, 1, 128),
                                                   (128, 256, 2, 1, 256), (64, 256, 1, 2, 256),
                                                   (256, 128, 2, 1, 256)])
def test_wgmma_accumulator_layout_follows_the_ptx_fragment_table(M, N, wg_m, wg_n, threads):
    lay = FragmentLayout.wgmma((M, N), threads, wg_m, wg_n)
    wn = N // wg_n
    seen = set()
    for t in range(threads):
        g, warp, lane = t // 128, (t // 32) % 4, t % 32
        gr, gc = g // wg_n, g % wg_n
        for reg in range(lay.num_regs):
            mi, i = reg // (wn // 2), reg % (wn // 2)  # m64 block of this warpgroup, register of the instruction
            # PTX ISA, wgmma .m64nNk16 D fragment: row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2),
            # col = (i / 4) * 8 + (lane % 4) * 2 + i % 2
            row = (mi * wg_m + gr) * 64 + 16 * warp + lane // 4 + 8 * ((i // 2) % 2)
            col = gc * wn + (i // 4) * 8 + (lane % 4) * 2 + i % 2
            assert lay.element_of(t, reg) == (row, col)
            seen.add((row, col))
    assert len(seen) == M * N


def test_wgmma_plans_put_warpgroups_over_the_tile():
    def plan(M, N, threads, policy=0, tb=False):
        p, why = plan_wgmma(M, N, 64, "float16", "float16", "float32", threads, policy,
                            (M, 64), (N, 64) if tb else (64, N), False, tb)
        return (p.warp_m, p.warp_n) if p else why

    assert plan(128, 128, 128) == (1, 1)
    assert plan(128, 128, 256) == (2, 1)
    assert plan(64, 256, 256) == (1, 2)
    assert plan(128, 256, 256, policy=2) == (1, 2)
    assert "m64" in plan(32, 128, 128)
    _, why = plan_wgmma(128, 128, 64, "float32", "float32", "float32", 128, 0, (128, 64), (64, 128), False, False)
    assert "float16/bfloat16" in why


# -- codegen -----------------------------------------------------------------------------------------------------

def _build(out: Path, args: tuple, arch: str = "sm_90a", compile_cubin: bool = True, pass_configs=None):
    func = gemm_t.get_program(*args)
    art = build_artifact(func, out, {"kind": "cuda", "arch": arch}, _param_specs(func), _normalize_out_idx([-1], 3),
                         compile_cubin=compile_cubin, pass_configs=pass_configs)
    return art, (out / "kernel.cu").read_text()


@needs_nvcc
@pytest.mark.parametrize("args,instr", [
    ((1000, 1030, 1000, 128, 128, 64, False, False, 3, 128, "float16"), "HGMMA.64x128x16.F32"),
    ((512, 512, 512, 128, 256, 64, False, True, 2, 256, "bfloat16"), "HGMMA.64x256x16.F32.BF16"),
])
def test_quickstart_gemm_compiles_to_hgmma_for_sm90a(tmp_path, args, instr):
    art, src = _build(tmp_path, args)
    assert "tl::wgmma_gemm_ss<" in src and "__align__(1024)" in src
    meta = art.extra["cuda"]
    cmd = " ".join(meta["nvcc_command"])
    assert meta["arch"] == "sm_90a" and ("compute_90a" in cmd or "--gpu-architecture=sm_90a" in cmd)
    assert "0 bytes spill stores" in meta["ptxas_info"]
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / meta["cubin"])], capture_output=True, text=True,
                          check=True).stdout
    assert instr in sass and "HMMA" not in sass


def _notes(args: tuple, arch: str = "sm_90a", pass_configs=None) -> tuple[list[str], str]:
    func = gemm_t.get_program(*args)
    seen = {}

    def record(name, f, _seconds):
        seen[name] = f

    mod = cuda_codegen.lower(func, record=record, arch=arch, options=resolve(pass_configs))
    stage = seen["tl.InferFragmentLayoutsCUDA"]
    notes = [str(n) for n in stage.attrs["tl.wgmma_notes"]] if "tl.wgmma_notes" in stage.attrs else []
    return notes, mod["main"].script()


QS = (256, 256, 256, 128, 128, 64, False, False, 2, 128, "float16")


@pytest.mark.parametrize("arch,pass_configs,note", [
    ("sm_80", None, None), ("sm_90", None, None),
    ("sm_90a", {"tl.cuda.wgmma": False}, "'tl.cuda.wgmma' is False"),
])
def test_mma_sync_stays_off_sm90a_and_when_switched_off(arch, pass_configs, note):
    notes, text = _notes(QS, arch, pass_configs)
    assert "tl::wgmma_gemm_ss" not in text and "tl::pipe_gemm_step" in text
    if note is None:
        assert notes == []
    else:
        assert len(notes) == 1 and note in notes[0] and re.search(r"line \d+: T.gemm 128x128x64 uses mma.sync",
                                                                   notes[0])


def test_shapes_wgmma_cannot_take_keep_mma_sync_with_the_reason():
    notes, text = _notes((256, 256, 256, 32, 128, 64, False, False, 2, 128, "float16"))
    assert "tl::wgmma_gemm_ss" not in text and "gemm" in text
    assert len(notes) == 1 and "m64nNk16" in notes[0]
    notes, text = _notes(QS)
    assert notes == [] and "tl::wgmma_gemm_ss<128, 128, 64, 1, 1, 128, 0, 0, 128, 128>" in text


def test_cuda_target_without_a_gpu_is_sm90a_and_named_architectures_stay(monkeypatch):
    import tilelang_core.target as tgt

    monkeypatch.setattr(tgt, "gpu_visible", lambda: False)
    assert cuda_target("cuda") == {"kind": "cuda", "arch": "sm_90a"}
    assert cuda_target({"kind": "cuda"}) == {"kind": "cuda", "arch": "sm_90a"}
    assert cuda_target("cuda -arch=sm_90") == {"kind": "cuda", "arch": "sm_90"}
    assert cuda_target("cuda -arch=sm_80") == {"kind": "cuda", "arch": "sm_80"}
    monkeypatch.setattr(tgt, "gpu_visible", lambda: True)
    monkeypatch.setattr(tgt, "_visible_arch", lambda: "sm_90a")
    assert cuda_target("cuda") == {"kind": "cuda", "arch": "sm_90a"}


def test_the_wgmma_switch_is_in_the_cache_key():
    assert resolve({"tl.cuda.wgmma": False}).key() != resolve(None).key()
    with pytest.raises(ValueError, match=r"tl.cuda.wgmma.*True or False.*'yes'"):
        resolve({"tl.cuda.wgmma": "yes"})

"""float8 GEMM on Hopper's wgmma path (issue 15, part 6), checked without a GPU.

* planning: float8_e4m3fn / float8_e5m2 A and B (any mix) with a float32 accumulator take wgmma ``m64nNk32`` when
  both operands are K-major (A M x K, B N x K: ``transpose_B=True``); other majors and K not made of k32 steps keep
  the FMA loops, with the reason in ``tl.wgmma_notes``;
* codegen: nvcc compiles the fp8 quickstart for sm_90a, its SASS has ``QGMMA.64xNx32.F32.E4M3.E4M3`` (the SASS
  name of fp8 wgmma; ``HGMMA`` is the fp16/bf16 one) and TMA loads (``UTMALDG``) of 1-byte boxes (128 elements per
  128 B swizzle atom), recorded as such for the launcher; a K whose rows are not 16-byte multiples keeps cp.async;
* results: the same programs on the CPU against torch (float8 -> float32 matmul), ragged shapes included.
The descriptor address model for 1-byte elements is in tests/test_cuda_wgmma.py; the GPU twins in
tests/gpu/test_wgmma_fp8_gemm.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.pass_config import resolve
from tilelang_core.transform.cuda.layouts import plan_wgmma

sys.path.insert(0, str(Path(__file__).parent))
from fp8_gemm_kernels import fp8_gemm  # noqa: E402
from test_cuda_wgmma import _cuobjdump, needs_nvcc  # noqa: E402

E4, E5 = "float8_e4m3fn", "float8_e5m2"
TORCH = {E4: torch.float8_e4m3fn, E5: torch.float8_e5m2, "bfloat16": torch.bfloat16, "float16": torch.float16,
         "float32": torch.float32}


# -- planning -----------------------------------------------------------------------------------------------------

def _plan(a: str, b: str, K: int = 128, ta: bool = False, tb: bool = True):
    return plan_wgmma(128, 128, K, a, b, "float32", 128, 0, (128, K) if not ta else (K, 128),
                      (128, K) if tb else (K, 128), ta, tb)


@pytest.mark.parametrize("a,b", [(E4, E4), (E5, E5), (E4, E5), (E5, E4)])
def test_k_major_float8_operands_of_either_format_take_wgmma(a, b):
    plan, why = _plan(a, b)
    assert plan is not None and plan.kind == "wgmma" and why == ""


def test_float8_gemms_wgmma_cannot_take_say_why():
    plan, why = _plan(E4, E4, tb=False)
    assert plan is None and "K-major" in why and "transpose_B=False" in why
    plan, why = _plan(E4, E5, ta=True)
    assert plan is None and "transpose_A=True" in why
    plan, why = _plan(E4, E4, K=48)
    assert plan is None and "m64nNk32" in why and "K % 32" in why
    plan, why = _plan(E4, "float16")
    assert plan is None and "float8_e4m3fn x float16" in why


def test_the_committed_fp8_wgmma_header_is_what_the_generator_writes():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import gen_wgmma_ops

    assert gen_wgmma_ops.OUT_FP8.read_text() == gen_wgmma_ops.fp8_header()
    text = gen_wgmma_ops.fp8_header()
    # every N of 8..256 for each of the four operand pairs, no transpose immediates
    assert text.count("struct WgmmaSSF8<") == 4 * 32 and "m64n256k32.f32.e5m2.e4m3" in text
    assert "imm-trans" not in text and '"n"(TA)' not in text


# -- codegen ------------------------------------------------------------------------------------------------------

def _build(out: Path, args: tuple, compile_cubin: bool = True):
    func = fp8_gemm.get_program(*args)
    art = build_artifact(func, out, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func), _normalize_out_idx([-1], 3),
                         compile_cubin=compile_cubin)
    return art, (out / "kernel.cu").read_text()


def _sass(out: Path, art) -> str:
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    return subprocess.run([dis, "-sass", str(out / art.extra["cuda"]["cubin"])], capture_output=True, text=True,
                          check=True).stdout


@needs_nvcc
@pytest.mark.parametrize("args,instr,maps", [
    # e4m3 x e4m3 -> bf16, 128x128x128 tiles, 3 stages (one group in flight), 4 k32 steps per tile
    ((1000, 1030, 1024, 128, 128, 128, E4, E4, "bfloat16", 3, 128), "QGMMA.64x128x32.F32.E4M3.E4M3",
     [{"param": "A", "dtype": E4, "dims": [1024, 1000], "box": [128, 128], "swizzle": 128},
      {"param": "B", "dtype": E4, "dims": [1024, 1030], "box": [128, 128], "swizzle": 128}]),
    # mixed e4m3 x e5m2 -> fp16, two warpgroups along M, n256 instructions, 4 stages
    ((512, 512, 512, 128, 256, 128, E4, E5, "float16", 4, 256), "QGMMA.64x256x32.F32.E4M3.E5M2",
     [{"param": "A", "dtype": E4, "dims": [512, 512], "box": [128, 128], "swizzle": 128},
      {"param": "B", "dtype": E5, "dims": [512, 512], "box": [128, 256], "swizzle": 128},
      # the fp16 output through TMA stores (tl.cuda.tma_store, on by default; the bf16 case's 1030-column rows are
      # not a multiple of 16 bytes, so it keeps register stores)
      {"param": "C", "dtype": "float16", "dims": [512, 512], "box": [64, 128], "swizzle": 128, "store": True}]),
])
def test_fp8_gemm_compiles_to_fp8_wgmma_fed_by_tma(tmp_path, args, instr, maps):
    art, src = _build(tmp_path, args)
    assert "tl::wgmma_gemm_ss<" in src and "tl::wgmma_drain<" in src and "tl::tma_load_2d" in src
    assert "cp_async" not in src
    meta = art.extra["cuda"]
    assert meta["tma"] == maps
    # no spills, and no wgmma serialised by ptxas (C7514: an accumulator touched while its group is in flight)
    assert "0 bytes spill stores" in meta["ptxas_info"] and "serialized" not in meta["ptxas_info"]
    sass = _sass(tmp_path, art)
    assert instr in sass and "UTMALDG.2D" in sass and "HMMA" not in sass and "HGMMA" not in sass


@needs_nvcc
def test_fp8_rows_that_are_not_16_byte_multiples_keep_cp_async_under_wgmma(tmp_path):
    # K = 200: rows of 200 bytes, which TMA cannot stride; the loads stay cp.async (16-byte chunks, the ragged
    # K tail by narrower copies: float8 vectors of at most 4 lanes, which TVM's CUDA codegen can print)
    art, src = _build(tmp_path, (300, 200, 200, 64, 64, 64, E5, E4, "float32", 2, 128))
    assert "tl::wgmma_gemm_ss<" in src and "cp_async" in src and not art.extra["cuda"]["tma"]
    assert "tma_load" not in src
    assert "QGMMA.64x64x32.F32.E5M2.E4M3" in _sass(tmp_path, art)


def _notes(args: tuple) -> tuple[list[str], str]:
    seen = {}
    mod = cuda_codegen.lower(fp8_gemm.get_program(*args), record=lambda name, f, _s: seen.setdefault(name, f),
                             arch="sm_90a", options=resolve(None))
    stage = seen["tl.InferFragmentLayoutsCUDA"]
    notes = [str(n) for n in stage.attrs["tl.wgmma_notes"]] if "tl.wgmma_notes" in stage.attrs else []
    return notes, mod["main"].script()


def test_an_mn_major_fp8_operand_keeps_the_fma_loops_with_the_reason_noted():
    notes, text = _notes((256, 256, 256, 128, 128, 64, E4, E4, "bfloat16", 2, 128, False))
    assert "tl::wgmma_gemm_ss" not in text
    assert len(notes) == 1 and "T.gemm 128x128x64 uses FMA loops, not wgmma" in notes[0]
    assert "K-major" in notes[0] and notes[0].startswith("line ")


# -- results on the CPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    # ragged M, N and K (K tail of 48), mixed formats; 64 x 64 tiles of B, whose transpose the CPU gemm once
    # tried in float8 vector registers (LLVM failed after minutes)
    (96, 80, 112, 64, 64, 64, E4, E5, "float32", 3, 128),
    (72, 64, 96, 64, 32, 32, E5, E4, "bfloat16", 2, 128, False),  # B stored K x N (the FMA form on CUDA), bf16 out
])
def test_fp8_gemm_on_the_cpu_equals_the_float32_matmul_of_the_float8_values(args):
    M, N, K, a_dt, b_dt, out = args[0], args[1], args[2], args[6], args[7], args[8]
    tb = args[11] if len(args) > 11 else True
    kernel = tilelang.jit(out_idx=[-1], target="cpu")(fp8_gemm.factory)(*args)
    g = torch.Generator().manual_seed(M * 7 + N)
    a = (torch.randn(M, K, generator=g) * 2).to(TORCH[a_dt])
    b = (torch.randn(*((N, K) if tb else (K, N)), generator=g) * 2).to(TORCH[b_dt])
    c = kernel(a, b)
    ref = a.float() @ (b.float().T if tb else b.float())
    assert c.dtype == TORCH[out] and c.abs().sum() > 0
    # products of float8 values are exact in float32; only the summation order and the output rounding differ
    tol = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}[out]
    torch.testing.assert_close(c.float(), ref.to(TORCH[out]).float(), rtol=tol, atol=tol)

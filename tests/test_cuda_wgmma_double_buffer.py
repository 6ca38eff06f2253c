"""``tl.cuda.wgmma_double_buffer``: the dequantised prefill's decoded B tile in two copies, its wgmma group in flight.

Without the key the prefill loop (bench/gpu/dequant_variants.py at 128-row tiles: the loads, the ``T.Parallel``
decode into ``B_s``, the wgmma ``T.gemm``) keeps ``wgmma.wait_group 0``: the next k-step's nest would overwrite the
tile the group in flight reads. With it ``B_s`` gets a second copy, step k writes copy ``k % 2``, and the gemm
leaves its group in flight (``wait_group 1``), so the decode of step k + 1 runs under step k's tensor-core work.
Checked without a GPU: the lowered code (two copies, the in-flight gemm, the drain after the loop, the note gone),
the CUDA emulator against torch for every format (a copy written while the other is read must not be mixed up:
the emulator tracks every shared byte's writer), ragged M and N, four stages, and what the key leaves alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.notes import read_notes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import Emulator, is_close_fraction  # noqa: E402

ON = {"tl.cuda.wgmma_double_buffer": True}
VARIANTS = {v.name: v for v in dv.VARIANTS}


def _program(name: str, M: int, N: int, K: int, stages: int = 3):
    v = VARIANTS[name]
    return v, dv.program(v, M, N, K, **{**dv.tiles(128, v), "num_stages": stages})


def _lowered(func, configs):
    return cuda_codegen.lower(func, arch="sm_90a", options=resolve(configs))["main"]


def _wgmma_notes(f) -> list[str]:
    return [str(n) for n in (f.attrs["tl.wgmma_notes"] if "tl.wgmma_notes" in f.attrs else [])]


def test_with_the_key_the_decoded_tile_has_two_copies_and_the_group_stays_in_flight():
    _, func = _program("hi_first", 128, 128, 1024)
    on, off = _lowered(func, ON), _lowered(func, None)
    text_on, text_off = on.script(), off.script()
    assert "tl::wgmma_gemm_ss<128, 64, 128, 2, 1, 64, 0, 1, 128, 128, 1>" in text_on  # pending = 1
    assert "tl::wgmma_drain<" in text_on and "tl::wgmma_drain<" not in text_off
    assert any("keeps wgmma.wait_group 0" in n for n in _wgmma_notes(off))
    assert not any("keeps wgmma.wait_group 0" in n for n in _wgmma_notes(on))
    extra = int(on.attrs["tl.dyn_smem_bytes"]) - int(off.attrs["tl.dyn_smem_bytes"])
    assert extra == 64 * 128 * 2  # one more 64 x 128 fp16 tile


@pytest.mark.parametrize("name,M,N,K,stages", [
    ("hi_first", 128, 64, 512, 3),
    ("bf16", 128, 64, 512, 3),
    ("zp_g128", 128, 64, 512, 3),
    ("int8", 128, 64, 512, 3),
    ("fp4_e2m1_g32", 128, 64, 512, 3),
    ("hi_first", 100, 96, 512, 4),  # ragged M and N, four stages
])
def test_emulated_double_buffered_prefill_matches_torch(name, M, N, K, stages):
    v, func = _program(name, M, N, K, stages)
    ins = dv.inputs(v, M, N, K, device="cpu", seed=5)
    out = torch.full((M, N), float("nan"), dtype=getattr(torch, v.dtype))
    Emulator(func, "sm_90a", ON).run([*ins, out])
    ref = dv.reference(v, *ins)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, (out.double() - ref).abs().max()


def test_the_key_leaves_the_decode_tiles_and_two_stage_loops_alone_and_is_off_by_default():
    assert resolve(None)["tl.cuda.wgmma_double_buffer"] is False
    with pytest.raises(ValueError, match="tl.cuda.wgmma_double_buffer"):
        resolve({"tl.cuda.wgmma_double_buffer": "on"})
    assert resolve(ON).key() != resolve(None).key()
    v = VARIANTS["hi_first"]
    decode = dv.program(v, 16, 128, 1024, **dv.tiles(16, v))  # mma.sync fragments: no wgmma to keep in flight
    assert _lowered(decode, ON).script() == _lowered(decode, None).script()
    _, two = _program("hi_first", 128, 128, 1024, stages=2)
    f = _lowered(two, ON)
    assert any("num_stages=2" in n for n in _wgmma_notes(f)) and "tl::wgmma_drain<" not in f.script()
    assert not any("double" in n for n in read_notes(f))


def _clear_each_step(M, N, K, block_M=128, block_N=64, block_K=64, stages=3, dtype="float16"):
    """A nest writing the gemm's B tile, and a gemm that clears its accumulator every k-step (clear_accum)."""
    import tilelang_core.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_in = T.alloc_shared((block_N, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_in)
                for i, j in T.Parallel(block_N, block_K):
                    B_s[i, j] = B_in[i, j] * T.cast(2.0, dtype)
                T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


def test_a_loop_the_key_qualifies_but_the_gemm_refuses_keeps_one_tile_and_stays_correct():
    # the nests qualify for two copies, then clear_accum keeps wait_group 0: the tile must keep its one allocation
    # (its accesses are not given a copy index), with the gemm's own reason in the note
    M, N, K = 128, 64, 256
    func = _clear_each_step(M, N, K)
    f = _lowered(func, ON)
    assert any("clear_accum=True" in n for n in _wgmma_notes(f)) and "tl::wgmma_drain<" not in f.script()
    g = torch.Generator().manual_seed(2)
    A, B = torch.randn(M, K, generator=g).half(), torch.randn(N, K, generator=g).half()
    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    Emulator(func, "sm_90a", ON).run([A, B, out])
    ref = A[:, -64:].double() @ (2 * B[:, -64:].double()).T  # only the last k-step survives clear_accum
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, (out.double() - ref).abs().max()

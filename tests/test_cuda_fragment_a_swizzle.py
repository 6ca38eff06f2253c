"""``tl.cuda.fragment_a_swizzle``: the A tile of a fused dequantising gemm swizzled for the lanes' 64-byte runs.

The fragment decode (``tl.cuda.dequant_fragments``) reads A in its k permutation: lane q of a row reads a 64-byte
run (32 halves) 16 bytes at a time, so lanes q and q + 2 read chunks 128 bytes apart, which the mma tiles' XOR
swizzle puts on the same banks (2-way conflicts). With the key the A tile takes ``layouts.run_swizzle_code``, which
also moves chunk bit 5 by offset bit 7. Checked without a GPU: the layout (a bijection of every row, no bank
conflict in any load phase, where the XOR swizzle has 2-way ones), values in the CUDA emulator against torch (the
cp.async writes use the TIR swizzle, the template's loads the C++ one: they must agree), under split-K, the notes
where it does not apply (8-byte loads of int8 pairs, 32-byte runs at block_K 64), and the key (off by default,
validated, in the cache key).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tilelang_core.backend.cuda import codegen
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.notes import read_notes
from tilelang_core.transform.cuda.layouts import run_swizzle_code, swizzle_py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402
from test_cuda_dequant_fragments_direct import factory, variant  # noqa: E402

GENERAL = {"tl.cuda.fuse_dequant": False}
ON = {**GENERAL, "tl.cuda.fragment_a_swizzle": True}


def _worst_phase(code: int, K: int, CH: int = 32) -> int:
    """The most lanes of one 8-lane load phase on one 16-byte bank group, over gemm_rb_step's A loads (D = 4)."""
    worst = 0
    for G in range(K // (4 * CH)):
        for TS in range(0, CH // 4, 2):
            for h in range(2):
                for phase in range(4):
                    groups = []
                    for lane in range(8 * phase, 8 * phase + 8):
                        q, r = lane % 4, lane // 4
                        col = G * 4 * CH + q * CH + (TS // 2) * 8
                        groups.append((swizzle_py((r + 8 * h) * K + col, code, "float16") * 2 // 16) % 8)
                    worst = max(worst, max(groups.count(g) for g in groups))
    return worst


@pytest.mark.parametrize("K,shift", [(256, 9), (128, 8), (512, 10)])
def test_the_run_swizzle_is_a_bijection_of_each_row_without_bank_conflicts(K, shift):
    code = run_swizzle_code(shift)
    for row in range(16):
        got = sorted(swizzle_py(row * K + c, code, "float16") for c in range(K))
        assert got == list(range(row * K, (row + 1) * K))
    assert _worst_phase(shift, K) == 2  # the mma tiles' XOR swizzle: lanes q and q + 2 collide
    assert _worst_phase(code, K) == 1


CASES = [  # (variant, M, N, K, extra pass_configs)
    ("example_bk256", 16, 64, 1024, {}),
    ("hi_first", 16, 64, 512, {"tl.cuda.factor_scale": True}),
    ("bf16", 16, 64, 512, {}),
    ("zp_g128", 16, 96, 256, {}),
    ("g128", 7, 64, 256, {}),
    ("example_bk256", 5, 96, 512, {"tl.cuda.dequant_fragments_direct": True}),
]


@pytest.mark.parametrize("name,M,N,K,extra", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}" for c in CASES])
def test_fused_gemms_on_the_run_swizzled_a_tile_match_torch_in_the_emulator(name, M, N, K, extra):
    v = variant(name)
    cfg = {**ON, **extra}
    notes = read_notes(codegen.lower(factory(v).get_program(M, N, K), None, "sm_90a", cfg)["main"])
    assert any("A_s is swizzled for 64-byte lane runs" in n for n in notes), notes
    args = dv.inputs(v, M, N, K, device="cpu", seed=13)
    (C,) = emulate(factory(v), (M, N, K), {}, args, arch="sm_90a", pass_configs=cfg)
    ref = dv.reference(v, args[0], *args[1:])
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def test_under_split_k_the_run_swizzled_tile_matches_torch():
    from test_cuda_split_k import SplitKEmulator

    v = variant("example_bk256")
    M, N, K = 16, 64, 1024
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)
    cfg = {**ON, "tl.cuda.split_k": 2}
    func = factory(v).get_program(M, N, K)
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


@pytest.mark.parametrize("name", ["int8", "bk64"])
def test_a_tile_read_in_other_loads_keeps_its_swizzle_with_a_note(name):
    # int8 pairs bytes (8-byte A loads); block_K 64 gives 16-half runs (32 bytes: one 128-byte line per row)
    func = factory(variant(name)).get_program(16, 64, 512)
    on, off = (codegen.lower(func, None, "sm_90a", c)["main"] for c in (ON, GENERAL))
    assert any("A_s keeps its swizzle: its lanes do not read it in 16-byte loads of 64-byte runs" in n
               for n in read_notes(on)), read_notes(on)
    assert str(on.body) == str(off.body)


def test_the_key_is_off_by_default_validated_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.fragment_a_swizzle"] is False
    with pytest.raises(ValueError, match="tl.cuda.fragment_a_swizzle"):
        resolve({"tl.cuda.fragment_a_swizzle": "yes"})
    func = factory(variant("example_bk256")).get_program(16, 64, 512)
    default, on = (codegen.lower(func, None, "sm_90a", c)["main"] for c in (GENERAL, ON))
    assert not any("fragment_a_swizzle" in n for n in read_notes(default))
    assert resolve(ON).key() != resolve(GENERAL).key() and str(default.attrs) != str(on.attrs)

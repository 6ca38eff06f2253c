"""``tl.cuda.accumulator_sets``: the k-steps of a fused dequantising T.gemm take turns over several float32 sets.

At decode tiles a warp holds few mma.sync accumulators (two at 16x128 on 256 threads), so its mma chain is one long
dependency; with the key the fragment fusion (``tl.cuda.dequant_fragments``) rotates the k-steps over 2 or 4 sets,
zeroes the extra sets before the K loop and adds them into the accumulator right after it. Checked without a GPU:
values in the CUDA emulator against torch (int4 both nibble orders, bf16, int8, a zero point, ragged M and N, with
the scale after the loop, under split-K), an accumulator that starts at 1 (the sets add to what the program put
there), the generated code (alternating destinations, the fold before the split-K reduction and the scale), the
notes when the key cannot apply (clear_accum=True), and the key (1 by default, validated, in the cache key).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.notes import read_notes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402
from test_cuda_dequant_fragments_direct import factory, variant  # noqa: E402  (the bench's programs at decode tiles)

GENERAL = {"tl.cuda.fuse_dequant": False}  # the recogniser would take the example's own spelling first


def _on(n: int = 2, **extra) -> dict:
    return {**GENERAL, "tl.cuda.accumulator_sets": n, **extra}


def _lowered(func, configs):
    return codegen.lower(func, None, "sm_90a", configs)["main"]


CASES = [  # (variant, M, N, K, sets, extra pass_configs)
    ("example_bk256", 16, 64, 512, 2, {}),
    ("hi_first", 16, 64, 512, 4, {}),
    ("bf16", 16, 64, 512, 2, {"tl.cuda.factor_scale": True}),
    ("int8", 16, 64, 512, 2, {}),
    ("zp_g128", 16, 96, 256, 2, {}),
    ("example_bk256", 7, 96, 512, 4, {}),  # ragged M and N
    ("bk64", 16, 64, 256, 4, {}),  # block_K 64: 4 k-steps, one per set
]


@pytest.mark.parametrize("name,M,N,K,sets,extra", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-s{c[4]}" for c in CASES])
def test_k_steps_over_accumulator_sets_match_torch_in_the_emulator(name, M, N, K, sets, extra):
    v = variant(name)
    cfg = _on(sets, **extra)
    notes = read_notes(_lowered(factory(v).get_program(M, N, K), cfg))
    assert any(f"take turns over {sets} accumulator sets" in n for n in notes), notes
    args = dv.inputs(v, M, N, K, device="cpu", seed=11)
    (C,) = emulate(factory(v), (M, N, K), {}, args, arch="sm_90a", pass_configs=cfg)
    ref = dv.reference(v, args[0], *args[1:])
    assert not torch.isnan(C).any()
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def test_under_split_k_each_block_adds_its_sets_before_the_reduction():
    from test_cuda_split_k import SplitKEmulator

    v = variant("bk64")
    M, N, K = 16, 64, 512
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)
    cfg = _on(2, **{"tl.cuda.split_k": 2})
    func = factory(v).get_program(M, N, K)
    assert _lowered(func, cfg).attrs["tl.cuda_launch"]["grid"][2] == 2
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def test_the_k_steps_alternate_destinations_and_the_sets_are_added_after_the_loop():
    v = variant("example_bk256")
    src = tilelang.compile(factory(v, block_N=128).get_program(16, 8192, 8192), out_idx=[-1],
                           target="cuda -arch=sm_90a", pass_configs=_on(2, **{"tl.cuda.factor_scale": True})
                           ).get_kernel_source()
    dests = re.findall(r"tl::gemm_rb_step<[^>]*>\([^;]*\(&\((\w+)\[0\]\)\)\);", src)
    assert dests[:4] == ["C_l_ptr", "dq_acc_set1_ptr", "C_l_ptr", "dq_acc_set1_ptr"], dests
    fold = src.index("C_l_ptr[0] = (C_l_ptr[0] + dq_acc_set1_ptr[0]);")
    assert src.rindex("tl::gemm_rb_step<") < fold < src.index("C_l_ptr[0] = (C_l_ptr[0] *")  # then the scale
    assert "splitk" not in src[:fold].split("for (int k")[-1]  # no reduction between the loop and the fold
    assert src.index("dq_acc_set1_ptr[0] = 0x0p+0f") < src.index("for (int k")


def _accumulating(M, N, K, clear_in_loop: bool, block_N=64, block_K=256, dtype="float16"):
    """The int4 decode; its accumulator starts at 1 (or each k-step clears it: clear_accum=True)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N,), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((16, block_K), dtype)
            B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((16, block_N), "float32")
            T.fill(C_l, 1.0)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[0, k * block_K], A_s)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                for i, j in T.Parallel(block_N, block_K):
                    q = (B_p[i, j // 2] >> (4 * (j % 2))) & 0xF
                    B_s[i, j] = T.cast(T.cast(q, "int32") - 8, dtype) * S[bx * block_N + i]
                T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=clear_in_loop)
            T.copy(C_l, C[0, bx * block_N])

    return main


def _inputs(M, N, K, seed=4):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).half()
    B = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.uint8)
    S = (torch.rand(N, generator=g) * 0.1 + 0.01).half()
    W = (torch.stack([B & 0xF, B >> 4], dim=-1).reshape(N, K).to(torch.int32) - 8).double() * S.double()[:, None]
    return A, B, S, W


def test_an_accumulator_that_starts_at_one_keeps_its_start_under_the_sets():
    M, N, K = 16, 64, 512
    A, B, S, W = _inputs(M, N, K)

    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        return _accumulating(M, N, K, clear_in_loop=False)

    (C,) = emulate(prog, (M, N, K), {}, [A, B, S], arch="sm_90a", pass_configs=_on(4))
    ref = 1 + A.double() @ W.T
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def test_clear_accum_in_the_loop_keeps_one_set_and_says_why():
    func = _accumulating(16, 64, 512, clear_in_loop=True)
    on, off = _lowered(func, _on(2)), _lowered(func, GENERAL)
    notes = read_notes(on)
    assert any("one accumulator set, not 2 (tl.cuda.accumulator_sets): the T.gemm has clear_accum=True" in n
               for n in notes), notes
    assert str(on.body) == str(off.body)


def test_the_key_is_one_set_by_default_validated_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.accumulator_sets"] == 1
    for bad in (3, "2", 0):
        with pytest.raises(ValueError, match="tl.cuda.accumulator_sets"):
            resolve({"tl.cuda.accumulator_sets": bad})
    func = factory(variant("int8")).get_program(16, 64, 512)
    default, on = _lowered(func, GENERAL), _lowered(func, _on(2))
    assert not any("accumulator_sets" in n for n in read_notes(default))
    assert resolve(_on(2)).key() != resolve(GENERAL).key() and str(default.body) != str(on.body)

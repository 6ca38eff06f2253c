"""``tl.cuda.factor_scale``: a k-invariant scale of a T.gemm's B operand applied once to the float32 sums.

A dequantising GEMM with one scale per output channel (bench/gpu/dequant_variants.py: ``B_s[i, j] = decode * S[n,
(k * bk + j) // K]``) multiplies every weight by ``S[n]``; with the key the nest stores the decode alone and a
``T.Parallel`` nest after the K loop multiplies the accumulator by ``S[n]``. Checked without a GPU: the values in
the CUDA emulator against torch (int4 both nibble orders, bf16, int8, ragged M and N, with the fragments fusion,
under split-K), a one-hot A giving the nest's own weights bit for bit, the generated code (no scale load in the K
loop, one multiply per output after it), the notes, the cases left alone (a per-group scale, an accumulator not
cleared before the loop, a B tile decoded into shared memory) and the key (off by default, validated, in the cache
key).
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
ON = {**GENERAL, "tl.cuda.factor_scale": True}


def _lowered(func, configs):
    return codegen.lower(func, None, "sm_90a", configs)["main"]


def _k_loop(src: str) -> str:
    """The generated K loop's text (from its ``for (int k`` to the end of the kernel's loop nest)."""
    start = src.index("for (int k = 0;")
    return src[start:]


CASES = [  # (variant, M, N, K, extra pass_configs)
    ("example_bk256", 16, 64, 512, {}),
    ("hi_first", 16, 64, 512, {}),
    ("bf16", 16, 64, 512, {}),
    ("int8", 16, 64, 512, {}),
    ("example_bk256", 7, 96, 512, {}),  # ragged M and N: the second block's 32 columns read S out of range (zeros)
    ("bk64", 16, 64, 256, {}),
]


@pytest.mark.parametrize("name,M,N,K,extra", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}" for c in CASES])
def test_a_per_channel_scale_factored_out_of_the_k_loop_matches_torch_in_the_emulator(name, M, N, K, extra):
    v = variant(name)
    args = dv.inputs(v, M, N, K, device="cpu", seed=7)
    cfg = {**ON, **extra}
    assert any("applied once to the float32 sums" in n
               for n in read_notes(_lowered(factory(v).get_program(M, N, K), cfg)))
    (C,) = emulate(factory(v), (M, N, K), {}, args, arch="sm_90a", pass_configs=cfg)
    ref = dv.reference(v, args[0], *args[1:])
    assert not torch.isnan(C).any()
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


@pytest.mark.parametrize("name", ["example_bk256", "int8"])
def test_one_hot_rows_of_a_give_the_nests_own_weights_bit_for_bit(name):
    # C[m, n] = W[n, 17 m]: one product each, exact in fp32 (a small integer times the fp16 scale), rounded once to
    # fp16 as the nest's own q * S is
    v = variant(name)
    M, N, K = 16, 64, 256
    args = dv.inputs(v, M, N, K, device="cpu", seed=5)
    A = torch.zeros(M, K, dtype=args[0].dtype)
    A[torch.arange(M), 17 * torch.arange(M)] = 1
    (C,) = emulate(factory(v), (M, N, K), {}, [A, *args[1:]], arch="sm_90a", pass_configs=ON)
    W = dv.dequantize(v, *args[1:])
    assert torch.equal(C, W[:, 17 * torch.arange(M)].T.to(C.dtype))


def test_the_k_loop_loads_no_scale_and_the_sums_are_scaled_once_after_it():
    v = variant("example_bk256")
    prog = factory(v)
    on = tilelang.compile(prog.get_program(16, 128, 1024), out_idx=[-1], target="cuda -arch=sm_90a",
                          pass_configs=ON).get_kernel_source()
    off = tilelang.compile(prog.get_program(16, 128, 1024), out_idx=[-1], target="cuda -arch=sm_90a",
                           pass_configs=GENERAL).get_kernel_source()
    loop_on, loop_off = _k_loop(on), _k_loop(off)
    epilogue = loop_on[loop_on.index("C_l_ptr[0] = (C_l_ptr[0] *"):]
    assert "S_ptr[" in loop_off.split("C_l_ptr[0] = ")[0]  # the default: the scale read in the loop
    assert "S_ptr[" not in loop_on[:loop_on.index("C_l_ptr[0] = (C_l_ptr[0] *")]
    assert len(re.findall(r"C_l_ptr\[\d+\] = \(C_l_ptr\[\d+\] \* \(\(float\)S_ptr\[", epilogue)) == 8  # 8 per thread


def test_under_split_k_the_last_block_scales_the_full_sum_once():
    from test_cuda_split_k import SplitKEmulator

    v = variant("bk64")
    M, N, K = 16, 64, 512
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)
    cfg = {**ON, "tl.cuda.split_k": 2}
    func = factory(v).get_program(M, N, K)
    f = _lowered(func, cfg)
    assert f.attrs["tl.cuda_launch"]["grid"][2] == 2
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


@pytest.mark.parametrize("name", ["g128", "zp_g128", "fp4_e2m1_g32"])
def test_a_scale_per_group_of_k_stays_in_the_decode_with_a_note(name):
    v = variant(name)
    func = factory(v).get_program(16, 64, 512)
    on, off = _lowered(func, ON), _lowered(func, GENERAL)
    assert any("changes with k (a scale per group of k): it stays in the decode" in n for n in read_notes(on))
    assert on.body.same_as(off.body) or str(on.body) == str(off.body)


@pytest.mark.parametrize("M,extra", [(16, {"tl.cuda.dequant_fragments": False}), (128, {})],
                         ids=["fragments-off", "prefill-tile"])
def test_a_b_tile_decoded_into_shared_memory_keeps_its_scale_and_says_why(M, extra):
    # the prefill tiles (several warp rows: the fragment fusion does not take them) and a decode without the fusion
    func = factory(variant("int8")).get_program(M, 64, 512)
    on, off = _lowered(func, {**ON, **extra}), _lowered(func, {**GENERAL, **extra})
    assert any("B_s stays a shared tile (the fragment fusion does not take this T.gemm)" in n
               for n in read_notes(on)), read_notes(on)
    assert str(on.body) == str(off.body)


def _not_cleared(M, N, K, block_N=64, block_K=256, dtype="float16"):
    """The int4 decode, its accumulator starting at 1 rather than 0: S (1 + sum) is not 1 + S sum."""

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
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[0, bx * block_N])

    return main


def test_an_accumulator_not_cleared_before_the_loop_keeps_the_scale_in_the_decode_and_says_why():
    f = _lowered(_not_cleared(16, 128, 512), ON)
    notes = read_notes(f)
    assert any("the scale S stays in the decode (tl.cuda.factor_scale): the accumulator C_l is set to something "
               "else than zero before the K loop" in n for n in notes), notes
    assert not any("applied once" in n for n in notes)


def test_the_key_is_off_by_default_validated_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.factor_scale"] is False
    with pytest.raises(ValueError, match="tl.cuda.factor_scale"):
        resolve({"tl.cuda.factor_scale": "yes"})
    func = factory(variant("int8")).get_program(16, 64, 512)
    default, on = _lowered(func, GENERAL), _lowered(func, ON)
    assert not any("factor_scale" in n for n in read_notes(default))
    assert resolve(ON).key() != resolve(GENERAL).key() and str(default.body) != str(on.body)


def _scale_first(M, N, K, block_N=64, block_K=256, dtype="float16"):
    """The int4 decode with the scale written first: ``S[n] * decode`` (the factor on the product's left)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N,), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((16, block_K), dtype)
            B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((16, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[0, k * block_K], A_s)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                for i, j in T.Parallel(block_N, block_K):
                    q = (B_p[i, j // 2] >> (4 * (j % 2))) & 0xF
                    B_s[i, j] = S[bx * block_N + i] * T.cast(T.cast(q, "int32") - 8, dtype)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[0, bx * block_N])

    return main


def test_a_scale_written_before_the_decode_is_factored_the_same_way():
    M, N, K = 16, 64, 512
    func = _scale_first(M, N, K)
    assert any("applied once to the float32 sums" in n for n in read_notes(_lowered(func, ON)))
    g = torch.Generator().manual_seed(4)
    A = torch.randn(M, K, generator=g).half()
    B = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.uint8)
    S = (torch.rand(N, generator=g) * 0.1 + 0.01).half()

    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        return _scale_first(M, N, K)

    (C,) = emulate(prog, (M, N, K), {}, [A, B, S], arch="sm_90a", pass_configs=ON)
    q = torch.stack([B & 0xF, B >> 4], dim=-1).reshape(N, K).to(torch.int32) - 8
    ref = A.double() @ (q.double() * S.double()[:, None]).T
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())

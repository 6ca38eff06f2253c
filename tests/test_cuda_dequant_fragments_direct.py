"""Packed weights read straight from global memory by the fragment decode (tl.cuda.dequant_fragments_direct).

With ``pass_configs={"tl.cuda.dequant_fragments": True, "tl.cuda.dequant_fragments_direct": True}`` the packed
tile ``B_p`` of a dequant GEMM (bench/gpu/dequant_variants.py) is not staged through shared memory by cp.async:
its T.copy and its allocation go, and each lane loads its 16-byte packed run of the K step from the global tensor
(bounds-guarded: zeros past the tensor, as the copy's zero fill), evict-first (``tl::ldg_cs16``: ld.global.cs.v4).
Checked here: the variants against torch through tests/cuda_emulator.py (fp16 high nibble first, bf16, the zero
point with groups of 128 and a ragged N, int8, block_K 64 and 256, split-K); the generated code (no ``B_p``, no
cp.async of the weights, shared memory = A's stages only, no spills, global loads of the weights in the SASS and
no shared stores); the register ring (the next K tile's weights loaded during this one: odd and single tile counts,
split-K shares of an odd count, the note, none without a K loop); a note where the tile is read by something else;
the option off by default and in the key."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen, find_nvcc
from tilelang_core.pass_config import resolve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402

DIRECT = {"tl.cuda.dequant_fragments": True, "tl.cuda.dequant_fragments_direct": True,
          "tl.cuda.fuse_dequant": False}  # the general path alone: the recogniser would take the example's spelling
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


def variant(name: str) -> dv.Variant:
    return next(v for v in dv.VARIANTS if v.name == name)


def factory(v: dv.Variant, block_N: int = 64):
    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        return dv.program(v, M, N, K, **{**dv.tiles(M, v), "block_N": block_N})

    return prog


# (variant, M, N, K, extra pass_configs)
CASES = [
    ("hi_first", 16, 64, 512, {}),
    ("bf16", 16, 64, 512, {}),
    ("zp_g128", 16, 96, 256, {}),  # zero point, groups of 128, ragged N: the second block's rows 32.. read zeros
    ("int8", 16, 64, 512, {}),
    ("bk64", 16, 64, 256, {}),
    ("example_bk256", 16, 64, 512, {}),
    ("fp4_e2m1_g32", 7, 64, 256, {}),  # scalars used several times (register slots), groups of 32, M = 7
    ("hi_first", 5, 96, 512, {}),  # ragged M and N together
    ("example_bk256", 16, 64, 768, {}),  # three K tiles: the register ring ends on its first slot
    ("hi_first", 16, 64, 256, {}),  # one K tile: the ring's first load only, no next tile
]


@pytest.mark.parametrize("name,M,N,K,extra", CASES, ids=[f"{c[0]}_{c[1]}x{c[2]}x{c[3]}" for c in CASES])
def test_weights_read_from_global_memory_match_torch_in_the_emulator(name, M, N, K, extra):
    v = variant(name)
    args = dv.inputs(v, M, N, K, device="cpu", seed=5)
    (C,) = emulate(factory(v), (M, N, K), {}, args, arch="sm_90a", pass_configs={**DIRECT, **extra})
    ref = dv.reference(v, args[0], *args[1:])
    assert not torch.isnan(C).any()
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def _k_loop(sass: str) -> list[str]:
    """The opcodes of the K loop: the longest backward branch's body that holds an HMMA."""
    ins = [(int(a, 16), op, rest) for a, op, rest in
           re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)([^;]*);", sass)]
    best: list[str] = []
    for addr, op, rest in ins:
        m = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if m and int(m[1], 16) < addr:
            body = [o for a, o, _ in ins if int(m[1], 16) <= a <= addr]
            if any(o.startswith("HMMA") for o in body) and len(body) > len(best):
                best = body
    return best


@needs_nvcc
def test_no_shared_tile_of_packed_weights_and_128_bit_evict_first_global_loads_in_the_sass():
    v = variant("hi_first")  # the bench's decode shape (split-K: grid 64 x 2)
    kernel = dv.compile_variant(v, 16, 8192, 8192, DIRECT, target={"kind": "cuda", "arch": "sm_90a"})
    src = kernel.get_kernel_source()
    assert not re.search(r"\bB_p\b", src)  # no shared packed tile: only the lanes' register runs (dq_B_*)
    # the body twice, once per slot of the register ring (each a K step of 16 mma k-steps)
    assert "B_s" not in src and src.count("tl::gemm_rb_step<") == 2 * 16
    # 4 n atoms x 2 groups of k-steps: one 16-byte run each, for the first tile before the loop and for the next
    # tile in each of the two bodies
    assert src.count("tl::ldg_cs16(") == 3 * 8
    res = kernel.resources()
    assert res.dynamic_smem == 4 * 16 * 256 * 2  # the stages of A only
    assert res.spill_stores == 0 and res.spill_loads == 0 and not res.warnings
    from tilelang_core.trace.model import find_disassembler

    if find_disassembler() is None:
        return
    ops = _k_loop(kernel.get_kernel_source("sass"))  # both slots' K steps (the STS after the loop: split-K's reduce)
    assert sum(o.startswith("HMMA.16816.F32") for o in ops) == 2 * 64
    assert not [o for o in ops if o.startswith(("STS", "LDSM"))]  # the weights never touch shared memory
    assert sum(o == "LDG.E.EF.128" for o in ops) == 2 * 8  # ld.global.cs.v4: evict-first, 16 bytes per lane and run
    assert sum(o.startswith("LDGSTS") for o in ops) == 4  # cp.async for A only: 16 rows x 512 bytes / 128 threads


@needs_nvcc
def test_split_k_shares_read_their_own_k_range_from_global_memory():
    # (the emulator has no tl::splitk_global_reduce yet: the split kernel is checked as generated code only)
    v = variant("hi_first")
    kernel = dv.compile_variant(v, 16, 1024, 8192, {**DIRECT, "tl.cuda.split_k": 2},
                                target={"kind": "cuda", "arch": "sm_90a"})
    src = kernel.get_kernel_source()
    assert "tl::splitk_global_reduce<" in src
    # share z runs K tiles 16 z .. 16 z + 15; the weight loads index the rows with k itself (k * 128 bytes)
    assert "for (int k = (((int)blockIdx.z) * 16); k < ((((int)blockIdx.z) * 16) + 16); ++k)" in src
    loads = [x for x in src.splitlines() if "tl::ldg_cs16(" in x]
    # the ring: the share's first tile before the loop (from blockIdx.z's first row byte), then the next tile
    assert len(loads) == 3 * 8 and all("(k * 128)" not in x and "blockIdx.z) * 2048" in x for x in loads[:8])
    assert all("(k * 128)" in x for x in loads[8:])
    assert not re.search(r"\bB_p\b", src)
    res = kernel.resources()
    assert res.dynamic_smem == 4 * 16 * 256 * 2 and res.spill_stores == 0


def test_split_k_shares_of_an_odd_tile_count_each_run_their_own_ring():
    from test_cuda_split_k import SplitKEmulator

    v = variant("example_bk256")
    M, N, K = 16, 64, 1536  # 6 K tiles, split 2: 3 per share, so a share ends on the ring's first slot
    args = dv.inputs(v, M, N, K, device="cpu", seed=9)
    cfg = {**DIRECT, "tl.cuda.split_k": 2}
    func = dv.program(v, M, N, K, **{**dv.tiles(M, v), "block_N": 64})
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def _one_tile(with_loop: bool):
    import tilelang_core.language as T

    @T.prim_func
    def main(A: T.Tensor((16, 512), "float16"), B: T.Tensor((64, 256), "uint8"), C: T.Tensor((16, 64), "float16")):
        with T.Kernel(1, threads=128) as _bx:
            A_s = T.alloc_shared((16, 256), "float16")
            B_p = T.alloc_shared((64, 128), "uint8")
            B_s = T.alloc_shared((64, 256), "float16")
            C_f = T.alloc_fragment((16, 64), "float32")
            T.clear(C_f)
            if with_loop:
                for k in T.Pipelined(2, num_stages=2):
                    T.copy(A[0, k * 256], A_s)
                    T.copy(B[0, k * 128], B_p)
                    for i, j in T.Parallel(64, 256):
                        B_s[i, j] = T.Cast("float16", ((B_p[i, j // 2] >> (4 * (j % 2))) & 15) - 8)
                    T.gemm(A_s, B_s, C_f, transpose_B=True)
            else:
                T.copy(A[0, 0], A_s)
                T.copy(B[0, 0], B_p)
                for i, j in T.Parallel(64, 256):
                    B_s[i, j] = T.Cast("float16", ((B_p[i, j // 2] >> (4 * (j % 2))) & 15) - 8)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[0, 0])

    return main


@pytest.mark.parametrize("with_loop", [True, False], ids=["k-loop", "no-loop"])
def test_the_register_ring_is_noted_and_needs_a_k_loop(with_loop):
    from tilelang_core.transform.common.notes import read_notes

    lowered = codegen.lower(_one_tile(with_loop), None, "sm_90a", DIRECT)["main"]
    notes = read_notes(lowered)
    text = str(lowered)
    if with_loop:
        assert any("the weights of the next K tile load into registers during this one (a ring of 2 slots" in n
                   for n in notes), notes
        assert "dq_B_0_0_r1" in text
    else:
        assert any("not inside a serial loop: its weights load at each step, with no register ring" in n
                   for n in notes), notes
        assert "tl::ldg_cs16" in text and "_r1" not in text


def test_a_packed_tile_read_elsewhere_stays_in_shared_memory_with_a_note():
    import tilelang_core.language as T
    from tilelang_core.transform.common.notes import read_notes

    @T.prim_func
    def main(A: T.Tensor((16, 256), "float16"), B: T.Tensor((64, 128), "uint8"), C: T.Tensor((16, 64), "float16"),
             D: T.Tensor((64, 128), "uint8")):
        with T.Kernel(1, threads=128) as _bx:
            A_s = T.alloc_shared((16, 256), "float16")
            B_p = T.alloc_shared((64, 128), "uint8")
            B_s = T.alloc_shared((64, 256), "float16")
            C_f = T.alloc_fragment((16, 64), "float32")
            T.clear(C_f)
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_p)
            for i, j in T.Parallel(64, 256):
                B_s[i, j] = T.Cast("float16", ((B_p[i, j // 2] >> (4 * (j % 2))) & 15) - 8)
            T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(B_p, D[0, 0])
            T.copy(C_f, C[0, 0])

    notes = read_notes(codegen.lower(main, None, "sm_90a", DIRECT)["main"])
    assert any("dequant_fragments_direct: B_p stays in shared memory" in n and "besides this nest" in n
               for n in notes), notes


def test_a_packed_tile_whose_tensor_is_accessed_before_the_nest_stays_in_shared_memory_with_a_note():
    import tilelang_core.language as T
    from tilelang_core.transform.common.notes import read_notes

    @T.prim_func
    def main(A: T.Tensor((16, 256), "float16"), B: T.Tensor((64, 128), "uint8"), C: T.Tensor((16, 64), "float16"),
             D: T.Tensor((64, 128), "uint8")):
        with T.Kernel(1, threads=128) as _bx:
            A_s = T.alloc_shared((16, 256), "float16")
            B_p = T.alloc_shared((64, 128), "uint8")
            B_c = T.alloc_shared((64, 128), "uint8")
            B_s = T.alloc_shared((64, 256), "float16")
            C_f = T.alloc_fragment((16, 64), "float32")
            T.clear(C_f)
            T.copy(B[0, 0], B_p)
            T.copy(B[0, 0], B_c)
            T.copy(A[0, 0], A_s)
            for i, j in T.Parallel(64, 256):
                B_s[i, j] = T.Cast("float16", ((B_p[i, j // 2] >> (4 * (j % 2))) & 15) - 8)
            T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(B_c, D[0, 0])
            T.copy(C_f, C[0, 0])

    lowered = codegen.lower(main, None, "sm_90a", DIRECT)["main"]
    notes = read_notes(lowered)
    assert any("B_p stays in shared memory" in n and "B is accessed between" in n for n in notes), notes
    assert "gemm_rb_step" in str(lowered)  # the fragments still apply; only the staging copy stays


def test_the_option_is_off_by_default_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.dequant_fragments_direct"] is False
    on = {"tl.cuda.dequant_fragments": True, "tl.cuda.fuse_dequant": False}
    assert resolve(DIRECT).key() != resolve(on).key()

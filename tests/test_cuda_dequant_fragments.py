"""B fragments computed in registers from a T.gemm's producer nest (tl.DequantFragmentsCUDA), without a GPU.

With ``pass_configs={"tl.cuda.dequant_fragments": True}`` a dequantising GEMM written the ordinary way
(bench/gpu/dequant_variants.py: a ``T.Parallel`` nest decodes the packed tile into a shared fp16/bf16 tile ``B_s``,
then ``T.gemm(A_s, B_s, C)``) no longer materialises ``B_s``: each thread evaluates the nest's expression at its own
mma.sync B fragment elements (k permuted so a lane's weights are one contiguous run) and issues the mma
(``tl::gemm_rb_step``). Checked here: every variant of the bench (fp16 and bf16, both nibble orders, per-channel,
group-128 scales, an asymmetric zero point, int8 and fp4 weights, block_K 64 and 256, a ragged N and M) against
torch through tests/cuda_emulator.py; the generated code (no decoded tile, no shared stores but the cp.async of the
packed bytes, no ldmatrix, no barrier between the k-steps); the notes where the rule does not apply; the option's
key."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen, find_nvcc
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.notes import read_notes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402

# the general path alone: the W4A16 recogniser (run first by default) would take the example's own spelling
# the fragments with nibble decodes one element at a time (tl.cuda.dequant_fragment_tables, on by default, off here:
# TABLES below turns it back on, and the tests show where the two differ)
ON = {"tl.cuda.dequant_fragments": True, "tl.cuda.fuse_dequant": False, "tl.cuda.dequant_fragment_tables": False}
OFF = {"tl.cuda.dequant_fragments": False}
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


def variant(name: str) -> dv.Variant:
    return next(v for v in dv.VARIANTS if v.name == name)


def factory(v: dv.Variant, block_N: int = 128):
    """The bench's program for ``v`` at decode tiles (16 x block_N x block_K, 4 stages, 128 threads)."""

    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        return dv.program(v, M, N, K, **{**dv.tiles(M, v), "block_N": block_N})

    return prog


# (variant, M, N, K, block_N): fp16, low nibble first, per-channel scales, block_K 256 (2 K steps), then one change
# at a time; block_N 64 (two n atoms per warp) keeps the emulation short
CASES = [
    ("example_bk256", 16, 64, 512, 64),
    ("hi_first", 16, 64, 512, 64),
    ("bf16", 16, 64, 512, 64),
    ("g128", 16, 64, 512, 64),
    ("zp_g128", 16, 96, 256, 64),  # asymmetric zero point, groups of 128, ragged N (the second block: 32 rows)
    ("bk64", 16, 64, 256, 64),  # block_K 64: lane runs of 16 k, 4 K steps
    ("int8", 16, 64, 512, 64),
    ("fp4_e2m1_g32", 7, 64, 256, 64),  # selects and shifts through scalars used several times, groups of 32, M = 7
]
# tl.cuda.dequant_fragment_tables (on by default): fp4's pairs looked up by byte permutes, ragged M, then ragged N
TABLES = {**ON, "tl.cuda.dequant_fragment_tables": True}
TABLE_CASES = [("fp4_e2m1_g32", 7, 64, 256, 64), ("fp4_e2m1_g32", 16, 96, 256, 64)]


@pytest.mark.parametrize("name,M,N,K,block_N,configs", [(*c, ON) for c in CASES] + [(*c, TABLES) for c in TABLE_CASES],
                         ids=[c[0] for c in CASES] + [f"{c[0]}-tables-{c[1]}x{c[2]}" for c in TABLE_CASES])
def test_each_dequant_variant_with_fragments_in_registers_matches_torch_in_the_emulator(name, M, N, K, block_N,
                                                                                        configs):
    v = variant(name)
    args = dv.inputs(v, M, N, K, device="cpu", seed=11)
    (C,) = emulate(factory(v, block_N), (M, N, K), {}, args, arch="sm_90a", pass_configs=configs)
    ref = dv.reference(v, args[0], *args[1:])
    assert not torch.isnan(C).any()
    # the weights are the nest's own fp16/bf16 values; what differs is fp32 summation order and the output rounding
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def _lowered(func, configs):
    return codegen.lower(func, None, "sm_90a", configs)["main"]


@needs_nvcc
def test_the_decoded_tile_is_gone_no_shared_stores_no_ldmatrix_no_barrier_between_k_steps():
    v = variant("hi_first")
    kernel = dv.compile_variant(v, 16, 1024, 1024, ON, target={"kind": "cuda", "arch": "sm_90a"})
    src = kernel.get_kernel_source()
    assert src.count("tl::gemm_rb_step<16, 128, 256, 1, 4, ") == 16  # 16 k-steps per K tile, k runs of 32
    # nibbles 16 bits apart in each register's halves (D = 4): both halves from one word, fp16 math on half2
    assert "tl::gemm_rb_step<16, 128, 256, 1, 4, 9, 32, 0, 4>" in src
    assert src.count("tl::lop3<234>(") == 16 * 8  # (w >> s) & 0x000F000F | 0x64006400: 8 registers of B per step
    assert "B_s" not in src and "tl::gemm_ss" not in src and "gemm_dq4" not in src
    assert src.count("__syncthreads") == 2  # the pipeline's one per K step and the one after the loop
    # each lane's 32 packed weights of a row: one 16-byte run (two 8-byte accesses, merged by ptxas)
    assert re.search(r"uchar dq_B_p_0_0_ptr\[16\];", src)
    res = kernel.resources()
    assert res.dynamic_smem == 4 * (16 * 256 * 2 + 128 * 128)  # stages of A and of the packed bytes only
    assert res.spill_stores == 0
    from tilelang_core.trace.model import find_disassembler

    if find_disassembler() is None:
        return
    sass = kernel.get_kernel_source("sass")
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)", sass)
    assert not [o for o in ops if o.startswith("STS")]  # the decoded values never reach shared memory
    assert not [o for o in ops if o.startswith("LDSM")]
    assert sum(o.startswith("HMMA.16816.F32") for o in ops) >= 64
    assert not [o for o in ops if o.startswith("I2F")]  # no int -> fp16 conversions: the 0x6400 exponent trick


@needs_nvcc
def test_with_the_recogniser_off_the_fragments_take_the_example():
    v = variant("example_bk256")
    off = dv.compile_variant(v, 16, 1024, 1024, None, target={"kind": "cuda", "arch": "sm_90a"})
    on = dv.compile_variant(v, 16, 1024, 1024, ON, target={"kind": "cuda", "arch": "sm_90a"})
    assert "tl::gemm_dq4" in off.get_kernel_source() and "gemm_rb_step" not in off.get_kernel_source()
    assert "tl::gemm_dq4" not in on.get_kernel_source() and "tl::gemm_rb_step<" in on.get_kernel_source()


def test_the_option_is_on_by_default_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.dequant_fragments"] is True
    assert resolve(OFF).key() != resolve(None).key()
    prog = dv.program(variant("hi_first"), 16, 256, 512, **dv.tiles(16, variant("hi_first")))
    assert "gemm_rb_step" in str(_lowered(prog, {}))  # a variant the recogniser does not take: fragments
    assert "gemm_rb_step" not in str(_lowered(prog, OFF))


@needs_nvcc
def test_by_default_the_recogniser_keeps_its_spelling_and_the_fragments_take_the_others():
    target = {"kind": "cuda", "arch": "sm_90a"}
    example = dv.compile_variant(variant("example_bk256"), 16, 1024, 1024, None, target=target).get_kernel_source()
    assert "tl::gemm_dq4" in example and "gemm_rb_step" not in example
    bf16 = dv.compile_variant(variant("bf16"), 16, 1024, 1024, None, target=target).get_kernel_source()
    assert "tl::gemm_dq4" not in bf16 and "tl::gemm_rb_step<" in bf16


def _plain_gemm(M=64, N=64, K=64):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[0, 0])

    return main


def _decoded_twice(M=16, N=64, K=64):
    """The decoded tile is also copied out: it must stay in shared memory."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), P: T.Tensor((N, K // 2), "uint8"), W: T.Tensor((N, K), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            P_s = T.alloc_shared((N, K // 2), "uint8")
            B_s = T.alloc_shared((N, K), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            T.copy(A[0, 0], A_s)
            T.copy(P[0, 0], P_s)
            for i, j in T.Parallel(N, K):
                B_s[i, j] = T.cast(T.cast((P_s[i, j // 2] >> (4 * (j % 2))) & 0xF, "int32") - 8, "float16")
            T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(B_s, W[0, 0])
            T.copy(C_f, C[0, 0])

    return main


def test_a_kernel_without_a_producer_nest_gets_no_fragments_note():
    # on by default, the option has nothing to say about a GEMM whose tiles are all copies
    assert not any("dequant_fragments" in n for n in read_notes(_lowered(_plain_gemm(), ON)))
    assert not any("dequant_fragments" in n for n in read_notes(_lowered(_plain_gemm(), {})))


def test_a_decoded_tile_read_elsewhere_stays_in_shared_memory_with_a_note():
    f = _lowered(_decoded_twice(), ON)
    notes = read_notes(f)
    assert any("B fragments are not computed" in n and "B_s is used by statements besides" in n for n in notes), notes
    assert "gemm_rb_step" not in str(f)


def test_prefill_tiles_with_several_warp_rows_keep_the_shared_tile_with_a_note():
    v = variant("hi_first")  # 128 x 64 x 128 tiles, 256 threads: 4 warp rows would each decode the same weights
    prog = dv.program(v, 128, 256, 512, **dv.tiles(128, v))
    f = _lowered(prog, {**ON, "tl.cuda.wgmma_written_tiles": False})  # the mma.sync path
    notes = read_notes(f)
    assert any("spread over 4 warps along M" in n for n in notes), notes
    assert "gemm_rb_step" not in str(f)
    f = _lowered(prog, {})  # by default such a tile takes wgmma (tl.cuda.wgmma_written_tiles), which the note says
    assert any("B fragments are not computed" in n and "(wgmma)" in n for n in read_notes(f)), read_notes(f)
    assert "gemm_rb_step" not in str(f)


@pytest.mark.parametrize("name,d", [("hi_first", 4), ("bf16", 4), ("zp_g128", 4), ("int8", 2), ("fp4_e2m1_g32", 1)])
def test_each_format_pairs_its_fields_16_bits_apart_or_keeps_one_element_at_a_time(name, d):
    # nibbles: k and k + 4 in one word (D = 4), bf16 through 0x4300; int8 bytes: k and k + 2 (D = 2), through
    # (b ^ 0x80) | 0x6400; fp4's selects: element by element in natural k order (D = 1)
    v = variant(name)
    src = str(_lowered(dv.program(v, 16, 256, 512, **dv.tiles(16, v)), ON))
    assert re.search(rf"tl::gemm_rb_step<16, 128, 256, 1, 4, \d+, 32, 0, {d}>", src), name
    word_as_pair = r'T.reinterpret\("(float16|bfloat16)x2", T.call_pure_extern\("uint32", "tl::lop3<(234|106)>"'
    assert bool(re.search(word_as_pair, src)) == (d > 1), name


@pytest.mark.parametrize("name,configs", [(n, ON) for n in ("hi_first", "zp_g128", "int8", "bf16", "fp4_e2m1_g32")]
                         + [("fp4_e2m1_g32", TABLES)], ids=lambda x: x if isinstance(x, str) else
                         ("tables" if x.get("tl.cuda.dequant_fragment_tables") else "on"))
def test_the_decoded_weights_are_the_nests_own_bit_for_bit(name, configs):
    # one-hot rows of A pick single weights: C[m, n] = W[n, 17 m] exactly (one product, zeros elsewhere), so every
    # nibble / byte position of a word and both halves of a pair are checked against the nest's fp16/bf16 value
    v = variant(name)
    M, N, K = 16, 64, 256
    args = dv.inputs(v, M, N, K, device="cpu", seed=5)
    A = torch.zeros(M, K, dtype=args[0].dtype)
    A[torch.arange(M), 17 * torch.arange(M)] = 1
    (C,) = emulate(factory(v, 64), (M, N, K), {}, [A, *args[1:]], arch="sm_90a", pass_configs=configs)
    W = dv.dequantize(v, *args[1:])
    assert torch.equal(C, W[:, 17 * torch.arange(M)].T.to(C.dtype))


def test_a_split_k_loop_with_fragments_in_registers_matches_torch_in_the_emulator():
    # tl.SplitKCUDA splits the generic form's K loop before the fragment pass: two blocks per tile (blockIdx.z), each
    # half of the 8 K steps, the partials summed by the last to arrive (rank 0 here: blocks run z = 1, then 0;
    # tl::splitk_global_reduce replayed by tests/test_cuda_split_k.py's emulator)
    from test_cuda_split_k import SplitKEmulator

    v = variant("bk64")
    M, N, K = 16, 64, 512
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)
    cfg = {**ON, "tl.cuda.split_k": 2}
    func = factory(v, 64).get_program(M, N, K)
    f = _lowered(func, cfg)
    assert f.attrs["tl.cuda_launch"]["grid"][2] == 2 and "gemm_rb_step" in str(f)
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_the_tables_key_is_on_by_default_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.dequant_fragment_tables"] is True
    assert resolve(TABLES).key() != resolve(ON).key()
    with pytest.raises(ValueError, match="tl.cuda.dequant_fragment_tables"):
        resolve({"tl.cuda.dequant_fragment_tables": 1})


def test_fp4_with_tables_looks_its_pairs_up_by_byte_permutes_and_word_paired_formats_are_unchanged():
    fp4 = variant("fp4_e2m1_g32")
    prog = dv.program(fp4, 16, 256, 512, **dv.tiles(16, fp4))
    with_tables, without = str(_lowered(prog, TABLES)), str(_lowered(prog, ON))
    assert "tl::nib_lut4<" in with_tables and "tl::prmt" in with_tables
    assert "nib_lut4" not in without
    assert re.search(r"tl::gemm_rb_step<16, 128, 256, 1, 4, \d+, 32, 0, 1>", with_tables)  # natural k order, D = 1
    for name in ("hi_first", "int8"):  # pairs by one word operation already: the key changes nothing
        v = variant(name)
        p = dv.program(v, 16, 256, 512, **dv.tiles(16, v))
        assert str(_lowered(p, TABLES)) == str(_lowered(p, ON)), name


def test_the_table_is_the_decodes_own_values_at_every_nibble(monkeypatch):
    import tilelang_core.transform.cuda.dequant_fragments_cuda as dfc
    from tilelang_core.transform.cuda import fragment_tables as ft

    fp4 = variant("fp4_e2m1_g32")
    prog = dv.program(fp4, 16, 256, 512, **dv.tiles(16, fp4))
    calls: list = []

    def record(v0, v1, ana):
        calls.append(v0)
        return ft.table_pair(v0, v1, ana)

    monkeypatch.setattr(dfc, "table_pair", record)
    _lowered(prog, TABLES)
    assert calls
    table = ft.table_of(calls[0])
    want = [torch.tensor(s * v, dtype=torch.float16).view(torch.int16).item() & 0xFFFF
            for s in (1.0, -1.0) for v in E2M1]
    assert table == want  # +0 .. 6, then -0 .. -6: e2m1, sign in the top bit of the nibble


@needs_nvcc
def test_fp4_with_tables_compiles_for_sm90a_without_spills(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    k = dv.compile_variant(variant("fp4_e2m1_g32"), 16, 1024, 1024, TABLES, target={"kind": "cuda", "arch": "sm_90a"})
    assert "tl::nib_lut4<" in k.get_kernel_source()
    assert k.resources().spill_stores == 0


def _exp2_decode(M, N, K, block_M=16, block_N=128, block_K=256, num_stages=4, threads=128, dtype="float16"):
    """A nibble decode through a transcendental: the tables cannot evaluate it exactly, the fragments still apply."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N,), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                for i, j in T.Parallel(block_N, block_K):
                    q = T.cast((B_p[i, j // 2] >> (4 * (j % 2))) & 0xF, "int32")
                    B_s[i, j] = T.cast(T.exp2(T.cast(q, "float32") - 8.0), dtype) * S[bx * block_N + i]
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


def test_a_decode_the_tables_cannot_evaluate_keeps_one_element_at_a_time_and_says_why():
    seen = codegen.lower(_exp2_decode(16, 256, 512), None, "sm_90a", TABLES)
    src = str(seen["main"])
    assert "tl::gemm_rb_step<" in src and "nib_lut4" not in src
    notes = [n for n in read_notes(seen) if "tl.cuda.dequant_fragment_tables" in n]
    assert len(notes) == 1 and "B_s is decoded one element at a time" in notes[0] and notes[0].startswith("line ")
    fp4 = variant("fp4_e2m1_g32")  # the tables apply: nothing to say
    assert not [n for n in read_notes(codegen.lower(dv.program(fp4, 16, 256, 512, **dv.tiles(16, fp4)), None,
                                                    "sm_90a", TABLES)) if "dequant_fragment_tables" in n]

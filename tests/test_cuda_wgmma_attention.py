"""wgmma for flash attention's two products on sm_90a (issue 16, part 1), checked without a GPU.

* index math: a ``wgmma`` fragment used as the A operand of a register-A wgmma (``tl::wgmma_gemm_rs``) hands the
  instruction its registers as they are — the eight halves ``(mi * K/16 + kk) * 8 ..`` of a thread must be the
  PTX ISA's m64 x k16 A fragment of m-block ``mi``, k-slice ``kk`` (warp ``w`` of the warpgroup: rows ``16 w +
  l/4`` and ``+ 8``, columns ``2 (l % 4) + {0, 1}`` and ``+ 8``); the ``wgmma_row`` layout holds exactly the rows of
  the accumulator registers ``row_reg`` maps to it;
* emulated: the sm_90a kernel (wgmma for both products, the online softmax on ``wgmma_row``), and the mma.sync
  kernel of sm_90 beside it, run by the CUDA emulator (``tests/cuda_emulator.py``, which replays
  ``tl::wgmma_gemm_ss/rs`` from the shared tiles' wgmma layouts and the threads' registers) matches torch on a
  ragged causal bf16 problem;
* codegen: the classic flash-attention program on sm_90a computes ``S = Q K^T`` with ``tl::wgmma_gemm_ss`` and
  ``O += P V`` with ``tl::wgmma_gemm_rs`` (P from the softmax registers), its online softmax on the ``wgmma_row``
  layout (quad shuffles); nvcc's SASS has HGMMA and no HMMA, without spills; a tile whose warpgroups would split N
  keeps mma.sync with the reasons noted, as does ``pass_configs={"tl.cuda.wgmma": False}``.
The results on a GPU are checked by the GPU suite (tests/gpu/test_kernels.py's attention cases).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.pass_config import resolve
from tilelang_core.transform.cuda.layouts import FragmentLayout

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulator import emulate, is_close_fraction  # noqa: E402
from test_cuda_wgmma import _cuobjdump  # noqa: E402

from examples import flash_attention  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")


# -- index math ------------------------------------------------------------------------------------------------

def _isa_a_fragment(warp_in_group: int, lane: int, i: int) -> tuple[int, int]:
    """(row, column) inside an m64 x k16 A slice of half i (0..7) of a thread (PTX ISA, wgmma register fragment
    of A for .f16/.bf16: the warps stacked along M, each a 16 x 16 mma-style A tile)."""
    row = 16 * warp_in_group + lane // 4 + 8 * ((i // 2) % 2)
    col = 2 * (lane % 4) + i % 2 + 8 * (i // 4)
    return row, col


@pytest.mark.parametrize("M,K,threads,wg_m", [(64, 64, 128, 1), (128, 64, 128, 1), (128, 128, 256, 2),
                                              (256, 32, 256, 2)])
def test_wgmma_fragment_registers_are_the_register_a_operand_of_each_k_slice(M, K, threads, wg_m):
    lay = FragmentLayout.wgmma((M, K), threads, wg_m, 1)
    mi_n, kt = M // wg_m // 64, K // 16
    assert lay.num_regs == mi_n * kt * 8
    for t in range(threads):
        g, w, lane = t // 128, (t // 32) % 4, t % 32
        for mi in range(mi_n):
            for kk in range(kt):
                for i in range(8):
                    r, c = _isa_a_fragment(w, lane, i)
                    want = ((mi * wg_m + g) * 64 + r, kk * 16 + c)
                    assert lay.element_of(t, (mi * kt + kk) * 8 + i) == want, (t, mi, kk, i)


@pytest.mark.parametrize("M,N,threads,wg_m", [(64, 64, 128, 1), (128, 64, 128, 1), (128, 128, 256, 2),
                                              (256, 64, 256, 2)])
def test_wgmma_row_layout_holds_the_rows_of_the_accumulator_registers(M, N, threads, wg_m):
    acc = FragmentLayout.wgmma((M, N), threads, wg_m, 1)
    rows = acc.row_layout()
    assert rows.kind == "wgmma_row" and rows.shape == (M,) and rows.num_regs == M // wg_m // 64 * 2
    held: dict[int, set[int]] = {}
    for t in range(threads):
        mine = {rows.element_of(t, r)[0] for r in range(rows.num_regs)}
        assert len(mine) == rows.num_regs  # no row twice in one thread
        for reg in range(acc.num_regs):
            assert acc.element_of(t, reg)[0] == rows.element_of(t, acc.row_reg(reg))[0]
        for row in mine:
            held.setdefault(row, set()).add(t)
    # every row lives in exactly the four lanes of one quad
    assert sorted(held) == list(range(M))
    assert all(len(ts) == 4 and len({t // 4 for t in ts}) == 1 for ts in held.values())
    assert FragmentLayout.wgmma((M, N), threads, wg_m, 2 if threads >= 256 else 1).row_kind in (None, "wgmma_row")


# -- emulated ----------------------------------------------------------------------------------------------------

def test_emulated_mma_sync_flash_attention_matches_torch_on_a_ragged_causal_problem():
    # the path sm_80/sm_90 (and sm_90a with tl.cuda.wgmma off) take: tl::gemm_ss, P from registers by tl::gemm_rs
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 100, 1, 32, generator=g).to(torch.float16) for _ in range(3))
    kwargs = {"block_M": 64, "block_N": 64, "num_stages": 2, "threads": 128, "dtype": "float16"}
    out, = emulate(flash_attention.flash_attention, (1, 1, 100, 32, True), kwargs, [q, k, v], arch="sm_90")
    ref = flash_attention.reference(q.double(), k.double(), v.double(), True)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, float((out.double() - ref).abs().max())


@pytest.mark.parametrize("loads", [{"tl.disable_tma_lower": True}, None], ids=["cp.async", "tma"])
def test_emulated_sm90a_flash_attention_matches_torch_on_a_ragged_causal_problem(loads):
    # 100 rows: two query blocks, the second ragged; causal: the first block sees one K/V tile, the second two
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 100, 1, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    kwargs = {"block_M": 64, "block_N": 64, "num_stages": 2, "threads": 128, "dtype": "bfloat16"}
    notes, text = _lower((1, 1, 100, 32, True), kwargs)
    assert notes == [] and "tl::wgmma_gemm_rs" in text
    # the causal mask tested only on the diagonal tiles (tl.SplitMaskedIterations); the K/V loads as cp.async, or
    # (the default) as 4-D TMA boxes a producer warpgroup issues, handed over on mbarriers (two consumer
    # warpgroups: tests/test_cuda_emulator_tma.py)
    out, = emulate(flash_attention.flash_attention, (1, 1, 100, 32, True), kwargs, [q, k, v], arch="sm_90a",
                   pass_configs=loads)
    ref = flash_attention.reference(q.double(), k.double(), v.double(), True)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, float((out.double() - ref).abs().max())


# -- codegen ---------------------------------------------------------------------------------------------------

def _lower(args: tuple, kwargs: dict, arch: str = "sm_90a", pass_configs=None) -> tuple[list[str], str]:
    func = flash_attention.flash_attention.get_program(*args, **kwargs)
    seen = {}
    mod = cuda_codegen.lower(func, record=lambda name, f, _s: seen.__setitem__(name, f), arch=arch,
                             options=resolve(pass_configs))
    stage = seen["tl.InferFragmentLayoutsCUDA"]
    notes = [str(n) for n in stage.attrs["tl.wgmma_notes"]] if "tl.wgmma_notes" in stage.attrs else []
    return notes, mod["main"].script()


@needs_nvcc
@pytest.mark.parametrize("shape,cfg,dtype,rs,rows", [
    ((1, 2, 250, 64, True), (64, 64, 2, 128), "float16", "tl::wgmma_gemm_rs<64, 64, 64, 1, 64, 0, 128>", 2),
    ((1, 2, 512, 128, False), (128, 64, 2, 256), "bfloat16", "tl::wgmma_gemm_rs<128, 128, 64, 2, 128, 0, 128>", 2),
    ((1, 2, 512, 128, True), (128, 64, 2, 128), "float16", "tl::wgmma_gemm_rs<128, 128, 64, 1, 128, 0, 128>", 4),
])
def test_flash_attention_on_sm90a_runs_both_products_on_wgmma(tmp_path, shape, cfg, dtype, rs, rows):
    bm, bn, st, th = cfg
    kwargs = {"block_M": bm, "block_N": bn, "num_stages": st, "threads": th, "dtype": dtype}
    func = flash_attention.flash_attention.get_program(*shape, **kwargs)
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([3], 4))
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert f"tl::wgmma_gemm_ss<{bm}, {bn}, {shape[3]}," in src  # S = Q K^T from shared Q and K
    assert rs in src  # O += P V: P from registers, V through a descriptor (MN-major: imm-trans-b)
    assert f"tl::row_allreduce<tl::MaxOp, 1, {rows}>" in src and "block_allreduce" not in src
    assert "acc_s_cast_smem" not in src and "tl::gemm_rs" not in src
    info = art.extra["cuda"]["ptxas_info"]
    assert "0 bytes spill stores" in info, info
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout
    assert re.search(r"HGMMA\.64x\d+x16\.F32", sass) and "HMMA" not in sass


def test_flash_attention_whose_warpgroups_would_split_n_keeps_mma_sync_with_the_reasons():
    # 64 query rows and two warpgroups: the only warpgroup grid for S is 1 x 2, which splits the rows' reductions
    notes, text = _lower((1, 2, 256, 64, False), {"block_M": 64, "block_N": 64, "threads": 256,
                                                 "dtype": "float16"})
    assert "wgmma_gemm" not in text and "tl::gemm_ss<64, 64, 64, 4, 2," in text  # mma.sync, 4 x 2 warps
    assert len(notes) == 2, notes
    assert "warpgroups would split N" in notes[0]
    assert "register-A wgmma needs the 2 warpgroup(s) along M" in notes[1]


def test_flash_attention_keeps_mma_sync_when_wgmma_is_switched_off():
    notes, text = _lower((1, 2, 256, 64, False), {"block_M": 64, "block_N": 64, "dtype": "float16"},
                         pass_configs={"tl.cuda.wgmma": False})
    assert "wgmma_gemm" not in text and "tl::gemm_rs" in text
    assert len(notes) == 2 and all("'tl.cuda.wgmma' is False" in n for n in notes)
    notes80, text80 = _lower((1, 2, 256, 64, False), {"block_M": 64, "block_N": 64, "dtype": "float16"}, "sm_80")
    assert notes80 == [] and "wgmma_gemm" not in text80 and "tl::gemm_rs" in text80


def test_attention_kv_loads_are_4d_tma_boxes_fed_by_a_producer_warpgroup():
    # K and V are [batch, seq, heads, dim] tensors: a tile of one (batch, head) is a 4-D box of (atom, 1, rows, 1),
    # so a ragged seq is zero-filled at its own edge; the loop (two gemms and the softmax) is warp-specialised
    func = flash_attention.flash_attention.get_program(2, 4, 200, 128, True, block_M=128, block_N=128, num_stages=2,
                                                       threads=256, dtype="float16", heads_kv=2)
    seen = {}
    cuda_codegen.lower(func, record=lambda name, f, _s: seen.__setitem__(name, f), arch="sm_90a",
                       options=resolve(None))
    final = seen["tl.WarpSpecializeCUDA"]
    maps = json.loads(str(final.attrs["tl.tma_maps"]))
    assert [(m["param"], m["dims"], m["box"], m["swizzle"]) for m in maps] == [
        ("K", [128, 2, 200, 2], [64, 1, 128, 1], 128), ("V", [128, 2, 200, 2], [64, 1, 128, 1], 128)]
    text = str(final)
    assert text.count("tl::tma_load_4d") == 4 and "cp_async" not in text  # 2 column blocks each of K and V
    assert final.attrs["tl.cuda_launch"]["threads"] == 384  # 2 consumer warpgroups + the producer's
    assert "tl::setmaxnreg_dec<24>" in text and "tl::setmaxnreg_inc<240>" in text
    assert "__syncwarp" in text  # each warp is done with the stage before its lane 0 releases it
    notes = [str(n) for f in seen.values() if "tl.notes" in f.attrs for n in f.attrs["tl.notes"]]
    assert not any("cp.async, not TMA" in n or "not warp-specialised" in n for n in notes), notes


def test_attention_tma_and_producer_warpgroup_switch_off_by_pass_configs():
    func = flash_attention.flash_attention.get_program(1, 2, 256, 128, False, block_M=128, block_N=128,
                                                       num_stages=2, threads=256, dtype="float16")
    for pc, tma, ws in (({"tl.disable_warp_specialized": True}, True, False), ({"tl.disable_tma_lower": True},
                                                                               False, False)):
        stages: dict = {}
        cuda_codegen.lower(func, record=lambda name, f, _s, out=stages: out.__setitem__(name, f), arch="sm_90a",
                           options=resolve(pc))
        text = str(stages["tl.WarpSpecializeCUDA"])
        assert ("tl::tma_load_4d" in text) == tma and ("cp_async" in text) == (not tma)
        assert ("setmaxnreg" in text or "named_barrier" in text) == ws


def test_the_producer_warpgroup_computes_its_trip_count_and_reads_no_consumer_memory():
    # the causal loop's trip count is a scalar the program stores before the loop (loop_range); the producer runs
    # none of the statements before the loop, so reading that scalar would read an uninitialised register (on the
    # H200: a producer looping a garbage number of times, a hung kernel); it recomputes the expression instead
    import tvm
    import tvm_ffi
    from tvm import tirx

    func = flash_attention.flash_attention.get_program(2, 4, 1000, 128, True, block_M=128, block_N=128,
                                                       num_stages=2, threads=256, dtype="float16")
    seen = {}
    cuda_codegen.lower(func, record=lambda name, f, _s: seen.__setitem__(name, f), arch="sm_90a",
                       options=resolve({"tl.cuda.pingpong": True}))
    final = seen["tl.WarpSpecializeCUDA"]
    split = []
    tvm_ffi.structural_map(final.body, [(tirx.IfThenElse, lambda s: split.append(s) or s)])
    split = [s for s in split if isinstance(s.condition, tirx.GE) and "threadIdx" in str(s.condition.a)]
    assert len(split) == 1
    producer, consumers = split[0].then_case, split[0].else_case
    reads: list = []
    tvm_ffi.structural_map(producer, [(tvm.ir.TensorLoad, lambda x: reads.append(x.source) or x)])
    assert {b.name for b in reads if not b.scope().startswith("shared")} == set(), reads
    loops: list = []
    tvm_ffi.structural_map(producer, [(tirx.For, lambda x: loops.append(x) or x)])
    trip = [lp.extent for lp in loops if lp.loop_var.name == "k_load"]
    assert len(trip) == 1 and "loop_range" not in str(trip[0]) and "bx" in str(trip[0]), trip
    # ping-pong: warpgroup 1 hands warpgroup 0 the first turn, warpgroup 0 takes the last one after the loop
    text = str(consumers)
    assert text.count("tl::pingpong_wait") == 2 and text.count("tl::pingpong_pass") == 2


@pytest.mark.parametrize("dim, block_N, stages, threads, specialised", [
    (128, 128, 2, 256, True),   # 160 KiB through the loop: one block per SM either way
    (128, 64, 3, 256, True),
    (128, 64, 2, 256, False),   # 96 KiB: two blocks per SM without the producer warpgroup's registers
    (64, 128, 2, 256, False),
    (128, 64, 2, 128, False),
])
def test_attention_takes_a_producer_warpgroup_only_where_it_costs_no_resident_block(dim, block_N, stages, threads,
                                                                                    specialised):
    # measured on the H200 (BENCHMARKS.md): a producer warpgroup fills the register file (one block per SM); where
    # shared memory leaves room for two blocks, the TMA loop without it was 8-80 % faster
    func = flash_attention.flash_attention.get_program(1, 2, 512, dim, False, block_M=128, block_N=block_N,
                                                       num_stages=stages, threads=threads, dtype="float16")
    seen = {}
    cuda_codegen.lower(func, record=lambda name, f, _s: seen.__setitem__(name, f), arch="sm_90a",
                       options=resolve(None))
    final = seen["tl.WarpSpecializeCUDA"]
    assert final.attrs["tl.cuda_launch"]["threads"] == threads + 128 * specialised
    assert "tl::tma_load_4d" in str(final)
    notes = [str(n) for f in seen.values() if "tl.notes" in f.attrs for n in f.attrs["tl.notes"]]
    assert any("not warp-specialised" in n and "room for 2 blocks per SM" in n for n in notes) == (not specialised)
    if not specialised:  # the tuner's (or the user's) override
        forced = {}
        cuda_codegen.lower(func, record=lambda name, f, _s: forced.__setitem__(name, f), arch="sm_90a",
                           options=resolve({"tl.cuda.ws_keep_occupancy": False}))
        assert forced["tl.WarpSpecializeCUDA"].attrs["tl.cuda_launch"]["threads"] == threads + 128

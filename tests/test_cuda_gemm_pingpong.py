"""The ping-pong persistent GEMM on sm_90a (pass_configs ``tl.cuda.gemm_pingpong``,
``transform/cuda/sm90/gemm_pingpong.py``), checked without a GPU: the generated CUDA C (two consumer warpgroups of
the program's 128 threads, the turn barriers around the mainloop, ``OWN_TILE`` wgmma calls, 384 threads), the key
off leaving the kernel byte-identical, the notes where it does not apply, ptxas for sm_90a (no spills, no wgmma
serialisation warning) and the SASS (HGMMA, the named barriers), and the CUDA emulator against torch on small
shapes (several tiles per block, odd and even tile counts, a block of one tile, ragged M/N, both wait modes,
transposed operands, rasterised tiles), and the emulator catching warpgroups that do not take turns (a race).
The concurrency model of the schedule (turn order, a missing turn barrier) is in test_cuda_warp_specialize.py;
the GPU twin is tests/gpu/test_gemm_pingpong.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import PassConfigKey, resolve
from tilelang_core.quickstart import matmul_relu
from tilelang_core.transform.cuda.common import extern_name

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulator import EmulationError, Emulator, is_close_fraction  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the sm_90a compile tests need it")
SM90A = {"kind": "cuda", "arch": "sm_90a"}
KEY = PassConfigKey.TL_CUDA_GEMM_PINGPONG
ON = {KEY: True}


def _lowered(args: tuple, pass_configs: dict[str, Any] | None) -> Any:
    return cuda_codegen.lower(matmul_relu.get_program(*args), arch="sm_90a", options=resolve(pass_configs))


def _source(args: tuple, pass_configs: dict[str, Any] | None) -> str:
    return cuda_codegen.generate(_lowered(args, pass_configs), arch="sm_90a", options=resolve(pass_configs)).source


def _notes(args: tuple, pass_configs: dict[str, Any] | None) -> list[str]:
    func = _lowered(args, pass_configs)["main"]
    return [str(n) for n in func.attrs["tl.notes"]] if "tl.notes" in func.attrs else []


# -- the generated code ----------------------------------------------------------------------------------------

GEMM = (512, 512, 256, 128, 128, 64, 3, 128, "float16")  # 16 tiles of 128 x 128, 4 k-steps on 3 stages
PERSIST = {"tl.cuda.persistent": 3}


def test_two_consumer_warpgroups_take_turns_at_the_mainloop_with_their_own_tile():
    src = _source(GEMM, {**ON, **PERSIST})
    assert "__launch_bounds__(384" in src or "384" in src
    assert src.count("tl::pingpong_wait(") == 2  # before the mainloop, and the last turn after the walk
    assert src.count("tl::pingpong_pass(") == 2  # warpgroup 1's first pass, and after each mainloop
    assert "tl::pingpong_pass(1);" in src
    calls = [ln for ln in src.splitlines() if "tl::wgmma_gemm_ss<" in ln]
    assert calls and all("128, 128, 1, 1>(" in ln for ln in calls), calls  # swizzles, PENDING 1, OWN_TILE 1
    assert "tl::setmaxnreg_inc<232>" in src and "tl::setmaxnreg_dec<40>" in src
    assert "(uint)4);" in src  # empty barriers: the 4 warps of one warpgroup consume a stage
    # the k loop sits between the turn's wait and its pass
    lines = src.splitlines()
    wait = next(i for i, ln in enumerate(lines) if "tl::pingpong_wait(" in ln)
    gemm = next(i for i, ln in enumerate(lines) if "tl::wgmma_gemm_ss<" in ln)
    passed = next(i for i, ln in enumerate(lines) if "tl::pingpong_pass(" in ln and i > gemm)
    drain = next(i for i, ln in enumerate(lines) if "tl::wgmma_drain<" in ln)
    assert wait < gemm < passed < drain


def test_the_key_off_leaves_the_kernel_byte_identical():
    assert _source(GEMM, {KEY: False, **PERSIST}) == _source(GEMM, PERSIST)


def test_the_key_is_validated_and_in_the_cache_key():
    assert resolve(ON).key() != resolve(None).key()
    with pytest.raises(ValueError, match=KEY):
        resolve({KEY: 1})


# -- where it does not apply --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,configs,why", [
    ((512, 512, 256, 128, 128, 64, 3, 256, "float16"), PERSIST, "threads=256: each consumer warpgroup"),
    (GEMM, {"tl.cuda.persistent": -1}, "not persistent"),
    ((256, 256, 256, 128, 128, 64, 3, 128, "float16"), None, "not persistent"),  # 4 tiles, 132 blocks
    (GEMM, {**PERSIST, "tl.cuda.cluster": (2, 1)}, "tl.cuda.cluster is on"),
    (GEMM, {**PERSIST, "tl.disable_warp_specialized": True}, "no warp-specialised TMA wgmma GEMM loop"),
])
def test_where_it_does_not_apply_a_note_says_why(args, configs, why):
    notes = _notes(args, {**ON, **(configs or {})})
    mine = [n for n in notes if "tl.cuda.gemm_pingpong not applied" in n]
    assert len(mine) == 1 and why in mine[0], notes
    assert not any(n.startswith("gemm ping-pong") for n in notes)


def test_the_tma_store_epilogue_on_by_default_yields_to_the_ping_pong_and_says_so():
    notes = _notes(GEMM, {**ON, **PERSIST})
    assert any(n.startswith("gemm ping-pong") for n in notes), notes
    assert any("keeps register stores" in n and "tl.cuda.gemm_pingpong is on" in n for n in notes), notes
    assert not any("tl.cuda.gemm_pingpong not applied" in n for n in notes), notes


def test_an_epilogue_through_shared_memory_keeps_one_consumer_group():
    from test_cuda_warp_specialize import gemm_via_shared

    prog = gemm_via_shared.get_program(512, 512, 256, 128, 128, 64, 3, 128)
    func = cuda_codegen.lower(prog, arch="sm_90a", options=resolve({**ON, **PERSIST}))["main"]
    notes = [str(n) for n in func.attrs["tl.notes"]]
    assert any("gemm_pingpong not applied" in n and "shared tile" in n for n in notes), notes


# -- ptxas and SASS -------------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("tile", [(128, 128, 64, 4), (128, 192, 64, 4)])
def test_ptxas_builds_it_for_sm_90a_without_spills_and_the_sass_has_hgmma_and_the_named_barriers(tile):
    bm, bn, bk, s = tile
    k = tilelang.compile(matmul_relu.get_program(8192, 8192, 8192, bm, bn, bk, s, 128, "float16"), out_idx=[-1],
                         target=SM90A, pass_configs=ON)
    res = k.resources()
    assert res is not None and res.spill_stores == 0 and res.spill_loads == 0, res
    assert res.threads == 384 and res.registers == 168, res  # 65536 / 384: setmaxnreg moves them (ptxas 13.0)
    assert not res.warnings, res.warnings  # no C7511/C7514 wgmma serialisation
    sass = k.get_kernel_source("sass")
    assert "HGMMA.64x" in sass and "UTMALDG.2D" in sass
    assert "BAR.ARV" in sass  # the turn passed (bar.arrive 2 / 3 - wg, 256)
    assert sum("BAR.SYNC" in ln and "0x100" in ln for ln in sass.splitlines()) >= 2  # the turns taken (256)
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL" in sass
    # ptxas kept the order the overlap needs: the turn passed (bar.arrive of a register barrier id) after the
    # mainloop's last HGMMA, before the drain's wait and the epilogue's stores
    lines = sass.splitlines()
    last_mma = max(i for i, ln in enumerate(lines) if "HGMMA" in ln)
    passed = next(i for i, ln in enumerate(lines) if re.search(r"BAR\.ARV R\d+, 0x100", ln))
    drain = next(i for i, ln in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ln)
    store = next(i for i, ln in enumerate(lines) if "STG" in ln)
    assert last_mma < passed < drain < store, (last_mma, passed, drain, store)


# -- the CUDA emulator against torch ----------------------------------------------------------------------------

def _emulate(args: tuple, pass_configs: dict[str, Any], seed: int) -> tuple[str, torch.Tensor, torch.Tensor]:
    M, N, K = args[:3]
    dt = getattr(torch, args[-1])
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=g).to(dt), torch.randn(K, N, generator=g).to(dt)
    emu = Emulator(matmul_relu.get_program(*args), "sm_90a", pass_configs)
    c = torch.full((M, N), float("nan"), dtype=dt)
    emu.run([a, b, c])
    return emu.func.script(), c, torch.relu(a.double() @ b.double())


@pytest.mark.parametrize("args,configs,seed", [
    # 16 tiles of 64 x 64 over 3 blocks (6, 5, 5 tiles: even and odd walks), 4 k-steps on 3 stages in flight
    ((256, 256, 128, 64, 64, 32, 3, 128, "float16"), {"tl.cuda.persistent": 3}, 0),
    # ragged M and N (200 x 136: 2 x 3 tiles of 128 x 64 over 2 blocks), bf16, 2 stages (wait_group 0)
    ((200, 136, 96, 128, 64, 32, 2, 128, "bfloat16"), {"tl.cuda.persistent": 2}, 1),
    # 3 tiles over 2 blocks: block 1 walks one tile (warpgroup 1 only passes and takes the turn)
    ((192, 64, 64, 64, 64, 32, 3, 128, "float16"), {"tl.cuda.persistent": 2}, 2),
])
def test_emulated_ping_pong_gemm_matches_torch(args, configs, seed):
    text, out, ref = _emulate(args, {**ON, **configs}, seed)
    assert "tl::pingpong_wait" in text and '"threads": 384' in text
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_ping_pong_gemm_of_transposed_operands_matches_torch():
    # A stored (K, M), B stored (N, K): MN-major A tiles; 3 x 2 tiles of 64 x 64 over 2 blocks, bf16
    from wgmma_kernels import gemm_t

    M, N, K = 192, 128, 96
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(K, M, generator=g).to(torch.bfloat16), torch.randn(N, K, generator=g).to(torch.bfloat16)
    emu = Emulator(gemm_t.get_program(M, N, K, 64, 64, 32, True, True, 3, 128, "bfloat16"), "sm_90a",
                   {**ON, "tl.cuda.persistent": 2})
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    emu.run([a, b, c])
    assert "tl::pingpong_wait" in emu.func.script()
    ref = torch.relu(a.double().T @ b.double().T)
    assert is_close_fraction(c, ref, 2e-2, 1e-1) == 0.0, float((c.double() - ref).abs().max())


@tilelang.jit(out_idx=[-1])
def gemm_rastered(M: int, N: int, K: int, bM: int, bN: int, bK: int, stages: int, panel: int,
                  dtype: str = "float16") -> Any:
    """One warpgroup's GEMM tile with ``T.use_swizzle(panel)``: the tile indices are rasterised in the kernel."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.use_swizzle(panel)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def test_emulated_ping_pong_gemm_with_rasterised_tiles_matches_torch():
    # T.use_swizzle(2): each warpgroup decodes its tiles through the rasterisation; 3 x 3 tiles over 2 blocks
    M, N, K = 192, 192, 64
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    emu = Emulator(gemm_rastered.get_program(M, N, K, 64, 64, 32, 3, 2), "sm_90a", {**ON, "tl.cuda.persistent": 2})
    assert any(str(n).startswith("gemm ping-pong") for n in emu.func.attrs["tl.notes"])
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    emu.run([a, b, c])
    ref = a.double() @ b.double()
    assert is_close_fraction(c, ref, 2e-2, 1e-1) == 0.0, float((c.double() - ref).abs().max())


@pytest.mark.parametrize("dropped", [("tl::pingpong_wait", "tl::pingpong_pass"), ("tl::pingpong_wait",)],
                         ids=["no_turn_barriers", "no_turn_wait"])
def test_the_emulator_catches_warpgroups_that_do_not_take_turns(dropped):
    # both mainloops at once: the producer reloads a stage the other warpgroup's wgmma group still reads
    M, N, K = 256, 128, 256
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    emu = Emulator(matmul_relu.get_program(M, N, K, 64, 64, 32, 3, 128, "float16"), "sm_90a",
                   {**ON, "tl.cuda.persistent": 2})

    def visit(x: Any) -> Any:
        v = x.value
        if isinstance(v, tvm.ir.Call) and extern_name(v) in dropped:
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return x

    emu.func = emu.func.with_body(tvm_ffi.structural_map(emu.func.body, [(tirx.Evaluate, visit)]))
    with pytest.raises(EmulationError, match="shared-memory race"):
        emu.run([a, b, torch.empty(M, N, dtype=torch.float16)])

"""``tl.cuda.swizzle_packed_tiles``: the packed weight tiles of the fragment decode swizzled and read 16 bytes a lane.

Without it a lane stages its run of packed weights (16 bytes of int4, 32 of int8) from the shared tile with 8-byte
loads, and a warp's eight rows, 256 or 512 bytes apart, all start on bank 0: Nsight Compute counted 42 % excessive
shared wavefronts on the H200 (the W4A16 decode at 16x64x512). With the key each run is ``tl::lds16`` loads and the
tile gets the packed staging swizzle (odd rows' chunks moved to the other half of the banks). Checked without a
GPU: the bank model of one warp's loads (conflict-free with the swizzle, conflicting without), the values in the
CUDA emulator against torch for every format (the ``cp.async`` writes and the ``lds16`` reads must agree on the
swizzle, or the weights come out permuted), ragged shapes and split-K, the generated code, and the key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen
from tilelang_core.pass_config import resolve
from tilelang_core.transform.cuda.layouts import packed_swizzle_code, swizzle_py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402

GENERAL = {"tl.cuda.fuse_dequant": False}
ON = {**GENERAL, "tl.cuda.swizzle_packed_tiles": True}


def variant(name: str) -> dv.Variant:
    return next(v for v in dv.VARIANTS if v.name == name)


def factory(v: dv.Variant, block_N: int = 64, block_K: int | None = None):
    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        tiles = {**dv.tiles(M, v), "block_N": block_N}
        if block_K:
            tiles["block_K"] = block_K
        return dv.program(v, M, N, K, **tiles)

    return prog


def _phases(row_bytes: int, run: int, code: int) -> list[int]:
    """The most lanes of one 8-lane phase of a warp's 16-byte loads that share a 16-byte bank chunk (1: no
    conflict), for every load of a k-group: lane l reads row l // 4 at byte (l % 4) * run (+ 16 for a 32-byte
    run's second load), as the fragment decode's lanes do."""
    worst = []
    for g in range(row_bytes // (4 * run)):
        for half in range(run // 16):
            chunks = []
            for lane in range(32):
                off = (lane // 4) * row_bytes + g * 4 * run + (lane % 4) * run + 16 * half
                chunks.append((swizzle_py(off, code, "uint8") >> 4) & 7)
            worst += [max(chunks[p:p + 8].count(c) for c in chunks[p:p + 8]) for p in range(0, 32, 8)]
    return worst


@pytest.mark.parametrize("row_bytes,run", [(128, 16), (256, 16), (512, 16), (128, 32), (256, 32), (512, 32)])
def test_one_warps_16_byte_loads_of_the_packed_rows_are_conflict_free_only_with_the_swizzle(row_bytes, run):
    code = packed_swizzle_code(row_bytes, 64, run)
    assert code
    assert max(_phases(row_bytes, run, code)) == 1
    assert max(_phases(row_bytes, run, 0)) == 2  # unswizzled: both rows of a phase on the same chunks


def test_short_rows_and_other_runs_get_no_swizzle():
    assert packed_swizzle_code(64, 64, 16) == 0  # two rows already share 128 bytes
    assert packed_swizzle_code(256, 64, 8) == 0 and packed_swizzle_code(256, 64, 64) == 0
    assert max(_phases(64, 16, 0)) == 1


CASES = [  # (variant, M, N, K, block_N, block_K)
    ("example_bk256", 16, 64, 512, 64, 256),  # 128-byte rows, 16-byte runs
    ("example_bk256", 16, 64, 1024, 64, 512),  # 256-byte rows
    ("hi_first", 16, 64, 512, 64, 256),
    ("bf16", 16, 64, 512, 64, 256),
    ("g128", 16, 64, 512, 64, 256),
    ("zp_g128", 16, 96, 256, 64, 256),  # zero points, ragged N
    ("int8", 16, 64, 512, 64, 256),  # 256-byte rows, 32-byte runs: two lds16 per lane
    ("fp4_e2m1_g32", 7, 64, 256, 64, 256),  # ragged M
]


@pytest.mark.parametrize("name,M,N,K,block_N,block_K", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-bk{c[5]}" for c in CASES])
def test_each_format_with_swizzled_packed_tiles_matches_torch_in_the_emulator(name, M, N, K, block_N, block_K):
    v = variant(name)
    prog = factory(v, block_N, block_K)
    src = codegen.lower(prog.get_program(M, N, K), None, "sm_90a", ON)["main"]
    assert "tl::lds16" in str(src)
    args = dv.inputs(v, M, N, K, device="cpu", seed=13)
    (C,) = emulate(prog, (M, N, K), {}, args, arch="sm_90a", pass_configs=ON)
    ref = dv.reference(v, args[0], *args[1:])
    assert not torch.isnan(C).any()
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(C.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def test_under_split_k_the_swizzled_stages_still_match_torch():
    from test_cuda_split_k import SplitKEmulator

    v = variant("example_bk256")
    M, N, K = 16, 64, 1024
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)
    cfg = {**ON, "tl.cuda.split_k": 2}
    func = factory(v, 64, 256).get_program(M, N, K)
    C = torch.full((M, N), float("nan"), dtype=torch.float16)
    SplitKEmulator(func, z_order=[1, 0], pass_configs=cfg).run([*args, C])
    ref = dv.reference(v, args[0], *args[1:])
    torch.testing.assert_close(C.double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def test_the_copy_writes_and_the_decode_reads_go_through_the_same_swizzle():
    v = variant("example_bk256")
    k = tilelang.compile(factory(v, 64, 512).get_program(16, 128, 2048), out_idx=[-1], target="cuda -arch=sm_90a",
                         pass_configs=ON)
    src = k.get_kernel_source()
    # the staging tile's cp.async destinations and the lds16 sources both XOR bit 6 by bit 8 (256-byte rows)
    assert src.count("tl::lds16(") >= 2 and ">> 8) & 1) * 4) << 4)" in src
    off = tilelang.compile(factory(v, 64, 512).get_program(16, 128, 2048), out_idx=[-1], target="cuda -arch=sm_90a",
                           pass_configs=GENERAL).get_kernel_source()
    assert "tl::lds16" not in off and "& 1) * 4) << 4)" not in off


def test_the_key_is_off_by_default_validated_and_part_of_the_cache_key():
    assert resolve(None)["tl.cuda.swizzle_packed_tiles"] is False
    with pytest.raises(ValueError, match="tl.cuda.swizzle_packed_tiles"):
        resolve({"tl.cuda.swizzle_packed_tiles": 3})
    assert resolve(ON).key() != resolve(GENERAL).key()

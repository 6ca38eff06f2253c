"""The GPU bench's correctness check (bench/gpu/run.py), exercised on CPU tensors.

Why: the W4A16 check compares a kernel with the *exact* product and widens the tolerance by the program-order
reference's own distance from it (per-channel kernels scale their fp32 sums instead of rounding every weight).
A check that loose enough to pass anything would hide wrong kernels; these tests pin both directions. Also: the GEMM
bench times the configuration the package ships for each shape (the one a user gets), read from defaults.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

GPU_BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu"
sys.path.insert(0, str(GPU_BENCH))

refs = pytest.importorskip("refs")
run = pytest.importorskip("run")


def _w4a16_case(seed: int = 0, M: int = 4, N: int = 48, K: int = 512, groups: int = 1):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).half()
    B = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.uint8)
    S = (torch.rand(N, groups, generator=g) * 0.1 + 0.01).half()
    return A, B, S


def test_exact_reference_differs_from_the_program_order_one_by_weight_rounding_only():
    A, B, S = _w4a16_case()
    prog, = refs.dequant_gemm(A, B, S)
    exact, = refs.dequant_gemm_exact(A, B, S)
    diff = (prog - exact).abs()
    assert float(diff.max()) > 0  # fp16 rounding of (q - 8) * s is visible ...
    assert float(diff.max()) < 1e-2 * float(exact.abs().max())  # ... and small against the outputs


def _check(out: torch.Tensor, A, B, S) -> bool:
    prog, = refs.dequant_gemm(A, B, S)
    exact, = refs.dequant_gemm_exact(A, B, S)
    ok, _ = run.compare(out, exact, 2e-2, 2e-2, (prog - exact).abs())
    return ok


@pytest.mark.parametrize("groups", [1, 4])
def test_exact_check_accepts_both_roundings_of_a_correct_kernel(groups):
    A, B, S = _w4a16_case(groups=groups)
    prog, = refs.dequant_gemm(A, B, S)
    exact, = refs.dequant_gemm_exact(A, B, S)
    assert _check(prog.half(), A, B, S)  # the program's per-weight rounding, output in fp16
    assert _check(exact.half(), A, B, S)  # scaled sums (the fused per-channel kernel), output in fp16


def test_exact_check_rejects_a_kernel_that_drops_one_k_chunk():
    A, B, S = _w4a16_case()
    A2 = A.clone()
    A2[:, 128:160] = 0  # as if one lane's 32 weights per row were never multiplied
    wrong, = refs.dequant_gemm_exact(A2, B, S)
    assert not _check(wrong.half(), A, B, S)


def test_exact_check_rejects_swapped_output_columns():
    A, B, S = _w4a16_case()
    exact, = refs.dequant_gemm_exact(A, B, S)
    wrong = exact.clone()
    wrong[:, [3, 4]] = wrong[:, [4, 3]]
    assert not _check(wrong.half(), A, B, S)


def test_gemm_shapes_times_the_shipped_default_of_each_issue_shape():
    """bench/gpu/gemm_shapes.py's first row per shape is the configuration defaults.json ships for the quickstart."""
    from gemm_shapes import SHAPES, shipped

    from tilelang_core.autotune.defaults import load_defaults

    for (M, N, K) in SHAPES:
        for dt in ("float16", "bfloat16"):
            got = shipped(M, N, K, dt)
            assert got is not None, (M, N, K, dt)
            tile, pcs = got
            row = next(r for r in load_defaults() if r.measurement.kernel == "matmul_relu" and r.arch == "sm_90a"
                       and (r.problem["M"], r.problem["N"], r.problem["K"], r.problem["dtype"]) == (M, N, K, dt))
            assert tile == tuple(row.tuned[k] for k in ("block_M", "block_N", "block_K", "num_stages", "threads"))
            assert pcs == row.tuned.get("pass_configs", {})
    assert shipped(100, 8192, 8192, "float16") is None  # no row for a shape the sweep did not take


def test_every_tile_of_the_dequant_tile_sweep_lowers_to_the_register_fragments():
    """bench/gpu/dequant_tiles.py's tiles all build for sm_90a with the general lowering (no recogniser), and each
    decodes into register fragments: a sweep row is never a tile the compiler refuses."""
    import dequant_tiles
    import dequant_variants as dv

    from tilelang_core.backend.cuda import codegen

    v = next(x for x in dv.VARIANTS if x.name == "hi_first")
    for bn, bk, st, th in dequant_tiles.TILES:
        func = dv.program(v, 16, 1024, 2048, 16, bn, bk, st, th)
        text = str(codegen.lower(func, None, "sm_90a", {"tl.cuda.fuse_dequant": False})["main"])
        assert "tl::gemm_rb_step<" in text, (bn, bk, st, th)


def test_the_ab_benchs_tiles_take_the_paths_its_keys_act_on():
    """bench/gpu/dequant_ab.py's decode tiles decode into register fragments (where tl.cuda.factor_scale and
    tl.cuda.swizzle_packed_tiles act) and its prefill tiles take wgmma, keeping the group in flight with
    tl.cuda.wgmma_double_buffer at three stages or more: an A/B row is never two copies of one kernel."""
    import dequant_ab
    import dequant_variants as dv

    from tilelang_core.backend.cuda import codegen

    v = next(x for x in dv.VARIANTS if x.name == "hi_first")
    general = {"tl.cuda.fuse_dequant": False}
    for bn, bk, st, th in dequant_ab.DECODE_TILES:
        func = dv.program(v, 16, 1024, 2048, 16, bn, bk, st, th)
        on = str(codegen.lower(func, None, "sm_90a", {**general, "tl.cuda.factor_scale": True})["main"])
        off = str(codegen.lower(func, None, "sm_90a", general)["main"])
        assert "tl::gemm_rb_step<" in on and on != off, (bn, bk, st, th)
    for bn, bk, st, th in dequant_ab.PREFILL_TILES:
        func = dv.program(v, 128, 1024, 2048, 128, bn, bk, st, th)
        on = str(codegen.lower(func, None, "sm_90a", {**general, "tl.cuda.wgmma_double_buffer": True})["main"])
        assert "tl::wgmma_gemm_ss<" in on and ("tl::wgmma_drain<" in on) == (st >= 3), (bn, bk, st, th)


def test_the_repeat_benchs_configs_parse_into_a_tile_and_validated_pass_configs():
    """bench/gpu/gemm_repeat.py's ``--configs`` entries: a tile and ``;``-separated pass_configs (tuples included),
    each a key the compiler accepts; an entry without five tile numbers stops with its text."""
    gemm_repeat = pytest.importorskip("gemm_repeat")
    from tilelang_core.pass_config import resolve

    tile, pcs = gemm_repeat.parse_config("128x256x64x4x256;tl.cuda.cluster=(1,2,1);tl.disable_warp_specialized=True")
    assert tile == (128, 256, 64, 4, 256)
    assert pcs == {"tl.cuda.cluster": (1, 2, 1), "tl.disable_warp_specialized": True}
    assert resolve(pcs)["tl.cuda.cluster"] == (1, 2, 1)
    with pytest.raises(SystemExit, match="128x256x64"):
        gemm_repeat.parse_config("128x256x64")

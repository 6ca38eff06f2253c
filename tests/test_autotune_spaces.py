"""The GEMM tuning spaces of ``tilelang_core.autotune.spaces``: what the sm_90a and sm_80 spaces hold, what they
drop and why, checked against the compiler's own rules (plan_wgmma / plan_gemm, the architecture's shared-memory
limit, the warp-specialisation pass's register split) and against a real sm_90a build of a kept configuration.
A configuration's ``pass_configs`` reach the compiler and the tuning database (a real CPU sweep)."""

from __future__ import annotations

import pytest
import torch

from tilelang_core.autotune import TuningDB, gemm_space, tune
from tilelang_core.autotune.spaces import (
    PASS_CONFIGS,
    REGISTER_MARGIN,
    gemm_candidates,
    register_budget,
    smem_bytes,
    summary,
)
from tilelang_core.autotune.workers import compile_config, jitted
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available
from tilelang_core.backend.cuda.resources import limits_for
from tilelang_core.quickstart import matmul_relu, reference
from tilelang_core.transform.cuda.layouts import plan_gemm, plan_wgmma

needs_cuda_compiler = pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(),
                                         reason="no nvcc or NVRTC: CUDA kernels cannot be compiled here")
SM90_LIMIT = limits_for("sm_90").smem_per_block


def _key(c: dict) -> tuple:
    return (c["block_M"], c["block_N"], c["block_K"], c["num_stages"], c["threads"],
            tuple(sorted(c.get(PASS_CONFIGS, {}).items())))


def test_every_sm90_config_has_a_wgmma_plan_and_fits_shared_memory_and_registers():
    space = gemm_space("cuda", M=4096, N=4096, K=4096, dtype="bfloat16")
    assert len(space) > 100
    for c in space:
        ws = not c.get(PASS_CONFIGS, {}).get("tl.disable_warp_specialized", False)
        plan, why = plan_wgmma(c["block_M"], c["block_N"], c["block_K"], "bfloat16", "bfloat16", "float32",
                               c["threads"], 0, (c["block_M"], c["block_K"]), (c["block_K"], c["block_N"]),
                               False, False)
        assert plan is not None, (c, why)
        assert smem_bytes(c["block_M"], c["block_N"], c["block_K"], c["num_stages"], "bfloat16") <= SM90_LIMIT
        assert c["block_M"] * c["block_N"] // c["threads"] + REGISTER_MARGIN <= register_budget(c["threads"], ws)
    forms = {(c["threads"], bool(c.get(PASS_CONFIGS, {}).get("tl.disable_warp_specialized"))) for c in space}
    assert forms == {(t, off) for t in (128, 256, 384) for off in (False, True)}  # 1-3 warpgroups, both forms
    assert any(c.get(PASS_CONFIGS, {}).get("tl.cuda.persistent") == -1 for c in space)  # 1024 tiles > 132 SMs
    assert not any("tl.cuda.split_k" in c.get(PASS_CONFIGS, {}) for c in space)
    assert len({_key(c) for c in space}) == len(space)


def test_the_sm90_space_drops_what_does_not_fit_and_says_why():
    by_key = {_key(c.config): c.reason for c in gemm_candidates("sm_90a", M=4096, N=4096, K=4096)}
    assert by_key[(128, 256, 64, 5, 256, ())].startswith("shared memory")  # 5 x 48 KiB > 227 KiB
    assert by_key[(128, 256, 64, 4, 256, ())] == ""  # the quickstart's measured config is kept
    assert by_key[(128, 256, 64, 4, 128, ())].startswith("registers")  # 256 accumulators per thread
    assert by_key[(64, 64, 64, 4, 384, ())].startswith("wgmma")  # no grid of 3 warpgroups divides 64x64
    counts = summary(gemm_candidates("sm_90a", M=4096, N=4096, K=4096))
    assert counts["kept"] > 0 and {"shared memory", "registers", "wgmma"} <= set(counts)


def test_small_grids_get_split_k_forms_and_large_grids_persistent_ones():
    decode = gemm_space("cuda", M=16, N=8192, K=8192, level="quick")
    splits = {c.get(PASS_CONFIGS, {}).get("tl.cuda.split_k") for c in decode}
    assert {0, 1, 2, 4} <= splits
    wide = [c for c in decode if c["block_M"] >= 64]
    assert wide and all(c["block_M"] == 64 and c["threads"] == 128 for c in wide)  # one m64 warpgroup at M = 16
    for c in decode:
        s = c.get(PASS_CONFIGS, {}).get("tl.cuda.split_k", 0)
        steps = 8192 // c["block_K"]
        assert s <= 1 or (steps % s == 0 and steps // s >= c["num_stages"])
    assert not any("tl.cuda.persistent" in c.get(PASS_CONFIGS, {}) for c in decode)
    square = gemm_space("cuda", M=8192, N=8192, K=8192, level="quick")
    assert any(c.get(PASS_CONFIGS, {}).get("tl.cuda.persistent") == -1 for c in square)
    assert all(c["block_M"] * c["block_N"] >= 128 * 128 for c in square)
    assert {c["block_K"] for c in square} == {64}  # one 128-byte swizzle row of fp16
    full = gemm_space("cuda", M=8192, N=8192, K=8192)
    assert {_key(c) for c in square} < {_key(c) for c in full}


def test_decode_sized_m_adds_narrow_mma_sync_tiles_that_fit_and_bigger_m_does_not():
    decode = gemm_space("sm_90a", M=16, N=8192, K=8192, level="quick")
    narrow = [c for c in decode if c["block_M"] < 64]
    assert {c["block_M"] for c in narrow} == {16}  # M = 16: no 32-row tile
    assert {(16, 64, 256, 4), (16, 64, 128, 8)} <= {(c["block_M"], c["block_N"], c["block_K"], c["num_stages"])
                                                    for c in narrow}
    for c in narrow:
        plan, _ = plan_wgmma(c["block_M"], c["block_N"], c["block_K"], "float16", "float16", "float32",
                             c["threads"], 0, (c["block_M"], c["block_K"]), (c["block_K"], c["block_N"]), False, False)
        assert plan is None  # not a wgmma tile: the compiler lowers it to mma.sync
        assert plan_gemm(c["block_M"], c["block_N"], c["block_K"], "float16", "float16", "float32", c["threads"],
                         0, True, True).kind == "mma"
        assert smem_bytes(c["block_M"], c["block_N"], c["block_K"], c["num_stages"], "float16") <= SM90_LIMIT
        assert "tl.disable_warp_specialized" not in c.get(PASS_CONFIGS, {})
        tiles = 8192 // c["block_N"]
        if tiles * 2 > 132:  # a grid the split-K rule leaves alone: no split-K form
            assert PASS_CONFIGS not in c
    # 64 tiles of 16x128 leave half the SMs idle: the compiler's split and no split are both offered
    assert {c.get(PASS_CONFIGS, {}).get("tl.cuda.split_k") for c in narrow if c["block_N"] == 128} == {0, 1}
    reasons = {c.reason.split(":")[0] for c in gemm_candidates("sm_90a", M=16, N=8192, K=8192) if c.reason}
    assert "mma.sync" in reasons  # 8 warps cannot split a 16x32 tile into 16x8 steps
    assert {c["block_M"] for c in gemm_space("sm_90a", M=32, N=2048, K=4096, level="quick")} >= {16, 32}
    assert min(c["block_M"] for c in gemm_space("sm_90a", M=128, N=2048, K=4096, level="quick")) == 64
    assert min(c["block_M"] for c in gemm_space("sm_90a", M=33, N=2048, K=4096)) == 64


def test_the_sm80_space_is_mma_sync_only():
    space = gemm_space("cuda -arch=sm_80", M=1024, N=1024, K=1024, names={"block_M": "BM"})
    assert space
    for c in space:
        assert PASS_CONFIGS not in c and c["threads"] in (128, 256)
        assert plan_gemm(c["BM"], c["block_N"], c["block_K"], "float16", "float16", "float32", c["threads"], 0,
                         True, True).kind == "mma"
        assert smem_bytes(c["BM"], c["block_N"], c["block_K"], c["num_stages"], "float16") <= 163 * 1024


@pytest.mark.parametrize("kwargs, named", [
    (dict(target="cpu"), "target"), (dict(dtype="float32"), "dtype"), (dict(M=0), "M must be"),
    (dict(accum_dtype="float16"), "accum_dtype"), (dict(level="fast"), "level"),
    (dict(names={"block_Q": "x"}), "names"),
])
def test_bad_arguments_are_errors_naming_them(kwargs, named):
    args = {"target": "cuda", "M": 256, "N": 256, "K": 256, **kwargs}
    with pytest.raises(ValueError, match=named):
        gemm_space(**args)


@needs_cuda_compiler
def test_a_kept_config_builds_within_the_estimates_and_its_pass_configs_reach_the_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    split_off = (("tl.cuda.split_k", 1),)  # 4 output tiles: a small grid, so the space offers split-K
    cfg = next(c for c in gemm_space("cuda", M=256, N=256, K=512, dtype="float16")
               if _key(c) == (128, 128, 64, 4, 256, split_off))
    jf = jitted(matmul_relu, [-1], "cuda")
    args = dict(M=256, N=256, K=512, dtype="float16", accum_dtype="float32")
    ws = compile_config(jf, {**args, **cfg}).resources()
    assert ws.spill_stores == 0 and ws.threads == 256 + 128  # the producer warpgroup
    ring = 4 * (128 * 64 + 64 * 128) * 2
    assert ring <= ws.dynamic_smem and ws.dynamic_smem + ws.static_smem <= smem_bytes(128, 128, 64, 4, "float16")
    off_cfg = {"tl.cuda.split_k": 1, "tl.disable_warp_specialized": True}
    off = compile_config(jf, {**args, **cfg, PASS_CONFIGS: off_cfg})
    assert off.pass_configs.explicit() == off_cfg
    assert off.resources().threads == 256  # no producer warpgroup


def test_a_configs_pass_configs_are_compiled_with_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    db = TuningDB(tmp_path / "t.sqlite3")
    base = dict(block_M=16, block_N=16, block_K=16, num_stages=1)
    configs = [{**base, PASS_CONFIGS: {"tl.cuda.split_k": 2}}, {**base, PASS_CONFIGS: {"tl.no_such_key": True}}]
    r = tune(matmul_relu, configs, args=dict(M=48, N=32, K=64), ref=reference, target="cpu", workers=0, db=db,
             progress=False)
    ok, bad = r.measurements
    assert ok.ok and ok.config[PASS_CONFIGS] == {"tl.cuda.split_k": 2}
    assert r.kernel_for(ok.config).pass_configs.explicit() == {"tl.cuda.split_k": 2}
    assert bad.status == "compile_error" and "tl.no_such_key" in bad.message
    stored = db.best(matmul_relu, {"M": 48, "N": 32, "K": 64}, "cpu")
    assert stored is not None and stored.config[PASS_CONFIGS] == {"tl.cuda.split_k": 2}
    a, b = torch.randn(48, 64), torch.randn(64, 32)
    torch.testing.assert_close(r.best_kernel(a, b), reference(a, b), rtol=1e-4, atol=1e-4)

"""The GPU bench's @jit path (bench/gpu/jit_build.py, run.py, compile_time.py), exercised without a GPU.

Why: on the GPU host these scripts compile every kernel in-process and must say truthfully how each was obtained.
An entry's compiler options (``Entry.pass_configs``) reach ``@jit(pass_configs=...)`` and its kernel, never the
kernel built without them; the quick subset must name entries that exist; the compile-time table
must apply the 1.0 s goal to the cold total.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

GPU_BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu"
sys.path.insert(0, str(GPU_BENCH))

kernels = pytest.importorskip("kernels")
jit_build = pytest.importorskip("jit_build")


def test_quick_subset_names_existing_entries_of_every_headline_group():
    by_name = {e.name: e for e in kernels.entries()}
    assert all(n in by_name for n in kernels.QUICK)
    groups = {by_name[n].bench for n in kernels.QUICK}
    assert groups >= {"gemm", "attention", "dequant", "gemv", "add", "softmax", "rmsnorm", "launch"}
    assert not any(by_name[n].pass_configs for n in kernels.QUICK)  # the defaults users get


def test_keep_filters_like_only_and_skip():
    assert kernels.keep("gemm_f16_x", only=["gemm"]) and not kernels.keep("add_x", only=["gemm"])
    assert not kernels.keep("gemm_f16_x", skip=["f16"])
    assert not kernels.keep("gemm_f16_x", quick=True) and kernels.keep(kernels.QUICK[0], quick=True)


def test_entry_options_are_valid_pass_configs_and_reach_the_factory():
    from tilelang_core.pass_config import resolve

    with_opts = [e for e in kernels.entries() if e.pass_configs]
    assert with_opts and {k for e in with_opts for k in e.pass_configs} >= {"tl.cuda.fused_gemm",
                                                                            "tl.cuda.fuse_dequant"}
    for e in with_opts:
        resolve(e.pass_configs)  # raises on an unknown key or a bad value
    e = next(e for e in with_opts if e.name == "quickstart_f16_unfused")
    shared: dict = {}
    f = jit_build._factory(e, {"kind": "cuda", "arch": "sm_90"}, shared)
    assert f.pass_configs.explicit() == {"tl.cuda.fused_gemm": False}
    plain = next(x for x in kernels.entries() if x.name == "quickstart_f16_1024")
    assert jit_build._factory(plain, {"kind": "cuda", "arch": "sm_90"}, shared) is not f


def test_environ_restores_previous_values(monkeypatch):
    monkeypatch.setenv("TL_BENCH_A", "1")
    monkeypatch.delenv("TL_BENCH_B", raising=False)
    with jit_build.environ({"TL_BENCH_A": "2", "TL_BENCH_B": "3"}):
        assert os.environ["TL_BENCH_A"] == "2" and os.environ["TL_BENCH_B"] == "3"
    assert os.environ["TL_BENCH_A"] == "1" and "TL_BENCH_B" not in os.environ


def test_summary_counts_and_describe():
    recs = [jit_build.Obtained("a", how="compiled", seconds=1.5, timings={"lower": 0.1, "codegen": 0.1, "nvcc": 1.2},
                               compiler="nvcc"),
            jit_build.Obtained("b", how="disk", seconds=0.05), jit_build.Obtained("c", how="memory"),
            jit_build.Obtained("d", error="boom")]
    assert [r.describe() for r in recs] == ["compiled 1.50s", "disk 0.05s", "memory", "failed"]
    lines = jit_build.summary(recs, 2.0, "test")
    assert "1 compiled, 1 from disk, 1 from memory, 1 failed" in lines[0]
    assert "nvcc 1.2 s" in lines[1]


def test_compile_time_table_applies_the_goal_to_the_cold_total():
    ct = pytest.importorskip("compile_time")
    fast = ct.Row("gemm", "nvcc", cold=0.8, stages={"lower": 0.1, "codegen": 0.05, "nvcc": 0.6}, ran="nvcc")
    slow = ct.Row("fa", "nvrtc", cold=1.3, stages={"lower": 0.1, "codegen": 0.05, "nvcc": 1.1}, ran="nvcc")
    lines = ct.table([fast, slow])
    assert lines[2].endswith("| pass |") and lines[3].endswith("| FAIL |")
    assert "nvrtc (ran nvcc)" in lines[3]  # a forcing that did not take is shown, not hidden
    assert "nvcc: 1/1" in ct.verdict([fast, slow]) and "nvrtc: 0/1" in ct.verdict([fast, slow])
    entry = {e.name: e for e in kernels.entries()}["gemm_f16_4096x4096x4096_128x256x32s4t256"]
    assert ct.triton_tiles(entry) == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8, "num_stages": 4,
                                      "num_warps": 8}


def test_jit_obtain_reports_compiled_memory_and_disk(tmp_path, monkeypatch):
    pytest.importorskip("tvm")
    from tilelang_core.backend.cuda.nvcc import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found: the CUDA compile is not exercised")
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    entry = {e.name: e for e in kernels.entries()}["t_add_1d_ragged"]
    target = {"kind": "cuda", "arch": "sm_90"}
    shared: dict = {}
    seen: dict = {}
    k1, r1 = jit_build.jit_obtain(entry, target, tmp_path, shared, seen)
    k2, r2 = jit_build.jit_obtain(entry, target, tmp_path, shared, seen)
    _, r3 = jit_build.jit_obtain(entry, target, tmp_path, {}, {})  # a new factory: the disk cache
    assert (r1.how, r2.how, r3.how) == ("compiled", "memory", "disk"), (r1.error, r2.error, r3.error)
    assert k1 is k2 and r1.compiler in ("nvcc", "nvrtc") and set(r1.timings) >= {"lower", "codegen", "nvcc"}

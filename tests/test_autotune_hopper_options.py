"""The sm_90a tuning spaces' ``options=`` axes: the Hopper keys that are off by default and not yet measured on a
GPU (``tl.cuda.cluster``, ``tl.cuda.gemm_pingpong``, ``tl.cuda.tma_store`` for the GEMM, ``tl.cuda.attention_overlap``
for attention, ``tl.cuda.dequant_fragments`` / ``tl.cuda.wgmma_written_tiles`` / ``tl.cuda.tma_plain_tiles`` for the
dequantising GEMM). Checked: the default spaces are unchanged; asked, the spaces hold the twins; the compiler takes
the option in the twins it keeps (its own notes and lowered code, sm_90a lowering) and refuses it in the ones it
drops; a few build with ptxas for sm_90a without spills; a twin's ``pass_configs`` are the identity of its
measurement through ``tune`` and the tuning database's ``best()``, and a shipped default with them is compiled
with them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tilelang_core.autotune import (
    Measurement,
    TuningDB,
    attention_space,
    compile_default,
    dequant_space,
    gemm_space,
    tune,
)
from tilelang_core.autotune.attention_space import attention_candidates
from tilelang_core.autotune.defaults import write_defaults
from tilelang_core.autotune.dequant_space import dequant_candidates
from tilelang_core.autotune.record import kernel_identity
from tilelang_core.autotune.space import factory_args
from tilelang_core.autotune.spaces import PASS_CONFIGS, gemm_candidates
from tilelang_core.autotune.workers import compile_config, jitted
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import resolve
from tilelang_core.quickstart import matmul_relu, reference

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
import dequant_variants  # noqa: E402

from examples import flash_attention  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the sm_90a builds need it")
SM90A = {"kind": "cuda", "arch": "sm_90a"}
GEMM = dict(M=4096, N=4096, K=256)  # 1024 tiles of 128 x 128: more than 132 SMs, so persistent kernels
NEW_GEMM_KEYS = ("tl.cuda.cluster", "tl.cuda.gemm_pingpong", "tl.cuda.tma_store")


def _pcs(c: dict) -> dict:
    return c.get(PASS_CONFIGS, {})


def _without(c: dict, keys: tuple[str, ...]) -> dict:
    pcs = {k: v for k, v in _pcs(c).items() if k not in keys}
    out = {k: v for k, v in c.items() if k != PASS_CONFIGS}
    return {**out, PASS_CONFIGS: pcs} if pcs else out


def _lowered(prog: Any, pass_configs: dict | None) -> dict:
    seen: dict = {}
    cuda_codegen.lower(prog, record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a",
                       options=resolve(pass_configs))
    return seen


def _notes(seen: dict) -> list[str]:
    last = list(seen.values())[-1]
    return [str(n) for n in last.attrs["tl.notes"]] if "tl.notes" in last.attrs else []


def _gemm_lowered(cfg: dict, M: int = GEMM["M"], N: int = GEMM["N"], K: int = GEMM["K"]) -> dict:
    c = dict(cfg)
    pcs = c.pop(PASS_CONFIGS, None)
    return _lowered(matmul_relu.get_program(M, N, K, dtype="float16", **c), pcs)


# -- the spaces --------------------------------------------------------------------------------------------------

def test_without_options_the_spaces_are_unchanged():
    for level in ("quick", "full"):
        base = gemm_space("sm_90a", M=8192, N=8192, K=8192, level=level)
        assert gemm_space("sm_90a", M=8192, N=8192, K=8192, level=level, options=()) == base
        assert not any(k in _pcs(c) for c in base for k in NEW_GEMM_KEYS)
        assert not any("tl.cuda.attention_overlap" in _pcs(c)
                       for c in attention_space("sm_90a", seq_len=4096, dim=128, level=level))
    assert all(PASS_CONFIGS not in c for c in dequant_space("sm_90a", M=128, N=8192, K=28672))


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (4096, 4096, 4096), (16, 8192, 8192)])
def test_asked_the_gemm_space_adds_twins_of_kept_configs_with_one_new_key_each(shape):
    M, N, K = shape
    for level in ("quick", "full"):
        base = gemm_space("sm_90a", M=M, N=N, K=K, dtype="bfloat16", level=level)
        more = gemm_space("sm_90a", M=M, N=N, K=K, dtype="bfloat16", level=level, options="hopper")
        assert all(c in more for c in base)
        twins = [c for c in more if c not in base]
        assert twins
        for c in twins:
            assert sum(k in _pcs(c) for k in NEW_GEMM_KEYS) == 1, c
            assert _without(c, NEW_GEMM_KEYS) in base, c  # a twin of a kept configuration
            pcs = _pcs(c)
            ws = not pcs.get("tl.disable_warp_specialized", False)
            if "tl.cuda.gemm_pingpong" in pcs:
                assert c["threads"] == 128 and ws and pcs.get("tl.cuda.persistent", 0) != -1
                assert c["block_M"] * c["block_N"] // 128 + 40 <= 232  # setmaxnreg 232 for two groups
            if "tl.cuda.cluster" in pcs:
                assert ws and pcs.get("tl.cuda.split_k", 1) == 1  # a split-K grid only with split-K off
                assert tuple(pcs["tl.cuda.cluster"]) in ((2, 1), (1, 2), (2, 2))
        keys = {k for c in twins for k in _pcs(c) if k in NEW_GEMM_KEYS}
        assert keys == set(NEW_GEMM_KEYS) if M > 16 else keys >= {"tl.cuda.cluster", "tl.cuda.tma_store"}
        shapes = {tuple(_pcs(c)["tl.cuda.cluster"]) for c in twins if "tl.cuda.cluster" in _pcs(c)}
        assert shapes == ({(2, 1), (1, 2)} | (set() if level == "quick" else {(2, 2)})) if M > 16 else shapes
    one = gemm_space("sm_90a", M=M, N=N, K=K, options="cluster")
    assert {k for c in one for k in _pcs(c) if k in NEW_GEMM_KEYS} == {"tl.cuda.cluster"}


def test_bad_options_and_options_off_hopper_are_errors_naming_them():
    with pytest.raises(ValueError, match="options must be 'hopper' or names"):
        gemm_space("sm_90a", M=256, N=256, K=256, options="clusters")
    with pytest.raises(ValueError, match="sm_90a's"):
        gemm_space("cuda -arch=sm_80", M=256, N=256, K=256, options="hopper")
    with pytest.raises(ValueError, match="attention_space: options must be"):
        attention_space("sm_90a", seq_len=512, dim=64, options="cluster")
    with pytest.raises(ValueError, match="dequant_space: options must be"):
        dequant_space("sm_90a", M=16, N=256, K=256, options="tma_store")


# -- the GEMM twins against the compiler --------------------------------------------------------------------------

def _first(cands: list, key: str, value: Any = True, kept: bool = True, where: Any = None) -> dict:
    return next(c.config for c in cands if c.kept == kept and _pcs(c.config).get(key) == value
                and (where is None or where(c.config)))


def test_kept_gemm_twins_take_their_option_and_dropped_ones_are_refused_by_the_compiler():
    cands = gemm_candidates("sm_90a", **GEMM, level="quick", options="hopper")
    sq = lambda c: (c["block_M"], c["block_N"], c["threads"]) == (128, 128, 128)  # noqa: E731
    for shape in ((2, 1), (1, 2)):
        notes = _notes(_gemm_lowered(_first(cands, "tl.cuda.cluster", list(shape), where=sq)))
        assert any(n.startswith(f"cluster: {shape[0]}x{shape[1]} blocks") for n in notes), notes
    notes = _notes(_gemm_lowered(_first(cands, "tl.cuda.gemm_pingpong", where=sq)))
    assert any(n.startswith("gemm ping-pong: 2 consumer warpgroups") for n in notes), notes
    twin = _first(cands, "tl.cuda.tma_store", False, where=sq)  # on by default: the twin is the register epilogue
    seen = _gemm_lowered(twin)
    maps = json.loads(str(list(seen.values())[-1].attrs["tl.tma_maps"]))
    assert not any(m.get("store") for m in maps), maps
    base = {**twin, PASS_CONFIGS: {k: v for k, v in _pcs(twin).items() if k != "tl.cuda.tma_store"}}
    maps = json.loads(str(list(_gemm_lowered(base).values())[-1].attrs["tl.tma_maps"]))
    assert any(m["param"] == "C" and m.get("store") for m in maps), maps
    # the predicted refusals are the compiler's
    no_ws = _first(cands, "tl.cuda.cluster", [2, 1], kept=False,
                   where=lambda c: _pcs(c).get("tl.disable_warp_specialized"))
    assert any("tl.cuda.cluster (2, 1, 1) not applied: the loop is not warp-specialised" in n
               for n in _notes(_gemm_lowered(no_ws)))
    t256 = _first(cands, "tl.cuda.gemm_pingpong", kept=False, where=lambda c: c["threads"] == 256)
    assert any("tl.cuda.gemm_pingpong not applied" in n and "threads=256" in n for n in _notes(_gemm_lowered(t256)))
    full = gemm_candidates("sm_90a", **GEMM, level="full", options="hopper")  # quick: -1 for the widest tiles only
    one_tile = _first(full, "tl.cuda.gemm_pingpong", kept=False,
                      where=lambda c: c["threads"] == 128 and _pcs(c).get("tl.cuda.persistent") == -1)
    assert any("tl.cuda.gemm_pingpong not applied" in n and "not persistent" in n
               for n in _notes(_gemm_lowered(one_tile)))


def test_a_split_k_grid_gets_cluster_and_tma_store_twins_only_with_split_k_off():
    cands = gemm_candidates("sm_90a", M=16, N=2048, K=8192, level="quick", options="hopper")  # few tiles
    twins = [c for c in cands if {"tl.cuda.cluster", "tl.cuda.tma_store"} & set(_pcs(c.config))]
    assert any(c.kept for c in twins)
    for c in twins:
        split = _pcs(c.config).get("tl.cuda.split_k")
        if split in (0, 2, 4):
            assert not c.kept and "split-K" in c.reason, c
        elif c.kept:
            assert split in (None, 1), c
    def without_twin_key(c: dict) -> dict:  # the twin's base configuration: tl.cuda.tma_store at its default (on)
        return {**c, PASS_CONFIGS: {k: v for k, v in _pcs(c).items() if k != "tl.cuda.tma_store"}}

    split = _first(cands, "tl.cuda.tma_store", False, kept=False,
                   where=lambda c: _pcs(c).get("tl.cuda.split_k") == 2)
    notes = _notes(_gemm_lowered(without_twin_key(split), M=16, N=2048, K=8192))
    assert any("keeps register stores" in n for n in notes), notes  # the default already does: the twin is dropped
    off = _first(cands, "tl.cuda.tma_store", False, where=lambda c: _pcs(c).get("tl.cuda.split_k") == 1)
    seen = _gemm_lowered(without_twin_key(off), M=16, N=2048, K=8192)
    assert '"store": true' in str(list(seen.values())[-1].attrs["tl.tma_maps"]), _notes(seen)
    seen = _gemm_lowered(off, M=16, N=2048, K=8192)
    assert '"store": true' not in str(list(seen.values())[-1].attrs["tl.tma_maps"]), _notes(seen)


@needs_nvcc
def test_a_cluster_twin_and_a_pingpong_twin_build_for_sm90a_without_spills(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    cands = gemm_candidates("sm_90a", **GEMM, level="quick", options="hopper")
    sq = lambda c: (c["block_M"], c["block_N"], c["threads"]) == (128, 128, 128)  # noqa: E731
    jf = jitted(matmul_relu, [-1], SM90A)
    args = dict(GEMM, dtype="float16", accum_dtype="float32")
    for cfg, threads in ((_first(cands, "tl.cuda.cluster", [2, 1], where=sq), 128 + 128),
                         (_first(cands, "tl.cuda.gemm_pingpong", where=sq), 2 * 128 + 128)):
        kernel = compile_config(jf, {**args, **cfg})
        assert kernel.pass_configs.explicit() == resolve(_pcs(cfg)).explicit()
        res = kernel.resources()
        assert res.spill_stores == 0 and res.threads == threads, (cfg, res)


# -- attention and the dequantising GEMM ------------------------------------------------------------------------

def test_attention_overlap_twins_have_a_producer_warpgroup_and_take_the_overlap():
    base = attention_space("sm_90a", seq_len=512, dim=64, level="quick")
    twins = [c for c in attention_space("sm_90a", seq_len=512, dim=64, level="quick", options="hopper")
             if c not in base]
    assert twins and all(_pcs(c).get("tl.cuda.attention_overlap") for c in twins)
    cfg = dict(twins[0])
    pcs = cfg.pop(PASS_CONFIGS)
    seen = _lowered(flash_attention.flash_attention.get_program(1, 2, 512, 64, False, dtype="float16", **cfg), pcs)
    ws = seen["tl.WarpSpecializeCUDA"]
    assert int(ws.attrs["tl.cuda_launch"]["threads"]) == cfg["threads"] + 128  # the producer warpgroup
    assert "tl::keep_before_wait" in str(ws)  # the overlap's form of the loop
    assert not any("no attention overlap" in n for n in _notes(seen))
    dropped = [c for c in attention_candidates("sm_90a", seq_len=4096, dim=128, options="hopper")
               if "tl.cuda.attention_overlap" in _pcs(c.config) and not c.kept]
    assert dropped and all(c.config["threads"] == 128 and "spills" in c.reason for c in dropped)


@pytest.mark.parametrize("M", [16, 128])
def test_the_dequant_space_twins_take_their_options_and_the_dropped_ones_would_not(M):
    # block_K 256, high nibble first: a spelling the W4A16 recogniser does not take, so the defaults are the
    # fragments (decode) and wgmma on the written tile (prefill)
    v = next(x for x in dequant_variants.VARIANTS if x.name == "hi_first")
    N, K = 1024, 1024

    def text(cfg: dict) -> tuple[str, list[str], int]:
        c = dict(cfg)
        pcs = c.pop(PASS_CONFIGS, None)
        seen = _lowered(dequant_variants.program(v, M, N, K, **c), pcs)
        launch = next(f.attrs["tl.cuda_launch"] for f in reversed(list(seen.values())) if "tl.cuda_launch" in f.attrs)
        return str(list(seen.values())[-1]), _notes(seen), int(launch["threads"])

    cands = dequant_candidates("sm_90a", M=M, N=N, K=K, options="hopper")
    for c in cands:
        src, notes, threads = text(c.config)
        pcs = _pcs(c.config)
        if not pcs:  # the defaults
            assert ("tl::gemm_rb_step<" in src) == (M <= 16) and ("tl::wgmma_gemm" in src) == (M > 16), (c, notes)
        if pcs.get("tl.cuda.dequant_fragments") is False:  # the twin keeps the shared tile; where dropped, so would
            assert "tl::gemm_rb_step<" not in src, (c, notes)  # the default have
        if pcs.get("tl.cuda.wgmma_written_tiles") is False:
            assert "tl::wgmma_gemm" not in src, (c, notes)
        if pcs.get("tl.cuda.tma_plain_tiles"):
            assert ("tl::wgmma_gemm" in src) == c.kept or "warp specialisation" in c.reason, (c, notes)
        if "tl::wgmma_gemm" in src:  # the packed tile is a TMA box exactly when the key asks for it
            assert ("tma_load" in src) == bool(pcs.get("tl.cuda.tma_plain_tiles")), (c, notes)
        if "warp specialisation" in c.reason:  # the compiler does not specialise this loop anyway
            assert threads == c.config["threads"] and "ws_keep_occupancy" in " ".join(text(
                _without(c.config, ("tl.disable_warp_specialized",)))[1])
        if pcs.get("tl.cuda.factor_scale"):  # hi_first's per-channel scale leaves the loop with the fragments
            assert c.kept == (M <= 16) and any("applied once to the float32 sums" in n for n in notes) == c.kept, \
                (c, notes)
        if pcs.get("tl.cuda.wgmma_double_buffer") and c.kept:  # the decoded tile twice, the group in flight
            assert "tl::wgmma_drain<" in src, (c, notes)
        if pcs.get("tl.cuda.dequant_fragment_tables") is False:  # hi_first pairs by word operations: same code
            assert "nib_lut4" not in src and src == text(_without(c.config, ("tl.cuda.dequant_fragment_tables",)))[0]
    kinds = {tuple(sorted(_pcs(c.config))) for c in cands if c.kept}
    assert kinds == ({(), ("tl.cuda.dequant_fragments",), ("tl.cuda.dequant_fragment_tables",),
                      ("tl.cuda.factor_scale",)} if M <= 16 else
                     {(), ("tl.cuda.wgmma_written_tiles",), ("tl.cuda.tma_plain_tiles",),
                      ("tl.cuda.tma_plain_tiles", "tl.disable_warp_specialized"), ("tl.cuda.wgmma_double_buffer",)})


# -- records: a twin's pass_configs are its identity ----------------------------------------------------------------

def test_a_twins_pass_configs_are_kept_through_tune_into_the_database_and_best(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    db = TuningDB(tmp_path / "t.sqlite3")
    base = dict(block_M=16, block_N=16, block_K=16, num_stages=1)
    twins = [{"tl.cuda.cluster": [2, 1]}, {"tl.cuda.gemm_pingpong": True}, {"tl.cuda.tma_store": True}]
    configs = [base] + [{**base, PASS_CONFIGS: t} for t in twins]  # CUDA keys: nothing changes on the CPU
    r = tune(matmul_relu, configs, args=dict(M=32, N=32, K=32), ref=reference, target="cpu", workers=0, db=db,
             progress=False)
    assert [m.config.get(PASS_CONFIGS) for m in r.measurements] == [None, *twins]
    stored = db.query(matmul_relu, {"M": 32, "N": 32, "K": 32}, "cpu")
    assert sorted(json.dumps(m.config.get(PASS_CONFIGS), sort_keys=True) for m in stored) == \
        sorted(json.dumps(t, sort_keys=True) for t in [None, *twins])
    # best() ranks a configuration and its twins apart, and returns the winner's pass_configs
    fast = min(m.latency_ms for m in stored) / 100
    for i in range(2):  # two more runs of one twin, so its median is the fastest
        db.record(dataclasses_replace(stored[2], latency_ms=fast, uid=f"rerun-{i}"))
    best = db.best(matmul_relu, {"M": 32, "N": 32, "K": 32}, "cpu")
    assert best is not None and best.config[PASS_CONFIGS] == stored[2].config[PASS_CONFIGS]
    assert best.ranked_runs == 3 and best.ranked_ms == fast  # its own three measurements, not its twins'


def dataclasses_replace(m: Measurement, **kw: Any) -> Measurement:
    import dataclasses

    return dataclasses.replace(m, **kw)


@needs_nvcc
def test_a_shipped_default_with_a_twins_pass_configs_is_compiled_with_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    prob = {"M": 256, "N": 256, "K": 256, "dtype": "float16", "accum_dtype": "float32"}
    tuned = {"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 3, "threads": 128,
             PASS_CONFIGS: {"tl.cuda.cluster": [2, 1], "tl.cuda.split_k": 1}}
    m = Measurement(kernel="matmul_relu", module="tilelang_core.quickstart",
                    source_hash=kernel_identity(matmul_relu)[2], config=factory_args(matmul_relu, {**prob, **tuned}),
                    target="cuda", device="NVIDIA H200", shapes=[[256, 256]] * 3, dtypes=["float16"] * 3,
                    latency_ms=0.01, passed=True)
    path = write_defaults(tmp_path / "defaults.json", [(m, "sm_90a", prob)])
    kernel = compile_default(matmul_relu, prob, SM90A, device="NVIDIA H200", db=False, shipped=path)
    assert kernel.tuning_default.source == "shipped"
    assert kernel.pass_configs.explicit() == {"tl.cuda.cluster": (2, 1, 1), "tl.cuda.split_k": 1}
    assert any(n.startswith("cluster: 2x1 blocks") for n in kernel.notes), kernel.notes
    assert "__cluster_dims__(2, 1, 1)" in kernel.get_kernel_source()


# -- the GPU session's sweep --------------------------------------------------------------------------------------

def test_the_defaults_sweeps_options_flag_puts_the_twins_in_its_space(tmp_path, monkeypatch):
    import importlib.util

    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    path = ROOT / "bench" / "gpu" / "h200_defaults_sweep.py"
    spec = importlib.util.spec_from_file_location("h200_defaults_sweep", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    prob = {"M": 4096, "N": 4096, "K": 256, "dtype": "float16", "accum_dtype": "float32"}
    assert sweep.space_for(prob, "quick", ["hopper"]) == gemm_space("cuda", **GEMM, level="quick", options="hopper")
    assert sweep.space_for(prob, "quick", []) == gemm_space("cuda", **GEMM, level="quick")
    log = tmp_path / "dry.log"
    assert sweep.main(["--dry-run", "--dry-configs", "0", "--shapes", "4096x4096x256", "--dtypes", "float16",
                       "--options", "hopper", "--log", str(log)]) == 0
    kept = len(gemm_space("cuda", **GEMM, level="quick", options="hopper"))
    assert f"4096x4096x256 float16: {kept} configs" in log.read_text() and "cluster" in log.read_text()
    assert sweep.label({"block_M": 128, "block_N": 128, "block_K": 64, "num_stages": 4, "threads": 128,
                        PASS_CONFIGS: {"tl.cuda.cluster": [2, 1]}}) == "128x128x64 s4 t128 [cluster 2x1]"


def test_the_dequant_benchs_space_flag_runs_every_config_of_the_dequant_space():
    for v in (dequant_variants.VARIANTS[0], next(v for v in dequant_variants.VARIANTS if v.fmt == "int8")):
        for M, N, K in ((16, 8192, 8192), (128, 8192, 28672)):
            runs = dequant_variants.space_runs(v, M, N, K, {"tl.cuda.split_k": 1})
            space = dequant_space("cuda", M=M, N=N, K=K, block_K=v.block_k, weight_bits=8 if v.fmt == "int8" else 4,
                                  options="hopper")
            assert [{**t, **({PASS_CONFIGS: {k: x for k, x in p.items() if k != "tl.cuda.split_k"}}
                             if len(p) > 1 else {})} for _tag, p, t in runs] == space
            assert all(p["tl.cuda.split_k"] == 1 for _tag, p, _t in runs)  # the command line's keys stay
            assert len({tag for tag, _p, _t in runs}) == len(runs)


def test_the_attention_benchs_space_flag_runs_every_config_of_the_attention_space():
    import attention_fwd

    for (_b, _h, S, D, _causal) in attention_fwd.SHAPES:
        runs = attention_fwd.space_runs(S, D, "float16")
        space = attention_space("cuda", seq_len=S, dim=D, options="hopper")
        assert [(dict(zip(("block_M", "block_N", "num_stages", "threads"), c)), p) for c, (_s, p) in runs] == \
            [({k: v for k, v in c.items() if k != PASS_CONFIGS}, c.get(PASS_CONFIGS)) for c in space]
        assert any("overlap" in s for _c, (s, _p) in runs)


def test_the_dequant_decode_space_has_a_long_k_tile_and_drops_tiles_that_do_not_fit_with_the_reason():
    configs = dequant_space("sm_90a", M=16, N=8192, K=8192, block_K=256)
    assert {"block_M": 16, "block_N": 64, "block_K": 512, "num_stages": 3, "threads": 128} in configs
    bk64 = dequant_space("sm_90a", M=16, N=8192, K=8192, block_K=64)  # a multiple of the program's K step
    assert {(c["block_N"], c["block_K"]) for c in bk64} == {(128, 64), (64, 512)}
    int8 = {(c.config["num_stages"], PASS_CONFIGS in c.config): c for c in
            dequant_candidates("sm_90a", M=16, N=8192, K=8192, block_K=256, weight_bits=8, options="dequant_fragments")
            if c.config["block_N"] == 64}
    assert int8[(3, False)].kept and int8[(4, False)].kept and int8[(3, True)].kept  # 144, 192 and 208 KB
    assert not int8[(4, True)].kept and int8[(4, True)].reason == (  # 4 stages and the decoded tile: 256 KB
        "tile 16x64x512 s4 with the decoded B tile (dequant_fragments False): its loop needs 256 KB of shared "
        "memory, more than a block's 227 KB on sm_90a")
    short = dequant_candidates("sm_90a", M=16, N=8192, K=768, block_K=256)  # 768 is no multiple of 512
    assert [c.reason for c in short if c.config["block_K"] == 512] == [
        "tile 16x64x512 s3: block_K 512 does not divide K = 768", "tile 16x64x512 s4: block_K 512 does not divide "
        "K = 768"]
    # the shared-tile twin holds the decoded tile too: on sm_80 it does not fit where the fragments' tile does
    sm80 = [c for c in dequant_candidates("sm_80", M=16, N=8192, K=8192, block_K=256, weight_bits=8,
                                          options="dequant_fragments") if c.config["num_stages"] == 3]
    assert all(c.kept for c in sm80 if PASS_CONFIGS not in c.config)
    assert not any(c.kept for c in sm80 if PASS_CONFIGS in c.config)

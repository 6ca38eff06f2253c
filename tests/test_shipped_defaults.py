"""Shipped tuning defaults (``tilelang_core/autotune/defaults.py``): which row answers a problem (exact sizes, else
the nearest of its shape class), the user's tuning database winning over the shipped file, targets and devices
that must get nothing, malformed files, and the decorator compiling with a shipped default (a real CPU build).
Rows are written by the tests themselves into temporary files with :func:`write_defaults`, as the GPU sweep does."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import tilelang_core
from tilelang_core.autotune import Measurement, ShippedDefaultsError, TuningDB, compile_default, default_config
from tilelang_core.autotune.defaults import DATA_FILE, load_defaults, shape_class, write_defaults
from tilelang_core.autotune.record import kernel_identity
from tilelang_core.autotune.space import factory_args
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available
from tilelang_core.machine import device_name
from tilelang_core.quickstart import matmul_relu, reference

needs_cuda_compiler = pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(),
                                         reason="no nvcc or NVRTC: CUDA kernels cannot be compiled here")
H200 = "NVIDIA H200"
SQUARE = {"block_M": 128, "block_N": 256, "block_K": 64, "num_stages": 4, "threads": 256}
BIG = {**SQUARE, "pass_configs": {"tl.cuda.persistent": -1}}
SKINNY = {**SQUARE, "block_N": 128, "pass_configs": {"tl.cuda.split_k": 2}}
DECODE = {"block_M": 64, "block_N": 128, "block_K": 128, "num_stages": 4, "threads": 128}


def problem(M: int, N: int, K: int, dtype: str = "float16") -> dict:
    return {"M": M, "N": N, "K": K, "dtype": dtype, "accum_dtype": "float32"}


def row(prob: dict, tuned: dict, *, device: str = H200, target: str = "cuda", arch: str = "sm_90a",
        source_hash: str | None = None, ms: float = 1.0) -> tuple[Measurement, str, dict]:
    m = Measurement(kernel="matmul_relu", module="tilelang_core.quickstart",
                    source_hash=source_hash or kernel_identity(matmul_relu)[2],
                    config=factory_args(matmul_relu, {**prob, **tuned}), target=target, device=device,
                    shapes=[[prob["M"], prob["K"]], [prob["K"], prob["N"]], [prob["M"], prob["N"]]],
                    dtypes=[prob["dtype"]] * 3, latency_ms=ms, ref_ms=ms * 1.01, passed=True,
                    resources={"registers": 168, "spill_stores": 0})
    return m, arch, prob


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return write_defaults(tmp_path / "defaults.json", [
        row(problem(4096, 4096, 4096), SQUARE), row(problem(8192, 8192, 8192), BIG),
        row(problem(128, 8192, 28672), SKINNY), row(problem(16, 8192, 8192), DECODE),
    ], generated={"commit": "test"})


def lookup(prob: dict, shipped: Path, **kw):
    kw.setdefault("target", "cuda")
    kw.setdefault("device", H200)
    kw.setdefault("db", False)
    return default_config(matmul_relu, prob, kw.pop("target"), shipped=shipped, **kw)


def test_the_exact_problem_gets_its_own_row(shipped):
    d = lookup(problem(8192, 8192, 8192), shipped)
    assert (d.source, d.match) == ("shipped", "exact")
    assert d.config == BIG  # the tuned arguments and pass_configs only, not the problem
    assert d.measurement.resources["registers"] == 168


@pytest.mark.parametrize("prob, expect, cls", [
    (problem(8, 4096, 4096), DECODE, "decode"),
    (problem(200, 4096, 14336), SKINNY, "skinny"),
    (problem(6000, 6000, 6000), BIG, "square"),  # nearer 8192^3 than 4096^3 in log2 distance
    (problem(3000, 4096, 2048), SQUARE, "square"),
])
def test_other_sizes_get_the_nearest_row_of_their_shape_class(shipped, prob, expect, cls):
    assert shape_class(prob) == cls
    d = lookup(prob, shipped)
    assert (d.source, d.match, d.config) == ("shipped", "bucket", expect)


def test_another_dtype_device_arch_or_program_version_gets_nothing(shipped, tmp_path):
    assert lookup(problem(4096, 4096, 4096, "bfloat16"), shipped) is None
    assert lookup(problem(4096, 4096, 4096), shipped, device="NVIDIA A100-SXM4-80GB") is None
    assert lookup(problem(4096, 4096, 4096), shipped, target="cuda -arch=sm_80") is None
    edited = write_defaults(tmp_path / "old.json", [row(problem(4096, 4096, 4096), SQUARE, source_hash="0" * 16)])
    assert lookup(problem(4096, 4096, 4096), edited) is None


def test_a_cpu_target_never_gets_gpu_defaults(shipped):
    for device in (H200, device_name("cpu")):
        assert lookup(problem(4096, 4096, 4096), shipped, target="cpu", device=device) is None


def test_the_users_database_wins_over_the_shipped_row(shipped, tmp_path):
    db = TuningDB(tmp_path / "mine.sqlite3")
    mine = {**SQUARE, "block_N": 128, "num_stages": 5}
    m, _, _ = row(problem(4096, 4096, 4096), mine, ms=0.9)
    db.record(m)
    d = lookup(problem(4096, 4096, 4096), shipped, db=db)
    assert (d.source, d.config) == ("db", mine)
    assert lookup(problem(8192, 8192, 8192), shipped, db=db).source == "shipped"  # nothing of mine there
    assert lookup(problem(4096, 4096, 4096), shipped, db=False).config == SQUARE


def _rewrite(path: Path, change) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, named", [
    (lambda d: d.update(format="something else"), "header"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d["rows"][0].pop("config"), "row 0: the field 'config' is missing"),
    (lambda d: d["rows"][1].update(latency_ms="fast"), "row 1, field 'latency_ms'"),
    (lambda d: d["rows"][2].update(status="check_failed"), "row 2: a default must be a measurement that passed"),
    (lambda d: d["rows"][0].update(colour="red"), "unknown field"),
    (lambda d: d["rows"][0]["problem"].update(M=1), "row 0, field 'problem'"),
    (lambda d: d["rows"][3].update(target="tpu"), "field 'target'"),
])
def test_a_malformed_file_is_an_error_naming_the_file_row_and_field(shipped, change, named):
    bad = _rewrite(shipped, change)
    with pytest.raises(ShippedDefaultsError, match=named) as e:
        lookup(problem(4096, 4096, 4096), bad)
    assert str(bad) in str(e.value)


def test_a_file_that_is_not_json_is_named(tmp_path):
    bad = tmp_path / "defaults.json"
    bad.write_text('{"rows": [')
    with pytest.raises(ShippedDefaultsError, match="not JSON"):
        load_defaults(bad)


def test_the_packaged_file_reads_and_ships_with_the_package():
    rows = load_defaults()
    assert all(r.measurement.status == "ok" and r.measurement.target == "cuda" for r in rows)
    assert DATA_FILE.is_file() and DATA_FILE.parent.name == "data"
    project = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    package_data = project.split("[tool.setuptools.package-data]", 1)[1].split("[", 2)[1]
    assert '"autotune/data/*.json"' in package_data  # the wheel carries the file


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 28672), (16, 8192, 8192)])
def test_the_packaged_h200_rows_answer_the_quickstart_at_issue_15s_shapes(M, N, K, dtype):
    # The packaged file is the H200 sweep's output: it must still match the quickstart program as it is now (its
    # source hash), or every call would silently fall back to no default.
    d = default_config(matmul_relu, problem(M, N, K, dtype), {"kind": "cuda", "arch": "sm_90a"}, device=H200,
                       db=False)
    assert d is not None and (d.source, d.match) == ("shipped", "exact")
    assert d.measurement.passed and d.measurement.stage == "clean_l2" and d.measurement.ref_ms > 0
    assert {"block_M", "block_N", "block_K", "num_stages", "threads"} <= set(d.config)


def test_the_decorator_from_db_compiles_with_a_shipped_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    tuned = {"block_M": 32, "block_N": 16, "block_K": 16, "num_stages": 1, "threads": 64}
    prob = problem(96, 48, 64, "float32")
    path = write_defaults(tmp_path / "cpu.json", [row(prob, tuned, device=device_name("cpu"), target="cpu",
                                                      arch="")])
    f = tilelang_core.autotune(configs={"block_M": [16, 64]}, ref=reference, from_db=True, progress=False,
                               db=tmp_path / "empty.sqlite3", defaults=path, target="cpu")(matmul_relu)
    kernel = f(M=96, N=48, K=64, dtype="float32")
    assert f.result is None  # no sweep ran
    assert kernel.tuning_default.source == "shipped"
    assert {k: kernel.config[k] for k in tuned} == tuned
    a, b = torch.randn(96, 64), torch.randn(64, 48)
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-4, atol=1e-4)


def test_compile_default_without_a_default_names_the_missing_arguments(tmp_path):
    empty = write_defaults(tmp_path / "none.json", [])
    with pytest.raises(TypeError, match="block_M, block_N, block_K"):
        compile_default(matmul_relu, dict(M=64, N=64, K=64), target="cpu", db=False, shipped=empty)


def _sweep_script():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "bench" / "gpu" / "h200_defaults_sweep.py"
    spec = importlib.util.spec_from_file_location("h200_defaults_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_sweep_script_emits_the_fastest_clean_l2_config_of_its_database(tmp_path):
    sweep = _sweep_script()
    db = TuningDB(tmp_path / "sweep.sqlite3")
    square, decode = problem(4096, 4096, 4096), problem(16, 8192, 8192)
    fast_warm, fast_clean = SQUARE, {**SQUARE, "num_stages": 3}
    for tuned, ms, stage in [(fast_warm, 0.80, ""), (fast_clean, 0.85, ""), (fast_warm, 1.10, sweep.CLEAN_L2),
                             (fast_clean, 1.00, sweep.CLEAN_L2), (fast_clean, 1.02, sweep.CLEAN_L2)]:
        m, _, _ = row(square, tuned, ms=ms)
        db.record(dataclasses.replace(m, stage=stage))
    for tuned, ms in [(DECODE, 0.05), ({**DECODE, "block_N": 64}, 0.07)]:  # no clean re-timing: the DB's best
        db.record(row(decode, tuned, ms=ms)[0])
    out = sweep.emit(db, [square, decode, problem(8192, 8192, 8192)], tmp_path / "defaults.json", "sm_90a",
                     {"commit": "test"})
    rows = load_defaults(out)
    assert len(rows) == 2  # nothing was measured at 8192^3
    assert lookup(square, out).config == fast_clean
    assert lookup(square, out).measurement.latency_ms == pytest.approx(1.01)  # the clean-L2 median
    assert lookup(decode, out).config == DECODE
    assert json.loads(out.read_text())["generated"]["commit"] == "test"


@needs_cuda_compiler
def test_the_sweep_scripts_dry_run_prints_the_space_and_compiles_a_config(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    log = tmp_path / "dry.log"
    code = _sweep_script().main(["--dry-run", "--dry-configs", "1", "--shapes", "256x512x1024", "--dtypes",
                                 "bfloat16", "--log", str(log)])
    text = log.read_text()
    assert code == 0, text
    assert "256x512x1024 bfloat16: " in text and "space: " in text
    assert "compiled for sm_90a" in text and "spills 0/0" in text


def test_a_jit_call_without_its_tuning_arguments_gets_the_users_best(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILELANG_CORE_TUNING_DB", str(tmp_path / "mine.sqlite3"))
    tuned = {"block_M": 16, "block_N": 32, "block_K": 16, "num_stages": 1, "threads": 64}
    prob = problem(64, 96, 32, "float32")
    TuningDB().record(row(prob, tuned, device=device_name("cpu"), target="cpu", arch="")[0])
    jf = tilelang_core.jit(out_idx=[-1], target="cpu")(matmul_relu.factory)
    kernel = jf(64, 96, 32, dtype="float32")  # block_M, block_N, block_K left out
    assert kernel.tuning_default.source == "db"
    assert {k: kernel.config[k] for k in tuned} == tuned
    a, b = torch.randn(64, 32), torch.randn(32, 96)
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="matmul_relu: missing a required argument: 'K'"):
        jf(64, 96)  # a problem argument is missing: not a tuning default's business
    with pytest.raises(TypeError, match="missing a required argument: 'block_M'"):
        jf(128, 96, 32, dtype="float32")  # no CPU row ships and none of mine is for this problem


def test_bad_arguments_to_the_lookup_are_named(shipped):
    with pytest.raises(TypeError, match="args must be a dict"):
        default_config(matmul_relu, [4096, 4096, 4096], "cuda", shipped=shipped, db=False)
    with pytest.raises(ValueError, match="'m' is not an argument of matmul_relu"):
        default_config(matmul_relu, {"m": 4096, "N": 4096, "K": 4096}, "cuda", shipped=shipped, db=False)


def test_the_sweep_re_times_its_finalists_then_the_tuners_fastest_others():
    from tilelang_core.autotune.tuner import TuneResult

    sweep = _sweep_script()
    square = problem(4096, 4096, 4096)
    ms = {1: 0.90, 2: 0.80, 3: 0.85, 4: 0.95, 5: 0.70}  # num_stages -> warm-L2 time
    rows = {st: row(square, {**SQUARE, "num_stages": st}, ms=t)[0] for st, t in ms.items()}
    result = TuneResult("matmul_relu", square, measurements=list(rows.values()), finals=[rows[4], rows[1]])
    got = [m.config["num_stages"] for m in sweep.clean_candidates(result, 4)]
    assert got == [1, 4, 5, 2]  # the finalists by their time, then the fastest others, no repeats
    assert [m.config["num_stages"] for m in sweep.clean_candidates(result, 1)] == [1]


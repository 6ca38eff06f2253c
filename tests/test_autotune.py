"""tilelang_core.autotune: search spaces, the sweep (in-process and in worker processes), the decorator, and the
tuning database (including two processes writing at once)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilelang_core
import tilelang_core.language as T
from tilelang_core.autotune import TuningDB, best, default_space, grid, parse_space, tune
from tilelang_core.autotune.record import Measurement, kernel_identity
from tilelang_core.autotune.space import as_configs

ROOT = Path(__file__).resolve().parent.parent


def scale_rows(M, N, block_M=16, threads=128):
    """Y = 2 * X, one tile of rows per block; ``block_M=3`` is refused (the sweep must skip it with the reason)."""
    if block_M == 3:
        raise ValueError("block_M=3: a tile that does not fit")

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            for i, j in T.Parallel(block_M, N):
                if bx * block_M + i < M:
                    Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 2.0

    return main


def wrong_for_big_tiles(M, N, block_M=16):
    """Correct for block_M <= 16, wrong (adds 1) beyond: the sweep must mark those configs check_failed."""
    extra = 1.0 if block_M > 16 else 0.0

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                if bx * block_M + i < M:
                    Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 2.0 + extra

    return main


def double(x):
    return 2 * x


# -- search spaces ----------------------------------------------------------------------------------------------
def gemm_factory(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128, dtype="float32"):
    return None


def test_default_space_bounds_tiles_by_shapes():
    space = default_space(gemm_factory, {"M": 64, "N": 512, "K": 128})
    assert space["block_M"] == [16, 32, 64]  # bounded by M
    assert space["block_N"] == [16, 32, 64, 128, 256]  # capped at 256
    assert space["block_K"] == [16, 32, 64, 128]
    assert space["num_stages"] == [1, 2, 3, 4, 5]
    assert space["threads"] == [32, 64, 128, 256, 512]
    assert "dtype" not in space and "M" not in space


def test_default_space_keeps_a_current_value_outside_the_rule():
    space = default_space(gemm_factory, {"M": 512, "N": 512, "K": 512, "block_M": 96, "num_stages": 0})
    assert 96 in space["block_M"] and 0 in space["num_stages"]


def test_parse_space_and_grid():
    space = parse_space("block_M=32,64,128 num_stages=1:4 threads=64:256:64")
    assert space == {"block_M": [32, 64, 128], "num_stages": [1, 2, 3, 4], "threads": [64, 128, 192, 256]}
    assert len(grid(space)) == 3 * 4 * 4
    assert grid(a=[1, 2], b=[3]) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    assert as_configs("a=1,2") == [{"a": 1}, {"a": 2}]
    assert as_configs({"a": [1, 2], "b": 5}) == [{"a": 1, "b": 5}, {"a": 2, "b": 5}]
    assert as_configs([{"a": 1}]) == [{"a": 1}]
    for bad in ("block_M", "block_M=4:1", "x=1 x=2", "a=1:b"):
        with pytest.raises(ValueError):
            parse_space(bad)


# -- the sweep --------------------------------------------------------------------------------------------------
def test_tune_in_process_skips_failures_with_reason_and_records_everything(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    seen = []
    result = tune(scale_rows, {"block_M": [8, 3, 32]}, args={"M": 100, "N": 64}, ref=double, workers=0, db=db,
                  progress=False, on_result=seen.append)
    assert result.compiled_in == "process"
    assert [m.config["block_M"] for m in result.measurements] == [8, 3, 32]
    failed = result.measurements[1]
    assert failed.status == "compile_error" and "does not fit" in failed.message
    ok = [m for m in result.measurements if m.ok]
    assert len(ok) == 2 and all(m.passed and m.latency_ms > 0 and m.runs >= 10 for m in ok)
    assert all(m.shapes == [[100, 64], [100, 64]] and m.dtypes == ["float32", "float32"] for m in ok)
    assert result.best in ok and result.best_config["block_M"] in (8, 32)
    assert result.reference_ms is not None and ok[0].ref_ms == result.reference_ms
    assert seen == result.measurements
    rows = db.query("scale_rows")
    assert len(rows) == 3 and {r.status for r in rows} == {"ok", "compile_error"}
    assert rows[0].versions["tilelang_core"] == tilelang_core.__version__ and rows[0].device
    k = result.best_kernel
    x = torch.randn(100, 64)
    torch.testing.assert_close(k(x), 2 * x)
    assert "does not fit" in result.table()


def test_tune_marks_wrong_configs_and_best_ignores_them(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    result = tune(wrong_for_big_tiles, {"block_M": [8, 32]}, args={"M": 64, "N": 32}, ref=double, workers=0,
                  db=db, progress=False)
    good, bad = result.measurements
    assert good.status == "ok" and good.passed and good.max_rel < 1e-6
    assert bad.status == "check_failed" and bad.passed is False and bad.max_abs == pytest.approx(1.0)
    assert bad.latency_ms is not None  # timed anyway: the plots show it, in red
    assert result.best is good
    assert db.best("wrong_for_big_tiles").config["block_M"] == 8


def test_tune_compiles_in_worker_processes(tmp_path):
    """A module-level factory is compiled by spawned workers; the sweep's process then loads every kernel from the
    disk cache instead of compiling it."""
    before = tilelang_core.cache_stats()["compiles"]
    result = tune(scale_rows, {"block_M": [4, 3, 64]}, args={"M": 64, "N": 32}, ref=double, workers=2,
                  db=tmp_path / "t.sqlite3", progress=False)
    assert result.compiled_in == "workers"
    assert tilelang_core.cache_stats()["compiles"] == before  # nothing compiled here
    statuses = [m.status for m in result.measurements]
    assert statuses == ["ok", "compile_error", "ok"]
    assert "does not fit" in result.measurements[1].message


def test_cell_and_closure_factories_are_not_sent_to_workers():
    from tilelang_core.autotune.workers import factory_ref

    def local(M):
        return None

    ns: dict = {}
    exec(compile("def cell(M):\n    return None\n", "<tilekernel-cell-abc>", "exec"), ns)
    assert factory_ref(local) is None and factory_ref(ns["cell"]) is None
    ref = factory_ref(scale_rows)
    assert ref is not None and ref.qualname == "scale_rows"


def test_progress_bar_in_a_terminal(tmp_path, capsys):
    tune(scale_rows, [{"block_M": 16}], args={"M": 32, "N": 32}, workers=0, db=False, progress=True)
    err = capsys.readouterr().err
    assert "scale_rows" in err and "1/1" in err


def test_decorator_tunes_once_per_shape_and_reuses_the_database(tmp_path):
    db = tmp_path / "t.sqlite3"

    @tilelang_core.autotune(configs={"block_M": [8, 32]}, ref=double, workers=0, db=db, progress=False)
    @tilelang_core.jit(out_idx=[-1])
    def doubler(M, N, block_M=16):
        return scale_rows(M, N, block_M)

    k = doubler(64, 32)
    assert doubler.result is not None and len(doubler.result.measurements) == 2
    assert k.config["block_M"] == doubler.result.best_config["block_M"]
    assert doubler(64, 32) is k and len(doubler.results) == 1  # tuned once per argument set
    explicit = doubler(64, 32, block_M=4)  # a tuned argument given explicitly: no sweep
    assert explicit.config["block_M"] == 4 and len(doubler.results) == 1
    assert len(TuningDB(db).query("doubler", device=None)) == 2


def test_from_db_uses_the_best_known_config_without_sweeping(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    tune(scale_rows, {"block_M": [8, 32]}, args={"M": 64, "N": 32}, ref=double, workers=0, db=db, progress=False)
    winner = db.best(scale_rows, {"M": 64, "N": 32}, "cpu").config["block_M"]
    tuner = tilelang_core.autotune(scale_rows, configs={"block_M": [8, 32]}, workers=0, db=db, progress=False,
                                   from_db=True)
    k = tuner(64, 32)
    assert tuner.results == {} and k.config["block_M"] == winner


def test_tilelang_core_autotune_is_a_callable_package():
    import tilelang_core.autotune as at

    assert at is tilelang_core.autotune and callable(at)
    tuner = at(scale_rows, configs=[{"block_M": 8}])
    assert isinstance(tuner, at.AutoTuner)  # TileLang's options accepted too (tilelang_core.autotuner)
    with pytest.raises(TypeError, match="configs"):
        at(scale_rows)


# -- the database -----------------------------------------------------------------------------------------------
def _m(kernel="k", latency=1.0, status="ok", passed=True, **config):
    return Measurement(kernel=kernel, config={"M": 64, **config}, status=status, latency_ms=latency, passed=passed,
                       shapes=[[64, 64]], dtypes=["float32"], target="cpu", device="dev A")


def test_database_best_query_and_filters(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    for lat in (3.0, 1.0, 2.0):  # config a: median 2.0
        db.record(_m(latency=lat, block="a"))
    db.record(_m(latency=1.5, block="b"))
    db.record(_m(latency=0.1, block="c", status="check_failed", passed=False))  # never best
    db.record(_m(latency=0.1, block="d", status="compile_error"))
    db.record(_m(kernel="other", latency=0.01, block="z"))
    db.record(Measurement(kernel="k", config={"M": 128, "block": "e"}, latency_ms=0.5, shapes=[[128, 128]],
                          target="cpu", device="dev A"))
    assert len(db) == 8 and db.kernels() == ["k", "other"]
    b = db.best("k", device="dev A")
    assert b.config["block"] == "e"  # any shapes
    assert db.best("k", [[64, 64]], "cpu", device="dev A").config["block"] == "b"  # a's median 2.0 > b's 1.5
    assert db.best("k", {"M": 64}, "cpu", device="dev A").config["block"] == "b"
    assert db.best("k", {"M": 64}, "cuda", device="dev A") is None
    assert db.best("k", device="dev B") is None
    assert db.best("k") is None  # "this" device is not "dev A"
    assert len(db.query("k", device=None, status="ok")) == 5
    assert best("k", device=None, db=db).config["block"] == "e"


def test_database_kernel_by_factory_matches_its_source(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    name, module, digest = kernel_identity(scale_rows)
    assert name == "scale_rows" and module == __name__
    db.record(Measurement(kernel=name, config={"block_M": 8}, source_hash=digest, latency_ms=1.0, device="d"))
    db.record(Measurement(kernel=name, config={"block_M": 16}, source_hash="edited", latency_ms=0.5, device="d"))
    assert db.best(scale_rows, device=None).config["block_M"] == 8  # the factory as it is now
    assert db.best("scale_rows", device=None).config["block_M"] == 16  # by name: any version


def test_database_location_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_TUNING_DB", str(tmp_path / "x" / "db.sqlite3"))
    assert TuningDB().path == tmp_path / "x" / "db.sqlite3"
    monkeypatch.delenv("TILELANG_CORE_TUNING_DB")
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path / "cache"))
    assert TuningDB().path == tmp_path / "cache" / "tuning.sqlite3"
    TuningDB().record(_m())
    import sqlite3

    conn = sqlite3.connect(tmp_path / "cache" / "tuning.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tilelang_core.autotune import TuningDB
    from tilelang_core.autotune.record import Measurement
    db = TuningDB(sys.argv[1])
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.01)
    for i in range(int(sys.argv[3])):
        db.record(Measurement(kernel=sys.argv[4], config={"i": i}, latency_ms=1.0 + i, device="d"))
        if i % 10 == 0:
            db.best(sys.argv[4], device=None)  # readers interleave with writers
    print("done")
""")


def test_two_processes_write_the_database_at_once(tmp_path):
    path, go, n = tmp_path / "shared.sqlite3", tmp_path / "go", 150
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(go), str(n), name],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for name in ("writer_a", "writer_b")]
    import time

    time.sleep(1.0)  # both are waiting for the signal
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "done" in out
    db = TuningDB(path)
    assert len(db) == 2 * n
    for name in ("writer_a", "writer_b"):
        rows = db.query(name, device=None)
        assert sorted(r.config["i"] for r in rows) == list(range(n))


# -- the machine's ceilings -------------------------------------------------------------------------------------
def test_ceilings_are_measured_once_and_cached(monkeypatch, tmp_path):
    from tilelang_core import machine

    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    calls = []
    real = machine.measure_ceilings

    def counting(kind="cpu", budget_s=0.3):
        calls.append(kind)
        return real(kind, budget_s=0.05)

    monkeypatch.setattr(machine, "measure_ceilings", counting)
    c1 = machine.ceilings("cpu")
    c2 = machine.ceilings("llvm")
    assert calls == ["cpu"] and c1 == c2
    assert c1.peak_gflops > 0 and c1.bandwidth_gbs > 0 and c1.kind == "cpu" and "cores" in c1.device
    assert c1.attainable(1e-6) == pytest.approx(c1.bandwidth_gbs * 1e-6)
    assert c1.attainable(1e6) == c1.peak_gflops
    assert list((tmp_path / "machine").glob("ceilings-cpu-*.json"))

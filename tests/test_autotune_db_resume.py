"""Tuning at scale, the parts that need no worker processes: the database's schema 2 (migration of a version-1
file, uids and merging without duplicates, best per source hash), shipping a compiled kernel as bytes, the timing
session's early stopping and finalists, resumable sweeps, and the errors for bad executor arguments."""

from __future__ import annotations

import sqlite3

import pytest
import torch

import tilelang_core.language as T
from tilelang_core.autotune import EarlyStop, LocalExecutor, RayExecutor, TuningDB, tune
from tilelang_core.autotune.record import FINAL, PRUNED, Measurement
from tilelang_core.autotune.shipping import pack, unpack
from tilelang_core.autotune.tasks import FinalsTask, SweepJob, TimeTask, TimingSession
from tilelang_core.autotune.workers import factory_ref, jitted
from tilelang_core.errors import TileLangRuntimeError


def add_one(M, N, block_M=16):
    """Y = X + 1, one tile of rows per block."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                if bx * block_M + i < M:
                    Y[bx * block_M + i, j] = X[bx * block_M + i, j] + 1.0

    return main


def plus_one(x):
    return x + 1


# -- the database ---------------------------------------------------------------------------------------------
V1_SCHEMA = """
CREATE TABLE measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL, module TEXT, source_hash TEXT,
    config TEXT NOT NULL, shapes TEXT NOT NULL, dtypes TEXT NOT NULL,
    target TEXT NOT NULL, device TEXT NOT NULL, host TEXT, versions TEXT,
    status TEXT NOT NULL, message TEXT,
    latency_ms REAL, p20_ms REAL, p80_ms REAL, min_ms REAL, runs INTEGER, ref_ms REAL,
    max_abs REAL, max_rel REAL, rtol REAL, atol REAL, passed INTEGER,
    flops REAL, bytes REAL, compile_s REAL,
    timestamp REAL NOT NULL, pid INTEGER
);
"""


def test_a_version_1_database_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    for i, lat in enumerate((2.0, 1.0)):
        conn.execute("INSERT INTO measurements (kernel, config, shapes, dtypes, target, device, status, latency_ms, "
                     "passed, timestamp) VALUES ('k', ?, '[[64,64]]', '[\"float32\"]', 'cpu', 'dev', 'ok', ?, 1, ?)",
                     (f'{{"block": {i}}}', lat, 100.0 + i))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    db = TuningDB(path)
    rows = db.query("k", device=None)
    assert [r.uid for r in rows] == ["v1-1", "v1-2"] and all(r.attempts == 1 and r.sweep == "" for r in rows)
    assert db.best("k", device="dev").config == {"block": 1}
    db.record(Measurement(kernel="k", config={"block": 5}, latency_ms=0.5, shapes=[[64, 64]], device="dev",
                          driver="570.1", clocks={"sm_mhz": 1980.0}, worker="local:gpu0"))
    new = db.best("k", device="dev")
    assert new.config == {"block": 5} and new.driver == "570.1" and new.clocks == {"sm_mhz": 1980.0}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_the_same_measurement_is_stored_once_and_merging_twice_adds_nothing(tmp_path):
    driver, worker = TuningDB(tmp_path / "driver.sqlite3"), TuningDB(tmp_path / "worker.sqlite3")
    m = Measurement(kernel="k", config={"b": 1}, latency_ms=1.0, device="d")
    first = driver.record(m)
    assert driver.record(m) == first and len(driver) == 1  # a retried hand-over of the same result
    for b in range(3):
        worker.record(Measurement(kernel="k", config={"b": b + 10}, latency_ms=2.0 + b, device="d"))
    assert driver.merge(worker) == 3 and driver.merge(worker.path) == 0
    assert len(driver) == 4 and sorted(r.config["b"] for r in driver.query("k", device=None)) == [1, 10, 11, 12]


def test_best_answers_per_source_hash(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    db.record(Measurement(kernel="k", config={"b": 1}, source_hash="old", latency_ms=0.1, device="d"))
    db.record(Measurement(kernel="k", config={"b": 2}, source_hash="new", latency_ms=0.9, device="d"))
    assert db.best("k", device="d").config == {"b": 1}
    assert db.best("k", device="d", source_hash="new").config == {"b": 2}


# -- shipping and the timing session --------------------------------------------------------------------------
def test_a_shipped_kernel_loads_elsewhere_and_a_corrupted_one_is_refused(tmp_path):
    kernel = jitted(add_one)(64, 32, block_M=16)
    shipped = pack(kernel)
    assert "meta.json" in shipped.files and shipped.nbytes > 1000
    loaded = unpack(shipped, tmp_path / "here")
    x = torch.randn(64, 32)
    torch.testing.assert_close(loaded(x), x + 1)
    assert loaded.config == kernel.config
    bad = pack(kernel)
    bad.key = "tampered"
    lib = next(n for n in bad.files if n.endswith(".so"))
    bad.files[lib] = bad.files[lib][:-16] + b"\0" * 16
    with pytest.raises(TileLangRuntimeError, match="SHA-256"):
        unpack(bad, tmp_path / "here")


def _session(tmp_path, early_stop):
    job = SweepJob(factory=factory_ref(add_one), out_idx=[-1], target="cpu", kind="cpu", ref=plus_one,
                   warmup=1.0, rep=5.0, early_stop=early_stop, final_rounds=2)
    return TimingSession(job, "test-worker", str(tmp_path / "timing"))


def test_early_stopping_drops_a_clearly_slower_config_after_a_few_runs(tmp_path):
    session = _session(tmp_path, EarlyStop(runs=3, factor=2.0))
    shipped = pack(jitted(add_one)(64, 32, block_M=16))
    base = Measurement(kernel="add_one", config={"M": 64, "N": 32, "block_M": 16})
    full = session.measure(TimeTask(0, base, shipped, best_ms=None))
    assert full.ok and full.stage == "" and full.runs >= 10 and full.worker == "test-worker" and full.clocks is not None
    pruned = session.measure(TimeTask(1, Measurement(kernel="add_one", config=dict(base.config)), shipped,
                                      best_ms=full.latency_ms / 1000))  # a best 1000x faster: clearly slower
    assert pruned.stage == PRUNED and pruned.runs == 3 and "early-stopped after 3 runs" in pruned.message
    kept = session.measure(TimeTask(2, Measurement(kernel="add_one", config=dict(base.config)), shipped,
                                    best_ms=full.latency_ms * 1000))  # a best 1000x slower: timed fully
    assert kept.stage == "" and kept.runs >= 10
    finals = session.finals(FinalsTask([TimeTask(3, Measurement(kernel="add_one", config=dict(base.config)),
                                                 shipped)]))
    assert len(finals) == 1 and finals[0].stage == FINAL and finals[0].ref_ms > 0 and finals[0].runs >= 20


def test_early_stop_and_executor_arguments_are_checked():
    with pytest.raises(ValueError, match="factor must be greater than 1"):
        EarlyStop(factor=1.0)
    with pytest.raises(ValueError, match="runs must be a positive integer"):
        EarlyStop(runs=0)
    with pytest.raises(ValueError, match="compile_workers must be a positive integer, got 0"):
        LocalExecutor(compile_workers=0)
    with pytest.raises(ValueError, match="compile_timeout_s must be a positive number of seconds, got -1"):
        LocalExecutor(compile_timeout_s=-1)
    with pytest.raises(ValueError, match="timing_actors must be a positive integer"):
        RayExecutor(timing_actors=0)
    with pytest.raises(ValueError, match="executor: expected one of 'local', 'ray', 'inline'.*got 'gpu'"):
        tune(add_one, {"block_M": [8, 16]}, args={"M": 32, "N": 32}, executor="gpu", db=False, progress=False)
    with pytest.raises(ValueError, match="early_stop must be True, False or an EarlyStop"):
        tune(add_one, {"block_M": [8, 16]}, args={"M": 32, "N": 32}, early_stop=3, db=False, progress=False)
    with pytest.raises(ValueError, match="finalists must be a non-negative integer, got -1"):
        tune(add_one, {"block_M": [8, 16]}, args={"M": 32, "N": 32}, finalists=-1, db=False, progress=False)

    def local_factory(M, N, block_M=16):
        return add_one(M, N, block_M)

    with pytest.raises(ValueError, match="cannot be imported by a worker process"):
        tune(local_factory, {"block_M": [8, 16]}, args={"M": 32, "N": 32}, executor="local", db=False,
             progress=False)


# -- resuming -------------------------------------------------------------------------------------------------
def test_a_stopped_sweep_resumes_where_it_left_off(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    space = {"block_M": [4, 8, 16, 32]}
    seen: list[Measurement] = []
    first = tune(add_one, space, args={"M": 64, "N": 32}, ref=plus_one, workers=0, db=db, progress=False,
                 warmup=1, rep=5, on_result=seen.append, should_stop=lambda: len(seen) >= 2)
    assert first.cancelled and [m.config["block_M"] for m in first.measurements] == [4, 8]
    again = tune(add_one, space, args={"M": 64, "N": 32}, ref=plus_one, workers=0, db=db, progress=False,
                 warmup=1, rep=5, resume=True)
    assert again.resumed == 2 and again.sweep == first.sweep
    assert [m.config["block_M"] for m in again.measurements] == [4, 8, 16, 32]
    assert [m.uid for m in again.measurements[:2]] == [m.uid for m in first.measurements]  # not re-measured
    rows = db.query("add_one", device=None, sweep=first.sweep)
    assert sorted(r.config["block_M"] for r in rows) == [4, 8, 16, 32]  # each configuration measured once
    other = tune(add_one, space, args={"M": 64, "N": 16}, ref=plus_one, workers=0, db=db, progress=False,
                 warmup=1, rep=5, resume=True)  # other fixed arguments: another sweep, nothing to resume
    assert other.resumed == 0 and other.sweep != first.sweep and len(other.measurements) == 4


def test_an_unpicklable_reference_keeps_the_default_sweep_in_this_process():
    from tilelang_core.autotune.tuner import _choose_executor

    ref = factory_ref(add_one)
    assert _choose_executor(None, 2, ref, 4, (lambda x: x + 1, None)) == "inline"  # a lambda cannot be pickled
    chosen = _choose_executor(None, 2, ref, 4, (plus_one, None))
    assert isinstance(chosen, LocalExecutor) and chosen.compile_workers == 2 and not chosen.pids()  # none started
    assert _choose_executor(None, 0, ref, 4, (plus_one, None)) == "inline"  # workers=0: this process
    with pytest.raises(ValueError, match="executor='local': the reference and inputs must be picklable"):
        tune(add_one, {"block_M": [8, 16]}, args={"M": 32, "N": 32}, ref=lambda x: x + 1, executor="local",
             db=False, progress=False)

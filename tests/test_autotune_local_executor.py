"""The local executor end to end: the quickstart GEMM over 16 configurations through 2 compile processes and one
CPU timing process, with one compile worker and the timing worker SIGKILLed mid-sweep (no result lost); a
configuration that kills its timing worker twice, or whose compile or kernel hangs past the task timeout
(``tune(timeout=...)``), is recorded as failed while the sweep goes on; Ctrl-C cancels the work in flight."""

from __future__ import annotations

import signal

import pytest
from autotune_sweep import (
    SHAPES,
    SMALL_SPACE,
    SPACE,
    TIMING,
    Killer,
    check_complete,
    deadly_reference,
    expected_kind,
    hanging_gemm,
    kind_of,
    stuck_gemm,
)

from tilelang_core.autotune import TuningDB, tune
from tilelang_core.autotune.executors import COMPILE, TIME
from tilelang_core.autotune.local_executor import LocalExecutor
from tilelang_core.autotune.record import COMPILE_ERROR, RUN_ERROR
from tilelang_core.quickstart import matmul_relu, reference


@pytest.fixture(scope="module")
def executor():
    ex = LocalExecutor(compile_workers=2)
    yield ex
    ex.shutdown()


def warm(factory, *configs) -> None:
    """Compile these configurations into the kernel cache first, so that in the sweep they come from the disk cache
    in well under the test's short task timeout even on a loaded machine (only the hang takes long)."""
    from tilelang_core.autotune.workers import compile_config, jitted

    for c in configs:
        compile_config(jitted(factory), {**SHAPES, **c})


def _busy_pid(ex: LocalExecutor, role: str) -> int | None:
    busy = [n for n, w in ex.workers.items() if w.role == role and w.busy]
    return ex.pids(role).get(busy[0]) if busy else None


def test_local_sweep_survives_killed_workers(executor, tmp_path):
    # 16 configurations: the kills land mid-sweep all the same (the Ray test sweeps issue 20's 64)
    db = TuningDB(tmp_path / "t.sqlite3")
    killer = Killer(_busy_pid)
    result = tune(matmul_relu, SMALL_SPACE, args=SHAPES, ref=reference, executor=executor, db=db, progress=False,
                  on_progress=killer, **TIMING)
    assert set(killer.killed) == {"compile", "time"}  # both really died mid-task
    check_complete(result, db, "local", SMALL_SPACE)
    assert set(result.workers) == {"compile-0", "compile-1", "time-cpu"}
    assert executor.workers["time-cpu"].lost == 1
    assert kind_of(result) == expected_kind(SMALL_SPACE)  # what the Ray executor's sweep must look like too
    rows = len(db)
    again = tune(matmul_relu, SMALL_SPACE, args=SHAPES, ref=reference, executor=executor, db=db, progress=False,
                 resume=True, **TIMING)  # a restarted sweep: everything is in the database already
    assert again.resumed == len(SMALL_SPACE) and len(db) == rows and again.sweep == result.sweep
    assert {m.uid for m in again.measurements} == {m.uid for m in result.measurements}


def test_a_config_that_kills_its_timing_worker_twice_is_recorded_as_failed(executor, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    result = tune(matmul_relu, [{"block_M": 32, "block_N": 32, "block_K": 32}], args=SHAPES, ref=deadly_reference,
                  executor=executor, db=db, progress=False, **TIMING)
    (m,) = result.measurements
    assert m.status == RUN_ERROR and "died on both attempts" in m.message and "exit code 7" in m.message
    assert m.attempts == 2 and result.lost == 2 and result.retried == 1
    assert [r.status for r in db.query("matmul_relu", device=None)] == [RUN_ERROR]


def test_a_compile_that_hangs_is_killed_after_the_task_timeout_and_recorded_as_failed(executor, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setitem(executor.timeouts, COMPILE, 3.0)
    warm(hanging_gemm, {"hang": 0})
    result = tune(hanging_gemm, [{"hang": 1}, {"hang": 0}], args=SHAPES, ref=reference, executor=executor,
                  db=tmp_path / "t.sqlite3", progress=False, finalists=0, **TIMING)
    hung, fine = result.measurements
    assert hung.status == COMPILE_ERROR and "compile_timeout_s=3" in hung.message and hung.attempts == 2
    # the hung compile's two workers, plus one per retry of the fine config (on a loaded machine its task can also
    # outlive the short limit once)
    assert fine.ok and 2 + (fine.attempts - 1) <= result.lost <= 2 + 2 * (fine.attempts - 1)


def test_ctrl_c_cancels_the_sweep_and_its_workers(executor, tmp_path):
    busy: dict[str, int] = {}

    def interrupt(ex: LocalExecutor) -> None:
        pid = _busy_pid(ex, COMPILE)
        if pid and not busy:
            busy[COMPILE] = pid
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C in the terminal or the notebook's interrupt sends

    space = [{"block_M": 16, "block_N": 16, "block_K": k, "threads": t} for k in (8, 64) for t in (32, 64, 256)]
    # Python's own Ctrl-C handler, whatever this process inherited (a test run started in the background by a shell
    # without job control begins with SIGINT ignored, and the signal would then do nothing)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            tune(matmul_relu, space, args=SHAPES, ref=reference, executor=executor, db=tmp_path / "t.sqlite3",
                 progress=False, on_progress=interrupt, **TIMING)
    finally:
        signal.signal(signal.SIGINT, old)
    assert busy and busy[COMPILE] not in executor.pids().values()  # the busy worker was stopped, not left running
    assert executor.pending() == 0


def test_tune_timeout_kills_a_kernel_that_hangs_and_the_sweep_goes_on(executor, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    space = [{"stuck": ""}, {"stuck": "run"}]  # (a compile that hangs: the test above)
    warm(stuck_gemm, *space)
    result = tune(stuck_gemm, space, args=SHAPES, ref=reference, executor=executor, db=db, progress=False,
                  finalists=0, timeout=5, **TIMING)
    fine, hung = result.measurements
    assert hung.status == RUN_ERROR and "time_timeout_s=5" in hung.message and "lost" in hung.message
    assert hung.attempts == 2 and fine.ok and fine.latency_ms > 0
    # the hung kernel's two timing workers, plus one per retry of the fine config (on a loaded machine a task of it
    # can outlive the 5 s limit once: the stop CI saw 3)
    assert 2 + (fine.attempts - 1) <= result.lost <= 2 + 2 * (fine.attempts - 1)  # a retry: compile and/or time
    assert sorted(r.status for r in db.query("stuck_gemm", device=None)) == ["ok", RUN_ERROR]
    assert executor.timeouts == {COMPILE: 900.0, TIME: 900.0}  # the sweep's limit does not stay on the executor


def test_tune_timeout_is_checked_and_refused_where_nothing_can_be_killed(tmp_path):
    with pytest.raises(ValueError, match=r"tune: timeout must be a positive number of seconds, got 0"):
        tune(matmul_relu, SPACE[:2], args=SHAPES, timeout=0, db=False, progress=False)
    with pytest.raises(ValueError, match=r"timeout=5 needs an executor's worker processes .* runs inline"):
        tune(matmul_relu, SPACE[:2], args=SHAPES, timeout=5, executor="inline", db=False, progress=False)

"""The sweep the executor tests share (tests/test_autotune_local_executor.py, tests/test_autotune_ray.py): the
quickstart GEMM at 64^3 over 64 configurations (SPACE: the Ray test's, issue 20's sweep) or 16 of them (SMALL_SPACE:
the local executor's, the same kills and checks for a quarter of the compiles on CI's 2 cores), a hook that SIGKILLs
a busy worker of each role mid-sweep, and the checks that no result was lost and that every record carries what the
database promises."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from tilelang_core.autotune import TuningDB, grid
from tilelang_core.autotune.executors import COMPILE, TIME
from tilelang_core.autotune.record import FINAL
from tilelang_core.quickstart import matmul_relu, reference

SHAPES = {"M": 64, "N": 64, "K": 64}
SPACE = grid(block_M=[8, 16, 32, 64], block_N=[8, 16, 32, 64], block_K=[16, 32], num_stages=[1, 2])
# a quarter of SPACE with the smallest and largest tiles, both block_K and both stage counts: still enough tasks per
# role for the kills (KILL_AFTER) to land mid-sweep
SMALL_SPACE = grid(block_M=[8, 64], block_N=[8, 64], block_K=[16, 32], num_stages=[1, 2])
TIMING = {"warmup": 2.0, "rep": 10.0}
KILL_AFTER = {COMPILE: 8, TIME: 5}  # tasks done by that role before one of its busy workers is killed


def hanging_gemm(M: int, N: int, K: int, block_M: int = 16, block_N: int = 16, block_K: int = 16,
                 hang: int = 0) -> Any:
    """The quickstart GEMM, except that ``hang=1`` never finishes compiling (a compile that hangs)."""
    if hang:
        time.sleep(3600)
    return matmul_relu.factory(M, N, K, block_M, block_N, block_K)


def stuck_gemm(M: int, N: int, K: int, block_M: int = 16, block_N: int = 16, block_K: int = 16,
               stuck: str = "") -> Any:
    """The quickstart GEMM, except that ``stuck="compile"`` never finishes compiling and ``stuck="run"`` builds a
    kernel that never finishes running (2^48 dependent multiply-adds: a kernel that hangs)."""
    if stuck == "compile":
        time.sleep(3600)
    if stuck != "run":
        return matmul_relu.factory(M, N, K, block_M, block_N, block_K)
    import tilelang_core.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=1) as _bx:
            C[0, 0] = A[0, 0]
            for _i, _j, _k in T.grid(65536, 65536, 65536):
                C[0, 0] = C[0, 0] * B[0, 0] + A[0, 0]

    return main


def deadly_reference(a: Any, b: Any) -> Any:
    """A reference that kills the process computing it (a config that takes its timing worker down)."""
    os._exit(7)


class Killer:
    """``on_progress`` hook: once ``KILL_AFTER[role]`` tasks of a role are done, SIGKILL one busy worker of that
    role (found by ``busy_pid(executor, role)``), once per role."""

    def __init__(self, busy_pid: Callable[[Any, str], int | None]):
        self.busy_pid = busy_pid
        self.done: dict[str, int] = {COMPILE: 0, TIME: 0}
        self.killed: dict[str, int] = {}
        self._hunting: set[str] = set()

    def __call__(self, executor: Any) -> None:
        for role in (COMPILE, TIME):
            done = sum(w.done for w in executor.workers.values() if w.role == role)
            if role in self.killed or role in self._hunting or done < KILL_AFTER[role]:
                continue
            pid = self.busy_pid(executor, role)
            if pid:
                os.kill(pid, signal.SIGKILL)
                self.killed[role] = pid
                continue
            # a progress event comes when a task has just finished, so the worker may be idle right now: watch it
            # from a thread until it has its next task, then kill it (on a fast machine the one timing worker was
            # never busy at the moment of the event, and the test never killed it)
            self._hunting.add(role)
            threading.Thread(target=self._hunt, args=(executor, role), daemon=True).start()

    def _hunt(self, executor: Any, role: str, timeout_s: float = 60.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            pid = self.busy_pid(executor, role)
            if pid:
                os.kill(pid, signal.SIGKILL)
                self.killed[role] = pid
                return
            time.sleep(0.005)


def check_complete(result: Any, db: TuningDB, executor: str, space: list[dict[str, Any]] = SPACE) -> None:
    """Every configuration of ``space`` has exactly one passing measurement (none lost), the dead workers' tasks
    were retried, and the records carry worker, device, clocks and spread; finalists re-timed; the best kernel is
    right."""
    assert result.executor == executor and not result.cancelled
    assert len(result.measurements) == len(space)
    got = sorted(tuple(m.config[k] for k in space[0]) for m in result.measurements)
    assert got == sorted(tuple(c.values()) for c in space)
    bad = [m.describe() for m in result.measurements if not m.ok]
    assert not bad, bad
    assert result.lost >= 2 and result.retried >= 2  # one compile task and one timing task lost, both retried
    assert any(m.attempts == 2 for m in result.measurements)
    rows = db.query("matmul_relu", device=None, sweep=result.sweep)
    sweep_rows = [r for r in rows if r.stage != FINAL]
    assert len(sweep_rows) == len(space) and len({r.uid for r in rows}) == len(rows)
    for r in sweep_rows:
        assert r.worker and r.device and r.runs >= 1 and r.p20_ms <= r.latency_ms <= r.p80_ms
        assert r.clocks.get("cpu_mhz", 0) > 0 and r.compile_s > 0 and r.passed
    assert len(result.finals) == 3 and all(f.stage == FINAL and f.ref_ms > 0 for f in result.finals)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    torch.testing.assert_close(result.best_kernel(a, b), reference(a, b), rtol=1e-4, atol=1e-4)


KIND_FIELDS = ("worker", "device", "clocks", "latency_ms", "p20_ms", "p80_ms", "compile_s", "ref_ms", "sweep")


def expected_kind(space: list[dict[str, Any]] = SPACE) -> dict[str, Any]:
    """What every executor's sweep of ``space`` must look like (:func:`kind_of`)."""
    return {"n": len(space), "statuses": ["ok"], "fields": sorted(KIND_FIELDS), "finals": 3}


EXPECTED_KIND = expected_kind(SPACE)


def kind_of(result: Any) -> dict[str, Any]:
    """What every executor's result must look like (:data:`EXPECTED_KIND`): statuses, which fields are filled on
    every measurement, how many finalists."""
    return {
        "n": len(result.measurements),
        "statuses": sorted({m.status for m in result.measurements}),
        "fields": sorted(k for k in KIND_FIELDS if all(getattr(m, k) for m in result.measurements)),
        "finals": len(result.finals),
    }


__all__ = ["SHAPES", "SPACE", "SMALL_SPACE", "TIMING", "Killer", "check_complete", "kind_of", "deadly_reference",
           "EXPECTED_KIND", "expected_kind", "hanging_gemm", "stuck_gemm"]

"""The sweep's driver loop over an executor: compile, time, retry what a dead worker lost, re-time finalists.

Why this module exists: the same decisions hold whichever executor runs the work (:mod:`.executors`):

- every configuration is submitted for compiling; a compiled one is queued for timing. For a CPU target timing
  starts only when every compile has finished (a kernel timed on the cores that compile others would measure
  them); for a GPU target compiling and timing overlap.
- timing tasks go out one per timing worker at a time, each carrying the best median so far, so a timing worker can
  drop a clearly slower configuration after a few runs (:class:`~.tasks.EarlyStop`).
- a task whose worker died is retried once, on another worker where there is one; lost a second time, its
  configuration is recorded as failed (``compile_error`` / ``run_error``, with the reason) — nothing else is lost.
- finally the ``finalists`` fastest are re-timed together, interleaved with the reference, by one timing worker.
- ``should_stop()`` and Ctrl-C cancel the tasks in flight; what was recorded stays recorded (a later sweep with
  ``resume=True`` continues from there).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .executors import COMPILE, FINALS, TIME, Event, Executor
from .record import COMPILE_ERROR, PRUNED, RUN_ERROR, Measurement, new_uid
from .tasks import CompileOutcome, FinalsTask, TimeTask

MAX_ATTEMPTS = 2  # a task is tried on one worker, then once more elsewhere
POLL_S = 0.2


@dataclass
class SweepStats:
    """What happened besides the measurements."""

    retried: int = 0
    lost: int = 0  # tasks whose worker died (each retried, or recorded as failed)
    pruned: int = 0
    cancelled: bool = False
    finals: list[Measurement] = field(default_factory=list)


def _copy(base: Measurement) -> Measurement:
    return dataclasses.replace(base, config=dict(base.config), uid=new_uid())


def run(executor: Executor, job: Any, calls: dict[int, dict[str, Any]], bases: dict[int, Measurement], *,
        record: Callable[[int, Measurement], None], barrier: bool, finalists: int = 0,
        should_stop: Callable[[], bool] | None = None,
        on_progress: Callable[[Executor], None] | None = None, best_ms: float | None = None) -> SweepStats:
    """Run the sweep of ``calls`` (config index -> factory arguments) on ``executor``; ``record(m)`` gets each
    measurement (with its config index) as it is final. ``best_ms``: the best median already known (a resumed sweep)."""
    stats = SweepStats()
    attempts: collections.Counter[tuple[str, int]] = collections.Counter()
    shipped: dict[int, Any] = {}
    compile_s: dict[int, float] = {}
    ready: collections.deque[int] = collections.deque()
    compiling = set(calls)
    timing = 0
    done: dict[int, Measurement] = {}

    def finish(i: int, m: Measurement) -> None:
        nonlocal best_ms
        m.compile_s = compile_s.get(i, m.compile_s)
        m.attempts = max(attempts[(COMPILE, i)], attempts[(TIME, i)], 1)
        done[i] = m
        if m.stage == PRUNED:
            stats.pruned += 1
        elif m.ok and (best_ms is None or m.latency_ms < best_ms):
            best_ms = m.latency_ms
        record(i, m)

    def failed(i: int, status: str, why: str) -> None:
        m = _copy(bases[i])
        m.status, m.message = status, why
        finish(i, m)

    def lost(ev: Event, payload: Any) -> bool:
        """Retry a lost task once elsewhere; False when it has had its second chance."""
        stats.lost += 1
        key = (COMPILE if ev.kind == COMPILE else TIME, ev.task_id)
        if attempts[key] >= MAX_ATTEMPTS:
            return False
        attempts[key] += 1
        stats.retried += 1
        executor.submit(ev.kind, ev.task_id, payload, avoid=ev.worker)
        return True

    executor.open(job)
    try:
        for i, call in calls.items():
            attempts[(COMPILE, i)] = 1
            executor.submit(COMPILE, i, call)
        while len(done) < len(calls):
            if should_stop is not None and should_stop():
                stats.cancelled = True
                executor.cancel()
                break
            if not barrier or not compiling:
                while ready and timing < max(1, executor.capacity(TIME)):
                    i = ready.popleft()
                    attempts[(TIME, i)] = 1
                    executor.submit(TIME, i, TimeTask(i, _copy(bases[i]), shipped[i], best_ms))
                    timing += 1
            for ev in executor.wait(POLL_S):
                i = ev.task_id
                if ev.kind == COMPILE:
                    if ev.lost:
                        if lost(ev, calls[i]):
                            continue
                        compiling.discard(i)
                        failed(i, COMPILE_ERROR, f"lost: its compile worker died on both attempts ({ev.why})")
                        continue
                    compiling.discard(i)
                    out = ev.result
                    if isinstance(out, BaseException):
                        failed(i, COMPILE_ERROR, f"{type(out).__name__}: {out}")
                    elif isinstance(out, CompileOutcome):
                        compile_s[i] = out.seconds
                        if out.reason or out.shipped is None:
                            failed(i, COMPILE_ERROR, out.reason or "no kernel came back")
                        else:
                            shipped[i] = out.shipped
                            ready.append(i)
                elif ev.kind == TIME:
                    if ev.lost:
                        if lost(ev, TimeTask(i, _copy(bases[i]), shipped[i], best_ms)):
                            continue
                        timing -= 1
                        failed(i, RUN_ERROR, f"lost: its timing worker died on both attempts ({ev.why})")
                        continue
                    timing -= 1
                    out = ev.result
                    if isinstance(out, Measurement):
                        finish(i, out)
                    else:
                        failed(i, RUN_ERROR, f"{type(out).__name__}: {out}")
            if on_progress is not None:
                on_progress(executor)
        if finalists > 1 and not stats.cancelled:
            stats.finals = _finals(executor, done, shipped, bases, finalists, record, stats)
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or an error: stop the work in flight, then re-raise
        stats.cancelled = True
        executor.cancel()
        raise
    finally:
        executor.close()
    return stats


def _finals(executor: Executor, done: dict[int, Measurement], shipped: dict[int, Any],
            bases: dict[int, Measurement], k: int, record: Callable[[int, Measurement], None],
            stats: SweepStats) -> list[Measurement]:
    good = sorted((i for i, m in done.items() if m.ok and m.stage != PRUNED and i in shipped),
                  key=lambda i: done[i].latency_ms)[:k]
    if len(good) < 2:
        return []
    task = FinalsTask([TimeTask(i, _copy(bases[i]), shipped[i]) for i in good])
    for attempt in range(MAX_ATTEMPTS):
        executor.submit(FINALS, -1, task)
        events: list[Event] = []
        while not events:
            events = [e for e in executor.wait(POLL_S) if e.kind == FINALS]
        ev = events[0]
        if ev.lost:
            stats.lost += 1
            if attempt + 1 < MAX_ATTEMPTS:
                stats.retried += 1
            continue
        if not isinstance(ev.result, list):
            return []
        for i, m in zip(good, ev.result):
            m.compile_s = done[i].compile_s
            record(i, m)
        return list(ev.result)
    return []


__all__ = ["run", "SweepStats", "MAX_ATTEMPTS"]

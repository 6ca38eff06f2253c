"""The local executor: compile processes on this host, and one timing process per visible GPU (or one for the CPU).

Why this module exists: on one host a sweep is bounded by compiling (CPU-bound Python + TVM: processes, not
threads) and then by timing on each device one kernel at a time. This executor runs ``compile_workers`` compile
processes and one timing process per visible GPU, each pinned to its GPU with ``CUDA_VISIBLE_DEVICES`` (on a
GPU-less host, or for a CPU target, one CPU timing process). Every process is our own ``spawn`` child talking over a
pipe and given *one task at a time*, so when one dies (killed, out of memory, a GPU context it crashed) the executor
knows exactly which task it had in flight, reports it lost, and starts a replacement; a crash stays in its process.

The processes ignore Ctrl-C (the tuner decides: :meth:`LocalExecutor.cancel` kills the busy ones), exit when the
tuner's process goes away, and are kept for the rest of the session (:func:`shared`), so only the first sweep pays
for their start-up (importing torch and TVM, a few seconds each).
"""

from __future__ import annotations

import atexit
import collections
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from typing import Any

from .executors import (
    COMPILE,
    DEFAULT_TIMEOUT_S,
    TIME,
    TIMEOUT_NAMES,
    Event,
    Executor,
    WorkerState,
    check_timeout,
    task_limit,
)

JOIN_TIMEOUT_S = 5.0
_ENV_LOCK = threading.Lock()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def worker_main(conn: Connection, role: str, name: str, parent: int) -> None:
    """A worker process: receive ``(op, task_id, payload)``, answer ``(task_id, result)``; ``None`` ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), name="tilelang-parent-watch", daemon=True).start()
    import torch  # noqa: F401 - the heavy imports happen now, not inside the first task's time limit

    from .tasks import TimingSession, compile_one
    from .workers import reason

    if role == COMPILE:
        import tilelang_core.language  # noqa: F401 - imports TVM
    conn.send(("ready", os.getpid()))  # imported: the clock of its first task starts now
    job = None
    session = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        op, task_id, payload = msg
        if op == "job":
            job, session = payload, None
            continue
        try:
            if op == COMPILE:
                out: Any = compile_one(job, task_id, payload, name)
            else:
                if session is None:
                    session = TimingSession(job, name)
                out = session.measure(payload) if op == TIME else session.finals(payload)
        except Exception as e:  # noqa: BLE001 - reported to the tuner as this task's failure
            out = RuntimeError(reason(e))
        conn.send((task_id, out))


class _Proc:
    """One worker process and what it is doing."""

    def __init__(self, name: str, role: str, gpu: str | None):
        self.name, self.role, self.gpu = name, role, gpu
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, role, name, os.getpid()),
                                   name=f"tilelang-{name}", daemon=True)
        with _ENV_LOCK:  # the child reads CUDA_VISIBLE_DEVICES from the environment it is started with
            old = os.environ.get("CUDA_VISIBLE_DEVICES")
            if gpu is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            try:
                self.process.start()
            finally:
                if gpu is not None:
                    if old is None:
                        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                    else:
                        os.environ["CUDA_VISIBLE_DEVICES"] = old
        child.close()
        self.task: tuple[str, int, Any] | None = None
        self.started = 0.0  # time.monotonic() when the task in flight was sent (or the worker became ready)
        self.ready = False  # its imports are done (a task sent before waits in the pipe)
        self.job_id: int | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(JOIN_TIMEOUT_S)
        self.conn.close()


def visible_gpus() -> list[str]:
    """The physical ids of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applied), via torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable CUDA: no GPUs
        n = 0
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return ids[:n]
    return [str(i) for i in range(n)]


class LocalExecutor(Executor):
    """``compile_workers`` compile processes (default: one per core) and one timing process per visible GPU
    (``gpus=``: physical ids to use instead), or one CPU timing process for a CPU target. A compile running longer
    than ``compile_timeout_s``, or a timing task longer than ``time_timeout_s`` (a compiler or a kernel that
    hangs), has its worker killed and counts as lost (default 900 s each)."""

    def __init__(self, compile_workers: int | None = None, gpus: list[int | str] | None = None,
                 compile_timeout_s: float = DEFAULT_TIMEOUT_S, time_timeout_s: float = DEFAULT_TIMEOUT_S):
        if compile_workers is not None and (not isinstance(compile_workers, int) or compile_workers < 1):
            raise ValueError(f"LocalExecutor: compile_workers must be a positive integer, got {compile_workers!r}")
        super().__init__(name="local")
        self.timeouts = {COMPILE: check_timeout("LocalExecutor", "compile_timeout_s", compile_timeout_s),
                         TIME: check_timeout("LocalExecutor", "time_timeout_s", time_timeout_s)}
        self.compile_workers = compile_workers
        self.gpus = None if gpus is None else [str(g) for g in gpus]
        self._procs: dict[str, _Proc] = {}
        self._queue: collections.deque[tuple[str, int, Any, str | None]] = collections.deque()
        self._job: Any = None
        self._job_id = 0

    # -- workers ----------------------------------------------------------------------------------------------
    def _compile_count(self) -> int:
        if self.compile_workers is not None:
            return self.compile_workers
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            return max(1, os.cpu_count() or 1)

    def _timing_slots(self, kind: str) -> list[tuple[str, str | None]]:
        if kind != "cuda":
            return [("time-cpu", None)]
        gpus = self.gpus if self.gpus is not None else visible_gpus()
        return [(f"time-gpu{g}", g) for g in gpus] or [("time-cpu", None)]

    def _start(self, name: str, role: str, gpu: str | None) -> _Proc:
        proc = _Proc(name, role, gpu)
        self._procs[name] = proc
        self.workers[name] = WorkerState(name, role)
        return proc

    def open(self, job: Any) -> None:
        self._job = job
        self._job_id += 1
        wanted = {f"compile-{i}": (COMPILE, None) for i in range(self._compile_count())}
        wanted.update({n: (TIME, g) for n, g in self._timing_slots(job.kind)})
        for name in list(self._procs):
            if name not in wanted or not self._procs[name].alive():
                self._procs.pop(name).kill()
                self.workers.pop(name, None)
        for name, (role, gpu) in wanted.items():
            if name not in self._procs:
                self._start(name, role, gpu)
        for w in self.workers.values():
            w.busy, w.current = False, None
        for proc in self._procs.values():
            self._send_job(proc)

    def _send_job(self, proc: _Proc) -> None:
        proc.conn.send(("job", 0, self._job))
        proc.job_id = self._job_id

    def pids(self, role: str | None = None) -> dict[str, int]:
        """The worker processes' ids by worker name (of one role, or all)."""
        return {n: p.pid for n, p in self._procs.items() if p.pid and (role is None or p.role == role)}

    # -- tasks ------------------------------------------------------------------------------------------------
    def submit(self, kind: str, task_id: int, payload: Any, avoid: str | None = None) -> None:
        self._queue.append((kind, task_id, payload, avoid))
        self._dispatch()

    def pending(self) -> int:
        return len(self._queue) + sum(1 for p in self._procs.values() if p.task is not None)

    def _dispatch(self) -> None:
        still: collections.deque[tuple[str, int, Any, str | None]] = collections.deque()
        while self._queue:
            kind, task_id, payload, avoid = self._queue.popleft()
            role = COMPILE if kind == COMPILE else TIME
            idle = [p for p in self._procs.values() if p.role == role and p.task is None and p.alive()]
            others = [p for p in idle if p.name != avoid]
            busy_others = [p for p in self._procs.values() if p.role == role and p.name != avoid and p.task]
            pick = others[0] if others else (idle[0] if idle and not busy_others else None)
            if pick is None:
                still.append((kind, task_id, payload, avoid))
                continue
            try:
                pick.conn.send((kind, task_id, payload))
            except (OSError, ValueError):  # it died a moment ago: the next wait() replaces it
                still.append((kind, task_id, payload, avoid))
                continue
            pick.task = (kind, task_id, payload)
            pick.started = time.monotonic()
            w = self.workers[pick.name]
            w.busy, w.current = True, task_id
        self._queue = still

    def _replace(self, proc: _Proc) -> None:
        proc.kill()
        self._procs.pop(proc.name, None)
        lost = self.workers.pop(proc.name, WorkerState(proc.name, proc.role)).lost + 1
        new = self._start(proc.name, proc.role, proc.gpu)
        self.workers[proc.name].lost = lost
        self._send_job(new)

    @staticmethod
    def _receive(p: _Proc) -> tuple[Any, Any]:
        """The worker's answer (task id, result), or (None, None); a "ready" message first is taken in passing."""
        try:
            while p.conn.poll():
                got_id, result = p.conn.recv()
                if got_id != "ready":
                    return got_id, result
                p.ready = True
                p.started = time.monotonic()
        except (EOFError, OSError):
            pass
        return None, None

    def wait(self, timeout: float) -> list[Event]:
        self._dispatch()
        busy = [p for p in self._procs.values() if p.task is not None]
        if not busy:
            return []
        handles: dict[Any, _Proc] = {}
        for p in busy:
            handles[p.conn] = p
            handles[p.process.sentinel] = p
        for p in self._procs.values():
            if not p.ready:
                handles[p.conn] = p
        events: list[Event] = []
        seen: set[str] = set()
        for h in wait_ready(list(handles), timeout):
            p = handles[h]
            if p.name in seen:
                continue
            seen.add(p.name)
            got_id, result = self._receive(p)
            if p.task is None:
                continue  # an idle worker's "ready" message
            kind, task_id, _payload = p.task
            if got_id == task_id:
                p.task = None
                w = self.workers[p.name]
                w.busy, w.current, w.done = False, None, w.done + 1
                events.append(Event(kind, task_id, p.name, result=result))
                continue
            if p.alive() and got_id is None and h is p.conn:
                continue  # spurious wake-up
            p.process.join(JOIN_TIMEOUT_S)  # its pipe closes a moment before it can be reaped
            code = p.process.exitcode
            p.task = None
            events.append(Event(kind, task_id, p.name, lost=True,
                                why=f"worker {p.name} (pid {p.pid}) died (exit code {code})"))
            self._replace(p)
        now = time.monotonic()
        for p in list(self._procs.values()):
            if p.task is None:
                continue
            kind, task_id, payload = p.task
            limit = task_limit(self.timeouts, kind, payload)
            if p.ready and p.name not in seen and now - p.started > limit:
                p.task = None
                what = TIMEOUT_NAMES[p.role]
                events.append(Event(kind, task_id, p.name, lost=True,
                                    why=f"worker {p.name} (pid {p.pid}) killed: its task ran past {what}={limit:g}"))
                self._replace(p)
        self._dispatch()
        return events

    def cancel(self) -> None:
        """Drop the queue and kill the processes with a task in flight (they are replaced at the next sweep)."""
        self._queue.clear()
        for p in list(self._procs.values()):
            if p.task is not None:
                p.kill()
                self._procs.pop(p.name, None)
                self.workers.pop(p.name, None)

    def close(self) -> None:
        self._queue.clear()

    def shutdown(self) -> None:
        """Stop every worker process."""
        for p in list(self._procs.values()):
            try:
                p.conn.send(None)
            except (OSError, ValueError):
                pass
        for p in list(self._procs.values()):
            p.process.join(JOIN_TIMEOUT_S)
            p.kill()
        self._procs.clear()
        self.workers.clear()


_SHARED: dict[tuple[Any, ...], LocalExecutor] = {}


def shared(compile_workers: int | None = None) -> LocalExecutor:
    """The session's local executor with this many compile workers (its processes kept between sweeps)."""
    key = (compile_workers,)
    if key not in _SHARED:
        for other in _SHARED.values():  # one pool of processes at a time
            other.shutdown()
        _SHARED.clear()
        _SHARED[key] = LocalExecutor(compile_workers=compile_workers)
    return _SHARED[key]


def shutdown() -> None:
    """Stop the session's local executor processes."""
    for ex in _SHARED.values():
        ex.shutdown()
    _SHARED.clear()


atexit.register(shutdown)

__all__ = ["LocalExecutor", "shared", "shutdown", "visible_gpus", "worker_main"]

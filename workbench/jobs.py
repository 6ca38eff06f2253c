"""Background work for interactive widgets: debounced, latest-request-wins jobs on the workbench's compile thread.

Why this module exists: a slider that recompiles must never freeze the notebook or show a result for a value the
user has already left. :class:`LatestOnly` implements the rules once: every request gets a generation number; a
request waits ``debounce_s`` (a newer request within that window replaces it); it then runs on the workbench's
single background thread (shared with the Compare tab's compiles: TVM's pass pipeline is not known to be
thread-safe, and two compiles at once on two cores only slow each other); the job is told when it has gone stale
(``ctx.stale()``) so it can stop between phases; and its result or error is handed to the display only if no newer
request arrived meanwhile — a stale result is dropped, never shown. Scheduling primitives (the timer and the
executor) are injectable, so tests drive debounce and stale-drop deterministically.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

DEBOUNCE_S = 0.2
_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def compile_executor() -> ThreadPoolExecutor:
    """The workbench's one background worker thread (compiles, checks, timings), created on first use."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-compile")
        return _EXECUTOR


@dataclass
class JobContext:
    """What a running job can ask: is it still wanted, and how to report its phase."""

    generation: int
    runner: LatestOnly

    def stale(self) -> bool:
        """A newer request has arrived: stop at the next convenient point, the result will not be shown."""
        return self.generation != self.runner.generation

    def status(self, text: str) -> None:
        """Report a phase (``compiling``, ``checking``, ``timing``); ignored once stale."""
        if not self.stale() and self.runner.on_status is not None:
            self.runner.on_status(text)


class LatestOnly:
    """Debounced jobs where only the newest request's outcome is shown.

    ``work(request, ctx)`` runs on the executor and returns a result; ``on_result(request, result)`` or
    ``on_error(request, exc)`` runs after it, on the same thread, only if the request is still the newest.
    """

    def __init__(self, work: Callable[[Any, JobContext], Any], on_result: Callable[[Any, Any], None],
                 on_error: Callable[[Any, BaseException], None] | None = None,
                 on_status: Callable[[str], None] | None = None, *, debounce_s: float = DEBOUNCE_S,
                 executor: Executor | None = None, timer: Callable[..., Any] = threading.Timer):
        self.work = work
        self.on_result = on_result
        self.on_error = on_error
        self.on_status = on_status
        self.debounce_s = debounce_s
        self._executor = executor
        self._timer_factory = timer
        self._lock = threading.Lock()
        self._timer: Any = None
        self._outstanding = 0
        self._idle = threading.Condition(self._lock)
        self.generation = 0
        self.dropped = 0  # stale requests whose work was skipped or whose result was thrown away
        self.last_future: Future | None = None

    @property
    def executor(self) -> Executor:
        return self._executor if self._executor is not None else compile_executor()

    # -- requests --------------------------------------------------------------------------------------------
    def supersede(self) -> int:
        """Make every earlier request stale without starting a new job (e.g. a cached result is shown instead)."""
        with self._lock:
            self.generation += 1
            self._cancel_timer()
            return self.generation

    def submit(self, request: Any) -> int:
        """Ask for ``request``; returns its generation. Earlier requests become stale at once."""
        with self._lock:
            self.generation += 1
            gen = self.generation
            self._cancel_timer()
            self._outstanding += 1
            if self.debounce_s > 0:
                t = self._timer_factory(self.debounce_s, self._fire, args=(gen, request))
                if hasattr(t, "daemon"):
                    t.daemon = True
                self._timer = t
        if self.debounce_s > 0:
            t.start()
        else:
            self._start(gen, request)
        return gen

    def _cancel_timer(self) -> None:  # with the lock held
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._outstanding -= 1
            self.dropped += 1
            self._idle.notify_all()

    def _fire(self, gen: int, request: Any) -> None:
        """The debounce window closed: start the job if the request is still the newest."""
        with self._lock:
            current = self._timer is not None and gen == self.generation
            if current:
                self._timer = None  # the outstanding count now belongs to the job
        if current:
            self._start(gen, request)

    def _start(self, gen: int, request: Any) -> None:
        """Queue the job (outside the lock: an executor may run it at once, in this thread)."""
        self.last_future = self.executor.submit(self._run, gen, request)

    def _run(self, gen: int, request: Any) -> None:
        ctx = JobContext(gen, self)
        try:
            if ctx.stale():
                self.dropped += 1
                return
            try:
                result = self.work(request, ctx)
            except BaseException as e:  # noqa: BLE001 - shown inline, the panel keeps working
                if ctx.stale():
                    self.dropped += 1
                elif self.on_error is not None:
                    self.on_error(request, e)
                return
            if ctx.stale():
                self.dropped += 1
                return
            self.on_result(request, result)
        finally:
            with self._lock:
                self._outstanding -= 1
                self._idle.notify_all()

    # -- waiting ---------------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        with self._lock:
            return self._outstanding > 0

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no request is waiting or running; False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout=timeout)

    def run_later(self, fn: Callable[[], Any]) -> Future:
        """Queue plain work on the same executor (counted by :meth:`wait`, never dropped)."""
        with self._lock:
            self._outstanding += 1

        def call() -> Any:
            try:
                return fn()
            finally:
                with self._lock:
                    self._outstanding -= 1
                    self._idle.notify_all()

        return self.executor.submit(call)


__all__ = ["LatestOnly", "JobContext", "compile_executor", "DEBOUNCE_S"]

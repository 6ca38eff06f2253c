"""Where a sweep's work runs: the interface every executor offers the scheduler, and choosing one by name.

Why this module exists: the sweep's logic (what to compile, what to time next, retries, early stopping, the
database) is one piece of code (:mod:`.scheduler`); where the work runs is another. An executor has *compile*
workers and *timing* workers; the scheduler submits tasks by role and waits for :class:`Event` s: a result, or
the loss of a worker with the task it had in flight (the scheduler then retries that task once elsewhere).

Executors: ``"local"`` (:class:`~.local_executor.LocalExecutor`: compile processes on this host and one timing
process per visible GPU, or one CPU timing process), ``"ray"`` (:class:`~.ray_executor.RayExecutor`: Ray tasks
and one actor per GPU of a cluster). ``"inline"`` is the previous release's path (compile workers, then timing in
the tuner's own process) and is handled by the tuner itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMPILE = "compile"
TIME = "time"
FINALS = "finals"
ROLES = (COMPILE, TIME)
NAMES = ("local", "ray", "inline")
DEFAULT_TIMEOUT_S = 900.0  # a compile or timing task running longer has hung (the slowest real ones take minutes)
TIMEOUT_NAMES = {COMPILE: "compile_timeout_s", TIME: "time_timeout_s"}


def check_timeout(owner: str, name: str, value: Any) -> float:
    """``value`` as a positive number of seconds, or a ``ValueError`` naming ``owner``'s argument ``name``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{owner}: {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def task_limit(timeouts: dict[str, float], kind: str, payload: Any) -> float:
    """How long a task of ``kind`` may run: its role's timeout; the finalists' task times every finalist and the
    reference in each round, so it gets one timing task's limit per finalist plus one."""
    if kind == FINALS:
        return timeouts[TIME] * (len(getattr(payload, "tasks", ())) + 1)
    return timeouts[COMPILE if kind == COMPILE else TIME]


@dataclass
class Event:
    """A finished task (``result``) or a lost one (``lost``: its worker died with it in flight)."""

    kind: str  # COMPILE | TIME | FINALS
    task_id: int
    worker: str
    result: Any = None
    lost: bool = False
    why: str = ""


@dataclass
class WorkerState:
    """One worker as the progress display shows it."""

    name: str
    role: str
    busy: bool = False
    done: int = 0
    lost: int = 0
    current: int | None = None  # the task id in flight


@dataclass
class Executor:
    """The interface (see the module docstring). Subclasses implement every method."""

    name: str = "executor"
    workers: dict[str, WorkerState] = field(default_factory=dict)
    # seconds a task of each role may run before its worker is killed (the task then counts as lost)
    timeouts: dict[str, float] = field(default_factory=lambda: {COMPILE: DEFAULT_TIMEOUT_S, TIME: DEFAULT_TIMEOUT_S})

    def open(self, job: Any) -> None:
        """Start (or reuse) the workers for this sweep's job."""
        raise NotImplementedError

    def capacity(self, role: str) -> int:
        """How many workers of ``role`` there are."""
        return sum(1 for w in self.workers.values() if w.role == role)

    def idle(self, role: str) -> int:
        """How many workers of ``role`` have nothing in flight (tasks submitted beyond that are queued)."""
        return sum(1 for w in self.workers.values() if w.role == role and not w.busy)

    def submit(self, kind: str, task_id: int, payload: Any, avoid: str | None = None) -> None:
        """Queue a task of ``kind`` (COMPILE, TIME or FINALS); ``avoid``: a worker not to use when another will do."""
        raise NotImplementedError

    def wait(self, timeout: float) -> list[Event]:
        """Events that happened, waiting up to ``timeout`` seconds for the first."""
        raise NotImplementedError

    def pending(self) -> int:
        """Tasks submitted and not yet reported."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Stop every task in flight now (Ctrl-C, ``should_stop``); the executor stays usable."""
        raise NotImplementedError

    def close(self) -> None:
        """End of the sweep: release what this sweep started (a session's pool may stay up)."""
        raise NotImplementedError


def resolve(executor: Any, workers: int | None = None) -> Any:
    """An :class:`Executor` (or ``"inline"``) from ``executor=``: a name, an instance, or None (``"local"``)."""
    if executor is None:
        executor = "local"
    if isinstance(executor, Executor):
        return executor
    if not isinstance(executor, str) or executor not in NAMES:
        raise ValueError(f"executor: expected one of {', '.join(map(repr, NAMES))} or an Executor "
                         f"(LocalExecutor(...), RayExecutor(address=...)), got {executor!r}")
    if executor == "inline":
        return "inline"
    if executor == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor()
    from .local_executor import shared

    return shared(workers if workers else None)


__all__ = ["Executor", "Event", "WorkerState", "resolve", "check_timeout", "task_limit", "COMPILE", "TIME", "FINALS",
           "ROLES", "NAMES", "DEFAULT_TIMEOUT_S", "TIMEOUT_NAMES"]

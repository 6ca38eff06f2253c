"""The Ray executor: compiling as Ray CPU tasks anywhere in a cluster, timing in one Ray actor per GPU.

Why this module exists: a host's GPUs and cores run out; a Ray cluster has more of both, and Ray already does what a
home-made cluster runner would have to (placement, object transfer, failure detection). Compile tasks need one CPU
each and may run on any node (a GPU-less node compiles CUDA too); each returns the compiled kernel's files
(:mod:`.shipping`) through Ray's object store, never a path, so nodes need not share a disk. Timing runs in one
actor per GPU of the cluster (``num_gpus=1``: Ray pins it with ``CUDA_VISIBLE_DEVICES``), or in one CPU actor where
the cluster has no GPU or the target is the CPU. Results stream back as tasks finish (``ray.wait``).

Faults: compile tasks are submitted with ``max_retries=0`` and actors with ``max_restarts=0``, so a worker process
or node that dies surfaces here as a lost task (``WorkerCrashedError``, ``ActorDiedError``, ``NodeDiedError``); the
scheduler retries it once elsewhere (a lost actor is replaced first). A kernel that crashes its GPU context kills
only its actor. Ctrl-C cancels the tasks in flight (``ray.cancel(force=True)``) and kills the actors.

Ray is an optional extra (``pip install -e '.[ray]'``); this module imports it only when an executor is opened.
"""

from __future__ import annotations

import collections
import os
from typing import Any

from .executors import COMPILE, TIME, Event, Executor, WorkerState

_REMOTES: dict[str, Any] = {}


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError("executor='ray' needs Ray: pip install 'tilelang-workbench[ray]' (or pip install ray)") \
            from e
    return ray


def _worker_name() -> str:
    ray = _ray()
    node = ray.get_runtime_context().get_node_id() or "node"
    return f"ray:{node[:8]}:{os.getpid()}"


def _compile(job: Any, index: int, call: dict[str, Any]) -> Any:
    from .tasks import compile_one

    return compile_one(job, index, call, _worker_name())


class _TimingActor:
    """One timing worker (per GPU, or the CPU's): a :class:`~.tasks.TimingSession` in a Ray actor."""

    def __init__(self, job: Any, name: str):
        from .tasks import TimingSession

        self.session = TimingSession(job, f"{name}({_worker_name()})")

    def pid(self) -> int:
        return os.getpid()

    def measure(self, task: Any) -> Any:
        return self.session.measure(task)

    def finals(self, task: Any) -> Any:
        return self.session.finals(task)


def _remotes() -> dict[str, Any]:
    if not _REMOTES:
        ray = _ray()
        _REMOTES["compile"] = ray.remote(num_cpus=1, max_retries=0)(_compile)
        _REMOTES["actor"] = ray.remote(max_restarts=0, max_task_retries=0)(_TimingActor)
    return _REMOTES


class RayExecutor(Executor):
    """Run a sweep on a Ray cluster: ``address`` as ``ray.init`` takes it (None: the cluster this process is
    connected to, else a new local one; ``"auto"``; ``"127.0.0.1:6379"``; ``"ray://host:10001"``).
    ``timing_actors``: how many (default: one per GPU of the cluster for a CUDA target, else one)."""

    def __init__(self, address: str | None = None, timing_actors: int | None = None,
                 init_kwargs: dict[str, Any] | None = None):
        if timing_actors is not None and (not isinstance(timing_actors, int) or timing_actors < 1):
            raise ValueError(f"RayExecutor: timing_actors must be a positive integer, got {timing_actors!r}")
        super().__init__(name="ray")
        self.address = address
        self.timing_actors = timing_actors
        self.init_kwargs = dict(init_kwargs or {})
        self._refs: dict[Any, tuple[str, int, str]] = {}
        self._actors: dict[str, Any] = {}
        self._busy: dict[str, Any] = {}  # actor name -> ref in flight
        self._pids: dict[str, Any] = {}  # actor name -> ref of its pid
        self._queue: collections.deque[tuple[str, int, Any, str | None]] = collections.deque()
        self._job: Any = None
        self._job_ref: Any = None
        self._gpu = False
        self._serial = 0

    # -- cluster ----------------------------------------------------------------------------------------------
    def connect(self) -> Any:
        ray = _ray()
        if not ray.is_initialized():
            kwargs = {"log_to_driver": False, **self.init_kwargs}
            ray.init(address=self.address, **kwargs)
        return ray

    def open(self, job: Any) -> None:
        ray = self.connect()
        self._job = job
        self._job_ref = ray.put(job)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self._gpu = job.kind == "cuda" and gpus > 0
        n = self.timing_actors or (gpus if self._gpu else 1)
        self._kill_actors()
        self.workers = {}
        for _ in range(n):
            self._new_actor()

    def _new_actor(self) -> str:
        self._serial += 1
        name = f"ray-time-{self._serial}"
        opts = {"num_gpus": 1} if self._gpu else {"num_cpus": 1}
        actor = _remotes()["actor"].options(**opts).remote(self._job_ref, name)
        self._actors[name] = actor
        self._pids[name] = actor.pid.remote()  # asked first: answered before the actor's first measurement
        self.workers[name] = WorkerState(name, TIME)
        return name

    def actor_pids(self) -> dict[str, int]:
        """The timing actors' process ids (by worker name)."""
        ray = _ray()
        return {n: int(ray.get(self._pids[n])) for n in self._actors}

    def _kill_actors(self) -> None:
        ray = _ray()
        for a in self._actors.values():
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self._actors.clear()
        self._busy.clear()
        self._pids.clear()

    # -- tasks ------------------------------------------------------------------------------------------------
    def capacity(self, role: str) -> int:
        if role == TIME:
            return len(self._actors)
        ray = _ray()
        return int(ray.cluster_resources().get("CPU", 1))

    def idle(self, role: str) -> int:
        if role == TIME:
            return len(self._actors) - len(self._busy)
        return self.capacity(role)

    def submit(self, kind: str, task_id: int, payload: Any, avoid: str | None = None) -> None:
        if kind == COMPILE:
            ref = _remotes()["compile"].remote(self._job_ref, task_id, payload)
            self._refs[ref] = (COMPILE, task_id, "")
            return
        self._queue.append((kind, task_id, payload, avoid))
        self._dispatch()

    def _dispatch(self) -> None:
        still: collections.deque[tuple[str, int, Any, str | None]] = collections.deque()
        while self._queue:
            kind, task_id, payload, avoid = self._queue.popleft()
            idle = [n for n in self._actors if n not in self._busy]
            others = [n for n in idle if n != avoid]
            pick = others[0] if others else (idle[0] if idle else None)
            if pick is None:
                still.append((kind, task_id, payload, avoid))
                continue
            actor = self._actors[pick]
            ref = (actor.measure if kind == TIME else actor.finals).remote(payload)
            self._refs[ref] = (kind, task_id, pick)
            self._busy[pick] = ref
            w = self.workers[pick]
            w.busy, w.current = True, task_id
        self._queue = still

    def pending(self) -> int:
        return len(self._refs) + len(self._queue)

    def wait(self, timeout: float) -> list[Event]:
        ray = _ray()
        self._dispatch()
        if not self._refs:
            return []
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        events = []
        for ref in ready:
            kind, task_id, worker = self._refs.pop(ref)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayTaskError as e:  # our code raised (it catches what it expects)
                out = RuntimeError(str(e).strip().splitlines()[-1])
            except ray.exceptions.RayError as e:  # the worker, actor or node is gone
                events.append(Event(kind, task_id, worker or "ray-compile", lost=True,
                                    why=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"))
                if worker:
                    self._lose_actor(worker)
                continue
            name = worker or getattr(out, "worker", "") or "ray-compile"
            if worker:
                self._busy.pop(worker, None)
            w = self.workers.setdefault(name, WorkerState(name, COMPILE if kind == COMPILE else TIME))
            w.busy, w.current, w.done = False, None, w.done + 1
            events.append(Event(kind, task_id, name, result=out))
        self._dispatch()
        return events

    def _lose_actor(self, name: str) -> None:
        """A timing actor died: forget it and start a replacement (Ray places it where resources are)."""
        ray = _ray()
        actor = self._actors.pop(name, None)
        self._busy.pop(name, None)
        self._pids.pop(name, None)
        if actor is not None:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        lost = self.workers.pop(name, WorkerState(name, TIME)).lost + 1
        new = self._new_actor()
        self.workers[new].lost = lost

    def cancel(self) -> None:
        ray = _ray()
        self._queue.clear()
        for ref, (kind, _tid, _worker) in list(self._refs.items()):
            if kind == COMPILE:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished meanwhile
                    pass
        self._refs.clear()
        self._kill_actors()

    def close(self) -> None:
        self._queue.clear()
        self._kill_actors()
        self._refs.clear()


__all__ = ["RayExecutor"]

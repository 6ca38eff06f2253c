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

Timeouts: a compile task running past ``compile_timeout_s`` is cancelled with ``force=True`` (its worker process is
killed) and a timing actor whose task runs past ``time_timeout_s`` is killed and replaced; either task counts as
lost (retried once, then recorded as failed with the reason). Ray queues tasks and starts worker processes itself,
so the time since submission is not the time running: a compile task tells a small clock actor when it has
started (its imports done), and its clock starts when the driver hears that; one that has not started
``START_ALLOWANCE_S`` plus its limit after submission is cancelled as well. The clock of a timing task starts when
its actor has finished starting (its ``pid()`` answered). This executor keeps no more compile tasks in flight than
the cluster has CPUs for them (the rest wait here).

Ray is an optional extra (``pip install -e '.[ray]'``); this module imports it only when an executor is opened.
"""

from __future__ import annotations

import collections
import os
import time
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

_REMOTES: dict[str, Any] = {}
START_ALLOWANCE_S = 300.0  # a compile task not started this long (plus its limit) after submission is cancelled


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


class _StartClock:
    """Where compile tasks say they have started (imports done). The driver asks for the keys after the ones it
    has read (``since``); a reply it never reads (a ``ray.get`` that timed out while this actor was still starting)
    loses no key: the next question gets it again. An earlier ``take()`` that emptied the list on every call lost
    the keys of such a reply, and their tasks ran into the start allowance (300 s) instead of their limit."""

    def __init__(self) -> None:
        self._keys: list[int] = []

    def started(self, key: int) -> None:
        self._keys.append(key)

    def take(self, since: int = 0) -> list[int]:
        return self._keys[since:]


def _compile(job: Any, index: int, call: dict[str, Any], clock: Any = None, key: int = 0) -> Any:
    from .tasks import compile_one

    if clock is not None:
        clock.started.remote(key)  # not waited for: the driver's clock for this task starts when it hears this
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
        _REMOTES["clock"] = ray.remote(num_cpus=0, max_restarts=0)(_StartClock)
    return _REMOTES


class RayExecutor(Executor):
    """Run a sweep on a Ray cluster: ``address`` as ``ray.init`` takes it (None: the cluster this process is
    connected to, else a new local one; ``"auto"``; ``"127.0.0.1:6379"``; ``"ray://host:10001"``).
    ``timing_actors``: how many (default: one per GPU of the cluster for a CUDA target, else one).
    ``compile_timeout_s`` / ``time_timeout_s``: how long a compile or timing task may run (900 s each)."""

    def __init__(self, address: str | None = None, timing_actors: int | None = None,
                 init_kwargs: dict[str, Any] | None = None, compile_timeout_s: float = DEFAULT_TIMEOUT_S,
                 time_timeout_s: float = DEFAULT_TIMEOUT_S):
        if timing_actors is not None and (not isinstance(timing_actors, int) or timing_actors < 1):
            raise ValueError(f"RayExecutor: timing_actors must be a positive integer, got {timing_actors!r}")
        super().__init__(name="ray")
        self.timeouts = {COMPILE: check_timeout("RayExecutor", "compile_timeout_s", compile_timeout_s),
                         TIME: check_timeout("RayExecutor", "time_timeout_s", time_timeout_s)}
        self.address = address
        self.timing_actors = timing_actors
        self.init_kwargs = dict(init_kwargs or {})
        self._refs: dict[Any, tuple[str, int, str]] = {}
        self._actors: dict[str, Any] = {}
        self._busy: dict[str, Any] = {}  # actor name -> ref in flight
        self._pids: dict[str, Any] = {}  # actor name -> ref of its pid
        self._queue: collections.deque[tuple[str, int, Any, str | None]] = collections.deque()
        self._compiles: collections.deque[tuple[int, Any]] = collections.deque()  # waiting for a free CPU
        self._compile_slots = 1
        self._started: dict[Any, float] = {}  # ref in flight -> when its clock started (time.monotonic())
        self._payloads: dict[Any, Any] = {}  # ref in flight -> its payload (the finalists' limit depends on it)
        self._ready: set[str] = set()  # actors that have finished starting
        self._clock: Any = None  # the _StartClock actor of this sweep
        self._keys: dict[int, Any] = {}  # start key -> compile ref not yet started
        self._key_of: dict[Any, int] = {}
        self._keys_read = 0  # how many start keys this sweep's clock has reported to the driver
        self._take: Any = None  # the clock's reply not read yet
        self._submitted: dict[Any, float] = {}  # compile ref -> when it was submitted
        self._next_key = 0
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
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self._compile_slots = max(1, cpus - (0 if self._gpu else n))  # CPU timing actors hold a CPU each
        self._kill_actors()
        self._clock = _remotes()["clock"].remote()
        self._keys_read, self._take = 0, None
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
        self._ready.clear()

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
            self._compiles.append((task_id, payload))
        else:
            self._queue.append((kind, task_id, payload, avoid))
        self._dispatch()

    def _dispatch(self) -> None:
        in_flight = sum(1 for kind, _t, _w in self._refs.values() if kind == COMPILE)
        while self._compiles and in_flight < self._compile_slots:
            task_id, payload = self._compiles.popleft()
            self._next_key += 1
            key = self._next_key
            ref = _remotes()["compile"].remote(self._job_ref, task_id, payload, self._clock, key)
            self._refs[ref] = (COMPILE, task_id, "")
            self._keys[key], self._key_of[ref] = ref, key
            self._submitted[ref] = time.monotonic()
            in_flight += 1
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
            self._started[ref] = time.monotonic()
            self._payloads[ref] = payload
            self._busy[pick] = ref
            w = self.workers[pick]
            w.busy, w.current = True, task_id
        self._queue = still

    def pending(self) -> int:
        return len(self._refs) + len(self._queue) + len(self._compiles)

    def _forget(self, ref: Any) -> tuple[str, int, str]:
        self._started.pop(ref, None)
        self._payloads.pop(ref, None)
        self._submitted.pop(ref, None)
        self._keys.pop(self._key_of.pop(ref, -1), None)
        return self._refs.pop(ref)

    def _compiles_started(self, now: float) -> None:
        """Start the clocks of the compile tasks that have said they started."""
        if not self._keys or self._clock is None:
            return
        ray = _ray()
        if self._take is None:
            self._take = self._clock.take.remote(self._keys_read)
        if not ray.wait([self._take], timeout=0)[0]:
            return  # the clock actor is still starting or busy: this reply is read at a later poll
        reply, self._take = self._take, None
        try:
            keys = ray.get(reply)
        except Exception:  # noqa: BLE001 - the clock actor is gone: the start allowance still holds
            return
        self._keys_read += len(keys)
        for key in keys:
            ref = self._keys.pop(key, None)
            if ref is not None and ref in self._refs:
                self._started[ref] = now

    def _overdue(self) -> list[Event]:
        """Kill what ran past its timeout: cancel the compile task (force: its worker process dies), kill the actor."""
        ray = _ray()
        now = time.monotonic()
        for name, ref in self._busy.items():  # an actor's clock starts once it has started (imports, session)
            if name not in self._ready and name in self._pids:
                if ray.wait([self._pids[name]], timeout=0)[0]:
                    self._ready.add(name)
                    self._started[ref] = max(self._started.get(ref, now), now)
                else:
                    self._started[ref] = now
        self._compiles_started(now)
        events = []
        for ref, (kind, task_id, worker) in list(self._refs.items()):
            limit = task_limit(self.timeouts, kind, self._payloads.get(ref))
            if ref in self._started:
                if now - self._started[ref] <= limit:
                    continue
            elif now - self._submitted.get(ref, now) <= limit + START_ALLOWANCE_S:
                continue
            self._forget(ref)
            what = TIMEOUT_NAMES[COMPILE if kind == COMPILE else TIME]
            events.append(Event(kind, task_id, worker or "ray-compile", lost=True,
                                why=f"{'actor ' + worker if worker else 'Ray compile task'} killed: its task ran past "
                                    f"{what}={limit:g}"))
            if worker:
                self._lose_actor(worker)
            else:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished meanwhile
                    pass
        return events

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
            kind, task_id, worker = self._forget(ref)
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
        events.extend(self._overdue())
        self._dispatch()
        return events

    def _lose_actor(self, name: str) -> None:
        """A timing actor died: forget it and start a replacement (Ray places it where resources are)."""
        ray = _ray()
        actor = self._actors.pop(name, None)
        self._busy.pop(name, None)
        self._pids.pop(name, None)
        self._ready.discard(name)
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
        self._compiles.clear()
        for ref, (kind, _tid, _worker) in list(self._refs.items()):
            if kind == COMPILE:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - finished meanwhile
                    pass
        self._drop_refs()
        self._kill_actors()

    def _drop_refs(self) -> None:
        for d in (self._refs, self._started, self._payloads, self._submitted, self._keys, self._key_of):
            d.clear()
        if self._clock is not None:
            try:
                _ray().kill(self._clock)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._clock = None
        self._keys_read, self._take = 0, None

    def close(self) -> None:
        self._queue.clear()
        self._compiles.clear()
        self._kill_actors()
        self._drop_refs()


__all__ = ["RayExecutor"]

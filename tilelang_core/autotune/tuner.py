"""Sweeping configurations: compile them (in parallel where possible), measure them one by one, keep the best.

Why this module exists: finding a good tile configuration is a search, and every result is worth keeping. The
programmatic form :func:`tune` takes a factory, a config list or grid and the problem arguments; it compiles the
configurations in worker processes (see :mod:`.workers`; factories that workers cannot import are compiled in this
process), skips those that fail with their reason, then checks and times the rest *sequentially* (two kernels timed
at once, or a kernel timed while others compile, would measure each other), records every measurement in the
tuning database, and shows a tqdm progress bar. The decorator form :class:`AutoTuner` wraps a ``@jit`` factory:
calling it with the problem arguments tunes once per argument set and returns the best compiled kernel.
"""

from __future__ import annotations

import inspect
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..target import resolve_target
from . import executors
from . import workers as workers_mod
from .db import TuningDB
from .device_info import device_facts
from .measure import MeasurementCancelledError, measure
from .progress import progress_bar
from .record import COMPILE_ERROR, FINAL, Measurement, jsonable, kernel_identity, library_versions, sweep_key
from .space import as_configs, factory_args
from .tasks import EarlyStop, SweepJob, problem


@dataclass
class TuneResult:
    """Every measurement of one sweep, in the order tried; ``best`` is the fastest that passed."""

    kernel: str
    args: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    reference_ms: float | None = None
    seconds: float = 0.0
    compiled_in: str = "process"  # "workers" | "process"
    tuned: list[str] = field(default_factory=list)  # the arguments the sweep varied
    sweep: str = ""  # the sweep's key in the database (resume=True continues it)
    executor: str = "inline"  # "inline" | "local" | "ray"
    finals: list[Measurement] = field(default_factory=list)  # finalists re-timed with the reference
    resumed: int = 0  # configurations taken from the database instead of measured again
    retried: int = 0  # tasks retried because their worker died
    lost: int = 0  # tasks whose worker died in flight
    pruned: int = 0  # configurations early-stopped
    cancelled: bool = False
    workers: dict[str, int] = field(default_factory=dict)  # tasks done per worker
    _jit: Any = field(default=None, repr=False)
    _kernels: dict[str, Any] = field(default_factory=dict, repr=False)
    _index: dict[str, int] = field(default_factory=dict, repr=False)  # measurement uid -> config index

    @property
    def best(self) -> Measurement | None:
        """The fastest configuration that passed: among the finalists' re-timings when there are any."""
        good = [m for m in (self.finals or self.measurements) if m.ok]
        return min(good, key=lambda m: m.latency_ms) if good else None

    @property
    def best_config(self) -> dict[str, Any] | None:
        b = self.best
        return dict(b.config) if b is not None else None

    @property
    def failures(self) -> list[Measurement]:
        return [m for m in self.measurements if not m.ok]

    def kernel_for(self, config: dict[str, Any]) -> Any:
        """The compiled kernel of one configuration (from the caches: it was compiled during the sweep)."""
        key = repr(sorted(config.items()))
        if key not in self._kernels:
            self._kernels[key] = workers_mod.compile_config(self._jit, config)
        return self._kernels[key]

    @property
    def best_kernel(self) -> Any:
        b = self.best
        if b is None:
            raise RuntimeError(f"{self.kernel}: no configuration compiled, ran and passed:\n{self.table()}")
        return self.kernel_for(b.config)

    def table(self, limit: int | None = None) -> str:
        """The measurements as text, fastest first, failures last."""
        good = sorted((m for m in self.measurements if m.latency_ms is not None), key=lambda m: m.latency_ms)
        rows = good + [m for m in self.measurements if m.latency_ms is None]
        lines = [m.describe(self.tuned or None) for m in rows[:limit]]
        for m in sorted(self.finals, key=lambda m: m.latency_ms or 0.0):
            lines.append(f"final: {m.describe(self.tuned or None)}")
        if self.reference_ms is not None:
            lines.append(f"reference: {self.reference_ms:.4f} ms")
        return "\n".join(lines)

    def __repr__(self) -> str:
        b = self.best
        best_txt = b.describe(self.tuned or None) if b is not None else "none passed"
        return (f"<TuneResult {self.kernel}: {len(self.measurements)} configs, {len(self.failures)} failed, "
                f"best {best_txt}>")


def _database(db: Any) -> TuningDB | None:
    if db is None or db is False:
        return None
    if db is True:
        return TuningDB()
    return db if isinstance(db, TuningDB) else TuningDB(Path(db))


def _worker_count(workers: int | None, n: int, ref: Any) -> int:
    """How many compile processes: none for one config, an unimportable factory, or without a disk cache."""
    from ..jit.cache import disk_cache_enabled

    if ref is None or n < 2 or not disk_cache_enabled() or not workers_mod.main_is_guarded():
        return 0
    if workers is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        workers = min(cores, n) if cores > 1 else 0
    return max(0, min(int(workers), n))


def tune(factory: Any, configs: Any, *, args: dict[str, Any] | None = None, ref: Callable[..., Any] | None = None,
         rtol: float | None = None, atol: float | None = None, out_idx: Any = None, target: Any = None,
         workers: int | None = None, db: Any = True, name: str | None = None, progress: bool = True,
         warmup: float = 25.0, rep: float = 100.0, on_result: Callable[[Measurement], None] | None = None,
         should_stop: Callable[[], bool] | None = None, inputs: Any = None, executor: Any = None,
         resume: bool = False, early_stop: Any = True, finalists: int = 3,
         on_progress: Callable[[Any], None] | None = None, timeout: float | None = None) -> TuneResult:
    """Try every configuration of ``factory`` at the problem ``args`` and return the measurements.

    ``configs``: a list of dicts, a grid ``{"block_M": [64, 128], ...}``, or a space string
    ``"block_M=64,128 num_stages=1:3"``. ``ref``: the torch reference (called with the inputs), checked with
    ``rtol``/``atol`` (default by output dtype). ``workers``: compile processes (default: one per core; 0 compiles
    here). ``db``: record in the tuning database (True: the default one; a path or :class:`TuningDB`; False: not).
    ``on_result(m)`` sees each measurement as it is recorded; ``should_stop()`` ends the sweep early.
    ``inputs``: the kernel's input tensors to check and time on (a list, or a function of the compiled kernel
    returning one; TileLang's ``set_autotune_inputs``); default: the profiler's seeded random inputs.

    ``executor``: where the work runs (docs/tuning.md): ``"local"`` (compile processes + one timing process per
    visible GPU, or one for the CPU), ``"ray"`` / ``RayExecutor(address=...)`` (a Ray cluster), ``"inline"`` (the
    previous release's path: timing in this process), or None: ``"local"`` when the factory can be imported by a
    worker and ``workers != 0``, else ``"inline"``. With an executor: ``early_stop`` (True: ``EarlyStop()``; an
    :class:`~.tasks.EarlyStop`; False: time everything fully) drops clearly slower configs after a few runs,
    ``finalists`` (default 3; 0: none) re-times the fastest interleaved with the reference, and ``on_progress(ex)``
    sees the executor's workers (``ex.workers``) as they progress. ``resume=True`` skips the configurations the
    database already holds for this sweep (same kernel source, fixed arguments, target, device, tolerances).
    ``timeout``: seconds one compile or one timing task may run on an executor's worker before the worker is
    killed (a compiler or a kernel that hangs); the task is retried once, then recorded as failed with the reason,
    and the sweep goes on. None: the executor's own limits (900 s each by default). The inline path runs in this
    process and cannot be limited: asking for a timeout there is a ``ValueError``.
    """
    t_start = time.perf_counter()
    cfgs = as_configs(configs)
    if not cfgs:
        raise ValueError("tune: no configurations to try")
    if not isinstance(finalists, int) or isinstance(finalists, bool) or finalists < 0:
        raise ValueError(f"tune: finalists must be a non-negative integer, got {finalists!r}")
    stop_rule = _early_stop(early_stop)
    if timeout is not None:
        executors.check_timeout("tune", "timeout", timeout)
    fixed = dict(args or {})
    calls = [{**fixed, **c} for c in cfgs]
    kname, module, source_hash = kernel_identity(factory, name)
    jf = workers_mod.jitted(factory, out_idx, target)
    backend = resolve_target(jf.target)
    database = _database(db)
    versions = library_versions()
    ref_spec = workers_mod.factory_ref(factory)
    from ..machine import device_name

    skey = sweep_key(kname, source_hash, fixed, backend, device_name(backend), (rtol, atol))
    bases = {i: Measurement(kernel=kname, config=factory_args(factory, call), module=module,
                            source_hash=source_hash, versions=versions, target=backend, sweep=skey)
             for i, call in enumerate(calls)}
    keys = list(dict.fromkeys(k for b in bases.values() for k in b.config))  # what identifies a configuration
    previous = _previous(database, kname, source_hash, skey, keys) if resume else {}
    known = {i: previous[_canon_config(b.config, keys)] for i, b in bases.items()
             if _canon_config(b.config, keys) in previous}
    todo = {i: calls[i] for i in range(len(calls)) if i not in known}
    ex = _choose_executor(executor, workers, ref_spec, len(todo), (ref, inputs))
    if timeout is not None and ex == "inline":
        raise ValueError(f"tune: timeout={timeout!r} needs an executor's worker processes to kill, but this sweep "
                         "runs inline (in this process: executor='inline', workers=0, a factory or reference a "
                         "worker cannot import or unpickle); pass executor='local' or 'ray', or no timeout")
    n_workers = _worker_count(workers, len(todo), ref_spec) if ex == "inline" else 0
    result = TuneResult(kernel=kname, args=fixed, compiled_in="workers" if n_workers or ex != "inline" else "process",
                        _jit=jf, tuned=list(dict.fromkeys(k for c in cfgs for k in c)), sweep=skey,
                        executor=ex if ex == "inline" else ex.name, resumed=len(known))
    for i in sorted(known):
        result.measurements.append(known[i])
    if ex == "inline":
        _run_inline(result, factory, jf, todo, bases, ref, ref_spec, n_workers, database, rtol=rtol, atol=atol,
                    warmup=warmup, rep=rep, inputs=inputs, progress=progress, on_result=on_result,
                    should_stop=should_stop)
    else:
        _run_executor(result, ex, jf, todo, bases, ref, ref_spec, database, backend, rtol=rtol, atol=atol,
                      warmup=warmup, rep=rep, inputs=inputs, progress=progress, on_result=on_result,
                      should_stop=should_stop, early_stop=stop_rule, finalists=finalists, on_progress=on_progress,
                      timeout=timeout)
    index = {m.uid: i for i, m in known.items()}
    index.update({m.uid: i for i, m in bases.items()})  # the inline path measures into the bases
    index.update(result._index)
    result.measurements.sort(key=lambda m: index.get(m.uid, len(bases)))
    result.seconds = time.perf_counter() - t_start
    return result


def _early_stop(early_stop: Any) -> EarlyStop | None:
    if early_stop is True:
        return EarlyStop()
    if early_stop is False or early_stop is None:
        return None
    if isinstance(early_stop, EarlyStop):
        return early_stop
    raise ValueError(f"tune: early_stop must be True, False or an EarlyStop(runs=..., factor=...), "
                     f"got {early_stop!r}")


def _canon_config(config: dict[str, Any], keys: list[str]) -> str:
    """A configuration by the factory's arguments only (a kernel may add entries of its own to a stored config)."""
    import json

    return json.dumps(jsonable({k: config.get(k) for k in keys}), sort_keys=True)


def _previous(database: TuningDB | None, kname: str, source_hash: str, skey: str,
              keys: list[str]) -> dict[str, Measurement]:
    """The configurations this sweep already measured (resume): the newest non-final row of each."""
    if database is None:
        return {}
    out: dict[str, Measurement] = {}
    for m in database.query(kname, source_hash=source_hash, device=None, sweep=skey):
        if m.stage != FINAL:
            out[_canon_config(m.config, keys)] = m
    return out


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - a lambda, a closure, an open handle, ...
        return False
    return True


def _choose_executor(executor: Any, workers: int | None, ref_spec: Any, n: int, shipped: Any) -> Any:
    """The executor for this sweep: ``"inline"`` or an :class:`~.executors.Executor`. Unasked (None), the local
    executor when the factory, the reference and the inputs can reach its processes, else the inline path."""
    if executor is None:
        if (workers == 0 or ref_spec is None or n < 2 or not workers_mod.main_is_guarded()
                or not _picklable(shipped)):
            return "inline"
        executor = "local"
    ex = executors.resolve(executor, workers)
    if ex != "inline":
        if ref_spec is None:
            raise ValueError(f"executor={getattr(ex, 'name', executor)!r}: the factory cannot be imported by a "
                             "worker process (it is defined in a notebook cell, inside a function, or in exec'd "
                             "code); move it to a module, or use executor='inline'")
        if not workers_mod.main_is_guarded():
            raise ValueError(f"executor={ex.name!r}: the main script has no 'if __name__ == \"__main__\":' guard, "
                             "so worker processes would run it again; add one, or use executor='inline'")
    return ex


def _run_executor(result: TuneResult, ex: Any, jf: Any, todo: dict[int, dict[str, Any]],
                  bases: dict[int, Measurement], ref: Any, ref_spec: Any, database: TuningDB | None, backend: str,
                  *, rtol: Any, atol: Any, warmup: float, rep: float, inputs: Any, progress: bool,
                  on_result: Any, should_stop: Any, early_stop: EarlyStop | None, finalists: int,
                  on_progress: Any, timeout: float | None = None) -> None:
    from ..jit.cache import cache_dir
    from . import scheduler

    job = SweepJob(factory=ref_spec, out_idx=jf.out_idx, target=jf.target, kind=backend, ref=ref, rtol=rtol,
                   atol=atol, warmup=warmup, rep=rep, inputs=inputs, early_stop=early_stop,
                   cache_dir=str(cache_dir()))
    if ex.name == "local":
        try:
            pickle.dumps(job)
        except Exception as e:  # noqa: BLE001 - a lambda reference, a tensor of an odd type, ...
            raise ValueError(f"executor='local': the reference and inputs must be picklable to reach the timing "
                             f"process (a module-level function, not a lambda): {type(e).__name__}: {e}; "
                             "use executor='inline' or executor='ray' (which ships lambdas)") from None
    if not todo:
        return
    bar = progress_bar(len(todo), f"{result.kernel}: {ex.name}", enable=progress)
    best_ms = result.best.latency_ms if result.best is not None else None

    def record(i: int, m: Measurement) -> None:
        if database is not None:
            database.record(m)
        result._index[m.uid] = i
        if m.ref_ms is not None:
            result.reference_ms = m.ref_ms
        if m.stage == FINAL:
            result.finals.append(m)
        else:
            result.measurements.append(m)
            bar.update(1)
        if on_result is not None:
            on_result(m)
        b = result.best
        if b is not None and b.latency_ms is not None:
            bar.set_postfix_str(f"best {b.latency_ms:.3f} ms", refresh=False)

    def progressed(executor: Any) -> None:
        counts = " ".join(f"{w.name}:{w.done}" for w in executor.workers.values())
        bar.set_description(f"{result.kernel}: {ex.name} [{counts}]", refresh=False)
        if on_progress is not None:
            on_progress(executor)

    saved = dict(ex.timeouts)
    if timeout is not None:  # this sweep's limit; the (session's shared) executor keeps its own afterwards
        ex.timeouts.update({executors.COMPILE: float(timeout), executors.TIME: float(timeout)})
    try:
        stats = scheduler.run(ex, job, todo, bases, record=record, barrier=backend != "cuda", finalists=finalists,
                              should_stop=should_stop, on_progress=progressed, best_ms=best_ms)
    finally:
        ex.timeouts.clear()
        ex.timeouts.update(saved)
        bar.close()
    result.retried, result.lost, result.pruned = stats.retried, stats.lost, stats.pruned
    result.cancelled = stats.cancelled
    result.workers = {n: w.done for n, w in ex.workers.items()}


def _run_inline(result: TuneResult, factory: Any, jf: Any, todo: dict[int, dict[str, Any]],
                bases: dict[int, Measurement], ref: Any, ref_spec: Any, n_workers: int,
                database: TuningDB | None, *, rtol: Any, atol: Any, warmup: float, rep: float, inputs: Any,
                progress: bool, on_result: Any, should_stop: Any) -> None:
    """The previous release's sweep: compile (in worker processes where possible), then check and time here, one
    configuration after another."""
    kname = result.kernel
    order = sorted(todo)
    calls = [todo[i] for i in order]
    bar = progress_bar(len(calls), f"{kname}: compiling" if n_workers else f"{kname}: tuning", enable=progress)
    failed: dict[int, tuple[str, float]] = {}
    compile_times: dict[int, float] = {}
    try:
        if n_workers:
            bar.set_description(f"{kname}: compiling ({n_workers} processes)")

            def done(i: int, why: str | None, seconds: float) -> None:
                compile_times[i] = seconds
                if why:
                    failed[i] = (why, seconds)
                bar.update(1)

            workers_mod.compile_parallel(ref_spec, calls, jf.out_idx, jf.target, n_workers, on_done=done)
            bar.reset(total=len(calls))
            bar.set_description(f"{kname}: timing")
        problems: dict[str, tuple[list[Any], tuple[Any, ...] | None, float | None]] = {}
        for i, call in enumerate(calls):
            if should_stop is not None and should_stop():
                result.cancelled = True
                break
            m = bases[order[i]]
            kernel = None
            if i in failed:
                m.status, m.message = COMPILE_ERROR, failed[i][0]
            else:
                t0 = time.perf_counter()
                try:
                    kernel = workers_mod.compile_config(jf, call)
                except Exception as e:  # noqa: BLE001 - skip the config, keep its reason
                    m.status, m.message = COMPILE_ERROR, workers_mod.reason(e)
                m.compile_s = compile_times.get(i, time.perf_counter() - t0)
            if kernel is None:
                from ..machine import device_name

                m.device = device_name(m.target)
            else:
                m.config = {**m.config, **kernel.config} if kernel.config else m.config
                try:
                    ins, ref_outs, ref_ms = problem(problems, kernel, ref, warmup, rep, inputs)
                    measure(kernel, m, inputs=ins, ref_outputs=ref_outs, rtol=rtol, atol=atol, warmup=warmup,
                            rep=rep, should_stop=should_stop)
                    m.ref_ms = ref_ms
                    result.reference_ms = ref_ms
                except MeasurementCancelledError:
                    result.cancelled = True
                    break
            facts = device_facts(m.target)
            m.driver, m.clocks, m.worker = facts.driver, facts.clocks, "inline"
            if database is not None:
                database.record(m)
            result.measurements.append(m)
            if on_result is not None:
                on_result(m)
            bar.update(1)
            b = result.best
            if b is not None and b.latency_ms is not None:
                bar.set_postfix_str(f"best {b.latency_ms:.3f} ms", refresh=False)
    finally:
        bar.close()


class AutoTuner:
    """``@tilelang_core.autotune(configs=...)`` over a ``@jit`` factory: calling it tunes, returns the best kernel.

    Tuning happens once per distinct set of call arguments (kept in :attr:`results`); passing any tuned argument
    explicitly skips tuning and compiles that call as given. ``from_db=True`` reuses the tuning database's best
    configuration for these arguments, when there is one, else the shipped defaults' (``defaults``: True the
    package's file, a path, False none; :mod:`.defaults`), instead of sweeping again.
    """

    def __init__(self, factory: Any, configs: Any, *, from_db: bool = False, defaults: Any = True, **options: Any):
        self.factory = factory
        self.configs = configs
        self.from_db = from_db
        self.defaults = defaults
        self.options = options
        self.results: dict[str, TuneResult] = {}
        self._kernels: dict[str, Any] = {}
        self.__wrapped__ = getattr(factory, "factory", factory)
        self.__name__ = getattr(self.__wrapped__, "__name__", "kernel")
        self.__doc__ = getattr(self.__wrapped__, "__doc__", None)

    @property
    def result(self) -> TuneResult | None:
        """The most recent sweep."""
        return next(reversed(self.results.values()), None) if self.results else None

    def _given(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        sig = inspect.signature(self.__wrapped__)
        sizes = {k: kwargs[k] for k in getattr(self.factory, "sizes", ()) if k in kwargs and k not in sig.parameters}
        rest = {k: v for k, v in kwargs.items() if k not in sizes}  # an eager function's T.const sizes: N=1024
        try:
            return {**sig.bind_partial(*args, **rest).arguments, **sizes}
        except TypeError as e:
            raise TypeError(f"{self.__name__}: {e}") from None

    def tune(self, *args: Any, **kwargs: Any) -> TuneResult:
        """Sweep for these problem arguments (always runs) and return the measurements."""
        given = self._given(args, kwargs)
        result = tune(self.factory, self.configs, args=given, **self.options)
        self.results[repr(sorted(given.items()))] = result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        jf = workers_mod.jitted(self.factory, self.options.get("out_idx"), self.options.get("target"))
        if getattr(jf, "eager", False):
            return self._call_eager(jf, args, kwargs)
        given = self._given(args, kwargs)
        tuned = set().union(*as_configs(self.configs))
        if tuned & set(given):
            return jf(**given)
        key = repr(sorted(given.items()))
        if key in self._kernels:
            return self._kernels[key]
        if self.from_db:
            from .defaults import default_config

            known = default_config(self.factory, given, jf.target, db=self.options.get("db", True),
                                   shipped=self.defaults)
            if known is not None:
                kernel = workers_mod.compile_config(jf, {**known.config, **given})
                kernel.tuning_default = known
                self._kernels[key] = kernel
                return kernel
        result = self.tune(*args, **kwargs)
        kernel = result.best_kernel
        # TileLang's names on the tuned kernel: the best configuration's latency (ms) and the reference's
        kernel.latency = result.best.latency_ms
        kernel.ref_latency = result.reference_ms
        self._kernels[key] = kernel
        return kernel

    def _call_eager(self, jf: Any, args: tuple, kwargs: dict) -> Any:
        """An eager ``@jit`` function called with its tensors: tune once per problem (its compile-time arguments
        and the ``T.const`` sizes the tensors give, on the profiler's inputs of those sizes), then run the best
        configuration on the given tensors and return what the function returns. ``f.compile(N=...)``-style calls
        without tensors go through :meth:`tune`."""
        given = self._given(args, kwargs)
        tensors = set(jf.tensor_params)
        problem = {k: v for k, v in given.items() if k not in tensors}
        tuned = set().union(*as_configs(self.configs))
        if tuned & set(problem):
            return jf(*args, **kwargs)
        probe = jf.compile(*args, **kwargs)  # the T.const sizes, read from the tensors (TileLang's rule)
        problem.update({k: probe.config[k] for k in jf.sizes if k in (probe.config or {})})
        key = repr(sorted(problem.items()))
        if key not in self._kernels:
            best_kernel = self.tune(**problem).best_kernel
            self._kernels[key] = {k: best_kernel.config[k] for k in tuned if k in (best_kernel.config or {})}
        return jf(*args, **{**kwargs, **self._kernels[key]})

    def __repr__(self) -> str:
        return f"<tilelang_core.autotune {self.__name__}: {len(self.results)} sweep(s)>"


def autotune(func: Any = None, *, configs: Any = None, ref: Callable[..., Any] | None = None,
             ref_prog: Callable[..., Any] | None = None, from_db: bool = False, **options: Any) -> Any:
    """Decorate a kernel factory (usually above ``@tilelang_core.jit``)::

        @tilelang_core.autotune(configs={"block_M": [64, 128], "block_N": [64, 128]}, ref=lambda A, B: A @ B)
        @tilelang_core.jit(out_idx=[-1])
        def matmul(M, N, K, block_M=64, block_N=64, block_K=32): ...

        kernel = matmul(512, 512, 512)   # sweeps once, returns the best kernel; matmul.result has the table

    Options are :func:`tune`'s (``rtol``, ``atol``, ``workers``, ``db``, ``progress``, ``warmup``, ``rep``, ...);
    ``ref_prog`` is TileLang's name for ``ref``.
    """
    if configs is None:
        raise TypeError("autotune: configs= is required (a list of dicts, a grid dict, or a space string)")
    for legacy in ("timeout", "supply_type", "cache_input_tensors", "skip_check", "max_mismatched_ratio"):
        # TileLang options with no meaning here; TileLang's timeout is ignored (its sweeps with a lambda reference
        # run inline here, where tune(timeout=...) is refused): pass tune_timeout=... to limit executor tasks
        options.pop(legacy, None)
    if "tune_timeout" in options:
        options["timeout"] = options.pop("tune_timeout")

    def wrap(f: Any) -> AutoTuner:
        return AutoTuner(f, configs, ref=ref if ref is not None else ref_prog, from_db=from_db, **options)

    return wrap(func) if func is not None else wrap


__all__ = ["tune", "autotune", "AutoTuner", "TuneResult"]

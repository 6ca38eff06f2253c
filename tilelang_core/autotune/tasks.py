"""The work a sweep hands to its workers: compile one configuration; check and time one compiled kernel.

Why this module exists: the local executor's worker processes and the Ray executor's tasks and actors must do
exactly the same thing, so both call these functions. A :class:`SweepJob` says what every worker needs (how to
import the factory, the reference, tolerances, timing budgets, early stopping); it is sent once per sweep.
:func:`compile_one` compiles a configuration and returns its files (:mod:`.shipping`), never a live kernel;
:class:`TimingSession` lives in a timing worker: it loads shipped kernels, checks them against the reference on
seeded inputs (computed once per problem), and times them — briefly first, and no further when the kernel is
clearly slower than the best so far (:class:`EarlyStop`) — and re-times the finalists interleaved with the
reference (:meth:`TimingSession.finals`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .measure import as_tuple, inputs_for, measure
from .record import FINAL, OK, PRUNED, Measurement
from .shipping import ShippedKernel, pack, unpack
from .workers import FactoryRef, compile_config, jitted, load_factory, reason


@dataclass(frozen=True)
class EarlyStop:
    """Drop a configuration after ``runs`` timed calls when even its fast runs (p20) are ``factor`` times slower
    than the best median so far. ``factor=2.0`` keeps anything that could plausibly win after full timing."""

    runs: int = 5
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not isinstance(self.runs, int) or self.runs < 1:
            raise ValueError(f"EarlyStop: runs must be a positive integer, got {self.runs!r}")
        if not self.factor > 1.0:
            raise ValueError(f"EarlyStop: factor must be greater than 1 (a config slower than the best by that "
                             f"factor is dropped), got {self.factor!r}")

    def prunes(self, p20_ms: float, best_ms: float | None) -> bool:
        return best_ms is not None and best_ms > 0 and p20_ms > self.factor * best_ms


@dataclass
class SweepJob:
    """Everything a worker needs for one sweep (picklable; Ray also ships lambdas)."""

    factory: FactoryRef
    out_idx: Any
    target: Any
    kind: str  # "cpu" | "cuda": the target's kind
    ref: Callable[..., Any] | None = None
    rtol: float | None = None
    atol: float | None = None
    warmup: float = 25.0
    rep: float = 100.0
    inputs: Any = None
    early_stop: EarlyStop | None = None
    cache_dir: str | None = None
    final_rounds: int = 5


@dataclass
class CompileOutcome:
    """What a compile worker sends back: the kernel's files, or why the configuration failed."""

    index: int
    reason: str | None
    seconds: float
    shipped: ShippedKernel | None = None
    worker: str = ""


@dataclass
class TimeTask:
    """One kernel to check and time; ``best_ms``: the best median so far (for early stopping)."""

    index: int
    base: Measurement
    shipped: ShippedKernel
    best_ms: float | None = None


@dataclass
class FinalsTask:
    """The finalists, re-timed in rounds interleaved with the reference."""

    tasks: list[TimeTask] = field(default_factory=list)


_FACTORIES: dict[FactoryRef, Any] = {}


def compile_one(job: SweepJob, index: int, call: dict[str, Any], worker: str = "") -> CompileOutcome:
    """Compile ``call`` (the factory's keyword arguments) and pack the result; a failure is a result too."""
    if job.cache_dir:
        os.environ.setdefault("TILELANG_CORE_CACHE_DIR", job.cache_dir)
    t0 = time.perf_counter()
    try:
        if job.factory not in _FACTORIES:
            _FACTORIES[job.factory] = jitted(load_factory(job.factory), job.out_idx, job.target)
        kernel = compile_config(_FACTORIES[job.factory], call)
        shipped = pack(kernel)
    except Exception as e:  # noqa: BLE001 - a failing config is a result
        return CompileOutcome(index, reason(e), time.perf_counter() - t0, None, worker)
    return CompileOutcome(index, None, time.perf_counter() - t0, shipped, worker)


class TimingSession:
    """A timing worker's state: the job, its unpacked kernels, and the inputs/reference per problem."""

    def __init__(self, job: SweepJob, worker: str, root: str | None = None):
        from .device_info import device_facts

        self.job = job
        self.worker = worker
        self.root = root or tempfile.mkdtemp(prefix="tilelang-timing-")
        self._problems: dict[str, tuple[list[Any], tuple[Any, ...] | None, float | None]] = {}
        self._facts = device_facts
        self.facts = device_facts(job.kind)

    def _stamp(self, m: Measurement) -> None:
        facts = self._facts(self.job.kind)  # clocks at measurement
        m.device, m.driver, m.clocks, m.worker = facts.name, facts.driver, facts.clocks, self.worker

    def load(self, task: TimeTask) -> Any:
        return unpack(task.shipped, self.root)

    def measure(self, task: TimeTask) -> Measurement:
        """Check and time one kernel (see :class:`EarlyStop`); every failure is a measurement, not an error."""
        m = task.base
        job = self.job
        try:
            kernel = self.load(task)
            m.config = {**m.config, **kernel.config} if kernel.config else m.config
            ins, ref_outs, ref_ms = problem(self._problems, kernel, job.ref, job.warmup, job.rep, job.inputs)
        except Exception as e:  # noqa: BLE001 - e.g. a shipped kernel that does not load here
            m.status, m.message = "run_error", reason(e)
            self._stamp(m)
            return m
        self._stamp(m)
        measure(kernel, m, inputs=ins, ref_outputs=ref_outs, rtol=job.rtol, atol=job.atol, bench=False)
        m.device = self.facts.name
        m.ref_ms = ref_ms
        if m.status not in (OK, "check_failed"):
            return m
        prof = kernel.get_profiler()
        stop = job.early_stop
        if stop is not None and task.best_ms is not None:
            quick = prof.do_bench(inputs=ins, n_warmup=1, n_repeat=stop.runs)
            if stop.prunes(quick.p20_ms, task.best_ms):
                _fill(m, quick)
                m.stage = PRUNED
                m.message = (f"early-stopped after {quick.runs} runs: p20 {quick.p20_ms:.4f} ms > "
                             f"{stop.factor:g} x best {task.best_ms:.4f} ms")
                return m
        _fill(m, prof.do_bench(inputs=ins, warmup=job.warmup, rep=job.rep))
        return m

    def finals(self, task: FinalsTask) -> list[Measurement]:
        """Re-time the finalists in ``final_rounds`` rounds, each round timing every finalist and then the
        reference, so a drift of the machine (clocks, a neighbour's load) hits them all alike. Returns one
        :data:`~.record.FINAL` measurement per finalist: median and spread over every run of every round."""
        job = self.job
        rounds = max(1, job.final_rounds)
        loaded = []
        for t in task.tasks:
            kernel = self.load(t)
            ins, _ref_outs, _ = problem(self._problems, kernel, job.ref, job.warmup, job.rep, job.inputs)
            loaded.append((t, kernel, ins))
        samples: list[list[float]] = [[] for _ in loaded]
        ref_samples: list[float] = []
        per_round = job.rep / rounds
        for _ in range(rounds):
            for i, (_t, kernel, ins) in enumerate(loaded):
                r = kernel.get_profiler().do_bench(inputs=ins, warmup=job.warmup / rounds, rep=per_round)
                samples[i].extend(r.samples_ms)
            if job.ref is not None and loaded:
                _t, kernel, ins = loaded[0]
                r = kernel.get_profiler().do_bench(job.ref, inputs=ins, warmup=job.warmup / rounds, rep=per_round)
                ref_samples.extend(r.samples_ms)
        from ..profiler import BenchResult

        out = []
        for (t, _kernel, _ins), s in zip(loaded, samples):
            m = t.base
            self._stamp(m)
            _fill(m, BenchResult(s))
            m.stage = FINAL
            m.ref_ms = statistics.median(ref_samples) if ref_samples else None
            m.message = f"finalist: {rounds} rounds interleaved with the reference"
            out.append(m)
        return out


def _fill(m: Measurement, t: Any) -> None:
    m.latency_ms = float(t)
    m.p20_ms, m.p80_ms, m.min_ms, m.runs = t.p20_ms, t.p80_ms, t.min_ms, t.runs


def problem(cache: dict[str, Any], kernel: Any, ref: Callable[..., Any] | None, warmup: float, rep: float,
            inputs: Any = None) -> tuple[list[Any], tuple[Any, ...] | None, float | None]:
    """Inputs, reference outputs and reference latency for the kernel's parameter shapes (computed once each)."""
    key = repr([(p.shape, p.dtype) for p in kernel.params])
    if key not in cache:
        if inputs is None:
            symbolic = sorted({d for i in kernel.in_idx for d in kernel.params[i].shape if isinstance(d, str)})
            if symbolic:  # one kernel for every size: which size to tune for is the caller's choice
                raise ValueError(f"tune: the kernel {kernel.name} has the symbolic size(s) {', '.join(symbolic)}, so "
                                 "its inputs cannot be drawn; pass the tensors to tune on (tune(..., inputs=[...]), "
                                 "or `with tilelang.autotuner.set_autotune_inputs(...)` around an @autotune call)")
            ins = inputs_for(kernel)
        else:
            ins = list(inputs(kernel) if callable(inputs) else inputs)
            if len(ins) != len(kernel.in_idx):
                raise ValueError(f"inputs: the kernel takes {len(kernel.in_idx)} input tensor(s), "
                                 f"{len(ins)} given")
        ref_outs = as_tuple(ref(*ins)) if ref is not None else None
        ref_ms = float(kernel.get_profiler().do_bench(ref, inputs=ins, warmup=warmup, rep=rep)) if ref else None
        cache[key] = (ins, ref_outs, ref_ms)
    return cache[key]


__all__ = ["EarlyStop", "SweepJob", "CompileOutcome", "TimeTask", "FinalsTask", "compile_one", "TimingSession",
           "problem"]

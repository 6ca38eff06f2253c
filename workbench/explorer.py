"""Measuring configurations of a workbench kernel for the tuning panel, and remembering every result.

Why this module exists: the panel's widgets should only display; the work behind a slider move — compile the cell's
factory with the new arguments (through the session cache), check the outputs against ``--ref``, time it, record
the measurement in the tuning database — is the same for a slider move, a sweep step and a test, and lives here.
It goes through tilelang_core's public API only: the kernel is compiled by the workbench's build cache
(``tilelang_core.jit``), measured by ``tilelang_core.autotune.measure`` (so panel and ``tilelang_core.autotune``
records are identical) and stored with ``tilelang_core.autotune.TuningDB``. Results are keyed by the tunable
values (``64/64/32/2/128``); a configuration measured once is "cached" and shows instantly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .check import Reference, outputs_margin
from .errors import compile_error
from .tunables import Tunable, full_label, short_label

COMPILED_ONLY = "no CUDA GPU here: compiled only"  # the message of a CUDA configuration built, not run


@dataclass(frozen=True)
class KnownBest:
    """The tuning database's best configuration: its newest measurement, the median it was ranked by, how many."""

    measurement: Any
    median_ms: float
    count: int

    @property
    def config(self) -> dict[str, Any]:
        return self.measurement.config


class Explorer:
    """Measures configurations of one workbench kernel; ``results`` holds this session's, in the order tried."""

    def __init__(self, wk: Any, knobs: list[Tunable], db: Any = True):
        from tilelang_core.autotune import TuningDB, kernel_identity
        from tilelang_core.autotune.record import library_versions

        if wk.program.function is None:
            raise ValueError(f"{wk.name}: the cell defines a @T.prim_func with fixed shapes; the tuning panel needs "
                             "a kernel factory whose arguments it can change")
        self.wk = wk
        self.knobs = list(knobs)
        self.names = [k.name for k in knobs]
        self.db = TuningDB() if db is True else (None if db is None or db is False else db)
        self.kernel_name, _module, self.source_hash = kernel_identity(wk.program.function, wk.name)
        self.versions = library_versions()
        self.results: dict[str, Any] = {}  # short label -> Measurement (this session)
        self.margins: dict[str, tuple[Any, float]] = {}  # short label -> (Measurement, its tolerance margin)
        self._lock = threading.Lock()
        self._problem: tuple[list[Any], tuple[Any, ...] | None] | None = None
        self.reference: Reference | None = None
        if wk.options.ref is not None:
            names = [wk.params[i].name for i in wk.kernel.in_idx]
            self.reference = Reference(wk.options.ref, names, dict(wk.program.namespace))
        self.ref_ms: float | None = None
        if wk.timing is not None and wk.timing.ref_ms is not None:
            self.ref_ms = float(wk.timing.ref_ms)
        self._ceilings: Any = None

    # -- identity --------------------------------------------------------------------------------------------
    def initial(self) -> dict[str, Any]:
        """The knobs' starting values."""
        return {k.name: k.value for k in self.knobs}

    def key(self, config: dict[str, Any]) -> str:
        return short_label(config, self.names)

    def full_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Every factory argument for a knob setting."""
        from tilelang_core.autotune.space import factory_args

        return factory_args(self.wk.program.function, {**self.wk.kwargs, **config})

    def cached(self, config: dict[str, Any]) -> Any:
        """The measurement of this setting taken earlier in this session, or None."""
        with self._lock:
            return self.results.get(self.key(config))

    @property
    def target_kind(self) -> str:
        from tilelang_core.machine import target_kind

        return target_kind(self.wk.kernel.target)

    @property
    def shapes(self) -> list[list[int]]:
        return [list(p.shape) for p in self.wk.params]

    # -- measuring -------------------------------------------------------------------------------------------
    def _new(self, config: dict[str, Any]) -> Any:
        from tilelang_core.autotune import Measurement

        return Measurement(kernel=self.kernel_name, config=self.full_config(config), source_hash=self.source_hash,
                           versions=self.versions, target=self.target_kind)

    def measure(self, config: dict[str, Any], ctx: Any = None) -> Any:
        """Compile, check and time one knob setting; record and remember it. ``ctx`` (a job context) gets the
        phases and can cancel between them (``tilelang_core.autotune.MeasurementCancelledError``)."""
        from tilelang_core.autotune import MeasurementCancelledError, measure
        from tilelang_core.autotune.record import COMPILE_ERROR
        from tilelang_core.machine import device_name

        def phase(text: str) -> None:
            if ctx is not None:
                ctx.status(f"{text} {full_label(config, self.names)}")

        def stale() -> bool:
            return ctx is not None and ctx.stale()

        m = self._new(config)
        phase("compiling")
        try:
            build = self.wk.build_config(**config)
        except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a result, shown inline
            err = compile_error(e, self.wk.cell, self.wk.name)
            m.status, m.message = COMPILE_ERROR, err.text().split("\n", 1)[-1]
            m.device = device_name(m.target)
            if stale():
                raise MeasurementCancelledError("compiling") from None
            return self._keep(config, m)
        kernel = build.kernel
        m.compile_s = build.seconds
        if stale():
            raise MeasurementCancelledError("compiling")
        from .magic import can_run

        if not can_run(kernel):
            from tilelang_core.autotune.measure import resource_record
            from tilelang_core.autotune.record import RUN_ERROR

            m.status, m.message, m.device = RUN_ERROR, COMPILED_ONLY, device_name(m.target)
            m.resources = resource_record(kernel)  # registers, spills, smem, occupancy need no GPU
            return self._keep(config, m)
        ins, ref_outs = self._inputs(kernel)
        opts = self.wk.options
        measure(kernel, m, inputs=ins, ref_outputs=ref_outs, rtol=opts.rtol, atol=opts.atol, bench=opts.bench,
                phase=phase, should_stop=stale)
        if ref_outs is not None and m.max_abs is not None and m.rtol is not None and m.atol is not None:
            self._margin_of(kernel, m, ins, ref_outs)
        if self.ref_ms is None and self.reference is not None and opts.bench:
            if stale():
                raise MeasurementCancelledError("timing the reference")
            phase("timing the reference for")
            self.ref_ms = float(kernel.get_profiler().do_bench(self.reference, inputs=ins))
        m.ref_ms = self.ref_ms
        if stale():
            raise MeasurementCancelledError("timing")
        return self._keep(config, m)

    def _margin_of(self, kernel: Any, m: Any, ins: list[Any], ref_outs: tuple[Any, ...]) -> None:
        """How much of the criterion ``|a-b| <= atol + rtol*|b|`` the worst element uses (the error plot's y): one
        more run of the kernel on the same inputs (``measure`` keeps only max abs / max rel errors)."""
        from tilelang_core.autotune.measure import as_tuple

        try:
            outs = as_tuple(kernel(*ins))
        except Exception:  # noqa: BLE001 - it ran once already; a failure here leaves the margin unknown
            return
        with self._lock:
            self.margins[self.key(m.config)] = (m, outputs_margin(outs, ref_outs, float(m.rtol), float(m.atol)))

    def margin(self, m: Any) -> float | None:
        """The tolerance margin of a measurement taken in this session (None for other sessions' and unchecked)."""
        with self._lock:
            mine, value = self.margins.get(self.key(m.config), (None, None))
        return value if mine is m else None

    def _inputs(self, kernel: Any) -> tuple[list[Any], tuple[Any, ...] | None]:
        """Seeded inputs and the reference's outputs on them (computed once: every configuration has the same
        parameters)."""
        if self._problem is None:
            from tilelang_core.autotune.measure import as_tuple, inputs_for

            ins = inputs_for(kernel, getattr(self.wk, "sizes", None))  # symbolic sizes: the cell's --shapes values
            refs = as_tuple(self.reference(*ins)) if self.reference is not None else None
            self._problem = (ins, refs)
        return self._problem

    def _keep(self, config: dict[str, Any], m: Any) -> Any:
        if self.db is not None:
            self.db.record(m)
        with self._lock:
            self.results[self.key(config)] = m
        return m

    def add(self, m: Any) -> None:
        """Remember a measurement taken elsewhere (e.g. by ``tilelang_core.autotune.tune``)."""
        config = {n: m.config.get(n) for n in self.names}
        with self._lock:
            self.results[self.key(config)] = m

    # -- what the plots read ---------------------------------------------------------------------------------
    def measurements(self) -> list[Any]:
        with self._lock:
            return list(self.results.values())

    def best(self) -> Any:
        good = [m for m in self.measurements() if m.ok]
        return min(good, key=lambda m: m.latency_ms) if good else None

    def history(self) -> list[Any]:
        """Earlier measurements of this kernel (same source), shapes and target on this device, from the database
        (this session's own are left out)."""
        if self.db is None:
            return []
        mine = {m.id for m in self.measurements()}
        rows = self.db.query(self.kernel_name, shapes=self.shapes, target=self.target_kind,
                             source_hash=self.source_hash)
        return [m for m in rows if m.id not in mine]

    def best_known(self) -> KnownBest | None:
        """The best configuration in the database for this kernel *source* (a factory of the same name with other
        code does not count), shapes and target on this device, any session: configurations are ranked by the
        median of their measurements (``TuningDB.best``), and that median is what is shown (not one run's)."""
        if self.db is None:
            return None
        m = self.db.best(self.kernel_name, shapes=self.shapes, target=self.target_kind, source_hash=self.source_hash)
        if m is None:
            return None
        return KnownBest(m, float(m.ranked_ms if m.ranked_ms is not None else m.latency_ms), max(m.ranked_runs, 1))

    @property
    def known_ceilings(self) -> Any:
        """The roofline if it was measured already (never measures: safe on the main thread)."""
        return self._ceilings or None

    @property
    def dtypes(self) -> list[str]:
        """The kernel's parameter dtypes (they pick the compute ceiling: tensor cores for fp16/bf16)."""
        return [p.dtype for p in self.wk.params]

    def ceilings(self) -> Any:
        """The roofline of the device the kernel runs on — the CPU, or the GPU for a CUDA kernel (measured there
        with CUDA events) — measured once per device, then cached on disk, with the compute ceiling for the
        kernel's dtypes; None when unavailable."""
        if self._ceilings is None:
            from tilelang_core.machine import ceilings

            try:
                self._ceilings = ceilings(self.target_kind).for_dtypes(self.dtypes)
            except Exception:  # noqa: BLE001 - e.g. a CUDA kernel on a machine without a GPU: no roofline
                self._ceilings = False
        return self._ceilings or None


__all__ = ["Explorer"]

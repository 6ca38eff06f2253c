"""One measurement of one configuration: what was tried, where, and what came out.

Why this module exists: the tuner, the tuning database and the workbench's panel all pass the same facts around —
the kernel's identity (name and a hash of its source), the configuration, the problem (parameter shapes and
dtypes), target and device, library versions, the latency with its spread, the error against the reference, and
why a configuration failed. :class:`Measurement` is that record; it knows how to turn itself into the achieved
rate and the arithmetic intensity that the plots draw.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

OK = "ok"
COMPILE_ERROR = "compile_error"
RUN_ERROR = "run_error"
CHECK_FAILED = "check_failed"
STATUSES = (OK, COMPILE_ERROR, RUN_ERROR, CHECK_FAILED)
PRUNED = "pruned"  # stage: timed briefly, clearly slower than the best so far, not timed further
FINAL = "final"  # stage: a finalist re-timed interleaved with the reference


def kernel_identity(factory: Any, name: str | None = None) -> tuple[str, str, str]:
    """``(name, module, source_hash)`` of a kernel factory (plain function or ``@jit`` factory).

    The hash covers the factory's source text (found through ``inspect``, which also reads notebook cells that were
    registered in ``linecache``), so an edited kernel does not inherit the old kernel's best configuration.
    """
    func = getattr(factory, "factory", factory)
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__name__
    qual = qual.rsplit("<locals>.", 1)[-1]  # a factory defined inside a function: its own name
    module = getattr(func, "__module__", None) or ""
    try:
        text = inspect.getsource(func)
    except (OSError, TypeError):
        code = getattr(func, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else qual
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return name or qual, module, digest


def sweep_key(kernel: str, source_hash: str, args: dict[str, Any], target: str, device: str,
              tolerances: tuple[float | None, float | None] = (None, None)) -> str:
    """The identity of a sweep: the same kernel source, fixed arguments, target, device and tolerances. A restarted
    sweep with the same key skips the configurations the database already holds for it (``resume=True``)."""
    text = json.dumps([kernel, source_hash, jsonable(args), target, device, list(tolerances)], sort_keys=True,
                      default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def new_uid() -> str:
    """A measurement's own identity: merging the same result twice (a retried hand-over) keeps one row."""
    return uuid.uuid4().hex


def library_versions() -> dict[str, str]:
    """Versions that change generated code or timings."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    out = {"tilelang_core": __version__}
    for dist in ("apache-tvm", "apache-tvm-ffi", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "absent"
    return out


def jsonable(value: Any) -> Any:
    """A config value as JSON can hold it (ints, floats, strings, bools, None; lists of them; else ``repr``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


@dataclass
class Measurement:
    """The outcome of trying one configuration (``status`` is ``ok``, ``compile_error``, ``run_error`` or
    ``check_failed``); latencies in ms, errors against the reference, work per call for the rate."""

    kernel: str
    config: dict[str, Any]
    status: str = OK
    message: str = ""
    module: str = ""
    source_hash: str = ""
    shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    target: str = "cpu"
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    latency_ms: float | None = None  # median
    p20_ms: float | None = None
    p80_ms: float | None = None
    min_ms: float | None = None
    runs: int = 0
    ref_ms: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    rtol: float | None = None
    atol: float | None = None
    passed: bool | None = None  # None: no reference given
    flops: float | None = None
    bytes: float | None = None
    compile_s: float | None = None
    timestamp: float = field(default_factory=time.time)
    id: int | None = None  # row id, once stored
    uid: str = field(default_factory=new_uid)
    sweep: str = ""  # :func:`sweep_key` of the sweep that took it ("" outside a sweep)
    worker: str = ""  # which timing worker measured it (``local:gpu0``, ``ray:<node>:<pid>``)
    driver: str = ""  # GPU driver version where readable
    clocks: dict[str, float] = field(default_factory=dict)  # e.g. {"sm_mhz": 1980, "mem_mhz": 2619} or cpu_mhz
    stage: str = ""  # "" (timed once), PRUNED (early-stopped) or FINAL (finalist re-timed with the reference)
    attempts: int = 1  # 2: its first worker died with it in flight and it was retried elsewhere
    resources: dict[str, Any] = field(default_factory=dict)  # CUDA: KernelResources.to_dict() (regs, spills, ...)
    # set by TuningDB.best() (not stored): the median of this configuration's measurements that ranked it, over how
    # many; describe() shows it instead of this one run's latency
    ranked_ms: float | None = None
    ranked_runs: int = 0

    @property
    def ok(self) -> bool:
        """Ran, was timed, and matched the reference (or had none)."""
        return self.status == OK and self.latency_ms is not None and self.passed is not False

    @property
    def unit(self) -> str:
        return "GFLOP/s" if self.flops else "GB/s"

    def rate(self, ms: float | None = None) -> float | None:
        """Achieved GFLOP/s (when the FLOP count is known), else GB/s, at ``ms`` (default: the median)."""
        ms = self.latency_ms if ms is None else ms
        if not ms or ms <= 0:
            return None
        work = self.flops if self.flops else self.bytes
        return work / (ms * 1e-3) / 1e9 if work else None

    @property
    def gflops(self) -> float | None:
        return self.flops / (self.latency_ms * 1e-3) / 1e9 if self.flops and self.latency_ms else None

    @property
    def intensity(self) -> float | None:
        """FLOP per byte of parameters moved (each read or written once)."""
        return self.flops / self.bytes if self.flops and self.bytes else None

    def label(self, keys: list[str] | None = None) -> str:
        """``block_M=64, block_N=128`` over ``keys`` (default: the whole config)."""
        items = [(k, self.config[k]) for k in (keys or list(self.config)) if k in self.config]
        return ", ".join(f"{k}={v}" for k, v in items)

    def describe(self, keys: list[str] | None = None) -> str:
        """One line: the config (``keys`` of it, default all) and what happened."""
        label = self.label(keys)
        if self.status == COMPILE_ERROR:
            return f"{label}: compile error: {self.message}"
        if self.status == RUN_ERROR:
            return f"{label}: failed to run: {self.message}"
        if self.ranked_ms is not None:
            rate = self.rate(self.ranked_ms)
            text = f"{label}: median {self.ranked_ms:.4f} ms of {self.ranked_runs} measurement(s)"
        else:
            rate = self.rate()
            text = f"{label}: {self.latency_ms:.4f} ms" if self.latency_ms is not None else label
        if rate is not None:
            text += f" ({rate:.1f} {self.unit})"
        if self.max_rel is not None:
            text += f", max rel err {self.max_rel:.1e}"
        if self.status == CHECK_FAILED:
            text += " FAIL"
        return text


__all__ = ["Measurement", "kernel_identity", "library_versions", "jsonable", "sweep_key", "new_uid", "OK",
           "COMPILE_ERROR", "RUN_ERROR", "CHECK_FAILED", "STATUSES", "PRUNED", "FINAL"]

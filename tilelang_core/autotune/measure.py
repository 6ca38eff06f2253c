"""Measuring one compiled configuration: check it against the reference, then time it.

Why this module exists: the tuner's sweep and the workbench panel's slider must produce identical records, so both
call :func:`measure`. It runs the kernel on seeded inputs (the profiler's), compares every output with the
reference's (``|out - ref| <= atol + rtol * |ref|``; relative error taken where ``|ref| > atol``), times the kernel
with the profiler's ``do_bench`` (median and spread), and fills in a :class:`~.record.Measurement`. Between the
phases it reports progress (``phase("checking")``, ``phase("timing")``) and asks whether the caller still wants the
result (``should_stop``): a panel whose slider moved on abandons the old configuration instead of finishing it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .record import CHECK_FAILED, OK, RUN_ERROR, Measurement

_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
             "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}
HALF_DTYPES = ("float16", "bfloat16")


class MeasurementCancelledError(Exception):
    """The caller no longer wants this measurement (``should_stop()`` returned True)."""


def default_tolerance(dtypes: list[str]) -> float:
    """rtol = atol for outputs of these dtypes: 1e-2 half, 1e-4 float32, 1e-7 float64, 0 integers (loosest wins)."""
    tol = 0.0
    for dt in dtypes:
        if dt in HALF_DTYPES:
            tol = max(tol, 1e-2)
        elif dt == "float32":
            tol = max(tol, 1e-4)
        elif dt == "float64":
            tol = max(tol, 1e-7)
    return tol


def symbol_values(kernel: Any, inputs: Any) -> dict[str, int]:
    """The values the inputs give the kernel's symbolic sizes (``{"n": 300}`` for ``A: T.Tensor((n,), ...)``)."""
    out: dict[str, int] = {}
    for i, t in zip(kernel.in_idx, inputs or []):
        for d, n in zip(kernel.params[i].shape, getattr(t, "shape", ())):
            if isinstance(d, str) and d.isidentifier():
                out.setdefault(d, int(n))
    return out


def concrete_shape(shape: Any, sizes: dict[str, int]) -> list[Any]:
    """A parameter's shape with its symbolic sizes evaluated where ``sizes`` knows them (else kept as text)."""
    from ..runtime.exported import eval_size

    out = []
    for d in shape:
        try:
            out.append(eval_size(d, sizes))
        except (KeyError, ValueError):
            out.append(d)
    return out


def work(kernel: Any, config: dict[str, Any], sizes: dict[str, int] | None = None) -> tuple[float | None, float]:
    """(FLOPs, bytes) per call: ``2*M*N*K`` when the config (or a symbolic size) has integer M, N, K; bytes of every
    parameter whose shape is known (symbolic sizes from ``sizes``)."""
    known = {**(sizes or {}), **config}
    dims = [known.get(k) for k in ("M", "N", "K")]
    flops = float(2 * dims[0] * dims[1] * dims[2]) if all(
        isinstance(d, int) and not isinstance(d, bool) for d in dims) else None
    nbytes = 0.0
    for p in kernel.params:
        shape = concrete_shape(p.shape, sizes or {})
        if all(isinstance(d, int) for d in shape):
            nbytes += math.prod(shape) * _ITEMSIZE.get(p.dtype, 4)
    return flops, nbytes


def describe_problem(m: Measurement, kernel: Any, sizes: dict[str, int] | None = None) -> None:
    """Fill in the problem (parameter shapes and dtypes), the work per call, and the target from ``kernel``;
    ``sizes``: the values of its symbolic sizes on the inputs measured."""
    from ..machine import device_name, target_kind

    m.shapes = [concrete_shape(p.shape, sizes or {}) for p in kernel.params]
    m.dtypes = [p.dtype for p in kernel.params]
    m.flops, m.bytes = work(kernel, m.config, sizes)
    m.target = target_kind(kernel.target)
    m.device = device_name(m.target)
    m.resources = resource_record(kernel)


def resource_record(kernel: Any) -> dict[str, Any]:
    """A CUDA kernel's resources (``kernel.resources().to_dict()``: registers, spills, shared memory, occupancy)
    for the measurement's record; ``{}`` for a CPU kernel or where they cannot be read."""
    read = getattr(kernel, "resources", None)
    try:
        res = read() if callable(read) else None
    except Exception:  # noqa: BLE001 - resources are extra facts; a kernel that cannot report them still measures
        return {}
    return res.to_dict() if res is not None else {}


def inputs_for(kernel: Any, sizes: dict[str, int] | None = None) -> list[Any]:
    """Seeded random inputs (the profiler's), on the kernel's device; ``sizes``: values of its symbolic sizes."""
    inputs = kernel.get_profiler().inputs(dynamic_symbolic_constraints=sizes or None)
    if kernel.target.get("kind") == "cuda":
        inputs = [t.cuda() for t in inputs]
    return inputs


def as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare(outs: tuple[Any, ...], refs: tuple[Any, ...], rtol: float, atol: float) -> tuple[float, float, bool]:
    """(max abs error, max rel error, all within tolerance) over every output; NaN counts as a mismatch."""
    import torch

    if len(outs) != len(refs):
        raise ValueError(f"the kernel returned {len(outs)} output(s), the reference {len(refs)}")
    max_abs = max_rel = 0.0
    passed = True
    for o, r in zip(outs, refs):
        r = torch.as_tensor(r)
        if tuple(r.shape) != tuple(o.shape):
            raise ValueError(f"the kernel returns shape {list(o.shape)}, the reference {list(r.shape)}")
        o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
        d = (o64 - r64).abs()
        if d.numel() == 0:
            continue
        if bool(torch.isnan(d).any()):
            return math.nan, math.nan, False
        passed = passed and bool((d <= atol + rtol * r64.abs()).all())
        max_abs = max(max_abs, float(d.max()))
        big = r64.abs() > max(atol, 1e-12)
        if bool(big.any()):
            max_rel = max(max_rel, float((d[big] / r64.abs()[big]).max()))
    return max_abs, max_rel, passed


def measure(kernel: Any, m: Measurement, *, reference: Callable[..., Any] | None = None,
            inputs: list[Any] | None = None, ref_outputs: tuple[Any, ...] | None = None,
            rtol: float | None = None, atol: float | None = None, warmup: float = 25.0, rep: float = 100.0,
            bench: bool = True, phase: Callable[[str], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> Measurement:
    """Check ``kernel`` against ``reference`` (or precomputed ``ref_outputs``) and time it; fills and returns ``m``.

    A kernel that raises is ``run_error``; outputs out of tolerance are ``check_failed`` (still timed, so the plots
    can show them). Raises :class:`MeasurementCancelledError` between phases when ``should_stop()`` says so.
    """
    def step(name: str) -> None:
        if should_stop is not None and should_stop():
            raise MeasurementCancelledError(name)
        if phase is not None:
            phase(name)

    ins = inputs if inputs is not None else inputs_for(kernel)
    describe_problem(m, kernel, symbol_values(kernel, ins))
    out_dtypes = [kernel.params[i].dtype for i in kernel.out_idx]
    tol = default_tolerance(out_dtypes)
    m.rtol = tol if rtol is None else rtol
    m.atol = tol if atol is None else atol
    step("checking")
    try:
        outs = as_tuple(kernel(*ins))
    except Exception as e:  # noqa: BLE001 - a config that cannot run is a result, not a crash
        m.status, m.message = RUN_ERROR, f"{type(e).__name__}: {e}"
        return m
    if ref_outputs is None and reference is not None:
        ref_outputs = as_tuple(reference(*ins))
    if ref_outputs is not None:
        try:
            m.max_abs, m.max_rel, m.passed = compare(outs, ref_outputs, m.rtol, m.atol)
        except ValueError as e:
            m.status, m.message, m.passed = CHECK_FAILED, str(e), False
            return m
    m.status = OK if m.passed is not False else CHECK_FAILED
    if not bench:
        return m
    step("timing")
    t = kernel.get_profiler().do_bench(inputs=ins, warmup=warmup, rep=rep)
    m.latency_ms = float(t)
    m.p20_ms, m.p80_ms, m.min_ms, m.runs = t.p20_ms, t.p80_ms, t.min_ms, t.runs
    return m


__all__ = ["measure", "compare", "work", "describe_problem", "resource_record", "inputs_for", "default_tolerance",
           "MeasurementCancelledError"]

"""Checking a kernel against a reference expression and timing both.

Why this module exists: ``--ref "torch.relu(A @ B)"`` is an expression over the kernel's *input names*, evaluated
in (a copy of) the user namespace. This module makes random inputs from the kernel's signature (through its
profiler), binds them by parameter name, compares every output, and benchmarks kernel and reference with the
profiler's ``do_bench``. Results are plain dataclasses the summary views format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .options import default_tolerance

_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
             "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


@dataclass
class OutputError:
    """How far one output is from the reference."""

    name: str
    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    margin: float = 0.0  # max over elements of |out - ref| / (atol + rtol * |ref|): the check passes when <= 1


@dataclass
class CheckResult:
    """Outcome of comparing every output with the reference (pass: ``|out - ref| <= atol + rtol * |ref|``)."""

    reference: str
    rtol: float
    atol: float
    outputs: list[OutputError] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.mismatched == 0 for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.max_rel for o in self.outputs), default=0.0)

    @property
    def margin(self) -> float:
        """The worst element's error as a fraction of what the criterion allows it (<= 1 passes)."""
        return max((o.margin for o in self.outputs), default=0.0)


@dataclass
class Timing:
    """Median latencies (``tilelang_core.profiler.BenchResult``, floats in ms) and the work per call."""

    kernel_ms: Any
    ref_ms: Any | None
    flops: float | None  # 2*M*N*K when the factory has M, N, K
    bytes: float  # all parameters, read or written once

    @property
    def spread(self) -> float | None:
        """The kernel's p20-p80 spread as a fraction of its median (None when the timer gave no spread)."""
        return relative_spread(self.kernel_ms, getattr(self.kernel_ms, "p20_ms", None),
                               getattr(self.kernel_ms, "p80_ms", None))

    @property
    def speedup(self) -> float | None:
        """Reference time / kernel time (> 1: the kernel is faster)."""
        if self.ref_ms is None or not self.kernel_ms:
            return None
        return float(self.ref_ms) / float(self.kernel_ms)

    def rate(self, ms: float | None) -> tuple[float, str] | None:
        """Achieved GFLOP/s (when the FLOP count is known) else GB/s, for a latency in ms."""
        if ms is None or ms <= 0:
            return None
        if self.flops:
            return self.flops / (ms * 1e-3) / 1e9, "GFLOP/s"
        return self.bytes / (ms * 1e-3) / 1e9, "GB/s"


class ReferenceCheckError(Exception):
    """The ``--ref`` expression failed or returned something that cannot be compared."""


class Reference:
    """``--ref`` compiled once, callable with the kernel's inputs in signature order."""

    def __init__(self, expr: str, input_names: list[str], namespace: dict[str, Any]):
        self.expr = expr
        self.input_names = input_names
        self._code = compile(expr, "<--ref>", "eval")
        self._env = dict(namespace)

    def __call__(self, *inputs: Any) -> Any:
        self._env.update(zip(self.input_names, inputs))
        return eval(self._code, self._env)  # the user's expression, in their namespace


def kernel_inputs(kernel: Any, sizes: dict[str, int] | None = None) -> list[Any]:
    """Seeded random inputs from the kernel's profiler, on the kernel's device (the GPU for a CUDA kernel);
    ``sizes``: the values of its symbolic sizes (``--shapes n=1024``)."""
    inputs = kernel.get_profiler().inputs(dynamic_symbolic_constraints=sizes or None)
    if kernel.target.get("kind") == "cuda":
        inputs = [t.cuda() for t in inputs]
    return inputs


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare(name: str, out: Any, ref: Any, rtol: float, atol: float) -> OutputError:
    """Errors of one output; relative error is taken over elements where ``|ref| > atol`` (no 0/0 blow-ups)."""
    import torch

    try:
        r = torch.as_tensor(ref)
    except Exception as e:  # noqa: BLE001 - whatever the expression returned, say what it was
        raise ReferenceCheckError(f"output {name!r}: the reference gave a {type(ref).__name__}, not a tensor "
                                  f"({e})") from e
    if tuple(r.shape) != tuple(out.shape):
        raise ReferenceCheckError(f"output {name!r}: the kernel returns shape {list(out.shape)}, the reference "
                                  f"{list(r.shape)}")
    o64, r64 = out.detach().to(torch.float64), r.detach().to(torch.float64)
    d = (o64 - r64).abs()
    bad = ~(d <= atol + rtol * r64.abs())  # NaN anywhere counts as a mismatch
    big = r64.abs() > max(atol, 1e-12)
    max_abs = float(d.max()) if d.numel() else 0.0
    max_rel = float((d[big] / r64.abs()[big]).max()) if bool(big.any()) else 0.0
    if math.isnan(max_abs) or bool(torch.isnan(d).any()):
        max_abs = math.nan
    return OutputError(name, max_abs, max_rel, int(bad.sum()), d.numel(), tolerance_margin(d, r64, rtol, atol))


def tolerance_margin(d: Any, ref: Any, rtol: float, atol: float) -> float:
    """``max(|out - ref| / (atol + rtol * |ref|))`` over the elements (float64 tensors ``d``, ``ref``): the fraction
    of its allowance the worst element uses; <= 1 is a pass. NaN anywhere is ``nan``; an error where nothing is
    allowed (atol = rtol = 0) is ``inf``."""
    import torch

    if d.numel() == 0:
        return 0.0
    if bool(torch.isnan(d).any()):
        return math.nan
    allowed = atol + rtol * ref.abs()
    ratio = torch.where(allowed > 0, d / allowed.clamp_min(1e-300),
                        torch.where(d > 0, torch.full_like(d, math.inf), torch.zeros_like(d)))
    return float(ratio.max())


def outputs_margin(outs: tuple[Any, ...], refs: tuple[Any, ...], rtol: float, atol: float) -> float:
    """:func:`tolerance_margin` over several outputs (the worst)."""
    import torch

    worst = 0.0
    for o, r in zip(outs, refs):
        o64 = o.detach().to(torch.float64)
        r64 = torch.as_tensor(r).detach().to(o64.device, torch.float64)
        if tuple(o64.shape) != tuple(r64.shape):
            continue
        m = tolerance_margin((o64 - r64).abs(), r64, rtol, atol)
        if m != m:  # NaN
            return m
        worst = max(worst, m)
    return worst


SPREAD_WARN = 0.25  # a p20-p80 spread over a quarter of the median: the timing is noisy (a busy machine)


def relative_spread(median: Any, p20: Any, p80: Any) -> float | None:
    """``(p80 - p20) / median``, None when any is missing or the median is not positive."""
    if median is None or p20 is None or p80 is None or not float(median) > 0:
        return None
    return (float(p80) - float(p20)) / float(median)


def check(kernel: Any, reference: Reference, rtol: float | None, atol: float | None,
          sizes: dict[str, int] | None = None) -> CheckResult:
    """Run kernel and reference on the same random inputs and compare every output (``sizes``: the values of the
    kernel's symbolic sizes)."""
    params = kernel.params
    out_dtypes = [params[i].dtype for i in kernel.out_idx]
    tol = default_tolerance(out_dtypes)
    rtol = tol if rtol is None else rtol
    atol = tol if atol is None else atol
    inputs = kernel_inputs(kernel, sizes)
    outs = _as_tuple(kernel(*inputs))
    try:
        refs = _as_tuple(reference(*inputs))
    except Exception as e:  # noqa: BLE001 - the user's expression may raise anything
        raise ReferenceCheckError(f"--ref {reference.expr!r} raised {type(e).__name__}: {e}") from e
    if len(refs) != len(outs):
        names = ", ".join(params[i].name for i in kernel.out_idx)
        raise ReferenceCheckError(f"the kernel has {len(outs)} output(s) ({names}); --ref {reference.expr!r} gave "
                              f"{len(refs)}")
    result = CheckResult(reference.expr, rtol, atol)
    for i, o, r in zip(kernel.out_idx, outs, refs):
        result.outputs.append(compare(params[i].name, o, r, rtol, atol))
    return result


def work(kernel: Any, config: dict[str, Any], sizes: dict[str, int] | None = None) -> tuple[float | None, float]:
    """(FLOPs, bytes) per call: 2*M*N*K when the config (or a symbolic size) has integer M, N, K; bytes of every
    parameter (a symbolic dimension counted at its value in ``sizes``)."""
    from tilelang_core.runtime.exported import eval_size

    known = {**(sizes or {}), **config}
    dims = [known.get(k) for k in ("M", "N", "K")]
    flops = float(2 * dims[0] * dims[1] * dims[2]) if all(isinstance(d, int) for d in dims) else None
    nbytes = 0.0
    for p in kernel.params:
        n = 1
        for s in p.shape:
            n *= eval_size(s, sizes or {})
        nbytes += n * _ITEMSIZE.get(p.dtype, 4)
    return flops, nbytes


def benchmark(kernel: Any, reference: Reference | None, config: dict[str, Any],
              sizes: dict[str, int] | None = None) -> Timing:
    """Median latency of kernel and reference on the profiler's inputs (``sizes``: symbolic sizes' values)."""
    prof = kernel.get_profiler()
    inputs = kernel_inputs(kernel, sizes)
    t_kernel = prof.do_bench(inputs=inputs)
    t_ref = prof.do_bench(reference, inputs=inputs) if reference is not None else None
    flops, nbytes = work(kernel, config, sizes)
    return Timing(t_kernel, t_ref, flops, nbytes)

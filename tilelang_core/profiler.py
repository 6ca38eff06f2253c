"""Correctness checks and timing for a compiled kernel.

``assert_allclose`` runs the kernel and a reference on fresh random inputs (never zeros: a kernel that writes
nothing must fail) and compares every output. ``do_bench`` times calls and returns the median latency in
milliseconds as a float that also carries the spread (p20/p80, min, number of runs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .runtime.call import torch_dtype


class BenchResult(float):
    """Median latency in ms (a float), with the spread of the runs."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    runs: int

    def __new__(cls, samples_ms: list[float]) -> BenchResult:
        s = sorted(samples_ms)
        med = statistics.median(s)
        obj = super().__new__(cls, med)
        obj.median_ms = med
        obj.p20_ms = s[int(0.2 * (len(s) - 1))]
        obj.p80_ms = s[int(0.8 * (len(s) - 1))]
        obj.min_ms = s[0]
        obj.runs = len(s)
        return obj

    def __repr__(self) -> str:
        return (f"{self.median_ms:.4f} ms (median of {self.runs}; p20 {self.p20_ms:.4f}, p80 {self.p80_ms:.4f}, "
                f"min {self.min_ms:.4f})")

    __str__ = __repr__


def random_tensor(shape: tuple[int, ...], dtype: str, generator: Any = None, device: str = "cpu") -> Any:
    """Random data for a parameter: normal floats, full-range bytes, small ints otherwise, random bools."""
    import torch

    tdt = torch_dtype(dtype)
    if dtype.startswith(("float", "bfloat")):
        return torch.randn(shape, generator=generator, dtype=torch.float32).to(tdt).to(device)
    if dtype == "bool":
        return (torch.rand(shape, generator=generator) > 0.5).to(device)
    if dtype == "uint8":
        lo, hi = 0, 256  # bytes are often packed data (two int4 per byte): exercise every bit
    elif dtype == "int8":
        lo, hi = -128, 128
    else:
        lo, hi = (0, 16) if dtype.startswith("uint") else (-8, 8)
    return torch.randint(lo, hi, shape, generator=generator, dtype=torch.int64).to(tdt).to(device)


def bench(fn: Callable[[], Any], warmup: float = 25.0, rep: float = 100.0, min_runs: int = 10,
          max_runs: int = 10_000) -> BenchResult:
    """Time ``fn`` (CPU wall clock): ``warmup`` and ``rep`` are time budgets in ms, as in triton.do_bench."""
    t0 = time.perf_counter()
    fn()
    first = max((time.perf_counter() - t0) * 1e3, 1e-4)
    for _ in range(max(1, int(warmup / first))):
        fn()
    n = max(min_runs, min(max_runs, int(rep / first)))
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return BenchResult(samples)


def bench_cuda(fn: Callable[[], Any], warmup: float = 25.0, rep: float = 100.0, min_runs: int = 10,
               max_runs: int = 10_000) -> BenchResult:
    """Time ``fn`` on the GPU with CUDA events (one pair per run, after warm-up); budgets in ms as in :func:`bench`."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    first = max(start.elapsed_time(end) / 5, 1e-4)
    for _ in range(max(1, int(warmup / first))):
        fn()
    n = max(min_runs, min(max_runs, int(rep / first)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in events:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return BenchResult([a.elapsed_time(b) for a, b in events])


def timer_for(device: str) -> Callable[..., BenchResult]:
    """The timer for work on ``device``: :func:`bench_cuda` (CUDA events) for ``"cuda"``, else :func:`bench`.

    Why: a CUDA launch returns before the GPU has run it, so a wall clock around it measures the launch, not the
    kernel; CUDA events recorded on the stream measure the kernel. Accepts a backend name (``"cuda"``/``"cpu"``,
    e.g. ``tilelang_core.target.resolve_target(target)``) or a torch device string (``"cuda:0"``).
    """
    return bench_cuda if str(device).split(":")[0] == "cuda" else bench


class Profiler:
    """Checks and times one compiled kernel (``kernel.get_profiler()``)."""

    def __init__(self, kernel: Any, tensor_supply: str = "randn", seed: int = 0):
        if tensor_supply not in ("randn", "random"):
            raise ValueError(f"tensor_supply: expected 'randn', got {tensor_supply!r}")
        self.kernel = kernel
        self.seed = seed
        self._inputs: list[Any] | None = None
        target = getattr(kernel, "target", None) or {}
        self.device = "cuda" if target.get("kind") == "cuda" else "cpu"  # where inputs live and how to time

    @property
    def timer(self) -> Callable[..., BenchResult]:
        """How :meth:`do_bench` times: CUDA events for a CUDA kernel, the wall clock on the CPU."""
        return timer_for(self.device)

    def _gen(self) -> Any:
        import torch

        g = torch.Generator()
        g.manual_seed(self.seed)
        self.seed += 1
        return g

    def make_inputs(self) -> list[Any]:
        """Fresh random tensors for the kernel's inputs."""
        g = self._gen()
        return [random_tensor(self.kernel.params[i].shape, self.kernel.params[i].dtype, g, self.device)
                for i in self.kernel.in_idx]

    def inputs(self) -> list[Any]:
        if self._inputs is None:
            self._inputs = self.make_inputs()
        return self._inputs

    def assert_allclose(self, reference: Callable[..., Any], rtol: float = 1e-2, atol: float = 1e-2,
                        inputs: list[Any] | None = None) -> None:
        """Run kernel and ``reference`` on the same random inputs; on a mismatch raise a ``TileLangCheckError`` (an
        AssertionError) naming the output, with a report for ``err.save_repro(path)``."""
        import torch

        seed = self.seed
        ins = inputs if inputs is not None else self.make_inputs()
        outs = self.kernel(*ins)
        ref = reference(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        refs = ref if isinstance(ref, (tuple, list)) else (ref,)
        if len(outs) != len(refs):
            raise AssertionError(f"the kernel returned {len(outs)} output(s), the reference {len(refs)}")
        for i, (o, r) in zip(self.kernel.out_idx, zip(outs, refs)):
            r = torch.as_tensor(r).to(o.dtype)
            try:
                torch.testing.assert_close(o, r, rtol=rtol, atol=atol, equal_nan=False)
            except AssertionError as e:
                name = self.kernel.params[i].name
                from .trace.report import check_failure

                # a TileLangCheckError (an AssertionError) carrying a report; err.save_repro(path) replays it
                raise check_failure(f"output {name!r} differs from the reference:\n{e}", self.kernel, reference,
                                    rtol=rtol, atol=atol, seed=None if inputs is not None else seed,
                                    inputs_given=inputs is not None) from None

    def max_error(self, reference: Callable[..., Any], inputs: list[Any] | None = None) -> dict[str, float]:
        """Max absolute and relative error against ``reference`` on random inputs."""
        import torch

        ins = inputs if inputs is not None else self.make_inputs()
        outs = self.kernel(*ins)
        ref = reference(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        refs = ref if isinstance(ref, (tuple, list)) else (ref,)
        abs_err, rel_err = 0.0, 0.0
        for o, r in zip(outs, refs):
            o64, r64 = o.to(torch.float64), torch.as_tensor(r).to(torch.float64)
            d = (o64 - r64).abs()
            abs_err = max(abs_err, float(d.max()))
            rel_err = max(rel_err, float((d / r64.abs().clamp_min(1e-6)).max()))
        return {"max_abs": abs_err, "max_rel": rel_err}

    def do_bench(self, func: Callable[..., Any] | None = None, warmup: float = 25.0, rep: float = 100.0,
                 inputs: list[Any] | None = None, **_compat: Any) -> BenchResult:
        """Median latency (ms) of the kernel, or of ``func`` on the same inputs (e.g. a torch reference)."""
        ins = inputs if inputs is not None else self.inputs()
        f = func if func is not None else self.kernel
        return self.timer(lambda: f(*ins), warmup=warmup, rep=rep)

"""Correctness checks and timing for a compiled kernel.

``assert_allclose`` runs the kernel and a reference on fresh random inputs (never zeros: a kernel that writes
nothing must fail) and compares every output. ``do_bench`` times calls and returns the median latency in
milliseconds as a float that also carries the spread (p20/p80, min, number of runs).

TileLang's spellings work too: ``kernel.get_profiler(tensor_supply_type=TensorSupplyType.Integer)`` draws inputs
as TileLang does (:mod:`tilelang_core.utils.tensor`), ``assert_allclose(ref, input_tensors=..., atol=, rtol=,
max_mismatched_ratio=0.01)`` allows that share of mismatched elements as TileLang's does, and the module-level
:func:`do_bench` (``tilelang.profiler.do_bench(fn, warmup, rep, return_mode="mean", quantiles=...)``) times any
callable.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .runtime.call import torch_dtype


class BenchResult(float):
    """Median latency in ms (a float), with the spread of the runs (``samples_ms``: every run, in order)."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    runs: int
    samples_ms: list[float]

    def __new__(cls, samples_ms: list[float]) -> BenchResult:
        s = sorted(samples_ms)
        med = statistics.median(s)
        obj = super().__new__(cls, med)
        obj.samples_ms = list(samples_ms)
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
          max_runs: int = 10_000, n_warmup: int = 0, n_repeat: int = 0) -> BenchResult:
    """Time ``fn`` (CPU wall clock): ``warmup`` and ``rep`` are time budgets in ms, as in triton.do_bench;
    ``n_warmup`` / ``n_repeat`` (when > 0) fix the numbers of calls instead."""
    t0 = time.perf_counter()
    fn()
    first = max((time.perf_counter() - t0) * 1e3, 1e-4)
    for _ in range(n_warmup if n_warmup > 0 else max(1, int(warmup / first))):
        fn()
    n = n_repeat if n_repeat > 0 else max(min_runs, min(max_runs, int(rep / first)))
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return BenchResult(samples)


def bench_cuda(fn: Callable[[], Any], warmup: float = 25.0, rep: float = 100.0, min_runs: int = 10,
               max_runs: int = 10_000, n_warmup: int = 0, n_repeat: int = 0) -> BenchResult:
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
    for _ in range(n_warmup if n_warmup > 0 else max(1, int(warmup / first))):
        fn()
    n = n_repeat if n_repeat > 0 else max(min_runs, min(max_runs, int(rep / first)))
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


_RETURN_MODES = ("min", "max", "mean", "median")


def aggregate(result: BenchResult, return_mode: str = "mean", quantiles: list[float] | None = None) -> Any:
    """TileLang's summary of timed runs: the ``quantiles`` (a list, each in [0, 1]) when given, else the ``min``,
    ``max``, ``mean`` or ``median`` in ms."""
    import torch

    t = torch.tensor(result.samples_ms, dtype=torch.float64)
    if quantiles is not None:
        q = [float(x) for x in quantiles]
        if any(not 0.0 <= x <= 1.0 for x in q):
            raise ValueError(f"quantiles: expected values in [0, 1], got {quantiles!r}")
        values = torch.quantile(t, torch.tensor(q, dtype=torch.float64)).tolist()
        return values[0] if len(values) == 1 else values
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode: expected one of {', '.join(map(repr, _RETURN_MODES))}, got {return_mode!r}")
    return float(getattr(torch, return_mode)(t)) if return_mode != "median" else float(result.median_ms)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles: list[float] | None = None, fast_flush: bool = True, backend: str = "event",
             return_mode: str = "mean", device: Any = None, **_ignored: Any) -> Any:
    """TileLang's ``tilelang.profiler.do_bench``: time ``fn()`` and return the ``return_mode`` of the runs in ms
    (default the mean, as TileLang), or the ``quantiles``. ``warmup``/``rep`` are time budgets in ms,
    ``_n_warmup``/``_n_repeat`` fixed counts. CUDA events when ``device`` is a CUDA device, or when it is None and
    a GPU is visible; the wall clock otherwise. ``fast_flush``/``backend`` (L2 flushing, CUPTI) are accepted and
    not used: runs are timed back to back."""
    if backend not in ("event", "cupti", "cudagraph"):
        raise ValueError(f"backend: expected 'event', 'cupti' or 'cudagraph', got {backend!r}")
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode: expected one of {', '.join(map(repr, _RETURN_MODES))}, got {return_mode!r}")
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = "cuda" if str(device).split(":")[0] == "cuda" or isinstance(device, int) else "cpu"
    timer = bench_cuda if dev == "cuda" else bench
    result = timer(fn, warmup=warmup, rep=rep, n_warmup=_n_warmup, n_repeat=_n_repeat)
    return aggregate(result, return_mode, quantiles)


class Profiler:
    """Checks and times one compiled kernel (``kernel.get_profiler()``).

    ``tensor_supply``: ``"randn"`` (the default: normal floats, full-range bytes, small integers; never zeros) or
    one of TileLang's :class:`~tilelang_core.utils.TensorSupplyType` (a member or its name)."""

    def __init__(self, kernel: Any, tensor_supply: Any = "randn", seed: int = 0):
        self.supply_type = None
        if not (isinstance(tensor_supply, str) and tensor_supply in ("randn", "random")):
            from .utils.tensor import supply_type

            self.supply_type = supply_type(tensor_supply)
        self.kernel = kernel
        self.seed = seed
        self._inputs: list[Any] | None = None
        self._inputs_key: tuple[Any, ...] = ()
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

    def input_shapes(self, dynamic_symbolic_constraints: dict[str, int] | None = None) -> list[tuple[int, ...]]:
        """The shape of each input; symbolic sizes take their values from ``dynamic_symbolic_constraints``
        (TileLang's name: ``{"m": 256}``). A symbolic size without a value is a ``ValueError`` naming it."""
        from .runtime.exported import eval_size, format_shape

        sizes = dict(dynamic_symbolic_constraints or {})
        for k, v in sizes.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"dynamic_symbolic_constraints: expected size name -> int >= 0, got {k!r}: {v!r}")
        shapes = []
        for i in self.kernel.in_idx:
            p = self.kernel.params[i]
            try:
                shapes.append(tuple(eval_size(d, sizes) for d in p.shape))
            except KeyError as e:  # a kernel for any m: which m to draw is the caller's choice
                raise ValueError(f"kernel {self.kernel.name}: input {p.name!r} has the symbolic size {e.args[0]}, "
                                 f"so the profiler cannot draw its inputs (shape {format_shape(p.shape)}); give "
                                 f"its value (dynamic_symbolic_constraints={{{e.args[0]!r}: ...}}) or pass the "
                                 "inputs (input_tensors=[...] / inputs=[...])") from None
        return shapes

    def make_inputs(self, dynamic_symbolic_constraints: dict[str, int] | None = None) -> list[Any]:
        """Fresh random tensors for the kernel's inputs (symbolic sizes from ``dynamic_symbolic_constraints``)."""
        shapes = self.input_shapes(dynamic_symbolic_constraints)
        g = self._gen()
        if self.supply_type is not None:
            from .utils.tensor import make_tensor

            made = [make_tensor(shape, self.kernel.params[i].dtype, self.supply_type, g, self.device)
                    for i, shape in zip(self.kernel.in_idx, shapes)]
        else:
            made = [random_tensor(shape, self.kernel.params[i].dtype, g, self.device)
                    for i, shape in zip(self.kernel.in_idx, shapes)]
        return [self._in_layout(self.kernel.params[i], t) for i, t in zip(self.kernel.in_idx, made)]

    @staticmethod
    def _in_layout(spec: Any, t: Any) -> Any:
        """``t`` in the memory layout of a ``T.StridedTensor`` parameter (same values), else ``t``."""
        strides = getattr(spec, "strides", None)
        if not strides or not hasattr(t, "stride"):
            return t
        import torch

        out = torch.empty_strided(tuple(t.shape), tuple(strides), dtype=t.dtype, device=t.device)
        out.copy_(t)
        return out

    def inputs(self, dynamic_symbolic_constraints: dict[str, int] | None = None) -> list[Any]:
        """The profiler's inputs, drawn once (once per set of symbolic sizes)."""
        key = tuple(sorted((dynamic_symbolic_constraints or {}).items()))
        if self._inputs is None or self._inputs_key != key:
            self._inputs = self.make_inputs(dynamic_symbolic_constraints)
            self._inputs_key = key
        return self._inputs

    def assert_allclose(self, reference: Callable[..., Any], rtol: float = 1e-2, atol: float = 1e-2,
                        inputs: list[Any] | None = None, *, input_tensors: list[Any] | None = None,
                        max_mismatched_ratio: float = 0.01) -> None:
        """Run kernel and ``reference`` on the same random inputs; on a mismatch raise a ``TileLangCheckError`` (an
        AssertionError) naming the output, with a report for ``err.save_repro(path)``.

        TileLang's semantics: up to ``max_mismatched_ratio`` of each output's elements (rounded down; default 1%)
        may lie outside ``atol + rtol * |ref|`` (NaN matches NaN there, as in TileLang); pass 0 to require every
        element (``torch.testing.assert_close``, where any NaN fails). ``input_tensors`` is TileLang's name for
        ``inputs``."""
        import torch

        if input_tensors is not None:
            if inputs is not None:
                raise TypeError("assert_allclose: pass inputs or input_tensors, not both")
            inputs = list(input_tensors)
        if not 0.0 <= float(max_mismatched_ratio) <= 1.0:
            raise ValueError(f"max_mismatched_ratio: expected a fraction in [0, 1], got {max_mismatched_ratio!r}")
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
                if max_mismatched_ratio > 0:
                    from .utils.tensor import torch_assert_close

                    torch_assert_close(o, r.to(o.device), rtol=rtol, atol=atol,
                                       max_mismatched_ratio=max_mismatched_ratio, base_name="kernel",
                                       ref_name="reference")
                else:
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
                 inputs: list[Any] | None = None, *, n_warmup: int = 0, n_repeat: int = 0,
                 input_tensors: list[Any] | None = None, return_mode: str | None = None,
                 quantiles: list[float] | None = None, dynamic_symbolic_constraints: dict[str, int] | None = None,
                 **_compat: Any) -> Any:
        """Median latency (ms) of the kernel, or of ``func`` on the same inputs (e.g. a torch reference), as a
        :class:`BenchResult`. TileLang's arguments: ``n_warmup``/``n_repeat`` fix the numbers of calls,
        ``input_tensors`` names the inputs, ``return_mode`` (``"mean"``, ``"median"``, ``"min"``, ``"max"``) or
        ``quantiles`` return that plain float (or list) instead, ``dynamic_symbolic_constraints`` gives the values
        of symbolic sizes for the drawn inputs (``{"m": 256}``)."""
        ins = inputs if inputs is not None else (list(input_tensors) if input_tensors is not None
                                                 else self.inputs(dynamic_symbolic_constraints))
        f = func if func is not None else self.kernel
        result = self.timer(lambda: f(*ins), warmup=warmup, rep=rep, n_warmup=n_warmup, n_repeat=n_repeat)
        if return_mode is None and quantiles is None:
            return result
        return aggregate(result, return_mode or "mean", quantiles)

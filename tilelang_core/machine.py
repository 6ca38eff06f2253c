"""What machine this is, and how fast it can go: device names and measured roofline ceilings.

Why this module exists: a tuning measurement only means something together with the device it was taken on (the
tuning database stores :func:`device_name` with every row), and a throughput figure only means something against
what the machine can do at all. :func:`ceilings` measures the two roofline ceilings — peak compute (GFLOP/s of a
large float32 matrix multiply through torch) and memory bandwidth (GB/s of a large copy) — once per machine and
device, and caches them as JSON next to the kernel cache (``<cache>/machine/``), so later sessions read them back
instantly. It works for the CPU and, where torch sees one, a CUDA GPU: there every figure is timed with CUDA events
after a warm-up (a wall clock would time the launches), the bandwidth is a device-to-device copy of 1 GiB (bytes
read + written), and a second compute ceiling, ``tensor_gflops``, is the tensor cores' rate on a large fp16/bf16
matrix multiply of random data (:meth:`Ceilings.for_dtypes` picks it for half-precision kernels). The ceilings are
*achievable* rates (what a tuned library reaches), not datasheet peaks, which is what a roofline of your own
kernels should be read against.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import socket
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

CEILINGS_VERSION = 2  # 2: CUDA timed with events, tensor-core peak added
HALF_DTYPES = ("float16", "bfloat16")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def device_name(kind: str = "cpu") -> str:
    """A readable name for the device a kernel of target ``kind`` (``"cpu"``/``"llvm"`` or ``"cuda"``) runs on."""
    if kind == "cuda":
        try:
            import torch

            if torch.cuda.is_available():
                return str(torch.cuda.get_device_name(0))
        except Exception:  # noqa: BLE001 - no usable torch.cuda: say so
            pass
        return "CUDA GPU (none visible)"
    return f"{cpu_model()} ({_cores()} cores)"


def hostname() -> str:
    return socket.gethostname()


def target_kind(target: Any) -> str:
    """``"cpu"`` or ``"cuda"`` for a target dict (``{"kind": "llvm", ...}``) or a ``target=`` string."""
    if isinstance(target, dict):
        kind = target.get("kind", "cpu")
    else:
        kind = str(target or "cpu").strip().lower().split()[0].split(":")[0]
    return "cuda" if kind.startswith("cuda") else "cpu"


@dataclass(frozen=True)
class Ceilings:
    """The roofline of one device: peak compute and memory bandwidth, as measured here."""

    device: str
    kind: str  # "cpu" | "cuda"
    peak_gflops: float  # float32 matrix multiply
    bandwidth_gbs: float  # large copy: bytes read + bytes written per second
    method: str
    measured_at: float  # unix time
    tensor_gflops: float | None = None  # fp16/bf16 matrix multiply on a GPU's tensor cores (None: not measured)

    def for_dtypes(self, dtypes: Any) -> Ceilings:
        """The roofline a kernel with these parameter dtypes should be read against: the tensor-core peak when any
        is fp16/bf16 and it was measured, else this one (float32 peak)."""
        if self.tensor_gflops and any(str(d) in HALF_DTYPES for d in dtypes):
            return replace(self, peak_gflops=self.tensor_gflops, method=f"{self.method}; peak: fp16/bf16 matmul")
        return self

    def attainable(self, intensity: float) -> float:
        """The roofline: attainable GFLOP/s at ``intensity`` FLOP/byte."""
        return min(self.peak_gflops, self.bandwidth_gbs * intensity)

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) where the two ceilings meet."""
        return self.peak_gflops / self.bandwidth_gbs if self.bandwidth_gbs else float("inf")


def _cache_file(kind: str, device: str) -> Path:
    from .jit.cache import cache_dir

    threads = ""
    if kind == "cpu":
        try:
            import torch

            threads = str(torch.get_num_threads())
        except Exception:  # noqa: BLE001
            threads = "?"
    key = hashlib.sha256(f"{CEILINGS_VERSION}|{kind}|{device}|{hostname()}|{threads}".encode()).hexdigest()[:16]
    return cache_dir() / "machine" / f"ceilings-{kind}-{key}.json"


def _best_seconds(fn: Any, sync: Any, budget_s: float, min_runs: int = 3) -> float:
    fn()
    sync()
    best = float("inf")
    deadline = time.perf_counter() + budget_s
    runs = 0
    while runs < min_runs or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def _event_seconds(fn: Any, warmup_s: float = 0.05, runs: int = 10) -> float:
    """Best seconds per call of ``fn`` on the GPU: CUDA events around each run, after ``warmup_s`` of warm-up
    (at least three calls: the clocks ramp up from idle and the first call pays for library setup)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent, calls = 0.0, 0
    while calls < 3 or spent < warmup_s:
        start.record()
        fn()
        end.record()
        end.synchronize()
        spent += start.elapsed_time(end) * 1e-3
        calls += 1
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for a, b in events:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return min(a.elapsed_time(b) for a, b in events) * 1e-3


def _matmul_gflops(n: int, dtype: Any, device: str, seconds: Any) -> float:
    """GFLOP/s of an ``n``-cubed matrix multiply of random ``dtype`` data (zeros would flatter a GPU's power)."""
    import torch

    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return 2 * n**3 / seconds(lambda: torch.mm(a, b, out=c)) / 1e9


def _measure_cuda() -> Ceilings:
    """The GPU's ceilings: float32 and fp16/bf16 matmul peaks and a 1 GiB device-to-device copy, CUDA-event timed."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("ceilings: no CUDA GPU is visible")
    sizes, tensor_n, nbytes = (4096, 8192), 8192, 1 << 30
    peak = max(_matmul_gflops(n, torch.float32, "cuda", _event_seconds) for n in sizes)
    tensor = max(_matmul_gflops(tensor_n, dt, "cuda", _event_seconds) for dt in (torch.float16, torch.bfloat16))
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    t_copy = _event_seconds(lambda: dst.copy_(src))
    return Ceilings(device=device_name("cuda"), kind="cuda", peak_gflops=peak, bandwidth_gbs=2 * nbytes / t_copy / 1e9,
                    method=f"CUDA events, best of 10 after warm-up: torch.mm float32 at {', '.join(map(str, sizes))}"
                           f"; float16/bfloat16 at {tensor_n} (tensor cores, random data); device-to-device copy "
                           f"of {nbytes >> 20} MiB (read + write)",
                    measured_at=time.time(), tensor_gflops=tensor)


def measure_ceilings(kind: str = "cpu", budget_s: float = 0.6) -> Ceilings:
    """Measure peak float32 GFLOP/s (torch matmul, the best over a few sizes) and copy bandwidth on ``kind``; on a
    GPU also the fp16/bf16 tensor-core peak, everything timed with CUDA events.

    Each figure is the best of repeated runs: on a shared, noisy machine the best run is the one closest to what
    the hardware can do.
    """
    import torch

    if kind == "cuda":
        return _measure_cuda()  # a fixed amount of work: CUDA-event timings need no time budget
    device = device_name(kind)
    sizes, nbytes = (256, 512, 1024), 1 << 26

    def sync() -> None:
        return None

    peak = 0.0
    for n in sizes:
        a = torch.randn(n, n)
        b = torch.randn(n, n)
        c = torch.empty(n, n)
        t_mm = _best_seconds(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), sync, budget_s / len(sizes), min_runs=5)
        peak = max(peak, 2 * n**3 / t_mm / 1e9)
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    t_copy = _best_seconds(lambda: dst.copy_(src), sync, budget_s)
    return Ceilings(device=device, kind=kind, peak_gflops=peak, bandwidth_gbs=2 * nbytes / t_copy / 1e9,
                    method=f"torch.mm float32 at {', '.join(str(n) for n in sizes)} (best); copy of "
                           f"{nbytes >> 20} MiB (best of runs)",
                    measured_at=time.time())


def ceilings(kind: str = "cpu", refresh: bool = False) -> Ceilings:
    """This machine's roofline for ``kind`` (``"cpu"`` or ``"cuda"``): measured once, then read from the cache
    (``refresh=True`` measures again, e.g. after a first measurement on a busy machine came out low)."""
    kind = target_kind(kind)
    device = device_name(kind)
    path = _cache_file(kind, device)
    if not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            return Ceilings(**data)
        except (OSError, ValueError, TypeError):
            pass  # unreadable: measure again
    result = measure_ceilings(kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(result), indent=1))
    os.replace(tmp, path)
    return result


__all__ = ["Ceilings", "ceilings", "measure_ceilings", "device_name", "cpu_model", "hostname", "target_kind"]

"""CPU benchmark of the example kernels against torch, on the same inputs, in the same process.

Why this exists: the examples are the kernels people copy, so their speed on the CPU is the number that tells
whether the compiler's lowering (GEMM micro-kernel, vectorised ``T.Parallel``, SIMD reductions) is any good.
Each workload is first checked against torch, then timed: for every workload the kernel and torch are timed
in alternating rounds (each round a warm-up plus a median of several runs), so slow drifts and bursts of load
from other processes hit both sides alike. The figure reported is the median of the round medians.

Fairness: the kernel is called with preallocated outputs, and torch with ``out=`` where torch has one (GEMM is
``torch.mm(out=)`` then an in-place ``relu_``). Where torch has no ``out=`` (RMSNorm), glibc is told to keep
large blocks on its heap (``mallopt``), so torch's output allocation reuses warm pages instead of mapping and
faulting fresh ones on every call.

Usage::

    python bench/cpu_kernels.py             # full set
    python bench/cpu_kernels.py --quick     # small shapes, fewer rounds (smoke run)
    python bench/cpu_kernels.py --json out.json

ratio = torch ms / kernel ms: above 1 the tilelang_core kernel is faster than torch.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import tilelang_core
from tilelang_core.errors import TileLangError
from tilelang_core.profiler import bench

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the examples folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"tl_examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- machine / run description ------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_info() -> dict[str, Any]:
    from importlib.metadata import version

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except Exception:  # noqa: BLE001
            return "unknown"

    from tilelang_core.backend.cpu import host_cpu

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu": cpu_model(),
        "llvm_cpu": host_cpu(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "tvm": ver("apache-tvm"),
        "tilelang_core": tilelang_core.__version__,
        "python": platform.python_version(),
        "commit": git_commit(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def keep_large_allocations_on_heap() -> bool:
    """glibc: serve big blocks from the heap and never trim it, so a freed 64 MiB output is reused warm."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 62))


class OtherLoad:
    """How many cores *other* processes kept busy between ``start()`` and ``stop()`` (from /proc/stat).

    On a 2-core machine one busy neighbour halves what a 2-thread kernel can get, so each timing records this;
    rows measured with a busy neighbour (> ~0.2 cores) are not to be trusted.
    """

    def __init__(self) -> None:
        self.tck = os.sysconf("SC_CLK_TCK")
        self._t0 = self._busy0 = self._own0 = 0.0

    @staticmethod
    def _busy_jiffies() -> float:
        try:
            with open("/proc/stat") as f:
                parts = [float(x) for x in f.readline().split()[1:]]
        except OSError:
            return float("nan")
        user, nice, system, _idle, _iowait, irq, softirq, steal = (parts + [0.0] * 8)[:8]
        return user + nice + system + irq + softirq + steal

    @staticmethod
    def _own_seconds() -> float:
        t = os.times()
        return t.user + t.system

    def start(self) -> None:
        self._t0, self._busy0, self._own0 = time.perf_counter(), self._busy_jiffies(), self._own_seconds()

    def stop(self) -> float:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        busy = (self._busy_jiffies() - self._busy0) / self.tck
        own = self._own_seconds() - self._own0
        return max(busy - own, 0.0) / wall


def wait_for_quiet(max_wait_s: float, threshold: float = 0.3, window_s: float = 3.0) -> float:
    """Wait (up to ``max_wait_s``) until other processes use under ``threshold`` cores; returns the last reading."""
    deadline = time.monotonic() + max_wait_s
    load = OtherLoad()
    while True:
        load.start()
        time.sleep(window_s)
        busy = load.stop()
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        print(f"  waiting for a quiet machine: other processes use {busy:.2f} cores", flush=True)


def kernel_threading(kernel: Any) -> str:
    """Which parallel-launch hook a loaded kernel library calls, and with how many threads.

    A kernel library calls ``__TVMBackendParallelLaunch`` through a pointer: our OpenMP shim sets it, but when
    TVM's runtime is in the process (always, after a JIT compile) TVM's loader points it at TVM's own thread
    pool, whose size is ``runtime.NumThreads`` (``TVM_NUM_THREADS``, else half the logical CPUs on x86).
    """

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]

    try:
        lib = ctypes.CDLL(str(kernel.artifact.library_path))
        ptr = ctypes.c_void_p.in_dll(lib, "__TVMBackendParallelLaunch").value
        info = DlInfo()
        ctypes.CDLL(None).dladdr(ctypes.c_void_p(ptr), ctypes.byref(info))
        where = Path(info.fname.decode()).name if info.fname else "?"
    except (OSError, ValueError, AttributeError):
        return "unknown"
    if "tvm_runtime" in where:
        import tvm_ffi

        n = tvm_ffi.get_global_func("runtime.NumThreads")()
        return f"TVM thread pool in {where}, runtime.NumThreads={n}"
    omp = ctypes.CDLL("libgomp.so.1")
    return f"OpenMP shim in {where}, omp_get_max_threads={omp.omp_get_max_threads()}"


# -- workloads ----------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One shape of one kernel family, with the block configs to try."""

    name: str
    factory: Any  # a @tilelang.jit factory
    args: tuple  # positional size arguments
    configs: list[dict[str, Any]]
    make_inputs: Callable[[torch.Generator], list[torch.Tensor]]
    make_outputs: Callable[[], list[torch.Tensor]]
    reference: Callable[..., torch.Tensor]  # (*inputs) -> expected output
    torch_fn: Callable[..., Any]  # (*inputs, *outputs) -> None, what is timed
    torch_desc: str
    work: float  # flops or bytes per call
    unit: str  # "GFLOP/s" or "GB/s"
    rtol: float = 1e-4
    atol: float = 1e-4


@dataclass
class ConfigResult:
    config: dict[str, Any]
    ms: float | None = None
    error: str | None = None
    compile_s: float = 0.0


@dataclass
class Result:
    name: str
    best_config: dict[str, Any] | None
    kernel_ms: float | None
    torch_ms: float | None
    ratio: float | None
    rate: float | None
    unit: str
    torch_desc: str
    kernel_spread: list[float] = field(default_factory=list)
    torch_spread: list[float] = field(default_factory=list)
    max_abs_err: float | None = None
    other_load: float | None = None
    kernel_min_ms: float | None = None  # fastest single run: the least disturbed by other processes
    torch_min_ms: float | None = None
    configs: list[ConfigResult] = field(default_factory=list)
    error: str | None = None


def workloads(quick: bool) -> list[Workload]:
    gemm = load_example("gemm")
    ew = load_example("elementwise")
    sm = load_example("softmax")
    rms = load_example("rmsnorm")
    gv = load_example("gemv")
    f32 = torch.float32
    out: list[Workload] = []

    def randn(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
        return lambda g: torch.randn(shape, generator=g, dtype=f32)

    gemm_cfgs = [dict(block_M=m, block_N=n, block_K=k) for m, n, k in (
        (128, 128, 128), (64, 128, 256), (128, 128, 64), (128, 128, 256), (96, 128, 256), (64, 64, 512),
        (64, 64, 64), (96, 64, 256), (48, 64, 512),
    )]
    gemm_sizes = [256, 1024] if quick else [1024, 2048]
    for s in gemm_sizes:
        out.append(Workload(
            name=f"gemm_relu fp32 {s}^3", factory=gemm.matmul_relu, args=(s, s, s),
            configs=gemm_cfgs[:3] if quick else gemm_cfgs,
            make_inputs=lambda g, s=s: [torch.randn(s, s, generator=g), torch.randn(s, s, generator=g)],
            make_outputs=lambda s=s: [torch.empty(s, s)],
            reference=gemm.reference_relu,
            torch_fn=lambda a, b, c: torch.mm(a, b, out=c).relu_(),
            torch_desc="mm(out=).relu_()", work=2.0 * s**3, unit="GFLOP/s", rtol=1e-3, atol=1e-3))

    M, N = (1024, 1024) if quick else (4096, 4096)
    ew_cfgs = [dict(block_M=m, block_N=n) for m, n in ((1, 4096), (4, 4096), (8, 4096), (32, 4096), (8, 1024),
                                                          (32, 512))]
    ew_cfgs = [c for c in ew_cfgs if c["block_N"] <= N] or [dict(block_M=8, block_N=N)]
    for factory, label in ((ew.add_tiled, "tiled"), (ew.add_direct, "direct")):
        out.append(Workload(
            name=f"add {label} fp32 {M}x{N}", factory=factory, args=(M, N),
            configs=ew_cfgs[:2] if quick else ew_cfgs,
            make_inputs=lambda g, M=M, N=N: [torch.randn(M, N, generator=g), torch.randn(M, N, generator=g)],
            make_outputs=lambda M=M, N=N: [torch.empty(M, N)],
            reference=ew.reference, torch_fn=lambda a, b, c: torch.add(a, b, out=c), torch_desc="add(out=)",
            work=3.0 * M * N * 4, unit="GB/s", rtol=0, atol=0))

    sm_shapes = [(1024, 1024)] if quick else [(4096, 4096), (8192, 1024)]
    for M, N in sm_shapes:
        out.append(Workload(
            name=f"softmax fp32 {M}x{N}", factory=sm.softmax, args=(M, N),
            configs=[dict(block_M=m) for m in ((1, 4) if quick else (1, 2, 4, 8))],
            make_inputs=lambda g, M=M, N=N: [torch.randn(M, N, generator=g)],
            make_outputs=lambda M=M, N=N: [torch.empty(M, N)],
            reference=sm.reference, torch_fn=lambda x, y: torch.softmax(x, -1, out=y),
            torch_desc="softmax(out=)", work=2.0 * M * N * 4, unit="GB/s", rtol=1e-5, atol=1e-6))

    M, N = (1024, 1024) if quick else (4096, 4096)
    out.append(Workload(
        name=f"rmsnorm fp32 {M}x{N}", factory=rms.rms_norm, args=(M, N),
        configs=[dict(block_M=m) for m in ((1, 2) if quick else (1, 2, 4, 8))],
        make_inputs=lambda g, M=M, N=N: [torch.randn(M, N, generator=g), torch.randn(N, generator=g)],
        make_outputs=lambda M=M, N=N: [torch.empty(M, N)],
        reference=rms.reference, torch_fn=lambda x, w, y: rms.reference(x, w),
        torch_desc="F.rms_norm (allocates)", work=2.0 * M * N * 4 + N * 4, unit="GB/s", rtol=1e-4, atol=1e-5))

    N = K = 2048 if quick else 8192
    gv_cfgs = [dict(block_N=n, block_K=k) for n, k in ((8, 64), (4, 128), (8, 128), (4, 256), (16, 64), (8, 32),
                                                       (16, 32), (2, 512), (1, 1024))]
    out.append(Workload(
        name=f"gemv fp32 {N}x{K}", factory=gv.gemv, args=(N, K),
        configs=gv_cfgs[:3] if quick else gv_cfgs,
        make_inputs=lambda g, N=N, K=K: [torch.randn(N, K, generator=g), torch.randn(K, generator=g)],
        make_outputs=lambda N=N: [torch.empty(N)],
        reference=gv.reference, torch_fn=lambda a, x, y: torch.mv(a, x, out=y), torch_desc="mv(out=)",
        work=4.0 * (N * K + N + K), unit="GB/s", rtol=1e-3, atol=1e-3))
    return out


# -- timing -------------------------------------------------------------------------------------------------
def timed_rounds(fns: list[Callable[[], Any]], rounds: int, rep_ms: float) -> list[list[Any]]:
    """Time each of ``fns`` in ``rounds`` alternating rounds; returns each one's list of per-round BenchResults."""
    out: list[list[Any]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            out[i].append(bench(fns[i], warmup=rep_ms / 4, rep=rep_ms, min_runs=5))
    return out


def spread(xs: list[float]) -> list[float]:
    s = sorted(xs)
    return [s[0], statistics.median(s), s[-1]]


def fmt_cfg(cfg: dict[str, Any] | None) -> str:
    if not cfg:
        return "-"
    return ",".join(f"{k.replace('block_', 'b')}={v}" for k, v in cfg.items())


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    for marker in ("undefined symbol:",):
        if marker in text:
            return f"{type(e).__name__}: ...{text[text.index(marker):].splitlines()[0]}"
    return text.splitlines()[0][:200]


def run_workload(w: Workload, rounds: int, rep_ms: float, sweep_rounds: int) -> Result:
    g = torch.Generator()
    g.manual_seed(0)
    ins = w.make_inputs(g)
    outs = w.make_outputs()
    res = Result(w.name, None, None, None, None, None, w.unit, w.torch_desc)
    expected = w.reference(*ins)
    kernels: list[tuple[ConfigResult, Any]] = []
    for cfg in w.configs:
        cr = ConfigResult(cfg)
        res.configs.append(cr)
        t0 = time.perf_counter()
        try:
            k = w.factory(*w.args, **cfg)
            cr.compile_s = time.perf_counter() - t0
            got = k(*ins)
            torch.testing.assert_close(got, expected, rtol=w.rtol, atol=w.atol)
        except (TileLangError, AssertionError, RuntimeError, ValueError, TypeError) as e:
            cr.error = short_error(e)
            print(f"  {w.name} [{fmt_cfg(cfg)}]: FAILED {cr.error}", flush=True)
            continue
        kernels.append((cr, k))
    if not kernels:
        res.error = "every config failed: " + (res.configs[0].error or "?")
        return res
    # sweep: the kernel alone, a few rounds each, configs interleaved round by round
    if len(kernels) > 1:
        rounds_res = timed_rounds([lambda k=k: k(*ins, *outs) for _, k in kernels], sweep_rounds, rep_ms / 2)
        for (cr, _), rs in zip(kernels, rounds_res):
            cr.ms = statistics.median(float(x) for x in rs)
            print(f"  {w.name} [{fmt_cfg(cr.config)}]: {cr.ms:.3f} ms", flush=True)
    best_cr, best_k = min(kernels, key=lambda ck: ck[0].ms if ck[0].ms is not None else 0.0)
    res.best_config = best_cr.config
    got = best_k(*ins)
    res.max_abs_err = float((got.double() - expected.double()).abs().max())
    # headline: kernel vs torch, interleaved
    load = OtherLoad()
    load.start()
    kres, tres = timed_rounds([lambda: best_k(*ins, *outs), lambda: w.torch_fn(*ins, *outs)], rounds, rep_ms)
    res.other_load = load.stop()
    kmeds, tmeds = [float(x) for x in kres], [float(x) for x in tres]
    res.kernel_ms, res.torch_ms = statistics.median(kmeds), statistics.median(tmeds)
    res.kernel_min_ms, res.torch_min_ms = min(x.min_ms for x in kres), min(x.min_ms for x in tres)
    if best_cr.ms is None:
        best_cr.ms = res.kernel_ms
    res.kernel_spread, res.torch_spread = spread(kmeds), spread(tmeds)
    res.ratio = res.torch_ms / res.kernel_ms
    res.rate = w.work / (res.kernel_ms * 1e-3) / 1e9  # GFLOP/s or GB/s
    print(f"  {w.name}: kernel {res.kernel_ms:.3f} ms, torch {res.torch_ms:.3f} ms, ratio {res.ratio:.2f} "
          f"(other processes: {res.other_load:.2f} cores)", flush=True)
    return res


# -- report -------------------------------------------------------------------------------------------------
def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


def main_table(results: list[Result]) -> str:
    rows = []
    for r in results:
        if r.kernel_ms is None:
            rows.append([r.name, "FAILED", "-", "-", "-", "-", "-", "-", r.error or "", "-"])
            continue
        assert r.torch_ms is not None and r.ratio is not None and r.rate is not None
        assert r.kernel_min_ms is not None and r.torch_min_ms is not None
        rows.append([r.name, f"{r.kernel_ms:.3f}", f"{r.torch_ms:.3f}", f"{r.ratio:.2f}", f"{r.rate:.1f} {r.unit}",
                     f"{r.kernel_min_ms:.3f} / {r.torch_min_ms:.3f}", f"{r.torch_min_ms / r.kernel_min_ms:.2f}",
                     fmt_cfg(r.best_config), r.torch_desc, f"{r.other_load:.2f}"])
    return table(rows, ["workload", "kernel ms", "torch ms", "ratio", "kernel rate", "min ms kernel / torch",
                        "ratio of mins", "best config", "torch op", "other load (cores)"])


def config_table(results: list[Result]) -> str:
    rows = []
    for r in results:
        if len(r.configs) <= 1:
            continue
        for c in r.configs:
            ms = f"{c.ms:.3f}" if c.ms is not None else "-"
            note = c.error or ("best" if c.config == r.best_config else "")
            rows.append([r.name, fmt_cfg(c.config), ms, f"{c.compile_s:.2f}", note])
    return table(rows, ["workload", "config", "kernel ms (sweep)", "compile s", "note"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, few configs and rounds (smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--rounds", type=int, default=None, help="kernel/torch alternating rounds (default 9, quick 3)")
    ap.add_argument("--only", default="", help="run only workloads whose name contains this text")
    ap.add_argument("--threads", type=int, default=0,
                    help="give kernels and torch this many threads (sets OMP_NUM_THREADS and TVM_NUM_THREADS, "
                         "re-executing this script so they apply from start-up); default: leave both as they come")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="first wait up to this long for other processes to leave the CPUs idle")
    args = ap.parse_args(argv)
    if args.threads and os.environ.get("TVM_NUM_THREADS") != str(args.threads):
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TVM_NUM_THREADS=str(args.threads))
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:])], env)
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = args.rounds or (3 if args.quick else 9)
    rep_ms = 60.0 if args.quick else 200.0
    heap = keep_large_allocations_on_heap()
    quiet = wait_for_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
    info = run_info()
    info["other_load_before"] = quiet
    info["mallopt_heap"] = heap
    print(f"date:    {info['date']}")
    print(f"machine: {info['cpu']} (LLVM cpu {info['llvm_cpu']}), {info['cores']} cores")
    print(f"versions: torch {info['torch']}, tvm {info['tvm']}, tilelang_core {info['tilelang_core']}, "
          f"python {info['python']}")
    print(f"commit:  {info['commit']}")
    probe = load_example("gemm").matmul(64, 64, 64, 32, 32, 32)
    info["kernel_threading"] = kernel_threading(probe)
    info["env_threads"] = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "TVM_NUM_THREADS")}
    print(f"kernel parallel launch: {info['kernel_threading']}; torch threads {info['torch_threads']}; "
          f"env {info['env_threads']}")
    print(f"loadavg at start: {info['loadavg_start']}"
          + (f"; other processes before start: {quiet:.2f} cores" if quiet is not None else ""))
    print(f"timing: {rounds} alternating kernel/torch rounds, each a median over >= 5 runs in ~{rep_ms:.0f} ms; "
          "figure = median of round medians\n", flush=True)
    results = []
    for w in workloads(args.quick):
        if args.only and args.only not in w.name:
            continue
        print(f"{w.name}:", flush=True)
        results.append(run_workload(w, rounds, rep_ms, sweep_rounds=2 if args.quick else 3))
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"\nloadavg at end: {info['loadavg_end']}")
    print("\nBlock configs tried (kernel alone, interleaved sweep):\n")
    print(config_table(results))
    print("\nKernel vs torch. ms = median of round medians; ratio = torch ms / kernel ms (> 1: the tilelang_core "
          "kernel is faster); 'ratio of mins' uses each side's fastest run; 'other load' = cores other processes "
          "used meanwhile (> ~0.2: treat the row as disturbed):\n")
    print(main_table(results))
    if args.json:
        payload = {"info": info, "results": [r.__dict__ | {"configs": [c.__dict__ for c in r.configs]}
                                             for r in results]}
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"\nwrote {args.json}")
    return 0 if all(r.kernel_ms is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Obtaining the kernels of ``bench/gpu/kernels.py`` through ``@jit`` (target CUDA), the way users do, in parallel.

Why this module exists: ``bench/gpu/run.py`` checks and times on the GPU host exactly what a user gets from
``tilelang_core.jit(out_idx=..., target="cuda")(factory)(*args)`` — lowering, code generation and nvcc (or NVRTC)
in the same session, the kernel cache in between — instead of artifacts built elsewhere. Compiling ~250 kernels
one after the other takes ~4 minutes on 2 cores, most of it in nvcc, so the compiles run in parallel:

* ``process`` (the default): a pool of spawned worker processes; each compiles one entry at a time through
  ``@jit`` into the shared kernel cache (the cold compile). The GPU process then asks ``@jit`` for the same kernel
  and gets it from the disk cache, while the workers go on with the next ones. Measured on a 2-core machine
  (24 kernels, 2 workers): as fast as 2 threads and with 25% less CPU per compile (no GIL sharing); with 16
  cores threads are bounded by the lowering, which holds the GIL (~0.1-0.2 s a kernel).
* ``thread``: a thread pool in the GPU process calls ``@jit`` directly (nvcc is a subprocess, so threads overlap
  there; lowering shares the GIL).
* ``serial`` (``workers == 0``): one at a time in this process.

An entry's compiler options (``Entry.pass_configs``) go to ``@jit(pass_configs=...)``, as a user would write them;
they are part of the kernel cache's keys (disk and memory), so every entry shares the one cache folder and any
pool (no environment variable is switched around a compile).
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kernels import Entry, entries, load_factory

POOLS = ("process", "thread")


@dataclass
class Obtained:
    """How one kernel was obtained: what ``run.py`` prints beside each check and writes to its JSON."""

    name: str
    how: str = "failed"  # "compiled" | "disk" | "memory" | "failed": the cache status where it was obtained
    seconds: float = 0.0  # wall time of that @jit call (the factory's parse, the cache key, the build)
    timings: dict[str, float] = field(default_factory=dict)  # "lower", "codegen", "nvcc" of a cold compile
    compiler: str = ""  # "nvcc" or "nvrtc" (first word of the recorded command line)
    where: str = "main"  # "main" (the GPU process) or "worker <pid>"
    load: str = ""  # pooled compiles: how the GPU process then got the kernel ("disk", "memory")
    load_seconds: float = 0.0
    error: str = ""

    def describe(self) -> str:
        """A short column: ``compiled 1.23s``, ``disk 0.08s``, ``memory``, ``failed``."""
        if self.how in ("memory", "failed"):
            return self.how
        return f"{self.how} {self.seconds:.2f}s"


def default_workers() -> int:
    """One compile per CPU core the process may use, one core left to the GPU process, at most 16."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 2
    return max(1, min(16, n - 1))


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block (the cache folder, for compile_time.py's cold caches), restoring
    the previous values after it (one thread only)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _factory(entry: Entry, target: dict[str, Any], shared: dict[tuple, Any]) -> Any:
    """The entry's factory under ``@jit(target=target, pass_configs=entry.pass_configs)``: shared per (module,
    factory, options) so repeated arguments hit the memory cache as they would for a user."""
    import tilelang_core

    base = load_factory(entry)
    key = (entry.module, entry.factory, json.dumps(entry.pass_configs, sort_keys=True))
    if key not in shared:
        shared[key] = tilelang_core.jit(out_idx=base.out_idx, target=target,
                                        pass_configs=entry.pass_configs or None)(base.factory)
    return shared[key]


def compiler_of(kernel: Any) -> str:
    """The CUDA compiler an artifact was built with: "nvcc" or "nvrtc" (first word of its recorded command)."""
    cmd = kernel.artifact.extra.get("cuda", {}).get("nvcc_command") or [""]
    return os.path.basename(str(cmd[0]))


def jit_obtain(entry: Entry, target: dict[str, Any], cache_base: Path, shared: dict[tuple, Any],
               seen: dict[int, str]) -> tuple[Any, Obtained]:
    """Call the entry's ``@jit`` factory here; returns (kernel or None, how it was obtained). Never raises.

    ``seen`` maps kernel objects already handed out to their entry: the memory cache returns the same object, whose
    own ``cache_status`` still says how it was first obtained."""
    rec = Obtained(entry.name)
    t0 = time.perf_counter()
    try:
        kern = _factory(entry, target, shared)(*entry.args, **entry.kwargs)
    except Exception as ex:  # noqa: BLE001 - reported per kernel, the run goes on
        rec.seconds = time.perf_counter() - t0
        rec.error = f"{type(ex).__name__}: {str(ex)[:3000]}\n{traceback.format_exc(limit=4)}"
        return None, rec
    rec.seconds = time.perf_counter() - t0
    rec.how = "memory" if id(kern) in seen else kern.cache_status
    seen.setdefault(id(kern), entry.name)
    if rec.how == "compiled":
        rec.timings = {k: float(v) for k, v in kern.artifact.extra.get("timings", {}).items()}
    rec.compiler = compiler_of(kern)
    return kern, rec


# -- worker processes ---------------------------------------------------------------------------------------------
_WORKER_SHARED: dict[tuple, Any] = {}
_WORKER_SEEN: dict[int, str] = {}


@functools.lru_cache(maxsize=1)
def _entries_by_name() -> dict[str, Entry]:
    return {e.name: e for e in entries()}


def _worker_compile(name: str, target: dict[str, Any], cache_base: str) -> dict[str, Any]:
    """In a worker process: compile one entry through @jit into the shared cache; the record as a dict."""
    _, rec = jit_obtain(_entries_by_name()[name], target, Path(cache_base), _WORKER_SHARED, _WORKER_SEEN)
    rec.where = f"worker {os.getpid()}"
    return asdict(rec)


class Obtainer:
    """Obtains a list of entries through ``@jit``, yielding them in list order as soon as each is ready (so the GPU
    process checks the first kernels while the pool compiles the rest)."""

    def __init__(self, target: dict[str, Any], cache_base: Path, workers: int, pool: str = "process"):
        if pool not in POOLS:
            raise ValueError(f"pool: expected one of {POOLS}, got {pool!r}")
        self.target = target
        self.cache_base = Path(cache_base)
        self.workers = workers
        self.pool = pool if workers > 0 else "serial"
        self.shared: dict[tuple, Any] = {}
        self.seen: dict[int, str] = {}
        self.wall = 0.0  # from the first submission to the last kernel handed out

    def describe(self) -> str:
        if self.pool == "serial":
            return "serial, in this process"
        kind = {"process": ("process", "processes"), "thread": ("thread", "threads")}[self.pool]
        return f"{self.workers} worker {kind[self.workers > 1]}"

    def obtain(self, todo: list[Entry]) -> Iterator[tuple[Entry, Any, Obtained]]:
        """Yield (entry, kernel or None, record) for every entry of ``todo``."""
        # every entry compiles into cache_base; set once for the process (and its workers: they inherit the
        # environment), never swapped while threads compile
        os.environ["TILELANG_CORE_CACHE_DIR"] = str(self.cache_base)
        t0 = time.perf_counter()
        if self.pool == "process":
            gen = self._pooled(todo)
        elif self.pool == "thread":
            gen = self._threaded(todo)
        else:
            gen = (self._here(e) for e in todo)
        for item in gen:
            self.wall = time.perf_counter() - t0
            yield item

    def _here(self, entry: Entry) -> tuple[Entry, Any, Obtained]:
        kern, rec = jit_obtain(entry, self.target, self.cache_base, self.shared, self.seen)
        return entry, kern, rec

    def _threaded(self, todo: list[Entry]) -> Iterator[tuple[Entry, Any, Obtained]]:
        ex = ThreadPoolExecutor(self.workers)
        try:
            futures = [ex.submit(self._here, e) for e in todo]
            for fut in futures:
                yield fut.result()
        finally:  # also when the consumer stops early: drop what has not started
            ex.shutdown(wait=True, cancel_futures=True)

    def _pooled(self, todo: list[Entry]) -> Iterator[tuple[Entry, Any, Obtained]]:
        """Worker processes compile; this process then loads each kernel through @jit (disk cache). A pool whose
        worker died (a crash in the compiler) is started again once for the entries not yet handed out."""
        pending = list(todo)
        for attempt in (1, 2):
            ctx = multiprocessing.get_context("spawn")  # no fork of a process holding a CUDA context or threads
            ex = ProcessPoolExecutor(self.workers, mp_context=ctx)
            try:
                futures = [ex.submit(_worker_compile, e.name, self.target, str(self.cache_base)) for e in pending]
                for i, (e, fut) in enumerate(zip(pending, futures)):
                    try:
                        rec = Obtained(**fut.result())
                    except BrokenProcessPool as bp:
                        if attempt == 1:
                            print(f"a compile worker died ({bp}); starting the pool again for the "
                                  f"{len(pending) - i} kernels left", flush=True)
                            pending = pending[i:]
                            break
                        yield e, None, Obtained(e.name, error="compile worker died (this kernel, or one compiled "
                                                              f"at the same time, crashed the compiler): {bp}")
                        continue
                    yield self._load(e, rec)
                else:
                    return
            finally:  # also when the consumer stops early (a broken CUDA context): drop what has not started
                ex.shutdown(wait=True, cancel_futures=True)

    def _load(self, entry: Entry, rec: Obtained) -> tuple[Entry, Any, Obtained]:
        """The GPU process's own @jit call for an entry a worker compiled: normally a disk-cache hit."""
        if rec.error:
            return entry, None, rec
        kern, mine = jit_obtain(entry, self.target, self.cache_base, self.shared, self.seen)
        if kern is None:
            return entry, None, mine
        if mine.how == "compiled":  # the worker's build was not found (disk cache off?): this one counts
            mine.where = "main (the worker's build was not in the cache)"
            return entry, kern, mine
        rec.load, rec.load_seconds = mine.how, mine.seconds
        if mine.how == "memory":  # a repeated entry: the GPU process already held this kernel
            rec.how, rec.seconds, rec.timings = "memory", 0.0, {}
        return entry, kern, rec


def summary(records: list[Obtained], wall: float, how: str) -> list[str]:
    """Lines summing up how a run obtained its kernels (counts, seconds per stage, the slowest compiles)."""
    n = {k: sum(r.how == k for r in records) for k in ("compiled", "disk", "memory", "artifact", "failed")}
    compiled = [r for r in records if r.how == "compiled"]
    stages = {k: sum(r.timings.get(k, 0.0) for r in compiled) for k in ("lower", "codegen", "nvcc")}
    total = sum(r.seconds for r in compiled)
    compilers = sorted({r.compiler for r in compiled if r.compiler})
    counts = ", ".join(f"{v} {k if k in ('compiled', 'failed') else 'from ' + k}" for k, v in n.items()
                       if v or k in ("compiled", "failed"))
    lines = [f"kernels obtained ({how}) in {wall:.1f} s wall: {counts}"]
    if compiled:
        lines.append(f"  compiles: {total:.1f} s in all ({', '.join(f'{k} {v:.1f} s' for k, v in stages.items())}; "
                     f"{total / len(compiled):.2f} s a kernel on average, compiler {'/'.join(compilers) or '?'})")
        slow = sorted(compiled, key=lambda r: -r.seconds)[:5]
        lines.append("  slowest: " + ", ".join(f"{r.name} {r.seconds:.2f}s" for r in slow))
    loads = [r.load_seconds for r in records if r.load]
    if loads:
        lines.append(f"  GPU process's own @jit calls (cache hits): {sum(loads):.1f} s in all, max {max(loads):.2f} s")
    return lines


def code_version(root: Path) -> str:
    """Which code ran, for a log: the git commit (and how many files differ from it) where the tree is a checkout,
    and tilelang_core's compiler digest (a hash of its sources, the kernel cache's own key) in any case."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.splitlines()
        git = f"git {head} (+{len(dirty)} modified)" if head else "no git checkout"
    except (OSError, subprocess.SubprocessError):
        git = "no git"
    try:
        from tilelang_core.jit.cache import compiler_digest

        digest = compiler_digest()
    except Exception:  # noqa: BLE001 - the artifacts path may run without the compiler's dependencies
        digest = "unknown"
    return f"code: {git}, tilelang_core compiler digest {digest}"


class Tee:
    """Writes to the terminal and to a log file at once, line-buffered, so a run stopped at the device's time limit
    still leaves its log."""

    def __init__(self, stream: TextIO, path: Path):
        self.stream = stream
        self.file = path.open("a", buffering=1)

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.file.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.file.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding ...: the terminal's
        return getattr(self.stream, name)

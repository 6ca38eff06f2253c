"""Compile throughput of a tuning sweep (configurations compiled per second) with 1, 2 and 4 compile workers.

Why this exists: a sweep spends most of its time compiling, and the local and Ray executors exist to spread that
over processes (issue 20). This script measures what the spreading buys on this machine: for each worker count it
starts a :class:`~tilelang_core.autotune.LocalExecutor` with that many compile processes, warms every process up
(one throwaway compile each: importing torch and TVM is start-up, not throughput), then compiles ``--configs``
distinct configurations of the quickstart GEMM into a fresh, empty kernel cache and reports configurations per
second (median of ``--runs``). The sequential row compiles the same configurations one after another in this
process (the previous release's in-process path).

Usage: ``python bench/tune_throughput.py [--size 128] [--configs 32] [--runs 2] [--workers 1,2,4] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def configs(n: int, size: int, salt: int) -> list[dict[str, Any]]:
    """``n`` distinct quickstart GEMM configurations (``salt`` makes each run's set new to the cache)."""
    from tilelang_core.autotune import grid

    space = grid(block_M=[16, 32, 64], block_N=[16, 32, 64], block_K=[16, 32], num_stages=[1, 2],
                 threads=[64 + 32 * salt, 128 + 32 * salt])
    return [{"M": size, "N": size, "K": size, **c} for c in space[:n]]


def run_workers(workers: int, n: int, size: int, salt: int) -> float:
    """Seconds to compile ``n`` new configurations with ``workers`` warm compile processes."""
    from tilelang_core.autotune.executors import COMPILE
    from tilelang_core.autotune.local_executor import LocalExecutor
    from tilelang_core.autotune.tasks import SweepJob
    from tilelang_core.autotune.workers import factory_ref
    from tilelang_core.quickstart import matmul_relu

    ex = LocalExecutor(compile_workers=workers)
    job = SweepJob(factory=factory_ref(matmul_relu), out_idx=[-1], target="auto", kind="cpu",
                   cache_dir=os.environ["TILELANG_CORE_CACHE_DIR"])
    try:
        ex.open(job)
        warm = configs(workers, size, salt + 50)
        for i, c in enumerate(warm):
            ex.submit(COMPILE, i, c)
        got = 0
        while got < len(warm):
            got += len(ex.wait(1.0))
        todo = configs(n, size, salt)
        t0 = time.perf_counter()
        for i, c in enumerate(todo):
            ex.submit(COMPILE, 1000 + i, c)
        done = 0
        while done < n:
            for ev in ex.wait(1.0):
                if ev.lost or ev.result.reason:
                    raise RuntimeError(f"config {ev.task_id} failed: {ev.why or ev.result.reason}")
                done += 1
        return time.perf_counter() - t0
    finally:
        ex.shutdown()


def run_sequential(n: int, size: int, salt: int) -> float:
    from tilelang_core.quickstart import matmul_relu

    matmul_relu(**configs(1, size, salt + 50)[0])  # warm: imports and the runtime shim
    todo = configs(n, size, salt)
    t0 = time.perf_counter()
    for c in todo:
        matmul_relu(**c)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128, help="M = N = K of the GEMM (default 128)")
    p.add_argument("--configs", type=int, default=32, help="configurations per measurement (default 32, max 72)")
    p.add_argument("--runs", type=int, default=2, help="repetitions per row; the median is reported (default 2)")
    p.add_argument("--workers", default="1,2,4", help="compile worker counts (default 1,2,4)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    rows: list[dict[str, Any]] = []
    salt = 0
    for label, workers in [("sequential (in process)", 0)] + [(f"{w} compile workers", w) for w in counts]:
        times = []
        for _ in range(args.runs):
            salt += 1
            os.environ["TILELANG_CORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tune_throughput_")
            from tilelang_core.jit import cache

            cache.clear_memory()
            secs = (run_sequential(args.configs, args.size, salt) if workers == 0
                    else run_workers(workers, args.configs, args.size, salt))
            times.append(secs)
        med = statistics.median(times)
        rows.append({"row": label, "workers": workers, "seconds": times, "configs_per_s": args.configs / med})
        print(f"{label:>26}: {args.configs / med:6.2f} configs/s  (median {med:.1f} s for {args.configs}; "
              f"runs {', '.join(f'{t:.1f}' for t in times)})", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    info = {"machine": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0)),
            "load_avg": os.getloadavg(), "commit": commit, "size": args.size, "configs": args.configs, "rows": rows}
    print(f"machine: {info['cores']} cores, load average {', '.join(f'{x:.1f}' for x in info['load_avg'])}, "
          f"commit {commit}")
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

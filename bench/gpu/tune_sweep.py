"""A tuning sweep of the quickstart GEMM on the GPU host: the local executor against the previous release's tuner.

Why this script exists: issue 20 asks what spreading a sweep buys on a real GPU host. It sweeps ``matmul_relu``
(fp16 in and out, fp32 accumulation) at ``--size``^3 (default 8192) over 72 configurations (block_M, block_N in
64/128/256, block_K 32/64, num_stages 2/3, threads 128/256) twice, each time into a fresh kernel cache and tuning
database:

* ``inline``: the previous release's path — compile all configurations in worker processes, then check and time
  each one after another in this process, every one fully timed;
* ``local``: :class:`~tilelang_core.autotune.LocalExecutor` — compile processes and one timing process per visible
  GPU (pinned with ``CUDA_VISIBLE_DEVICES``), compiling and timing overlapped, early stopping, 3 finalists re-timed
  interleaved with the reference;

and prints each one's wall time, how many configurations passed, were early-stopped or failed, and the best
configuration with its latency and the reference's (torch, cuBLAS). Configurations that do not fit (shared memory)
are failures of the sweep, not of the script.

    PYTHONPATH=<tvm bundle> python bench/gpu/tune_sweep.py [--size 8192] [--workers 16] [--only local|inline]
                                                           [--configs N] [--json out.json]

No IPython needed. On a machine without a GPU every configuration fails to run; the script says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))


def space() -> list[dict[str, Any]]:
    from tilelang_core.autotune import grid

    return grid(block_M=[64, 128, 256], block_N=[64, 128, 256], block_K=[32, 64], num_stages=[2, 3],
                threads=[128, 256])


def reference(a: Any, b: Any) -> Any:
    import torch

    return torch.relu(a @ b)


def sweep(executor: str, size: int, workers: int | None, limit: int | None = None) -> dict[str, Any]:
    import os

    os.environ["TILELANG_CORE_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"tune_sweep_{executor}_")
    from tilelang_core.autotune import TuningDB, tune
    from tilelang_core.jit import cache
    from tilelang_core.quickstart import matmul_relu

    cache.clear_memory()
    db = TuningDB(Path(os.environ["TILELANG_CORE_CACHE_DIR"]) / "tuning.sqlite3")
    extra: dict[str, Any] = {} if executor == "local" else {"early_stop": False, "finalists": 0}
    t0 = time.perf_counter()
    r = tune(matmul_relu, space()[:limit], args=dict(M=size, N=size, K=size, dtype="float16", accum_dtype="float32"),
             ref=reference, target="cuda", executor=executor, workers=workers, db=db, progress=True, **extra)
    wall = time.perf_counter() - t0
    b = r.best
    out = {"executor": executor, "wall_s": round(wall, 1), "configs": len(r.measurements),
           "passed": sum(m.ok for m in r.measurements), "pruned": r.pruned,
           "failed": len(r.failures), "reference_ms": r.reference_ms, "workers": r.workers,
           "best": None if b is None else {"config": {k: b.config[k] for k in r.tuned}, "ms": b.latency_ms,
                                           "device": b.device, "driver": b.driver, "clocks": b.clocks}}
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--workers", type=int, default=None, help="compile processes (default: one per core)")
    p.add_argument("--only", choices=("local", "inline"), default=None)
    p.add_argument("--configs", type=int, default=None, help="only the first N configurations (a dry run)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    rows = [sweep(ex, args.size, args.workers, args.configs) for ex in ("inline", "local")
            if args.only in (None, ex)]
    if len(rows) == 2 and rows[1]["wall_s"]:
        print(f"wall time: inline {rows[0]['wall_s']} s, local {rows[1]['wall_s']} s "
              f"({rows[0]['wall_s'] / rows[1]['wall_s']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""A tuning sweep through a Ray head on the GPU host, against the local executor: the quickstart GEMM at 8192^3.

Why this script exists: issue 20 asks for a Ray head on the GPU host when Ray's wheels can be carried there (the
host has no Ray and no internet; bench/gpu/split_ray_bundle.sh packs them in three parts). This script

1. makes Ray importable: as installed, else from /tmp/raysite, else by joining /tmp/rayparts/raypart.* (the three
   carried parts) and installing the wheels into /tmp/raysite (``pip install --no-index --no-deps --target``);
2. sweeps ``matmul_relu`` (fp16, fp32 accumulation) at ``--size``^3 over the 72 configurations of
   bench/gpu/tune_sweep.py through the local executor, then through ``executor="ray"`` on a Ray head started here on
   127.0.0.1 (all cores for compile tasks, one timing actor per GPU), each into a fresh kernel cache and database;
3. prints each sweep as JSON, then one log line ``ray-sweep <date> <gpu> size=... local=...s ray=...s (x)`` that
   it also writes to ``$OUT/ray_sweep.log`` (the device tool brings it back).

    python3 bench/gpu/ray_sweep.py [--size 8192] [--configs N] [--only ray|local]

Exit status 0 when both sweeps had passing configurations.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
RAYSITE = Path("/tmp/raysite")
PARTS = Path("/tmp/rayparts")


def _add_path(p: str, front: bool) -> None:
    """On this process's path and on the environment's PYTHONPATH (Ray's workers are started with it)."""
    if p not in sys.path:
        sys.path.insert(0, p) if front else sys.path.append(p)
    parts = [x for x in os.environ.get("PYTHONPATH", "").split(":") if x and x != p]
    os.environ["PYTHONPATH"] = ":".join([p, *parts] if front else [*parts, p])


def _install_from_parts() -> None:
    names = sorted(glob.glob(str(PARTS / "raypart.*")))
    if len(names) != 3:
        raise SystemExit(f"ray does not import and {PARTS} holds {len(names)} of the 3 parts "
                         "(bench/gpu/split_ray_bundle.sh says how to carry them)")
    wheels = Path(tempfile.mkdtemp(prefix="raywhl-"))
    with open(wheels / "bundle.tar", "wb") as out:
        for n in names:
            out.write(Path(n).read_bytes())
    subprocess.run(["tar", "-xf", str(wheels / "bundle.tar"), "-C", str(wheels)], check=True)
    files = sorted(glob.glob(str(wheels / "*.whl")))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                          "--target", str(RAYSITE), *files])
    if pip.returncode != 0:  # no pip: a wheel is a zip; keep the executables' mode bits (raylet, gcs_server)
        for f in files:
            with zipfile.ZipFile(f) as z:
                for info in z.infolist():
                    path = z.extract(info, RAYSITE)
                    mode = info.external_attr >> 16
                    if mode:
                        os.chmod(path, mode)
    print(f"[ray-sweep] installed {len(files)} wheels into {RAYSITE}", flush=True)


def ensure_ray() -> Any:
    try:
        import ray
    except ImportError:
        if not (RAYSITE / "ray").is_dir():
            _install_from_parts()
        _add_path(str(RAYSITE), front=False)  # last: the host's own packages (torch's filelock ...) win
        import ray
    return ray


def fresh_cache(label: str) -> None:
    """A new, empty kernel cache for one sweep. Set before Ray's head starts: its workers keep the environment they
    were started with (a Ray compile task into the local sweep's cache would only load what that one compiled)."""
    os.environ["TILELANG_CORE_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"ray_sweep_{label}_")


def sweep(executor: Any, label: str, size: int, limit: int | None) -> dict[str, Any]:
    from tune_sweep import reference, space

    from tilelang_core.autotune import TuningDB, tune
    from tilelang_core.jit import cache
    from tilelang_core.quickstart import matmul_relu

    cache.clear_memory()
    db = TuningDB(Path(os.environ["TILELANG_CORE_CACHE_DIR"]) / "tuning.sqlite3")
    t0 = time.perf_counter()
    r = tune(matmul_relu, space()[:limit], args=dict(M=size, N=size, K=size, dtype="float16", accum_dtype="float32"),
             ref=reference, target="cuda", executor=executor, db=db, progress=True)
    wall = time.perf_counter() - t0
    b = r.best
    out = {"executor": label, "wall_s": round(wall, 1), "configs": len(r.measurements),
           "passed": sum(m.ok for m in r.measurements), "pruned": r.pruned, "failed": len(r.failures),
           "lost": r.lost, "reference_ms": r.reference_ms, "workers": len(r.workers),
           "timing_workers": sorted({m.worker for m in r.measurements if m.worker}),
           "best": None if b is None else {"config": {k: b.config[k] for k in r.tuned}, "ms": b.latency_ms,
                                           "device": b.device}}
    print(json.dumps(out), flush=True)
    return out


def start_head(ray: Any) -> None:
    import torch

    gpus = torch.cuda.device_count()
    kwargs = dict(num_cpus=os.cpu_count(), num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    try:
        ray.init(_node_ip_address="127.0.0.1", **kwargs)
    except Exception as e:  # noqa: BLE001 - some Ray builds refuse the loopback address: let Ray pick
        print(f"[ray-sweep] ray.init on 127.0.0.1 failed ({type(e).__name__}: {e}); retrying on Ray's address",
              flush=True)
        ray.shutdown()
        ray.init(**kwargs)
    print(f"[ray-sweep] Ray {ray.__version__} head: {ray.cluster_resources()}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--configs", type=int, default=None, help="only the first N configurations (a dry run)")
    p.add_argument("--only", choices=("local", "ray"), default=None)
    args = p.parse_args(argv)
    if Path("/tmp/site/tvm").is_dir():  # TVM as bench/gpu/test_suite.sh unpacks it
        _add_path("/tmp/site", front=True)
    _add_path(str(ROOT), front=True)
    _add_path(str(ROOT / "bench" / "gpu"), front=True)
    rows = []
    if args.only in (None, "local"):
        from tilelang_core.autotune import local_executor

        fresh_cache("local")
        rows.append(sweep("local", "local", args.size, args.configs))
        local_executor.shutdown()  # its GPU timing process gives the GPU back before Ray's actor takes it
    if args.only in (None, "ray"):
        ray = ensure_ray()
        fresh_cache("ray")
        start_head(ray)
        try:
            rows.append(sweep("ray", "ray", args.size, args.configs))
        finally:
            ray.shutdown()
    import torch

    walls = {r["executor"]: r["wall_s"] for r in rows}
    ratio = f" ({walls['local'] / walls['ray']:.2f}x)" if len(walls) == 2 and walls.get("ray") else ""
    line = (f"ray-sweep {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ} "
            f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no-gpu'} size={args.size} "
            f"configs={rows[0]['configs'] if rows else 0} "
            + " ".join(f"{k}={v}s" for k, v in walls.items()) + ratio
            + " passed=" + "/".join(str(r["passed"]) for r in rows))
    print(line, flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(Path(out) / "ray_sweep.log", "a", encoding="utf-8") as f:
            f.write(line + "\n" + "".join(json.dumps(r) + "\n" for r in rows))
    return 0 if rows and all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

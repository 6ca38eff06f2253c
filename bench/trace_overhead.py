"""What the compile trace costs: compile time with tracing off, on, and before the trace existed.

Why this exists: issue 3 promises that the trace is cheap when nobody asks for it — compile time with tracing off
must not grow by more than 5% — and that asking for it costs a bounded re-run of the lowering. This script
measures both on the quickstart GEMM (``tilelang_core.quickstart.matmul_relu``, 1024^3, 64x64x32 tiles):

* ``off``      — ``tilelang_core.compile(program)`` on a cold cache dir (a fresh ``TILELANG_CORE_CACHE_DIR``
                 per run, so each run also builds the C runtime shim, as a first compile on a machine does);
* ``on``       — the same compile, then ``kernel.trace`` (every stage's TVMScript, timings, codegen re-run);
* ``baseline`` — the ``off`` measurement with the tilelang_core of a git revision from before the trace
                 (``--baseline``, default ``HEAD``; extracted with ``git archive`` into a temp dir and put first
                 on ``PYTHONPATH``), to show that tracing off is unaffected. ``--baseline none`` skips it.

Each arm runs in fresh processes: one warm-up compile (TVM's and LLVM's one-off initialisation), then ``--runs``
timed compiles (default 5), each on a new cold cache dir. The arms take turns for ``--rounds`` rounds (default 3)
so that load from other work on the machine hits them alike. The table shows the median, minimum and range of
all samples; the verdict passes when the median or the minimum (the cost without interference from other load)
of tracing-off is within 5% of the baseline's.

Usage: ``python bench/trace_overhead.py [--runs 5] [--rounds 3] [--size 1024] [--baseline HEAD|none] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# -- the child: runs in a fresh process, with whichever tilelang_core is first on the path ----------------------
def child(arm: str, runs: int, size: int) -> dict[str, Any]:
    import tilelang_core
    from tilelang_core.quickstart import matmul_relu

    program = matmul_relu.get_program(size, size, size, 64, 64, 32)
    compile_s: list[float] = []
    trace_s: list[float] = []
    stages = 0
    for i in range(runs + 1):  # run 0 warms TVM and LLVM up and is not counted
        os.environ["TILELANG_CORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tl_trace_bench_")
        t0 = time.perf_counter()
        kernel = tilelang_core.compile(program, out_idx=[-1])
        t1 = time.perf_counter()
        if arm == "on":
            stages = len(kernel.trace)
        t2 = time.perf_counter()
        if i:
            compile_s.append(t1 - t0)
            trace_s.append(t2 - t1)
    return {"arm": arm, "compile_s": compile_s, "trace_s": trace_s, "stages": stages,
            "tilelang_core": str(Path(tilelang_core.__file__).parent)}


# -- the parent ---------------------------------------------------------------------------------------------------
def extract_baseline(rev: str, dest: Path) -> Path:
    """``git archive <rev> tilelang_core`` into ``dest``; returns the directory to put on PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tilelang_core"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_arm(arm: str, runs: int, size: int, pythonpath: Path | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    res = subprocess.run([sys.executable, __file__, "--child", arm, "--runs", str(runs), "--size", str(size)],
                         capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if res.returncode != 0:
        raise SystemExit(f"arm {arm} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:7.1f} ms  min {min(xs) * 1e3:6.1f}  ({min(xs) * 1e3:.0f}-{max(xs) * 1e3:.0f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="timed compiles per arm (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds the arms take turns for (default 3)")
    p.add_argument("--size", type=int, default=1024, help="M = N = K (default 1024)")
    p.add_argument("--baseline", default="HEAD", help="git revision to compare tracing-off against, or 'none'")
    p.add_argument("--json", metavar="PATH", help="also write the raw numbers as JSON")
    p.add_argument("--child", choices=["off", "on"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.size)))
        return 0

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tl_trace_baseline_") as tmp:
        base = extract_baseline(args.baseline, Path(tmp)) if args.baseline.lower() != "none" else None
        arms: list[tuple[str, str, Path | None]] = [("off", "off", None), ("on", "on", None)]
        if base is not None:
            arms.insert(0, ("baseline", "off", base))
        for _ in range(args.rounds):
            for key, arm, path in arms:
                r = run_arm(arm, args.runs, args.size, path)
                acc = results.setdefault(key, {**r, "compile_s": [], "trace_s": []})
                acc["compile_s"] += r["compile_s"]
                acc["trace_s"] += r["trace_s"]

    off = statistics.median(results["off"]["compile_s"])
    on = [c + t for c, t in zip(results["on"]["compile_s"], results["on"]["trace_s"])]
    print(f"compile-time overhead of the trace: quickstart GEMM {args.size}^3, tiles 64x64x32, cold cache dir per run,"
          f" {args.rounds} rounds x {args.runs} runs per arm")
    print(f"  {'arm':<44} {'median':>10} {'min':>10}  {'range':>12}  vs off (median)")
    rows = []
    if "baseline" in results:
        b = results["baseline"]["compile_s"]
        rows.append((f"before the trace ({args.baseline}), compile", b, statistics.median(b) / off - 1))
    rows.append(("tracing off (now), compile", results["off"]["compile_s"], 0.0))
    rows.append(("tracing on: compile + kernel.trace", on, statistics.median(on) / off - 1))
    rows.append((f"  of which kernel.trace ({results['on']['stages']} stages)", results["on"]["trace_s"], None))
    for label, xs, rel in rows:
        print(f"  {label:<44} {_fmt(xs)}  {'' if rel is None else f'{rel:+.1%}'}")
    if "baseline" in results:
        b = statistics.median(results["baseline"]["compile_s"])
        bmin, offmin = min(results["baseline"]["compile_s"]), min(results["off"]["compile_s"])
        # on a busy machine the median swings with other load; the minimum is the cost without interference
        verdict = "within" if min(off / b, offmin / bmin) <= 1.05 else "OVER"
        print(f"tracing off vs before the trace: median {off / b - 1:+.1%}, min {offmin / bmin - 1:+.1%} "
              f"({verdict} the 5% budget)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

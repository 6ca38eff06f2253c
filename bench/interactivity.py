"""How long a slider move in the tuning panel takes to update the plots (issue target: CPU GEMM 512^3 on a 2-core
machine, a new configuration <= 1.5 s median, a configuration measured before <= 0.1 s).

Why this exists: the panel is only useful if exploring feels live. This drives a real ``TuningPanel`` the way a user
does — one slider at a time, by setting ``.value`` — with the default debounce, a cold kernel cache (every new
configuration really compiles) and a fresh tuning database, and times each move until the result is drawn (status
line and the three figures updated: the end of the panel's display step). Moves to configurations never measured
walk a snake path through block_M x block_N (then again with another block_K); cached moves revisit them.

    python bench/interactivity.py             # GEMM 512^3 (the target)
    python bench/interactivity.py --size 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.panel_timing import stats, timed_move  # noqa: E402

FACTORY = '''\
def matmul_relu(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''
SNAKE = [("block_M", 32), ("block_N", 32), ("block_M", 64), ("block_M", 128), ("block_N", 64), ("block_N", 128),
         ("block_M", 64), ("block_M", 32)]  # from (64, 64): eight new (block_M, block_N) pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--cached-moves", type=int, default=24)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb_interactivity_"))
    os.environ["TILELANG_CORE_CACHE_DIR"] = str(tmp / "cache")  # cold: every new configuration compiles
    os.environ["TILELANG_CORE_TUNING_DB"] = str(tmp / "tuning.sqlite3")

    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "workbench")
    n = args.size
    ip.run_cell_magic("tilekernel", f'matmul_relu --shapes M={n},N={n},K={n} --ref "torch.relu(A @ B)" -q', FACTORY)
    wk = ip.user_ns["matmul_relu"]
    panel = wk.panel(block_M=[32, 64, 128], block_N=[32, 64, 128], block_K=[32, 64])
    panel.wait(300)  # the first measurement and the machine's ceilings

    fresh, phases = [], []
    for block_k in (32, 64):
        panel.apply({"block_M": 64, "block_N": 64})  # back to the snake's start (measured: instant, not timed)
        panel.wait(300)
        if panel.config()["block_K"] != block_k:
            t, _ = timed_move(panel, "block_K", block_k)
            fresh.append(t)
        for name, value in SNAKE:
            t, m = timed_move(panel, name, value)
            fresh.append(t)
            phases.append(m.compile_s or 0.0)
            print(f"new    {name}={value:<4} {t * 1e3:7.0f} ms  (compile {m.compile_s * 1e3:5.0f} ms; "
                  f"{m.describe(panel.names)})")
    rng = random.Random(0)
    measured = [dict(zip(panel.names, key.split("/"))) for key in panel.explorer.results]
    cached = []
    for _ in range(args.cached_moves):
        target = rng.choice(measured)
        name = rng.choice(["block_M", "block_N"])
        value = int(target[name])
        if panel.config()[name] == value or panel.explorer.cached({**panel.config(), name: value}) is None:
            continue
        t, m = timed_move(panel, name, value)
        cached.append(t)
    out = {"size": n, "cores": os.cpu_count(), "debounce_s": panel.runner.debounce_s,
           "new_config_s": stats(fresh), "compile_s": stats(phases), "cached_config_s": stats(cached)}
    print()
    print(f"CPU GEMM {n}^3, {os.cpu_count()} cores, debounce {panel.runner.debounce_s * 1e3:.0f} ms")
    for key, label, target in (("new_config_s", "new configuration", 1.5), ("cached_config_s", "cached", 0.1)):
        s = out[key]
        verdict = "meets" if s["median"] <= target else "MISSES"
        print(f"  {label:18s} median {s['median'] * 1e3:7.1f} ms  p20 {s['p20'] * 1e3:7.1f}  p80 {s['p80'] * 1e3:7.1f}"
              f"  min {s['min'] * 1e3:7.1f}  max {s['max'] * 1e3:7.1f}  (n={s['n']}; target {target * 1e3:.0f} ms: "
              f"{verdict})")
    c = out["compile_s"]
    print(f"  of which compiling   median {c['median'] * 1e3:7.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

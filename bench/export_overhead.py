"""Import time and per-call overhead of an exported kernel module (issue 5), against the in-process JITKernel.

Exports a small elementwise kernel (so launch overhead, not compute, dominates) and the quickstart GEMM, then
measures in fresh processes: ``import <module>`` (with torch already imported), the first call (library written
to the cache and loaded), and the steady per-call time, next to the same kernel called through tilelang_core and
an empty torch op (``torch.add`` on a 1-element tensor). Prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBE = r'''
import json, sys, time
import torch
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter(); import {mod} as m; t1 = time.perf_counter()
ins = m.kernel.make_inputs()
t2 = time.perf_counter(); m.kernel(*ins); t3 = time.perf_counter()
n = 2000
t4 = time.perf_counter()
for _ in range(n):
    m.kernel(*ins)
t5 = time.perf_counter()
x = torch.randn(1)
t6 = time.perf_counter()
for _ in range(n):
    torch.add(x, x)
t7 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "first": t3 - t2, "call": (t5 - t4) / n, "torch_empty": (t7 - t6) / n}}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    import torch

    from examples.elementwise import add_direct

    kernel = add_direct(64, 64, block_M=8, block_N=64)
    tmp = Path(tempfile.mkdtemp(prefix="export-bench-"))
    path = kernel.export(tmp / "add_small.py")
    ins = [torch.randn(64, 64), torch.randn(64, 64)]
    kernel(*ins)
    import time

    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        kernel(*ins)
    core_call = (time.perf_counter() - t0) / n
    rows = []
    for _ in range(args.runs):
        env_cache = tempfile.mkdtemp(prefix="export-cache-")
        out = subprocess.run([sys.executable, "-c", PROBE.format(mod=path.stem), str(path.parent)],
                             capture_output=True, text=True, env={**__import__("os").environ,
                                                                  "TILELANG_EXPORT_CACHE_DIR": env_cache})
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))

    def med(k: str) -> float:
        return statistics.median(r[k] for r in rows)

    print(f"exported module: {path} ({path.stat().st_size / 1024:.0f} KiB)")
    print("| measurement | median |")
    print("|---|---|")
    print(f"| import exported module (torch already imported) | {med('import') * 1e3:.1f} ms |")
    print(f"| first call (write library to cache, load, run) | {med('first') * 1e3:.1f} ms |")
    print(f"| per call, exported module (64x64 add) | {med('call') * 1e6:.1f} us |")
    print(f"| per call, same kernel through tilelang_core | {core_call * 1e6:.1f} us |")
    print(f"| per call, empty torch op (torch.add on 1 element) | {med('torch_empty') * 1e6:.1f} us |")


if __name__ == "__main__":
    main()

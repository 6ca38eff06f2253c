"""Benchmark: the shipped quickstart GEMM against cuBLAS, timed in alternation over many rounds, with the GPU clock.

``python bench/gpu/gemm_repeat.py [--shapes 8192x8192x8192 16x8192x8192] [--dtypes float16 bfloat16] [--rounds 9]``
on the H200 (PYTHONPATH = the repo and TVM). Why: at 8192³ both sides of a single ratio moved by 10 % between runs
of one call (BENCHMARKS.md, 2026-12-04: 1.09x then 0.90x), more than the margin a goal asks about; one ratio is
not evidence either way. For each shape and dtype this compiles the configuration the package ships
(``autotune/data/defaults.json``: what ``tilelang_core.quickstart.matmul_relu`` gets on sm_90a) in-process through
``@jit`` (and each ``--configs`` entry beside it), checks it against ``torch.relu(a @ b)``, then times cuBLAS and
ours one after the other ``--rounds`` times with the clean-L2 timer, sampling the SM clock and power (nvidia-smi)
after each round. It prints every round's times and ratios, then per kernel the median ratio with its min and max
and the ratio of the medians, do_bench beside (one ratio, at the end), and Triton's tutorial matmul once
(``--no-triton`` skips it).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm_shapes import do_bench_ms, shipped  # noqa: E402
from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402


def clocks() -> str:
    """The SM clock (MHz), power (W) and temperature (C) now, as nvidia-smi reports them ("" without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    sm, power, temp = (x.strip() for x in out.splitlines()[0].split(","))
    return f"{sm} MHz {power} W {temp} C"


def parse_config(text: str) -> tuple[tuple[int, int, int, int, int], dict[str, Any]]:
    """``BMxBNxBKxSxT[;key=value...]`` (values Python literals) -> (tile, pass_configs)."""
    head, *kvs = text.split(";")
    tile = tuple(int(x) for x in head.split("x"))
    if len(tile) != 5:
        raise SystemExit(f"--configs: {text!r} is not BMxBNxBKxSxT[;key=value...]")
    pcs = {}
    for kv in kvs:
        k, v = kv.split("=", 1)
        pcs[k] = ast.literal_eval(v)
    return tile, pcs  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["8192x8192x8192", "16x8192x8192"])
    ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--rep", type=int, default=30, help="timed calls per clean-L2 measurement")
    ap.add_argument("--configs", nargs="*", default=[], help="more configurations timed in the same rounds: "
                    "BMxBNxBKxSxT[;key=value...] (e.g. '128x256x64x4x256;tl.cuda.cluster=(2,1,1)')")
    ap.add_argument("--no-triton", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}  "
          f"{clocks()}", flush=True)
    for shape in args.shapes:
        M, N, K = (int(x) for x in shape.split("x"))
        for dt in args.dtypes:
            got = shipped(M, N, K, dt)
            runs = ([("shipped", *got)] if got is not None else []) + [(c, *parse_config(c)) for c in args.configs]
            if not runs:
                print(f"\n{shape} {dt}: no shipped configuration", flush=True)
                continue
            tdt = getattr(torch, dt)
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            ref = torch.relu(a @ b)
            flops = 2.0 * M * N * K
            kernels = []
            print(f"\n{shape} {dt}", flush=True)
            for label, (bm, bn, bk, st, th), pcs in runs:
                t0 = time.perf_counter()
                try:
                    k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pcs or None)(matmul_relu.factory)(
                        M, N, K, bm, bn, bk, st, th, dt, "float32")
                except Exception as e:  # noqa: BLE001 - report the config and go on
                    print(f"  {label}: COMPILE FAILED {str(e).splitlines()[0][:200]}", flush=True)
                    continue
                build = time.perf_counter() - t0
                ok = torch.allclose(k(a, b).float(), ref.float(), rtol=2e-2, atol=2e-1)
                print(f"  {label}: {bm}x{bn}x{bk} s{st} t{th} {pcs or ''}  {'ok' if ok else 'WRONG'}  "
                      f"build {build:.1f}s", flush=True)
                kernels.append((label, k))
            cub: list[float] = []
            ours: list[list[float]] = [[] for _ in kernels]
            for r in range(args.rounds):
                cub.append(bench_ms_clean(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep))
                for i, (_, k) in enumerate(kernels):
                    ours[i].append(bench_ms_clean(lambda k=k, a=a, b=b: k(a, b), rep=args.rep))
                print(f"  round {r + 1}: cuBLAS {cub[-1] * 1e3:8.1f} us, " + ", ".join(
                    f"{label} {o[-1] * 1e3:.1f} us = {cub[-1] / o[-1]:.3f}x" for (label, _), o in zip(kernels, ours))
                    + f"   {clocks()}", flush=True)
            for (label, k), times in zip(kernels, ours):
                ratios = sorted(c / o for c, o in zip(cub, times))
                db = do_bench_ms(lambda a=a, b=b: torch.relu(a @ b)) / do_bench_ms(lambda k=k, a=a, b=b: k(a, b))
                print(f"  {shape} {dt} {label}: median ratio {statistics.median(ratios):.3f}x (min {ratios[0]:.3f}, "
                      f"max {ratios[-1]:.3f}, {sum(x >= 1.0 for x in ratios)}/{len(ratios)} rounds >= 1.0); ratio of "
                      f"medians {statistics.median(cub) / statistics.median(times):.3f}x (cuBLAS "
                      f"{statistics.median(cub) * 1e3:.1f} us, ours {statistics.median(times) * 1e3:.1f} us, "
                      f"{flops / statistics.median(times) / 1e9:.0f} TF/s); do_bench {db:.3f}x", flush=True)
            if not args.no_triton:
                import triton_ref

                triton_ref.matmul(a, b, relu=True)  # autotune outside the timing
                t_tri = bench_ms_clean(lambda a=a, b=b: triton_ref.matmul(a, b, relu=True), rep=args.rep)
                print(f"  {shape} {dt} Triton: {t_tri * 1e3:.1f} us ({statistics.median(cub) / t_tri:.3f}x cuBLAS)",
                      flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: the unchanged quickstart GEMM+ReLU at issue 15's four shapes, fp16 and bf16, against cuBLAS and
Triton in the same run.

``python bench/gpu/gemm_shapes.py`` on the H200 (PYTHONPATH = the repo and TVM). For each shape (4096³, 8192³,
128×8192×28672, 16×8192×8192) and dtype it compiles ``tilelang_core.quickstart.matmul_relu`` through
``@jit(target="cuda")`` (sm_90a: wgmma, TMA, warp specialisation, persistent blocks, split-K where the grid cannot
fill the SMs — all the defaults) for a few tile configs, checks each against ``torch.relu(a @ b)``, and times it,
``torch.relu(a @ b)`` (cuBLAS) and Triton's tutorial matmul with ReLU (``triton_ref.py``, autotuned) with the
clean-L2 timer of ``run.py`` (the headline) and ``triton.testing.do_bench`` beside it. Prints one line per kernel:
time, TF/s, the ratio to cuBLAS (reference time / ours: above 1 is faster) and to Triton, build time.
``--pingpong`` adds ``PINGPONG``'s tiles with ``tl.cuda.gemm_pingpong`` at the square shapes (4096³, 8192³).
Each shape's first row is the configuration the package ships for it (``autotune/data/defaults.json``, the H200
sweep: tiles and ``pass_configs``), labelled ``shipped``: the kernel a user gets from the tuned defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

SHAPES: dict[tuple[int, int, int], list[tuple[int, int, int, int, int]]] = {  # block M, N, K, stages, threads
    (4096, 4096, 4096): [(128, 256, 64, 4, 256), (256, 128, 64, 4, 256)],
    (8192, 8192, 8192): [(128, 256, 64, 4, 256), (256, 128, 64, 4, 256)],
    (128, 8192, 28672): [(128, 256, 64, 4, 256), (128, 128, 64, 4, 256), (128, 128, 64, 5, 128)],
    (16, 8192, 8192): [(64, 256, 64, 4, 128), (16, 64, 256, 4, 128), (16, 64, 128, 8, 128), (16, 32, 256, 4, 128)],
}
# decode: 16-row tiles are not wgmma tiles, so T.gemm lowers to mma.sync there (bench/gpu/decode_gemm.py sweeps them)
# --pingpong: the ping-pong schedule (tl.cuda.gemm_pingpong, off by default) at the square shapes: one warpgroup's tile
PINGPONG = [(128, 128, 64, 4, 128), (128, 128, 64, 5, 128), (128, 192, 64, 4, 128)]
# grids of fewer blocks than SMs: also with split-K forced (beside the wave rule's own choice)
SPLITS = {(128, 8192, 28672): (2, 4), (16, 8192, 8192): (2, 4)}


def shipped(M: int, N: int, K: int, dtype: str) -> tuple[tuple[int, int, int, int, int], dict[str, Any]] | None:
    """The shipped default of the quickstart at exactly this problem on sm_90a: (tile, pass_configs), or None."""
    from tilelang_core.autotune.defaults import load_defaults

    want = {"M": M, "N": N, "K": K, "dtype": dtype, "accum_dtype": "float32"}
    for r in load_defaults():
        if r.measurement.kernel == "matmul_relu" and r.arch == "sm_90a" and r.problem == want:
            c = r.tuned
            tile = tuple(int(c[k]) for k in ("block_M", "block_N", "block_K", "num_stages", "threads"))
            return tile, dict(c.get("pass_configs") or {})  # type: ignore[return-value]
    return None


def do_bench_ms(fn: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--pingpong", action="store_true", help="also the ping-pong schedule (tl.cuda.gemm_pingpong) "
                    "of PINGPONG's tiles at the square shapes (bench/gpu/gemm_pingpong.py compares it in detail)")
    args = ap.parse_args()
    tri = None
    if not args.no_triton:
        import triton_ref

        tri = triton_ref.matmul
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}",
          flush=True)
    for dt in args.dtypes:
        tdt = getattr(torch, dt)
        for (M, N, K), cfgs in SHAPES.items():
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            flops = 2.0 * M * N * K
            ref = torch.relu(a @ b)
            t_ref = bench_ms_clean(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep)
            d_ref = do_bench_ms(lambda a=a, b=b: torch.relu(a @ b))
            line = f"\n{M}x{N}x{K} {dt}  cuBLAS: {t_ref * 1e3:.1f} us clean ({flops / t_ref / 1e9:.0f} TF/s), " \
                   f"{d_ref * 1e3:.1f} us do_bench"
            t_tri = None
            if tri is not None:
                tri(a, b, relu=True)  # autotune outside the timing
                t_tri = bench_ms_clean(lambda a=a, b=b: tri(a, b, relu=True), rep=args.rep)
                line += f"  Triton: {t_tri * 1e3:.1f} us clean ({t_ref / t_tri:.2f}x cuBLAS)"
            print(line, flush=True)
            runs: list[tuple[Any, Any]] = [(c, None) for c in cfgs] + [(c, sk) for c in cfgs
                                                                      for sk in SPLITS.get((M, N, K), ())]
            if args.pingpong and M == N == K:
                runs += [(c, "pingpong") for c in PINGPONG]
            default = shipped(M, N, K, dt)
            if default is not None:
                runs.insert(0, (default[0], default[1]))
            for (bm, bn, bk, st, th), sk in runs:
                t0 = time.perf_counter()
                pp = sk == "pingpong"
                label = f"{bm}x{bn}x{bk} s{st} t{th}" + (
                    f" shipped {sk or ''}".rstrip() if isinstance(sk, dict) else
                    " gemm_pingpong" if pp else f" split_k={sk}" if sk else "")
                try:
                    pc = (sk or None) if isinstance(sk, dict) else {"tl.cuda.gemm_pingpong": True} if pp else \
                        {"tl.cuda.split_k": sk} if sk else None
                    k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(matmul_relu.factory)(
                        M, N, K, bm, bn, bk, st, th, dt, "float32")
                except Exception as e:  # noqa: BLE001 - report the config and go on
                    print(f"  {label}: COMPILE FAILED {str(e)[:200]}", flush=True)
                    continue
                build = time.perf_counter() - t0
                c = k(a, b)
                ok = torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-1)
                t = bench_ms_clean(lambda k=k, a=a, b=b: k(a, b), rep=args.rep)
                d = do_bench_ms(lambda k=k, a=a, b=b: k(a, b))
                notes = [n for n in k.notes if "ping" in n] if pp else \
                    [n for n in k.notes if "persistent" in n or "split" in n.lower()][:1]
                tri_s = f"  {t_tri / t:.2f}x Triton" if t_tri else ""
                print(f"  {label}: {t * 1e3:7.1f} us  {flops / t / 1e9:6.0f} TF/s  "
                      f"{t_ref / t:.2f}x cuBLAS (do_bench {d_ref / d:.2f}x){tri_s}  {'ok' if ok else 'WRONG'}  "
                      f"build {build:.1f}s  {'; '.join(notes)[:90]}", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: the quickstart GEMM+ReLU with the ping-pong persistent schedule (``tl.cuda.gemm_pingpong``) against
the shipped H200 config and cuBLAS, at 4096³ and 8192³, fp16 and bf16, in one run.

``python bench/gpu/gemm_pingpong.py [--only 8192] [--tiles 128x128x64s4 ...] [--panel 16]`` on the H200
(PYTHONPATH = the repo and TVM). The ping-pong gives each of two consumer warpgroups the program's tile, so the
program is one warpgroup's (``threads=128``) and the block has 2 x 128 consumer threads plus the producer. For each
shape and dtype: cuBLAS (``torch.relu(a @ b)``), the shipped config of ``tilelang_core/autotune/data/defaults.json``
as shipped (the baseline), then for each ``--tiles`` tile (block M x N x K, stages) the ping-pong kernel beside its
twin with the key off (the same 128-thread program, persistent, one consumer warpgroup per block) and beside the
cooperative kernel of the same work per block (block N doubled over threads=256, with fewer stages where its
tiles do not fit), so the
schedule's own effect is twin/pingpong. Every kernel is checked against ``torch.relu(a @ b)``, the ping-pong one
bit for bit against its twin; the kernels are timed interleaved ``--rounds`` times with the clean-L2 timer of
``run.py`` (medians reported). ``--panel P``: the three built with ``T.use_swizzle(P)`` (the quickstart has no
rasterisation; at 8192³ it matters for L2 reuse). One line per config: times, against the baseline and cuBLAS,
registers, and the note when the schedule did not apply.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402
from tma_store import shipped_defaults  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
import tilelang_core.language as T  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

KEY = "tl.cuda.gemm_pingpong"
SIZES = (4096, 8192)
TILES = ["128x128x64s4", "128x128x64s5", "128x128x64s6", "128x192x64s4"]


def rastered(M: int, N: int, K: int, bM: int, bN: int, bK: int, stages: int, threads: int, dtype: str,
             panel: int) -> Any:
    """The quickstart's GEMM+ReLU with ``T.use_swizzle(panel)`` (tiles rasterised in panels, for L2 reuse)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.use_swizzle(panel)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(bM, bN):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def _build(M: int, N: int, K: int, cfg: tuple[int, ...], dt: str, pc: dict[str, Any], panel: int = 0) -> Any:
    if panel:
        return tilelang.compile(rastered(M, N, K, *cfg, dt, panel), out_idx=[-1], target="cuda", pass_configs=pc)
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(matmul_relu.factory)(M, N, K, *cfg, dt,
                                                                                           "float32")


def _label(cfg: tuple[int, ...], pc: dict[str, Any]) -> str:
    return "x".join(map(str, cfg[:3])) + f" s{cfg[3]} t{cfg[4]}" + \
        "".join(f" {k.split('.')[-1]}={v}" for k, v in pc.items())


def _tile(text: str) -> tuple[int, int, int, int]:
    dims, stages = text.split("s")
    bm, bn, bk = (int(x) for x in dims.split("x"))
    return bm, bn, bk, int(stages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", nargs="*", default=TILES, help="per-warpgroup tiles, e.g. 128x128x64s4")
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", type=int, default=None, help="only the shape of this size (4096 or 8192)")
    ap.add_argument("--panel", type=int, default=0, help="T.use_swizzle(panel) in the ping-pong, its twin and the "
                    "cooperative kernel (0: the quickstart's program, no rasterisation)")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}",
          flush=True)
    shipped = shipped_defaults()
    for dt in args.dtypes:
        tdt = getattr(torch, dt)
        for size in SIZES:
            if args.only is not None and size != args.only:
                continue
            M = N = K = size
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            flops = 2.0 * M * N * K
            ref = torch.relu(a @ b)
            t_ref = bench_ms_clean(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep)
            print(f"\n{M}x{N}x{K} {dt}  cuBLAS: {t_ref * 1e3:.1f} us clean ({flops / t_ref / 1e9:.0f} TF/s)",
                  flush=True)
            base_cfg, base_pc = shipped.get((M, N, K, dt), ((128, 256, 64, 4, 256), {}))
            base = _build(M, N, K, base_cfg, dt, base_pc)
            t_base = statistics.median(bench_ms_clean(lambda k=base, a=a, b=b: k(a, b), rep=args.rep) for _ in range(2))
            print(f"  baseline {_label(base_cfg, base_pc)} [shipped]: {t_base * 1e3:.1f} us "
                  f"({t_ref / t_base:.2f}x cuBLAS)", flush=True)
            for text in args.tiles:
                bm, bn, bk, s = _tile(text)
                cfg = (bm, bn, bk, s, 128)
                label = _label(cfg, {KEY: True}) + (f" panel={args.panel}" if args.panel else "")
                try:
                    on = _build(M, N, K, cfg, dt, {KEY: True}, args.panel)
                    twin = _build(M, N, K, cfg, dt, {}, args.panel)
                except Exception as e:  # noqa: BLE001 - report the config and go on
                    print(f"  {label}: COMPILE FAILED {str(e)[:200]}", flush=True)
                    continue
                if "tl::pingpong_wait(" not in on.get_kernel_source("cuda"):
                    why = "; ".join(n for n in on.notes if "pingpong" in n)[:200]
                    print(f"  {label}: NOT APPLIED: {why}", flush=True)
                    continue
                coop = None  # the cooperative kernel of the same work per block: two warpgroups on a 2x wider tile
                for cs in (s, s - 1, s - 2):  # fewer stages where the wider tile's do not fit
                    try:
                        coop = _build(M, N, K, (bm, 2 * bn, bk, cs, 256), dt, {}, args.panel)
                        break
                    except Exception as e:  # noqa: BLE001
                        print(f"  cooperative {bm}x{2 * bn}x{bk} s{cs} t256: COMPILE FAILED {str(e)[:120]}",
                              flush=True)
                c_on = on(a, b)
                ok = torch.allclose(c_on.float(), ref.float(), rtol=2e-2, atol=2e-1)
                same = torch.equal(c_on, twin(a, b))
                t_on, t_tw, t_co = [], [], []
                for _ in range(args.rounds):
                    t_tw.append(bench_ms_clean(lambda k=twin, a=a, b=b: k(a, b), rep=args.rep))
                    t_on.append(bench_ms_clean(lambda k=on, a=a, b=b: k(a, b), rep=args.rep))
                    if coop is not None:
                        t_co.append(bench_ms_clean(lambda k=coop, a=a, b=b: k(a, b), rep=args.rep))
                tn, tw = statistics.median(t_on), statistics.median(t_tw)
                co = f"  vs cooperative t256 {statistics.median(t_co) * 1e3:.1f} us: " \
                     f"{statistics.median(t_co) / tn:.3f}x" if t_co else ""
                res = on.resources()
                regs = f"{res.registers} smem {res.smem // 1024} KiB" if res is not None else "?"
                print(f"  {label}: {tn * 1e3:7.1f} us ({flops / tn / 1e9:.0f} TF/s, {t_ref / tn:.2f}x cuBLAS)  "
                      f"vs shipped {t_base / tn:.3f}x  vs key off {tw * 1e3:.1f} us: {tw / tn:.3f}x{co}  "
                      f"{'ok' if ok else 'WRONG'}  {'bit-identical' if same else 'DIFFERS FROM KEY OFF'}  "
                      f"regs {regs}", flush=True)


if __name__ == "__main__":
    main()

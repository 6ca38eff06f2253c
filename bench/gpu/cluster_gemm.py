"""Benchmark: the quickstart GEMM+ReLU in thread-block clusters with TMA multicast (``tl.cuda.cluster``) against the
shipped H200 config, at 8192³ (``--only 4096`` for 4096³), fp16 and bf16, beside cuBLAS, in one run.

``python bench/gpu/cluster_gemm.py [--cluster 2x1 1x2 2x2] [--only 8192]`` on the H200 (PYTHONPATH = the repo and
TVM). For each shape and dtype: the shipped config of ``tilelang_core/autotune/data/defaults.json`` as shipped (the
baseline), then for each ``--cluster`` shape the same tile with the cluster key (a clustered kernel is
warp-specialised: the shipped config's ``tl.disable_warp_specialized`` is dropped for it), with one block per tile
(``tl.cuda.persistent=-1``) and persistent (132 blocks in 1-D clusters walking the tiles together), each beside its
unclustered twin (the same tile and persistence without the key), so the cluster's own effect is twin/clustered;
and the same for ``gemm_shapes.py``'s tiles of that shape. Every kernel is checked against
``torch.relu(a @ b)``, clustered ones bit for bit against their unclustered twin; the baseline, the twin and the
clustered kernel are timed interleaved ``--rounds`` times with the clean-L2 timer of ``run.py`` (medians reported).
One line per config: times, against the baseline and cuBLAS, registers, and the note when the cluster did not
apply (a grid the cluster does not divide, ...).
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

from gemm_shapes import SHAPES  # noqa: E402
from run import bench_ms_clean  # noqa: E402
from tma_store import shipped_defaults  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

KEY = "tl.cuda.cluster"
NOT_WITH_CLUSTERS = ("tl.disable_warp_specialized", "tl.cuda.persistent")
PERSISTENCE = {"one block per tile": -1, "persistent": 0}  # both forms, each clustered against its unclustered twin


def _build(M: int, N: int, K: int, cfg: tuple[int, ...], dt: str, pc: dict[str, Any]) -> Any:
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(matmul_relu.factory)(M, N, K, *cfg, dt,
                                                                                           "float32")


def _label(cfg: tuple[int, ...], pc: dict[str, Any]) -> str:
    return "x".join(map(str, cfg[:3])) + f" s{cfg[3]} t{cfg[4]}" + \
        "".join(f" {k.split('.')[-1]}={v}" for k, v in pc.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", nargs="*", default=["2x1", "1x2"], help="cluster shapes, e.g. 2x1 1x2 2x2")
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", type=int, default=8192, help="the shape whose M is this (default 8192)")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in c.split("x")) for c in args.cluster]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}",
          flush=True)
    shipped = shipped_defaults()
    for dt in args.dtypes:
        tdt = getattr(torch, dt)
        for (M, N, K), cfgs in SHAPES.items():
            if M != args.only:
                continue
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            flops = 2.0 * M * N * K
            ref = torch.relu(a @ b)
            t_ref = bench_ms_clean(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep)
            print(f"\n{M}x{N}x{K} {dt}  cuBLAS: {t_ref * 1e3:.1f} us clean ({flops / t_ref / 1e9:.0f} TF/s)",
                  flush=True)
            base_cfg, base_pc = shipped.get((M, N, K, dt), (cfgs[0], {}))
            base = _build(M, N, K, base_cfg, dt, base_pc)
            print(f"  baseline {_label(base_cfg, base_pc)} [shipped]", flush=True)
            tiles = [(base_cfg, base_pc)] + [(c, {}) for c in cfgs if c != base_cfg]
            for (cfg, pc), (form, persist) in ((t, f) for t in tiles for f in PERSISTENCE.items()):
                ws_pc = {**{k: v for k, v in pc.items() if k not in NOT_WITH_CLUSTERS}, "tl.cuda.persistent": persist}
                try:
                    ws = _build(M, N, K, cfg, dt, ws_pc)
                except Exception as e:  # noqa: BLE001 - report the config and go on
                    print(f"  {_label(cfg, ws_pc)}: COMPILE FAILED {str(e)[:200]}", flush=True)
                    continue
                for shape in shapes:
                    label = _label(cfg, {**ws_pc, KEY: "x".join(map(str, shape))}) + f" [{form}]"
                    try:
                        on = _build(M, N, K, cfg, dt, {**ws_pc, KEY: shape})
                    except Exception as e:  # noqa: BLE001
                        print(f"  {label}: COMPILE FAILED {str(e)[:200]}", flush=True)
                        continue
                    if "__cluster_dims__" not in on.get_kernel_source("cuda"):
                        why = "; ".join(n for n in on.notes if "cluster" in n)[:200]
                        print(f"  {label}: NOT APPLIED: {why}", flush=True)
                        continue
                    c_on = on(a, b)
                    ok = torch.allclose(c_on.float(), ref.float(), rtol=2e-2, atol=2e-1)
                    same = torch.equal(c_on, ws(a, b))
                    t_base, t_ws, t_on = [], [], []
                    for _ in range(args.rounds):
                        t_base.append(bench_ms_clean(lambda k=base, a=a, b=b: k(a, b), rep=args.rep))
                        t_ws.append(bench_ms_clean(lambda k=ws, a=a, b=b: k(a, b), rep=args.rep))
                        t_on.append(bench_ms_clean(lambda k=on, a=a, b=b: k(a, b), rep=args.rep))
                    tb, tw, tn = (statistics.median(x) for x in (t_base, t_ws, t_on))
                    res = on.resources()
                    regs = f"{res.registers} smem {res.smem // 1024} KiB" if res is not None else "?"
                    print(f"  {label}: {tn * 1e3:7.1f} us ({flops / tn / 1e9:.0f} TF/s, {t_ref / tn:.2f}x cuBLAS)  "
                          f"vs shipped {tb * 1e3:.1f} us: {tb / tn:.3f}x  vs unclustered {tw * 1e3:.1f} us: "
                          f"{tw / tn:.3f}x  {'ok' if ok else 'WRONG'}  "
                          f"{'bit-identical' if same else 'DIFFERS FROM UNCLUSTERED'}  regs {regs}", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: the quickstart GEMM+ReLU with its epilogue through TMA stores (``tl.cuda.tma_store``) against the
register epilogue, at issue 15's shapes, beside cuBLAS, in one run.

``python bench/gpu/tma_store.py`` on the H200 (PYTHONPATH = the repo and TVM). For each shape (4096³, 8192³,
128×8192×28672, 16×8192×8192), each dtype (fp16, bf16) and each tile config (the shipped H200 defaults of
``tilelang_core/autotune/data/defaults.json`` first, then ``gemm_shapes.py``'s), it compiles
``tilelang_core.quickstart.matmul_relu`` twice through ``@jit(target="cuda")`` — the config's pass_configs with
``tl.cuda.tma_store`` False and True — checks both against ``torch.relu(a @ b)`` and each other (bit for bit: both
epilogues round the same way), and times key off, key on and ``torch.relu(a @ b)`` (cuBLAS) with the clean-L2 timer
of ``run.py``, off and on interleaved ``--rounds`` times (the medians of the rounds are reported, so clock drift
hits both sides alike), with ``triton.testing.do_bench`` beside it. One line per config: both times, on / off
(above 1: the TMA store epilogue is faster), both against cuBLAS, registers and shared memory of the on build, and
the note when the key did not apply (a split-K epilogue, a staging ring that does not fit, ...).

Shared-memory bank conflicts of the staging writes (the ring is 128 B-swizzled; docs/cuda.md): with Nsight Compute,
``ncu --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,``
``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum -k main_kernel python bench/gpu/tma_store.py --only 4096
--rounds 1`` (one metric list, no space; ``--only`` keeps one shape).
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

from gemm_shapes import SHAPES, do_bench_ms  # noqa: E402
from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

KEY = "tl.cuda.tma_store"


def shipped_defaults() -> dict[tuple[int, int, int, str], tuple[tuple[int, ...], dict[str, Any]]]:
    """(M, N, K, dtype) -> ((block M, N, K, stages, threads), pass_configs) of the shipped H200 defaults."""
    import json

    path = Path(tilelang.__file__).parent / "autotune" / "data" / "defaults.json"
    out = {}
    for row in json.loads(path.read_text())["rows"]:
        c = row["config"]
        out[(c["M"], c["N"], c["K"], c["dtype"])] = ((c["block_M"], c["block_N"], c["block_K"], c["num_stages"],
                                                      c["threads"]), dict(c.get("pass_configs") or {}))
    return out


def _build(M: int, N: int, K: int, cfg: tuple[int, ...], dt: str, pc: dict[str, Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(matmul_relu.factory)(M, N, K, *cfg, dt,
                                                                                         "float32")
    return k, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="off/on timing rounds, interleaved (default 3)")
    ap.add_argument("--only", type=int, default=None, help="only the shapes whose M is this (e.g. 4096)")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}",
          flush=True)
    shipped = shipped_defaults()
    for dt in args.dtypes:
        tdt = getattr(torch, dt)
        for (M, N, K), cfgs in SHAPES.items():
            if args.only is not None and M != args.only:
                continue
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
            b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
            flops = 2.0 * M * N * K
            ref = torch.relu(a @ b)
            t_ref = bench_ms_clean(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep)
            d_ref = do_bench_ms(lambda a=a, b=b: torch.relu(a @ b))
            print(f"\n{M}x{N}x{K} {dt}  cuBLAS: {t_ref * 1e3:.1f} us clean ({flops / t_ref / 1e9:.0f} TF/s), "
                  f"{d_ref * 1e3:.1f} us do_bench", flush=True)
            runs = []
            if (M, N, K, dt) in shipped:
                runs.append(("shipped", *shipped[(M, N, K, dt)]))
            runs += [("", c, {}) for c in cfgs if not runs or c != runs[0][1]]
            if M <= 128:  # a small grid splits K, whose epilogue keeps register stores: also without split-K
                runs.append(("no split-K", runs[0][1], {**runs[0][2], "tl.cuda.split_k": 1}))
            for tag, cfg, pc in runs:
                label = "x".join(map(str, cfg[:3])) + f" s{cfg[3]} t{cfg[4]}" + \
                    "".join(f" {k.split('.')[-1]}={v}" for k, v in pc.items()) + (f" [{tag}]" if tag else "")
                try:
                    off, b_off = _build(M, N, K, cfg, dt, {**pc, KEY: False})
                    on, b_on = _build(M, N, K, cfg, dt, {**pc, KEY: True})
                except Exception as e:  # noqa: BLE001 - report the config and go on
                    print(f"  {label}: COMPILE FAILED {str(e)[:200]}", flush=True)
                    continue
                applied = "tl::tma_store_2d(" in on.get_kernel_source("cuda")
                c_off, c_on = off(a, b), on(a, b)
                ok = torch.allclose(c_on.float(), ref.float(), rtol=2e-2, atol=2e-1)
                same = torch.equal(c_on, c_off)
                t_off, t_on = [], []
                for _ in range(args.rounds):
                    t_off.append(bench_ms_clean(lambda k=off, a=a, b=b: k(a, b), rep=args.rep))
                    t_on.append(bench_ms_clean(lambda k=on, a=a, b=b: k(a, b), rep=args.rep))
                to, tn = statistics.median(t_off), statistics.median(t_on)
                d_off = do_bench_ms(lambda k=off, a=a, b=b: k(a, b))
                d_on = do_bench_ms(lambda k=on, a=a, b=b: k(a, b))
                res = on.resources()
                regs = f"{res.registers} smem {res.smem // 1024} KiB" if res is not None else "?"
                why = "" if applied else "  NOT APPLIED: " + "; ".join(n for n in on.notes if "TMA stores" in n)[:160]
                print(f"  {label}: off {to * 1e3:7.1f} us ({t_ref / to:.2f}x cuBLAS)  on {tn * 1e3:7.1f} us "
                      f"({t_ref / tn:.2f}x cuBLAS, {flops / tn / 1e9:.0f} TF/s)  on/off {to / tn:.3f}x "
                      f"(do_bench {d_off / d_on:.3f}x)  {'ok' if ok else 'WRONG'}  "
                      f"{'bit-identical' if same else 'DIFFERS FROM OFF'}  regs {regs}  "
                      f"build {b_off:.1f}/{b_on:.1f}s{why}", flush=True)


if __name__ == "__main__":
    main()

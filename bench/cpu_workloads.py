"""CPU benchmark of the issue-7 workloads against torch: flash attention, W4A16 dequantized GEMM (decode), GEMV.

* Flash attention forward (``examples/flash_attention.py``), fp32, ``[batch, seq, heads, dim]``, causal and not,
  against ``torch.nn.functional.scaled_dot_product_attention`` on the same tensors (SDPA's ``[b, h, s, d]`` views;
  torch's output is left in its own layout, so torch pays no copy). FLOPs: ``4 * b * h * s^2 * d``, halved when
  causal.
* W4A16 GEMM (``examples/dequant_gemm.py``) in the decode shape (``M`` = 1 and 16, ``N = K``), int4 weights with
  per-group-of-128 scales, against ``torch.mm`` on the fp32 weights dequantized once (what a CPU without an int4
  kernel would run; it reads 8x the weight bytes). Rate: GB/s of the kernel's own inputs (packed weights, scales,
  A) and output.
* GEMV (``examples/gemv.py``) against ``torch.mv``.

Timing, fairness and the report come from ``bench/cpu_kernels.py``: each workload sweeps a few block configs, then
times the best one against torch in alternating rounds (median of round medians), with preallocated outputs.

Usage::

    python bench/cpu_workloads.py            # full set
    python bench/cpu_workloads.py --quick    # small shapes, few rounds (smoke run)

ratio = torch ms / kernel ms: above 1 the tilelang_core kernel is faster than torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


ck = _load(HERE / "cpu_kernels.py", "tl_bench_cpu_kernels")
Workload = ck.Workload


def attention_workloads(quick: bool) -> list[Any]:
    fa = ck.load_example("flash_attention")
    shapes = [(1, 4, 256, 64)] if quick else [(1, 8, 1024, 64), (1, 8, 1024, 128), (2, 8, 1000, 64)]
    tiles = [(64, 64), (32, 64)] if quick else [(64, 64), (32, 64), (64, 32), (128, 64), (64, 128)]
    out = []
    for b, h, s, d in shapes:
        for causal in (False, True):
            def inputs(g: torch.Generator, b: int = b, h: int = h, s: int = s, d: int = d) -> list[torch.Tensor]:
                return [torch.randn(b, s, h, d, generator=g) for _ in range(3)]

            def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, c: bool = causal) -> Any:
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=c)

            out.append(Workload(
                name=f"flash_attn fp32 b{b} h{h} s{s} d{d}{' causal' if causal else ''}",
                factory=fa.flash_attention, args=(b, h, s, d, causal),
                configs=[dict(block_M=m, block_N=n) for m, n in tiles],
                make_inputs=inputs, make_outputs=lambda b=b, h=h, s=s, d=d: [torch.empty(b, s, h, d)],
                reference=lambda q, k, v, c=causal: fa.reference(q, k, v, c),
                torch_fn=sdpa, torch_desc="F.scaled_dot_product_attention", work=fa.flops(b, h, s, d, causal),
                unit="GFLOP/s", rtol=1e-4, atol=1e-4))
    return out


def dequant_workloads(quick: bool) -> list[Any]:
    dq = ck.load_example("dequant_gemm")
    N = K = 1024 if quick else 4096
    group = 128
    g = torch.Generator()
    g.manual_seed(7)
    B, Scale = dq.random_packed(N, K, group, generator=g)
    W = dq.dequantize(B, Scale)  # fp32 (N, K), dequantized once for torch
    out = []
    for M in (1, 16):
        blocks = [(64, 128), (32, 128)] if quick else [(64, 128), (32, 128), (128, 128), (64, 64), (64, 256)]
        nbytes = B.numel() + Scale.numel() * 4 + M * K * 4 + M * N * 4

        def torch_mm(A: torch.Tensor, Bq: torch.Tensor, S: torch.Tensor, C: torch.Tensor) -> Any:
            return torch.mm(A, W.T, out=C)

        out.append(Workload(
            name=f"w4a16 gemm fp32 M{M} N{N} K{K} g{group}", factory=dq.dequant_gemm, args=(M, N, K, group),
            configs=[dict(block_M=M, block_N=n, block_K=k) for n, k in blocks],
            make_inputs=lambda g, M=M: [torch.randn(M, K, generator=g), B, Scale],
            make_outputs=lambda M=M: [torch.empty(M, N)],
            reference=dq.reference, torch_fn=torch_mm, torch_desc="mm(out=) on fp32 weights dequantized once",
            work=float(nbytes), unit="GB/s", rtol=1e-4, atol=1e-3))
    return out


def gemv_workloads(quick: bool) -> list[Any]:
    gv = ck.load_example("gemv")
    N = K = 2048 if quick else 8192
    cfgs = [dict(block_N=n, block_K=k) for n, k in ((8, 64), (4, 128), (8, 128), (16, 64))]
    return [Workload(
        name=f"gemv fp32 {N}x{K}", factory=gv.gemv, args=(N, K), configs=cfgs[:2] if quick else cfgs,
        make_inputs=lambda g: [torch.randn(N, K, generator=g), torch.randn(K, generator=g)],
        make_outputs=lambda: [torch.empty(N)], reference=gv.reference,
        torch_fn=lambda a, x, y: torch.mv(a, x, out=y), torch_desc="mv(out=)",
        work=4.0 * (N * K + N + K), unit="GB/s", rtol=1e-3, atol=1e-3)]


def workloads(quick: bool) -> list[Any]:
    return attention_workloads(quick) + dequant_workloads(quick) + gemv_workloads(quick)


def copy_bandwidth(mib: int = 512) -> float:
    """GB/s (read + write) of a torch clone of a large tensor: the memory-bound ceiling."""
    src = torch.randn(mib * 2**20 // 4)
    ms = float(ck.bench(lambda: src.clone(), warmup=50, rep=400))
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, few configs and rounds (smoke run)")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--rounds", type=int, default=None, help="kernel/torch alternating rounds (default 7, quick 3)")
    ap.add_argument("--only", default="", help="run only workloads whose name contains this text")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="first wait up to this long for other processes to leave the CPUs idle")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    rep_ms = 60.0 if args.quick else 200.0
    heap = ck.keep_large_allocations_on_heap()
    quiet = ck.wait_for_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
    info = ck.run_info()
    info["other_load_before"] = quiet
    info["mallopt_heap"] = heap
    info["copy_gbs"] = copy_bandwidth(64 if args.quick else 512)
    print(f"date:    {info['date']}")
    print(f"machine: {info['cpu']} (LLVM cpu {info['llvm_cpu']}), {info['cores']} cores; "
          f"copy bandwidth (torch clone) {info['copy_gbs']:.1f} GB/s")
    print(f"versions: torch {info['torch']}, tvm {info['tvm']}, tilelang_core {info['tilelang_core']}")
    print(f"commit:  {info['commit']}; loadavg at start {info['loadavg_start']}")
    print(f"timing: {rounds} alternating kernel/torch rounds, each a median over >= 5 runs in ~{rep_ms:.0f} ms\n",
          flush=True)
    results = []
    for w in workloads(args.quick):
        if args.only and args.only not in w.name:
            continue
        print(f"{w.name}:", flush=True)
        results.append(ck.run_workload(w, rounds, rep_ms, sweep_rounds=2 if args.quick else 3))
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"\nloadavg at end: {info['loadavg_end']}")
    print("\nBlock configs tried (kernel alone, interleaved sweep):\n")
    print(ck.config_table(results))
    print("\nKernel vs torch (ratio = torch ms / kernel ms; > 1 means the tilelang_core kernel is faster):\n")
    print(ck.main_table(results))
    if args.json:
        payload = {"info": info, "results": [r.__dict__ | {"configs": [c.__dict__ for c in r.configs]}
                                             for r in results]}
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"\nwrote {args.json}")
    return 0 if all(r.kernel_ms is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

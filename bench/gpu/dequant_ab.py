"""Benchmark: one ``pass_configs`` key at two values (off and on), the dequantising GEMM variants in alternation.

``python bench/gpu/dequant_ab.py --key tl.cuda.factor_scale [--only example_bk256 int8] [--rounds 3]`` on the H200
(``--values 1 2`` for a key that is not a switch, e.g. ``tl.cuda.accumulator_sets``; PYTHONPATH = the repo and
TVM). For each variant, shape and tile: both kernels compiled in-process by the JIT with the general lowering
(``tl.cuda.fuse_dequant`` off, so the recogniser does not take the example), checked against torch, then timed
``--rounds`` times each in alternation (off, on, off, on ...) with the clean-L2 timer; the line gives the medians,
the ratio on/off and both against fp16 cuBLAS (``a @ w.T``) measured in the same run, do_bench
beside. The recogniser's own kernel (defaults) is timed once per shape as the figure to keep or beat.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dequant_variants as dv  # noqa: E402
from run import bench_ms, bench_ms_clean  # noqa: E402

DECODE_TILES = [(64, 512, 3, 128), (128, 256, 4, 128), (128, 256, 4, 256)]  # (block_N, block_K, stages, threads)
PREFILL_TILES = [(64, 128, 3, 256), (64, 128, 4, 256), (128, 64, 4, 256), (128, 128, 3, 256)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key", required=True, help="the pass_configs key to compare (False against True)")
    ap.add_argument("--only", nargs="+", default=["example_bk256", "bf16", "hi_first", "int8"])
    ap.add_argument("--shapes", nargs="+", default=["16x8192x8192", "128x8192x28672"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--values", nargs=2, default=["False", "True"], metavar=("OFF", "ON"),
                    help="the key's two values (Python literals; e.g. 1 2 for tl.cuda.accumulator_sets)")
    ap.add_argument("--pass-config", action="append", default=[], help="KEY=VALUE for both sides")
    ap.add_argument("--tiles", nargs="+", help="block_N x block_K x num_stages x threads (default: the lists above)")
    args = ap.parse_args()
    base = {"tl.cuda.fuse_dequant": False}
    values = [ast.literal_eval(x) for x in args.values]
    for kv in args.pass_config:
        k, v = kv.split("=", 1)
        base[k] = ast.literal_eval(v)
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, key {args.key} {values[0]!r} against "
          f"{values[1]!r}, base {base}", flush=True)
    for shape in args.shapes:
        M, N, K = (int(x) for x in shape.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(N, K, device="cuda", dtype=torch.float16)
        cublas = bench_ms_clean(lambda a=a, w=w: torch.mm(a, w.T))
        cublas_db = bench_ms(lambda a=a, w=w: torch.mm(a, w.T))
        print(f"{shape}: fp16 cuBLAS clean {cublas * 1e3:.1f} us, do_bench {cublas_db * 1e3:.1f} us", flush=True)
        for name in args.only:
            v = next(x for x in dv.VARIANTS if x.name == name)
            inputs = dv.inputs(v, M, N, K)
            ref = dv.reference(v, inputs[0], *inputs[1:])
            if name == "example_bk256":  # the recogniser, at the program's tile, with every default
                rec = dv.compile_variant(v, M, N, K)
                t = bench_ms_clean(lambda rec=rec, x=inputs: rec(*x))
                print(f"  {name:14} default lowering ({dv.mechanisms(rec)}): {t * 1e3:.1f} us = {cublas / t:.2f}x",
                      flush=True)
            tiles = [tuple(int(x) for x in t.split("x")) for t in args.tiles] if args.tiles else (
                DECODE_TILES if M <= 16 else PREFILL_TILES)
            for bn, bk, st, th in tiles:
                bm = 16 if M <= 16 else 128
                tile = {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th}
                tag = f"{name:14} {bm}x{bn}x{bk} s{st} t{th}"
                try:
                    ks = [dv.compile_variant(v, M, N, K, {**base, args.key: on}, tile=tile) for on in values]
                    errs = [((k(*inputs).double() - ref).abs().max() / ref.abs().max()).item() for k in ks]
                except Exception as e:  # noqa: BLE001 (a tile that does not compile is a row of the table)
                    print(f"  {tag}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                    continue
                times: list[list[float]] = [[], []]
                for _ in range(args.rounds):
                    for i, k in enumerate(ks):
                        times[i].append(bench_ms_clean(lambda k=k, x=inputs: k(*x)))
                db = [bench_ms(lambda k=k, x=inputs: k(*x)) for k in ks]
                off, on = (statistics.median(t) for t in times)
                ok = "ok" if max(errs) <= 1e-2 else f"WRONG {errs}"
                print(f"  {tag}: {ok} off {off * 1e3:.1f} us ({cublas / off:.2f}x), on {on * 1e3:.1f} us "
                      f"({cublas / on:.2f}x) = {off / on:.3f}x; do_bench {cublas_db / db[0]:.2f}x / "
                      f"{cublas_db / db[1]:.2f}x; err {errs[0]:.1e} / {errs[1]:.1e}; {dv.mechanisms(ks[1])}",
                      flush=True)


if __name__ == "__main__":
    main()

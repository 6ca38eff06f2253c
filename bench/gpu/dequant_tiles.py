"""Benchmark: the dequantising GEMM variants at the decode shape over a grid of tiles and split-K factors.

``python bench/gpu/dequant_tiles.py [--only example_bk256 fp4_e2m1_g32] [--shape 16x8192x8192]`` on the H200
(PYTHONPATH = the repo and TVM). Why: the profiler (bench/gpu/profile_kernels.py under ncu) shows the decode
kernels neither DRAM- nor issue-bound (few eligible warps), so the question is which tile shape, thread count,
pipeline depth and split gives the scheduler more independent work. Each line: the variant, the tile, the split
(0: the compiler's wave rule), correctness against torch, the clean-L2 time and its ratio to fp16 cuBLAS
(``a @ w.T``, the same run), do_bench beside it. The general lowering only (``tl.cuda.fuse_dequant`` off), so the
figures are those of the mechanism that is to replace the recogniser.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dequant_variants as dv  # noqa: E402
from run import bench_ms, bench_ms_clean  # noqa: E402

# (block_N, block_K, num_stages, threads)
TILES = [(128, 256, 4, 128), (64, 256, 4, 128), (64, 256, 6, 128), (64, 512, 3, 128), (128, 512, 3, 128),
         (128, 128, 6, 128), (256, 256, 3, 256), (128, 256, 4, 256), (256, 128, 4, 256), (64, 128, 8, 128)]
SPLITS = (0, 2, 4, 8, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=["example_bk256", "fp4_e2m1_g32", "int8"])
    ap.add_argument("--shape", default="16x8192x8192")
    ap.add_argument("--splits", nargs="*", type=int, default=list(SPLITS))
    args = ap.parse_args()
    M, N, K = (int(x) for x in args.shape.split("x"))
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, {M}x{N}x{K}", flush=True)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    cublas = bench_ms_clean(lambda: torch.mm(a, w.T))
    cublas_db = bench_ms(lambda: torch.mm(a, w.T))
    print(f"fp16 cuBLAS clean {cublas * 1e3:.1f} us, do_bench {cublas_db * 1e3:.1f} us", flush=True)
    best: dict[str, tuple[float, str]] = {}
    for name in args.only:
        v = next(x for x in dv.VARIANTS if x.name == name)
        inputs = dv.inputs(v, M, N, K)
        ref = dv.reference(v, inputs[0], *inputs[1:])
        for (bn, bk, st, th), split in itertools.product(TILES, args.splits):
            if v.group not in (-1,) and bk % v.group and v.group % bk:
                continue
            tile = {"block_M": 16, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th}
            cfg = {"tl.cuda.fuse_dequant": False, **({"tl.cuda.split_k": split} if split else {})}
            tag = f"{name:14} 16x{bn}x{bk} s{st} t{th} split {split or 'auto'}"
            try:
                kernel = dv.compile_variant(v, M, N, K, cfg, tile=tile)
                got = kernel(*inputs)
            except Exception as e:  # noqa: BLE001 (a tile that does not compile or launch is a row of the table)
                print(f"  {tag}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
                continue
            err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
            clean = bench_ms_clean(lambda kernel=kernel, inputs=inputs: kernel(*inputs))
            db = bench_ms(lambda kernel=kernel, inputs=inputs: kernel(*inputs))
            grid = kernel.artifact.extra["cuda"].get("grid", [1, 1, 1])
            frag = "fragments" if "gemm_rb_step" in kernel.get_kernel_source() else "shared tile"
            print(f"  {tag}: {'ok' if err <= 1e-2 else 'WRONG'} {clean * 1e3:6.1f} us = {cublas / clean:.2f}x "
                  f"(do_bench {cublas_db / db:.2f}x) grid {grid} {frag}", flush=True)
            if err <= 1e-2 and (name not in best or clean < best[name][0]):
                best[name] = (clean, tag)
    print("\nbest per variant:")
    for t, tag in best.values():
        print(f"  {tag}: {t * 1e3:.1f} us = {cublas / t:.2f}x cuBLAS")


if __name__ == "__main__":
    main()

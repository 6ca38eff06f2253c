"""Launch one of the headline memory-bound kernels a few times, compiled in-process by ``@jit``, for a profiler.

``ncu --clock-control none --kernel-name main_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight
--section MemoryWorkloadAnalysis --section WarpStateStats python bench/gpu/profile_kernels.py decode`` on the H200
(PYTHONPATH = the repo and TVM). Kernels: ``decode`` (the quickstart GEMM+ReLU at
16x8192x8192 fp16, at the tile the H200 sweep ships for it: 16x64x128 s5 t128), ``decode_tma`` (the same at
16x64x64 s8 with ``tl.cuda.tma_mma_tiles``), ``w4a16`` / ``fp4`` / ``int8`` / ``g128`` / ``zp`` (the dequant
variants at the same shape, default lowering; ``--tile 64x512x3x128`` (block_N x block_K x stages x threads) and
``--pass-config KEY=VALUE`` change it, e.g. ``--pass-config tl.cuda.fuse_dequant=False`` for the general lowering of
the example). ``--launch`` sets the launches (3);
each output is checked against torch once, so a profile is never of a wrong kernel.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dequant_variants as dv  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

DEQUANT = {"w4a16": "example_bk256", "fp4": "fp4_e2m1_g32", "int8": "int8", "g128": "g128", "zp": "zp_g128"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=["decode", "decode_tma", *DEQUANT])
    ap.add_argument("--launch", type=int, default=3)
    ap.add_argument("--shape", default="16x8192x8192")
    ap.add_argument("--tile", help="dequant variants: block_N x block_K x num_stages x threads")
    ap.add_argument("--pass-config", action="append", default=[], help="dequant variants: KEY=VALUE")
    args = ap.parse_args()
    M, N, K = (int(x) for x in args.shape.split("x"))
    g = torch.Generator(device="cuda").manual_seed(0)
    if args.kernel.startswith("decode"):
        a = torch.randn(M, K, device="cuda", generator=g).half()
        b = torch.randn(K, N, device="cuda", generator=g).half()
        if args.kernel == "decode":
            kernel = matmul_relu(M, N, K, 16, 64, 128, 5, 128, "float16", "float32")
        else:  # the 16-row tiles loaded by TMA (tl.cuda.tma_mma_tiles), 8 stages
            kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.tma_mma_tiles": True})(
                matmul_relu.factory)(M, N, K, 16, 64, 64, 8, 128, "float16", "float32")
        inputs, ref = [a, b], torch.relu(a.float() @ b.float())
    else:
        v = next(x for x in dv.VARIANTS if x.name == DEQUANT[args.kernel])
        cfg = {kv.split("=", 1)[0]: ast.literal_eval(kv.split("=", 1)[1]) for kv in args.pass_config}
        tile = None
        if args.tile:
            bn, bk, st, th = (int(x) for x in args.tile.split("x"))
            tile = {"block_M": 16 if M <= 16 else 128, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th}
        kernel = dv.compile_variant(v, M, N, K, cfg or None, tile=tile)
        inputs = dv.inputs(v, M, N, K)
        ref = dv.reference(v, inputs[0], *inputs[1:])
    print(f"{args.kernel}: {kernel!r}", flush=True)
    out = kernel(*inputs)
    err = ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
    print(f"max error / max |ref| = {err:.2e}", flush=True)
    if err > 1e-2:
        raise SystemExit(f"{args.kernel}: wrong result (relative error {err:.2e}); not profiling it")
    for _ in range(args.launch - 1):
        kernel(*inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

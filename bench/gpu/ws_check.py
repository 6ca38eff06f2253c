"""Probe: the warp-specialised GEMM against torch over a grid of small shapes, tiles, dtypes and options, reporting
which output tiles are wrong (issue 15 part 3; a wrong bf16 64x64x32 case in the GPU suite at 0f7fac4).

``python bench/gpu/ws_check.py`` on the GPU host (PYTHONPATH = the repo and TVM)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from test_gemm import matmul  # noqa: E402

import tilelang_core as tilelang  # noqa: E402

CASES = [  # M, N, K, bM, bN, bK, dtype
    (256, 256, 256, 64, 64, 32, "bfloat16"),
    (256, 256, 256, 64, 64, 32, "float16"),
    (256, 192, 160, 64, 64, 32, "float16"),
    (256, 192, 160, 64, 64, 32, "bfloat16"),
    (256, 256, 512, 64, 64, 32, "float16"),
    (256, 256, 256, 64, 128, 32, "bfloat16"),
    (256, 256, 256, 128, 128, 32, "bfloat16"),
    (256, 256, 256, 64, 64, 64, "bfloat16"),
]
OPTS = {"ws": None, "ws-wait0": {"tl.cuda.wgmma_pipeline": False}, "no-ws": {"tl.disable_warp_specialized": True}}


def main() -> None:
    torch.manual_seed(0)
    for M, N, K, bm, bn, bk, dt in CASES:
        tdt = getattr(torch, dt)
        a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
        ref = a.double() @ b.double()
        for label, pc in OPTS.items():
            k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(matmul.factory)(
                M, N, K, bm, bn, bk, in_dtype=dt, out_dtype=dt)
            bad = []
            for _ in range(5):
                c = k(a, b).double()
                err = (c - ref).abs()
                tiles = sorted({(i // bm, j // bn) for i, j in (err > 0.05 * (1 + ref.abs())).nonzero().tolist()})
                bad.append((float(err.max()), len(tiles), tiles[:4]))
            src = k.get_kernel_source()
            lb = src[src.index("__launch_bounds__("):].split(")")[0]
            print(f"{M}x{N}x{K} {bm}x{bn}x{bk} {dt:9s} {label:9s} {lb}) "
                  + "  ".join(f"max={e:.3g} bad_tiles={n}{t if n else ''}" for e, n, t in bad), flush=True)


if __name__ == "__main__":
    main()

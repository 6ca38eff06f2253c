"""Diagnose a W4A16 disagreement seen in notebook 04 on the H200 (16x512x1024, group 128, default tiles: 13 of
8192 outputs off by up to 0.26): the kernel through @jit against the float64 product of the weights as the program
forms them (fp16 (q - 8) * scale), several random draws, the worst elements named, under each compiler variant
given on the command line as a ``pass_configs`` entry KEY=VALUE (a Python literal: True, 4, 'cluster'; the options
are part of the kernel cache key, so the variants share one process and one cache).

    python bench/gpu/diag_w4a16.py [M N K GROUP] [--pass-config 'tl.cuda.split_k=1' ...]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def one(M: int, N: int, K: int, gs: int, draws: int = 6, pass_configs: dict[str, Any] | None = None) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    import tilelang_core as tilelang
    from examples import dequant_gemm as dq

    kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pass_configs)(dq.dequant_gemm.factory)(
        M, N, K, gs, dtype="float16")
    src = kernel.get_kernel_source()
    grid = kernel.artifact.extra["cuda"]["grid"]
    print(f"  fused={'gemm_dq4' in src} splitk={'splitk_global_reduce' in src} grid={grid}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for d in range(draws):
        A = torch.randn(M, K, generator=g, device="cuda").half()
        B = torch.randint(0, 256, (N, K // 2), generator=g, device="cuda").to(torch.uint8)
        ng = 1 if gs == -1 else K // gs
        S = torch.randn(N, ng, generator=g, device="cuda").half() if d % 2 == 0 else \
            (torch.rand(N, ng, generator=g, device="cuda") * 0.1 + 0.01).half()
        q = torch.stack([B & 0xF, B >> 4], dim=-1).reshape(N, K).to(torch.int32) - 8
        Wp = (q.half() * S.repeat_interleave(K // ng, dim=1)).double()  # per-weight fp16, as the program
        We = q.double() * S.double().repeat_interleave(K // ng, dim=1)  # exact
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kernel(A, B, S, C)
        torch.cuda.synchronize()
        for name, W in (("program", Wp), ("exact", We)):
            ref = A.double() @ W.T
            err = (C.double() - ref).abs()
            bad = err > 0.02 + 0.02 * ref.abs()
            worst = torch.nonzero(err == err.max())[0].tolist()
            print(f"  draw {d} ({'randn' if d % 2 == 0 else 'rand'} scales) vs {name:7}: max|C| {ref.abs().max():.1f} "
                  f"max err {err.max():.3g} at {worst} (ref {ref[tuple(worst)]:.4g}, got {C[tuple(worst)].item():.4g});"
                  f" {int(bad.sum())} out of tol; nan {int(torch.isnan(C).sum())}")
        if d == 0:
            C2 = torch.full_like(C, float("nan"))
            kernel(A, B, S, C2)
            torch.cuda.synchronize()
            print(f"  same inputs twice: max diff {(C2.double() - C.double()).abs().max():.3g}")


def main() -> None:
    args = [a for a in sys.argv[1:]]
    opts = [a.split("=", 1) for i, a in enumerate(args) if i > 0 and args[i - 1] == "--pass-config"]
    nums = [int(a) for i, a in enumerate(args)
            if a.lstrip("-").isdigit() and (i == 0 or args[i - 1] != "--pass-config")]
    M, N, K, gs = nums if len(nums) == 4 else (16, 512, 1024, 128)
    for opt in [None, *opts]:
        print(f"== {M}x{N}x{K} g{gs} {'default' if opt is None else '='.join(opt)}", flush=True)
        one(M, N, K, gs, pass_configs=None if opt is None else {opt[0]: ast.literal_eval(opt[1])})


if __name__ == "__main__":
    main()

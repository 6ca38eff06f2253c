"""Probe: what 64-bit offsets cost a kernel with symbolic sizes on the GPU (issue 14 part 8).

Since tl.PromoteIndexInt64 gives every tensor with a symbolic dimension 64-bit offsets (the compiler cannot know
how large a call's tensor is), a kernel written with ``T.symbolic("m")`` computes its addresses in int64 where the
same kernel with a static M keeps int32. ``python bench/gpu/symbolic_offsets.py`` on the H200 (PYTHONPATH = the repo
and TVM) compiles the README's quickstart GEMM (fp16, wgmma path) and a bandwidth-bound element-wise kernel twice —
static M and symbolic M — checks both against torch, and times them with run.py's clean-L2 timer (median of
``--rep``). It prints one JSON line per kernel with both times and their ratio. Not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
import tilelang_core.language as T  # noqa: E402


def gemm(M: Any, N: int, K: int, block_M: int = 128, block_N: int = 128, block_K: int = 64, stages: int = 3):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def axpy(M: Any, N: int, block_M: int = 16):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16"), Z: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, block_M), threads=256) as bx:
            for i, j in T.Parallel(block_M, N):
                Z[bx * block_M + i, j] = X[bx * block_M + i, j] * T.float16(2.0) + Y[bx * block_M + i, j]

    return main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--rep", type=int, default=100)
    args = ap.parse_args()
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16, generator=g)
    cases = {
        "gemm": (lambda m: gemm(m, n, n), [a, b], lambda: a @ b, 2e-2),
        "axpy": (lambda m: axpy(m, n), [a, b], lambda: a * 2 + b, 1e-3),
    }
    for name, (make, ins, ref, tol) in cases.items():
        times = {}
        for label, m in (("static", n), ("symbolic", T.symbolic("m"))):
            kernel = tilelang.compile(make(m), out_idx=[-1], target="cuda")
            out = kernel(*ins)
            torch.testing.assert_close(out.float(), ref().float(), rtol=tol, atol=tol * 10)
            times[label] = bench_ms_clean(lambda k=kernel, xs=ins: k(*xs), rep=args.rep)
        print(json.dumps({"kernel": name, "size": n, **times,
                          "symbolic_over_static": times["symbolic"] / times["static"]}))


if __name__ == "__main__":
    main()

"""Quickstart: compile, check and time one tile kernel end to end — ``python -m tilelang_core.quickstart``.

Why this module exists: it is the smallest complete tour of the project and the smoke test behind
``bash scripts/start.sh --headless``. It writes a GEMM + ReLU kernel in the tile language exactly as the README
shows it, compiles it for the default target (``target="auto"``, the host CPU in this release), runs it on random
torch inputs, checks it against ``torch.relu(a @ b)`` and times it against that torch expression with the
kernel's own profiler. If this runs and prints PASS, the toolchain (TVM, LLVM codegen, the C compiler used to link
the kernel library, the kernel cache and the torch bridge) works on this machine.

Exit status: 0 when the result matches torch, 1 when it does not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import tilelang_core as tilelang
import tilelang_core.language as T

RTOL = 1e-4
ATOL = 1e-4


@tilelang.jit(out_idx=[-1])
def matmul_relu(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, num_stages: int = 2,
                threads: int = 128, dtype: str = "float32", accum_dtype: str = "float32") -> Any:
    """``C = relu(A @ B)`` for ``A: (M, K)``, ``B: (K, N)``; tiles of ``block_M x block_N``, K step ``block_K``."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def reference(a: Any, b: Any) -> Any:
    """What the kernel must compute, in torch."""
    import torch

    return torch.relu(a @ b)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tilelang_core.quickstart",
                                description="Compile, check and time a GEMM+ReLU tile kernel against torch.")
    p.add_argument("--size", type=int, default=1024, help="M = N = K unless given separately (default 1024)")
    p.add_argument("-M", "--m", type=int, default=None, help="rows of A and C (default: --size)")
    p.add_argument("-N", "--n", type=int, default=None, help="columns of B and C (default: --size)")
    p.add_argument("-K", "--k", type=int, default=None, help="reduction length (default: --size)")
    p.add_argument("--block-m", type=int, default=64, help="tile rows (default 64)")
    p.add_argument("--block-n", type=int, default=64, help="tile columns (default 64)")
    p.add_argument("--block-k", type=int, default=32, help="tile reduction step (default 32)")
    p.add_argument("--num-stages", type=int, default=2, help="T.Pipelined stages (default 2)")
    p.add_argument("--threads", type=int, default=128, help="threads per block (default 128)")
    p.add_argument("--seed", type=int, default=0, help="torch random seed (default 0)")
    p.add_argument("--no-bench", action="store_true", help="check correctness only, skip the timings")
    return p.parse_args(argv)


def _gflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e9


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    M = args.m or args.size
    N = args.n or args.size
    K = args.k or args.size
    torch.manual_seed(args.seed)

    print(f"tilelang_core {tilelang.__version__} quickstart: C = relu(A @ B), A {M}x{K}, B {K}x{N}, float32")
    print(f"tile config: block_M={args.block_m} block_N={args.block_n} block_K={args.block_k} "
          f"num_stages={args.num_stages} threads={args.threads}")
    kernel = matmul_relu(M, N, K, args.block_m, args.block_n, args.block_k, num_stages=args.num_stages,
                         threads=args.threads)
    tgt = kernel.target
    print(f"target:        auto -> {tgt.get('kind')} (mcpu={tgt.get('mcpu', '?')}, mtriple={tgt.get('mtriple', '?')})")
    print(f"compile:       {kernel.compile_seconds:.2f} s (cache: {kernel.cache_status})")

    a = torch.randn(M, K, dtype=torch.float32)
    b = torch.randn(K, N, dtype=torch.float32)
    c = kernel(a, b)
    ref = reference(a, b)
    err = float((c - ref).abs().max())
    ok = bool(torch.allclose(c, ref, rtol=RTOL, atol=ATOL))
    print(f"correctness:   max abs error {err:.3e} vs torch.relu(a @ b) (rtol=atol={RTOL:g}) -> "
          f"{'PASS' if ok else 'FAIL'}")

    prof = kernel.get_profiler()
    errs = prof.max_error(reference)
    print(f"profiler:      max_error on its own seeded inputs: abs {errs['max_abs']:.3e}")

    if not args.no_bench:
        t_kernel = prof.do_bench()
        t_torch = prof.do_bench(lambda x, y: torch.relu(x @ y))
        print(f"kernel:        {t_kernel.median_ms:8.3f} ms median  {_gflops(M, N, K, t_kernel.median_ms):8.1f} GFLOP/s"
              f"  ({t_kernel.runs} runs)")
        print(f"torch:         {t_torch.median_ms:8.3f} ms median  {_gflops(M, N, K, t_torch.median_ms):8.1f} GFLOP/s"
              f"  ({t_torch.runs} runs, {torch.get_num_threads()} threads)")
        print(f"ratio:         kernel/torch time = {t_kernel.median_ms / t_torch.median_ms:.2f}x")

    if not ok:
        print("FAIL: the kernel's result does not match torch", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the unchanged quickstart GEMM+ReLU at the decode shape (M = 16 against a large weight), a wide grid
of tile configurations on both GEMM paths, against cuBLAS and Triton in the same run.

``python bench/gpu/decode_gemm.py`` on the H200 (PYTHONPATH = the repo and TVM). Issue 15 asks for ≥ 1.3× cuBLAS at
16×8192×8192, a memory-bound shape (128 MiB of fp16 weight: 31.4 µs at the 4.27 TB/s copy limit). Where
``gemm_shapes.py`` measures three tiles, this script measures the two ways the compiler can take the program:

* ``block_M = 64`` (wgmma, TMA, warp specialisation: four times the rows M needs, the rest zero-filled by TMA);
* ``block_M = 16`` (mma.sync and cp.async: the rows M has, more bytes of B in flight per block);

each with the automatic split-K (``tl.cuda.split_k`` 0, the wave rule) and forced splits, and prints one line per
configuration (clean-L2 time, bandwidth of B, the ratio to cuBLAS, do_bench ratio, correctness, build time,
whether the kernel reduces split-K partial sums, the kernel's split-K note) then the five fastest. ``--shape
MxNxK`` for another decode shape, ``--dtypes`` to pick, ``--prefetch 128 256`` to time each tile with those
``tl.cuda.l2_prefetch`` sizes, ``--mma-only`` for the 16-row tiles alone, ``--hints`` for the best 16-row tiles with
L2 eviction priorities on the operand copies instead, ``--tma-mma`` for 16 x 64 x 64 deep rings loaded by TMA
(``tl.cuda.tma_mma_tiles``) against cp.async.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
import tilelang_core.language as T  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402

WGMMA = [(64, 128, 128, 4, 128), (64, 256, 64, 4, 128), (64, 64, 128, 6, 128), (64, 128, 64, 6, 128)]
MMA_SYNC = [(16, 128, 256, 3, 128), (16, 64, 256, 4, 128), (16, 64, 256, 5, 128), (16, 128, 128, 4, 128),
            (16, 128, 128, 6, 128), (16, 256, 64, 4, 128), (16, 256, 64, 6, 128),
            (16, 128, 256, 3, 256), (16, 64, 128, 8, 128), (16, 32, 256, 4, 128), (16, 32, 128, 8, 128),
            (16, 32, 256, 6, 128), (16, 64, 128, 5, 128)]
SPLITS = (0, 2, 4, 8)  # 0: the compiler's choice
# --hints: the best 16-row tiles with L2 priorities on the operand copies (T.copy eviction_policy=): B is read once
# per block and by no other block, A is re-read by every block of the grid (a question for an automatic rule)
HINT_TILES = [(16, 64, 256, 4, 128), (16, 64, 128, 5, 128), (16, 64, 128, 8, 128)]
# --tma-mma: 16 x 64 x 64 tiles (both operand tiles of 128-byte rows) with deep rings, each with
# tl.cuda.tma_mma_tiles (TMA loads completing on mbarriers) and without (cp.async); the best cp.async tile beside them
TMA_MMA = [(16, 64, 64, 4, 128), (16, 64, 64, 6, 128), (16, 64, 64, 8, 128), (16, 64, 64, 12, 128),
           (16, 64, 64, 16, 128), (16, 64, 128, 5, 128)]
# a hint on the B copy stops these kernels with an illegal instruction (ptxas 13.0, docs/cuda.md "Steering tools"):
# only A is hinted here
HINTS = [(None, None), ("evict_last", None), ("evict_first", None)]


@tilelang.jit(out_idx=[-1])
def matmul_relu_hinted(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, num_stages: int,
                       threads: int, dtype: str, accum_dtype: str, a_policy: str | None, b_policy: str | None) -> Any:
    """The quickstart's program with an L2 eviction priority on each operand copy."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s, eviction_policy=a_policy)
                T.copy(B[k * block_K, bx * block_N], B_s, eviction_policy=b_policy)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def operands(dt: str, shape: tuple[int, int, int], seed: int, rep: int) -> tuple[Any, Any, Any, float]:
    """Random ``a`` (M x K), ``b`` (K x N) on the GPU, the reference ``relu(a @ b)`` and its clean-L2 time (ms)."""
    M, N, K = shape
    tdt = getattr(torch, dt)
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
    b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
    return a, b, torch.relu(a @ b), bench_ms_clean(lambda: torch.relu(a @ b), rep=rep)


def run_hints(dt: str, shape: tuple[int, int, int], args: argparse.Namespace) -> None:
    """``--hints``: each of :data:`HINT_TILES` with each pair of :data:`HINTS`, the compiler's split."""
    M, N, K = shape
    a, b, ref, t_ref = operands(dt, shape, 1, args.rep)
    print(f"\n{dt}  cuBLAS: {t_ref * 1e3:.1f} us clean", flush=True)
    for (bm, bn, bk, st, th), (pa, pb) in itertools.product(HINT_TILES, HINTS):
        k = tilelang.jit(out_idx=[-1], target="cuda")(matmul_relu_hinted.factory)(
            M, N, K, bm, bn, bk, st, th, dt, "float32", pa, pb)
        ok = torch.allclose(k(a, b).float(), ref.float(), rtol=2e-2, atol=2e-1)
        t = bench_ms_clean(lambda k=k: k(a, b), rep=args.rep)
        hint = "hint" if "_hint<" in k.get_kernel_source() else "no hint"
        print(f"  {bm}x{bn}x{bk} s{st} t{th} A {pa or '-'} B {pb or '-'}: {t * 1e3:6.1f} us  "
              f"{K * N * 2 / t / 1e9:5.2f} TB/s of B  {t_ref / t:.2f}x cuBLAS  {'ok' if ok else 'WRONG'}  {hint}",
              flush=True)


def do_bench_ms(fn: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100))


def parse_shape(s: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in s.lower().split("x"))
    return m, n, k


def run_dtype(dt: str, shape: tuple[int, int, int], args: argparse.Namespace, tri: Any) -> None:
    """Time cuBLAS, Triton and every configuration at one dtype; print the lines and the five fastest."""
    M, N, K = shape
    a, b, ref, t_ref = operands(dt, shape, 0, args.rep)
    d_ref = do_bench_ms(lambda: torch.relu(a @ b))
    line = f"\n{dt}  cuBLAS: {t_ref * 1e3:.1f} us clean, {d_ref * 1e3:.1f} us do_bench"
    if tri is not None:
        tri(a, b, relu=True)
        t_tri = bench_ms_clean(lambda: tri(a, b, relu=True), rep=args.rep)
        line += f"  Triton: {t_tri * 1e3:.1f} us clean ({t_ref / t_tri:.2f}x cuBLAS)"
    print(line, flush=True)
    results: list[tuple[float, str]] = []
    tiles = TMA_MMA if args.tma_mma else MMA_SYNC if args.mma_only else WGMMA + MMA_SYNC
    for cfg, sk, pf, tm in itertools.product(tiles, args.splits, args.prefetch,
                                             (True, False) if args.tma_mma else (False,)):
        bm, bn, bk, st, th = cfg
        label = f"{bm}x{bn}x{bk} s{st} t{th} split_k={sk}" + (f" l2_prefetch={pf}" if pf != 128 else "") + (
            " tma_mma_tiles" if tm else "")
        pcs = {"tl.cuda.split_k": sk, "tl.cuda.l2_prefetch": pf, **({"tl.cuda.tma_mma_tiles": True} if tm else {})}
        t0 = time.perf_counter()
        try:
            k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pcs)(
                matmul_relu.factory)(M, N, K, bm, bn, bk, st, th, dt, "float32")
        except Exception as e:  # noqa: BLE001 - report the config and go on
            print(f"  {label}: COMPILE FAILED {str(e).splitlines()[0][:160]}", flush=True)
            continue
        build = time.perf_counter() - t0
        c = k(a, b)
        ok = torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-1)
        t = bench_ms_clean(lambda k=k: k(a, b), rep=args.rep)
        d = do_bench_ms(lambda k=k: k(a, b))
        notes = [n for n in k.notes if "split" in n.lower()][:1]
        split = "split" if "splitk" in k.get_kernel_source() else "no split"
        print(f"  {label}: {t * 1e3:6.1f} us  {K * N * 2 / t / 1e9:5.2f} TB/s of B  {t_ref / t:.2f}x cuBLAS "
              f"(do_bench {d_ref / d:.2f}x)  {'ok' if ok else 'WRONG'}  build {build:.1f}s  {split}  "
              f"{'; '.join(notes)[:110]}", flush=True)
        if ok:
            results.append((t, label))
    print(f"fastest ({dt}):", flush=True)
    for t, label in sorted(results)[:5]:
        print(f"  {label}: {t * 1e3:.1f} us  {t_ref / t:.2f}x cuBLAS", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=parse_shape, default=(16, 8192, 8192))
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--splits", nargs="*", type=int, default=list(SPLITS))
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--prefetch", nargs="*", type=int, default=[128],
                    help="tl.cuda.l2_prefetch sizes to time (0, 64, 128, 256)")
    ap.add_argument("--mma-only", action="store_true", help="only the 16-row (mma.sync) tiles")
    ap.add_argument("--hints", action="store_true", help="only the L2 eviction-priority variants (HINTS)")
    ap.add_argument("--tma-mma", action="store_true", help="the TMA_MMA tiles with and without tl.cuda.tma_mma_tiles")
    args = ap.parse_args()
    M, N, K = args.shape
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}  "
          f"{M}x{N}x{K}; copy limit of B at 4.27 TB/s: {K * N * 2 / 4.27e6:.1f} us", flush=True)
    tri = None
    if not args.no_triton:
        import triton_ref

        tri = triton_ref.matmul
    for dt in args.dtypes:
        if args.hints:
            run_hints(dt, (M, N, K), args)
        else:
            run_dtype(dt, (M, N, K), args, tri)


if __name__ == "__main__":
    main()

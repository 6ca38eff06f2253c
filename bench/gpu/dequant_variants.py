"""Dequantised GEMM variants of issue 17 against fp16 cuBLAS, on the GPU host (programs + torch references here).

Why this script exists: the W4A16 example is fast on CUDA only in the one spelling ``tl.FuseDequantGemmCUDA``
recognises; a user's small change (bf16, another ``block_K``, the high nibble first, a zero point, fp4 or int8
weights) fell to the generic lowering, 10-20x slower (issue 17's table). This file holds each variant as the
program a user would write (the weight decode is an ordinary ``T.Parallel`` nest: nothing is a hint to the
compiler), a torch reference on the dequantised weights, and a driver that, for every variant at 16x8192x8192 and
128x8192x28672, checks the kernel against the reference first, then times it and ``torch.mm`` on an fp16 weight
matrix of the same shape (cuBLAS) with CUDA events after an L2 clean (``run.py``'s ``bench_ms_clean``, the
headline) and with ``triton.testing.do_bench``. It also prints which mechanisms applied (the recogniser's
``gemm_dq4``, split-K's workspace reduce) and the compiler's notes, so a slow variant says why.

    python3 bench/gpu/dequant_variants.py [--log out.txt] [--only bf16 bk64] [--shapes 16x8192x8192]
        [--pass-config tl.cuda.split_k=4 ...] [--no-split-baseline] [--fragments] [--space]

Kernels of the generic path that tl.SplitKCUDA split are timed again with ``tl.cuda.split_k=1`` (what split-K
buys), unless ``--no-split-baseline``.

``tl.cuda.dequant_fragments`` (the general producer fusion: B fragments computed in registers from the decode nest,
no decoded shared tile) is on by default, after the W4A16 recogniser (``tl.cuda.fuse_dequant``), which keeps the
one spelling it takes. ``--fragments`` also checks and times every variant with the fusion alone (the recogniser
off, tag " fragments") and with the fusion off (the shared-tile decode or the recogniser, tag " no fragments"), so
one run gives the three columns.
Adding ``--pass-config tl.cuda.dequant_fragments_direct=True`` makes the fused rows read the packed weights straight
from global memory (no shared staging of the packed tile; docs/cuda.md, "Producer fusion").

``--space`` checks and times, per variant and shape, every configuration of
``tilelang_core.autotune.dequant_space(..., options="hopper")`` instead: the bench's tile at two stage counts and
the space's other decode tiles (256 threads; 16 x 64 with a long K step), each also with the twins of issue 17's
keys (``tl.cuda.dequant_fragments`` / ``tl.cuda.dequant_fragment_tables`` off for decode tiles,
``tl.cuda.wgmma_written_tiles`` with and without ``tl.cuda.tma_plain_tiles`` for prefill tiles); the row's tag
names the tile, stages, threads and keys.

Without a GPU, ``--source DIR`` writes each variant's generated CUDA C (and ptxas's register counts) to DIR.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tilelang_core as tilelang  # noqa: E402
import tilelang_core.language as T  # noqa: E402


@dataclass(frozen=True)
class Variant:
    """One row of the table: the weight format and the program's tiles."""

    name: str
    fmt: str = "int4"  # int4 | fp4 | int8
    dtype: str = "float16"  # activations, scales, output
    group: int = -1  # -1: one scale per output channel
    hi_first: bool = False  # int4/fp4: even k in the high nibble
    zero_point: bool = False  # int4: W = (q - Z[n, g]) * S[n, g] with Z uint8 in [0, 15], else q - 8
    block_k: int = 256


VARIANTS = [
    Variant("example_bk256"),
    Variant("bf16", dtype="bfloat16"),
    Variant("bk64", block_k=64),
    Variant("hi_first", hi_first=True),
    Variant("zp_g128", group=128, zero_point=True),
    Variant("g128", group=128),
    Variant("fp4_e2m1_g32", fmt="fp4", group=32),
    Variant("int8", fmt="int8"),
]
SHAPES = [(16, 8192, 8192), (128, 8192, 28672)]


def tiles(M: int, v: Variant) -> dict[str, int]:
    """The program's tiles: decode (M <= 16) one warp row of 16 x 128, prefill 128 x 64 with 256 threads."""
    if M <= 16:
        return {"block_M": 16, "block_N": 128, "block_K": v.block_k, "num_stages": 4, "threads": 128}
    return {"block_M": 128, "block_N": 64, "block_K": min(v.block_k, 128), "num_stages": 3, "threads": 256}


def program(v: Variant, M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, num_stages: int,
            threads: int) -> Any:
    """The variant's ``@T.prim_func``: ``C = A @ dequant(B)^T``, the decode written out in a ``T.Parallel`` nest."""
    dtype, accum = v.dtype, "float32"
    group = K if v.group == -1 else v.group
    ng = K // group
    hi = 1 if v.hi_first else 0
    if v.fmt == "int8":
        @T.prim_func
        def int8_main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), "int8"), S: T.Tensor((N, ng), dtype),
                      C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_s = T.alloc_shared((block_M, block_K), dtype)
                B_q = T.alloc_shared((block_N, block_K), "int8")
                B_s = T.alloc_shared((block_N, block_K), dtype)
                C_l = T.alloc_fragment((block_M, block_N), accum)
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_s)
                    T.copy(B[bx * block_N, k * block_K], B_q)
                    for i, j in T.Parallel(block_N, block_K):
                        B_s[i, j] = T.cast(B_q[i, j], dtype) * S[bx * block_N + i, (k * block_K + j) // group]
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                T.copy(C_l, C[by * block_M, bx * block_N])

        return int8_main
    if v.fmt == "fp4":
        @T.prim_func
        def fp4_main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N, ng), dtype),
                     C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_s = T.alloc_shared((block_M, block_K), dtype)
                B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
                B_s = T.alloc_shared((block_N, block_K), dtype)
                C_l = T.alloc_fragment((block_M, block_N), accum)
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_s)
                    T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                    for i, j in T.Parallel(block_N, block_K):
                        q = T.cast((B_p[i, j // 2] >> (4 * ((j + hi) % 2))) & 0xF, "int32")  # e2m1: s e e m
                        e = (q >> 1) & 3
                        mag = T.if_then_else(e == 0, T.cast(q & 1, "float32") * 0.5,
                                             (1.0 + T.cast(q & 1, "float32") * 0.5)
                                             * T.cast(1 << (T.max(e, 1) - 1), "float32"))
                        val = T.if_then_else(q >= 8, -mag, mag)
                        B_s[i, j] = T.cast(val, dtype) * S[bx * block_N + i, (k * block_K + j) // group]
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                T.copy(C_l, C[by * block_M, bx * block_N])

        return fp4_main
    if v.zero_point:
        @T.prim_func
        def zp_main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N, ng), dtype),
                    Z: T.Tensor((N, ng), "uint8"), C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_s = T.alloc_shared((block_M, block_K), dtype)
                B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
                B_s = T.alloc_shared((block_N, block_K), dtype)
                C_l = T.alloc_fragment((block_M, block_N), accum)
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_s)
                    T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                    for i, j in T.Parallel(block_N, block_K):
                        q = (B_p[i, j // 2] >> (4 * ((j + hi) % 2))) & 0xF
                        g = (k * block_K + j) // group
                        B_s[i, j] = (T.cast(T.cast(q, "int32") - T.cast(Z[bx * block_N + i, g], "int32"), dtype)
                                     * S[bx * block_N + i, g])
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                T.copy(C_l, C[by * block_M, bx * block_N])

        return zp_main

    @T.prim_func
    def int4_main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N, ng), dtype),
                  C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_p = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((block_M, block_N), accum)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_p)
                for i, j in T.Parallel(block_N, block_K):
                    q = (B_p[i, j // 2] >> (4 * ((j + hi) % 2))) & 0xF
                    B_s[i, j] = (T.cast(T.cast(q, "int32") - 8, dtype)
                                 * S[bx * block_N + i, (k * block_K + j) // group])
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return int4_main


# -- inputs and references (torch only) --------------------------------------------------------------------------
FP4_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def inputs(v: Variant, M: int, N: int, K: int, device: str = "cuda", seed: int = 0) -> list[torch.Tensor]:
    """Random inputs in the program's parameter order (output left out): every byte value possible, positive
    random scales, random zero points."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, v.dtype)
    ng = 1 if v.group == -1 else K // v.group
    A = torch.randn(M, K, generator=g).to(dt)
    if v.fmt == "int8":
        B = torch.randint(-128, 128, (N, K), generator=g, dtype=torch.int8)
        S = (torch.rand(N, ng, generator=g) * 0.01 + 0.001).to(dt)
    else:
        B = torch.randint(0, 256, (N, K // 2), generator=g, dtype=torch.uint8)
        S = (torch.rand(N, ng, generator=g) * 0.1 + 0.01).to(dt)
    out = [A, B, S]
    if v.zero_point:
        out.append(torch.randint(0, 16, (N, ng), generator=g, dtype=torch.uint8))
    return [t.to(device) for t in out]


def dequantize(v: Variant, B: torch.Tensor, S: torch.Tensor, Z: torch.Tensor | None = None) -> torch.Tensor:
    """The (N, K) weights the program computes with, each rounded to the program's dtype as its nest does."""
    dt = S.dtype
    if v.fmt == "int8":
        N, K = B.shape
        return (B.to(dt) * S.repeat_interleave(K // S.shape[1], dim=1)).to(dt)
    N, K = B.shape[0], 2 * B.shape[1]
    lo, hi = (B & 0xF).to(torch.int32), (B >> 4).to(torch.int32)
    q = torch.stack([hi, lo] if v.hi_first else [lo, hi], dim=-1).reshape(N, K)
    s = S.repeat_interleave(K // S.shape[1], dim=1)
    if v.fmt == "fp4":
        w = torch.tensor(FP4_E2M1, device=B.device)[q.long()].to(dt)
    elif Z is not None:
        w = (q - Z.to(torch.int32).repeat_interleave(K // Z.shape[1], dim=1)).to(dt)
    else:
        w = (q - 8).to(dt)
    return (w * s).to(dt)


def reference(v: Variant, A: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
    """``A @ W^T`` in float64 (the more accurate side of the comparison)."""
    return A.double() @ dequantize(v, *weights).double().T


def compile_variant(v: Variant, M: int, N: int, K: int, pass_configs: dict[str, Any] | None = None,
                    target: str = "cuda", tile: dict[str, int] | None = None) -> Any:
    func = program(v, M, N, K, **(tile or tiles(M, v)))
    return tilelang.compile(func, out_idx=[-1], target=target, pass_configs=pass_configs,
                            name=f"dq_{v.name}", config={"M": M, "N": N, "K": K})


# -- the GPU driver ------------------------------------------------------------------------------------------------
def mechanisms(kernel: Any) -> str:
    src = kernel.get_kernel_source()
    used = [name for mark, name in (("gemm_dq4", "recogniser gemm_dq4"), ("gemm_rb_step", "B fragments in registers"),
                                    ("splitk_global_reduce", "split-K"),
                                    ("cp_async", "cp.async"), ("mma.sync", "mma.sync"), ("gemm_ss", "gemm_ss"))
            if mark in src]
    grid = kernel.artifact.extra["cuda"].get("grid")
    return f"grid {grid}, {', '.join(used) or 'plain'}"


def space_runs(v: Variant, M: int, N: int, K: int, pass_configs: dict[str, Any]) -> list[tuple[str, dict, dict]]:
    """``--space``: (tag, pass_configs, tile) for every configuration of ``dequant_space(..., options="hopper")``
    (the bench's tiles and stages, each with the issue-17 keys where the compiler takes them)."""
    from tilelang_core.autotune import dequant_space

    runs = []
    for c in dequant_space("cuda", M=M, N=N, K=K, block_K=v.block_k, weight_bits=8 if v.fmt == "int8" else 4,
                           options="hopper"):
        c = dict(c)
        pcs = c.pop("pass_configs", {})
        keys = ",".join(k.rsplit(".", 1)[-1] for k in sorted(pcs))
        tile = f" {c['block_M']}x{c['block_N']}x{c['block_K']} s{c['num_stages']} t{c['threads']}"
        runs.append((tile + (f" {keys}" if keys else ""), {**pass_configs, **pcs}, c))
    return runs


def run_gpu(names: list[str] | None, shapes: list[tuple[int, int, int]], pass_configs: dict[str, Any],
            out: list[str], split_baseline: bool = True, fragments: bool = False, space: bool = False) -> None:
    from run import bench_ms, bench_ms_clean

    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(N, K, device="cuda", dtype=torch.float16)
        cublas_clean = bench_ms_clean(lambda a=a, w=w: torch.mm(a, w.T))
        cublas_db = bench_ms(lambda a=a, w=w: torch.mm(a, w.T))
        out.append(f"{M}x{N}x{K}: fp16 cuBLAS clean {cublas_clean * 1e3:.1f} us, do_bench {cublas_db * 1e3:.1f} us")
        for v in VARIANTS:
            if names and v.name not in names:
                continue
            args = inputs(v, M, N, K)
            ref = reference(v, args[0], *args[1:])
            runs: list[tuple[str, dict, dict | None]] = [("", pass_configs, None)]
            if fragments:  # the general producer fusion alone, and the decode into the shared tile
                runs.append((" fragments", {**pass_configs, "tl.cuda.dequant_fragments": True,
                                            "tl.cuda.fuse_dequant": False}, None))
                runs.append((" no fragments", {**pass_configs, "tl.cuda.dequant_fragments": False}, None))
            if space:  # the tuning space's configurations (the first is the bench's own tile)
                runs = space_runs(v, M, N, K, pass_configs)
            for tag, cfg, tile in runs:
                try:
                    kernel = compile_variant(v, M, N, K, cfg, tile=tile)
                except Exception as e:  # noqa: BLE001 (a variant that does not compile is a row of the table)
                    out.append(f"  {v.name + tag:24} COMPILE FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
                    continue
                got = kernel(*args)
                err = ((got.double() - ref).abs().max() / ref.abs().max()).item()  # output rounding: ~2^-9 (bf16)
                ok = err <= 1e-2
                clean = bench_ms_clean(lambda kernel=kernel, args=args: kernel(*args))
                db = bench_ms(lambda kernel=kernel, args=args: kernel(*args))
                notes = "; ".join(kernel.artifact.extra.get("notes", []))
                out.append(f"  {v.name + tag:24} {'PASS' if ok else 'FAIL'} (err {err:.1e}) clean {clean * 1e3:.1f} us "
                           f"= {cublas_clean / clean:.2f}x cuBLAS; do_bench {db * 1e3:.1f} us = {cublas_db / db:.2f}x; "
                           f"{mechanisms(kernel)}" + (f"; notes: {notes}" if notes else ""))
                split = kernel.artifact.extra["cuda"].get("grid", [1, 1, 1])[2] > 1
                if (split_baseline and not tag and split and "gemm_dq4" not in kernel.get_kernel_source()
                        and "tl.cuda.split_k" not in cfg):  # what tl.SplitKCUDA buys: the same without it
                    runs.append((tag + " split_k=1", {**cfg, "tl.cuda.split_k": 1}, tile))


def write_sources(dest: Path, names: list[str] | None, shapes: list[tuple[int, int, int]],
                  pass_configs: dict[str, Any], fragments: bool = False) -> None:
    """No GPU: each variant's CUDA C and lowered TIR into ``dest`` (through the CUDA build, nvcc included); with
    ``fragments`` also each variant with the fusion alone (``tl.cuda.fuse_dequant=False``, folders ending
    ``_fragments``) and without it (``tl.cuda.dequant_fragments=False``, ``_no_fragments``)."""
    from tilelang_core.jit import _normalize_out_idx, _param_specs
    from tilelang_core.jit.cuda import build_artifact

    for M, N, K in shapes:
        for v in VARIANTS:
            if names and v.name not in names:
                continue
            cfgs = [("", pass_configs)] + ([("_fragments", {**pass_configs, "tl.cuda.fuse_dequant": False}),
                                            ("_no_fragments", {**pass_configs, "tl.cuda.dequant_fragments": False})]
                                           if fragments else [])
            for tag, cfg in cfgs:
                func = program(v, M, N, K, **tiles(M, v))
                d = dest / f"{v.name}_{M}x{N}x{K}{tag}"
                d.mkdir(parents=True, exist_ok=True)
                specs = _param_specs(func)
                try:
                    art = build_artifact(func, d, {"kind": "cuda", "arch": "sm_90a"}, specs,
                                         _normalize_out_idx([-1], len(specs)), pass_configs=cfg)
                except Exception as e:  # noqa: BLE001 (one failed variant is a line of the listing)
                    print(d.name, "BUILD FAILED:", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                    continue
                print(d.name, art.extra["cuda"].get("grid"), art.extra.get("notes"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log")
    ap.add_argument("--only", nargs="+")
    ap.add_argument("--shapes", nargs="+", help="MxNxK")
    ap.add_argument("--pass-config", action="append", default=[], help="KEY=VALUE (a Python literal)")
    ap.add_argument("--source", help="no GPU: write the generated CUDA C of each variant under this folder")
    ap.add_argument("--fragments", action="store_true", help="also check and time each variant with the general "
                    "producer fusion alone (tl.cuda.fuse_dequant=False) and without it (tl.cuda.dequant_fragments="
                    "False)")
    ap.add_argument("--space", action="store_true", help="check and time every configuration of "
                    "tilelang_core.autotune.dequant_space(options='hopper') instead (tiles, stages and the keys "
                    "tl.cuda.dequant_fragments / wgmma_written_tiles / tma_plain_tiles where they apply)")
    ap.add_argument("--no-split-baseline", action="store_true", help="do not also time split kernels of the "
                    "generic path with pass_configs tl.cuda.split_k=1")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    cfg = {k: ast.literal_eval(val) for k, val in (p.split("=", 1) for p in args.pass_config)}
    if args.source:
        write_sources(Path(args.source), args.only, shapes, cfg, args.fragments)
        return
    out: list[str] = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, pass_configs {cfg}"]
    try:
        run_gpu(args.only, shapes, cfg, out, not args.no_split_baseline, args.fragments, args.space)
    finally:
        text = "\n".join(out)
        print(text)
        if args.log:
            Path(args.log).write_text(text + "\n")


if __name__ == "__main__":
    main()

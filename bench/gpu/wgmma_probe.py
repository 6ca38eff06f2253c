"""Probe: TF/s of the quickstart GEMM (+ReLU) on the wgmma path vs torch.matmul, at 4096^3 and 8192^3.

``python bench/gpu/wgmma_probe.py`` on the H200 (PYTHONPATH = the repo and TVM). For a few tile configs
(block_M x block_N x block_K, stages, threads) it compiles the README's quickstart program through
``@jit(target="cuda")`` (sm_90a: ``tl::wgmma_gemm_ss``, one wgmma group kept in flight across k-steps, loads by
TMA: ``tma``), and, for comparison, the same config with ``pass_configs={"tl.disable_tma_lower": True}``
(``cp.async`` loads), with
``{"tl.cuda.wgmma_pipeline": False}`` (``--w0``: every k-step waits for its group, wait_group 0) and with
``{"tl.cuda.wgmma": False}`` (mma.sync), checks each result against
torch, and times every kernel
and ``torch.relu(a @ b)`` with CUDA events around each call, the L2 emptied by reading 256 MB before each call
(median of ``--rep``). Also prints the ptxas register/spill line, the SASS's tensor-core instructions and its
wgmma waits (``depbar=0x1`` when a group stays in flight). Issue 15.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402 - bench/gpu/run.py's clean-L2 timer, so both figures are timed alike

import tilelang_core as tilelang  # noqa: E402
import tilelang_core.language as T  # noqa: E402
from tilelang_core.quickstart import matmul_relu  # noqa: E402


@tilelang.jit(out_idx=[-1])
def matmul_relu_rastered(M, N, K, block_M, block_N, block_K, num_stages, threads, dtype, accum_dtype, panel):
    """The quickstart program with TileLang's block rasterisation hint ``T.use_swizzle(panel)`` (L2 reuse)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main

RASTERED = [(128, 256, 64, 4, 256), (256, 128, 64, 4, 256)]  # also timed with T.use_swizzle(panel)
CONFIGS = [  # block_M, block_N, block_K, stages, threads
    (128, 128, 64, 3, 128),
    (128, 256, 64, 3, 256),
    (128, 128, 64, 4, 256),
    (256, 128, 64, 3, 256),
    (128, 256, 32, 4, 256),
    # with a group in flight the loads run num_stages - 2 tiles ahead: one stage more gives back the depth of s3
    (128, 128, 64, 4, 128),
    (128, 256, 64, 4, 256),
]


def clean_ms(fn: Any, warmup: int = 5, rep: int = 30) -> float:
    """Median ms with the L2 emptied by reading 256 MB before each call: run.py's clean-L2 timer."""
    return bench_ms_clean(fn, warmup=warmup, rep=rep)


def _sass_has_hgmma(kernel: Any) -> str:
    tool = shutil.which("cuobjdump")
    if tool is None:
        try:
            import nvidia.cu13  # type: ignore[import-not-found]

            p = Path(list(nvidia.cu13.__path__)[0]) / "bin" / "cuobjdump"
            tool = str(p) if p.is_file() else None
        except ImportError:
            tool = None
    if tool is None:
        return "no cuobjdump"
    cubin = kernel.artifact.path / "kernel.cubin"
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True).stdout
    kinds = sorted(set(re.findall(r"(HGMMA\.\S+|HMMA\.\S+)", sass)))
    waits = sorted(set(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)))
    return (",".join(kinds) or "no tensor-core instructions") + (f"  depbar={','.join(waits)}" if waits else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--no-mma", action="store_true", help="skip the mma.sync comparison builds")
    ap.add_argument("--w0", action="store_true", help="also the wait_group 0 builds (no wgmma group in flight)")
    ap.add_argument("--panels", type=int, nargs="*", default=[4, 8, 16],
                    help="T.use_swizzle panel sizes for the rastered builds of RASTERED")
    ap.add_argument("--configs", choices=["all", "best"], default="all",
                    help="'best': only the rastered builds and the best plain config")
    args = ap.parse_args()
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype]
    if args.configs == "best":
        CONFIGS[:] = [(128, 256, 64, 4, 256)]
    print(f"device: {torch.cuda.get_device_name()}  dtype: {args.dtype}  {time.strftime('%Y-%m-%d %H:%M')}")
    for n in args.sizes:
        a = torch.randn(n, n, device="cuda").to(dt)
        b = torch.randn(n, n, device="cuda").to(dt)
        flops = 2.0 * n * n * n
        ref = torch.relu(a @ b)
        t_ref = clean_ms(lambda a=a, b=b: torch.relu(a @ b), rep=args.rep)
        print(f"\n{n}^3  torch.relu(a @ b): {t_ref:.3f} ms  {flops / t_ref / 1e9:.1f} TF/s", flush=True)
        variants = [("tma+ws", None), ("tma+ws-1/tile", {"tl.cuda.persistent": -1}),
                    ("tma-ws-noreg", {"tl.cuda.setmaxnreg": False}),
                    ("tma", {"tl.disable_warp_specialized": True}),
                    ("cp.async", {"tl.disable_tma_lower": True})]
        variants += [("wgmma-w0", {"tl.cuda.wgmma_pipeline": False})] if args.w0 else []
        variants += [] if args.no_mma else [("mma.sync", {"tl.cuda.wgmma": False})]
        runs = [(c, label, pc, None) for c in CONFIGS for label, pc in variants]
        runs += [(c, f"tma+ws+swz{p}", None, p) for c in RASTERED for p in args.panels]
        runs += [(c, f"tma+ws-1/tile+swz{p}", {"tl.cuda.persistent": -1}, p) for c in RASTERED for p in args.panels]
        runs += [(c, f"tma+swz{p}", {"tl.disable_warp_specialized": True}, p) for c in RASTERED for p in args.panels]
        for (bm, bn, bk, st, th), label, pc, panel in runs:
            t0 = time.perf_counter()
            try:
                fac = matmul_relu if panel is None else matmul_relu_rastered
                extra = () if panel is None else (panel,)
                k = tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pc)(fac.factory)(
                    n, n, n, bm, bn, bk, st, th, args.dtype, "float32", *extra)
            except Exception as e:  # noqa: BLE001 - report the config and go on
                print(f"  {bm}x{bn}x{bk} s{st} t{th} {label}: COMPILE FAILED {str(e)[:300]}")
                continue
            build = time.perf_counter() - t0
            c = k(a, b)
            err = (c.float() - ref.float()).abs().max().item()
            ok = torch.allclose(c.float(), ref.float(), rtol=2e-2, atol=2e-1)
            t = clean_ms(lambda k=k, a=a, b=b: k(a, b), rep=args.rep)
            meta = json.loads((k.artifact.path / "meta.json").read_text())
            info = meta.get("extra", {}).get("cuda", {}).get("ptxas_info", "")
            regs = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", info))
            print(f"  {bm}x{bn}x{bk} s{st} t{th} {label:8s}: {t:.3f} ms  {flops / t / 1e9:7.1f} TF/s  "
                  f"{t_ref / t:.2f}x torch  {'ok' if ok else 'WRONG'} (max err {err:.3g})  build {build:.1f}s  "
                  f"{regs}  {_sass_has_hgmma(k)}", flush=True)


if __name__ == "__main__":
    main()

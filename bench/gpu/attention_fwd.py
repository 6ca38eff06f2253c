"""Benchmark: the classic flash-attention forward (examples/flash_attention.py) at issue 16's shapes, fp16 and
bf16, against torch SDPA and a Triton FlashAttention-2 kernel in the same run, with its schedules as variants.

``python bench/gpu/attention_fwd.py`` on the H200 (PYTHONPATH = the repo and TVM). For each shape ((8, 16, 4096,
128) causal and not, (8, 32, 2048, 64)) and dtype it compiles the unchanged program through ``@jit(target="cuda")``
(sm_90a: ``S = Q K^T`` on ``tl::wgmma_gemm_ss``, ``O += P V`` on ``tl::wgmma_gemm_rs`` with P from registers, K/V
as TMA boxes fed by a producer warpgroup) for a few tile configs; with ``--mma-too`` also with
``pass_configs={"tl.cuda.wgmma": False}`` (mma.sync); with ``--variants`` also with ping-pong
(``tl.cuda.pingpong``), with the softmax under the previous block's ``P V`` (``tl.cuda.attention_overlap``, also
with the producer warpgroup forced), without the producer warpgroup (``tl.disable_warp_specialized``) and without TMA
(``tl.disable_tma_lower``: cp.async). Each kernel is checked against SDPA (max |error| printed; one off by more
than 2e-2 is not timed) and timed, with SDPA (its backend printed) and Triton (``triton_attn.py``; fp16 only), by
the clean-L2 timer of ``run.py`` (the headline) and ``triton.testing.do_bench`` beside it. ``--space`` times
every configuration of ``tilelang_core.autotune.attention_space(..., options="hopper")`` instead of the fixed
configs (tiles, stages, warpgroups, the producer warpgroup forced, and ``tl.cuda.attention_overlap`` twins).
Ratios are reference time / ours (above 1: faster than the reference).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from examples.flash_attention import flash_attention, flops  # noqa: E402

SHAPES: dict[tuple[int, int, int, int, bool], list[tuple[int, int, int, int]]] = {  # block M, N, stages, threads
    (8, 16, 4096, 128, False): [(128, 64, 2, 256), (128, 128, 2, 256), (128, 64, 3, 256), (128, 64, 2, 128)],
    (8, 16, 4096, 128, True): [(128, 64, 2, 256), (128, 128, 2, 256), (128, 64, 3, 256)],
    (8, 32, 2048, 64, False): [(128, 64, 2, 256), (128, 128, 2, 256), (128, 128, 2, 128), (64, 128, 2, 128)],
}


def do_bench_ms(fn: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100))


def sdpa_backend(dtype: torch.dtype) -> str:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 8, 256, 128, device="cuda", dtype=dtype)
    for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
            return f"{name} (first of cuDNN, flash, efficient that runs; the default dispatcher picks among them)"
        except RuntimeError:
            continue
    return "MATH"


def space_runs(S: int, D: int, dt: str) -> list[tuple[tuple[int, int, int, int], tuple[str, dict | None]]]:
    """``--space``: every configuration of ``attention_space(options="hopper")`` for sequence ``S``, head dim ``D``
    (tiles, stages, warpgroups, the producer warpgroup forced, ``tl.cuda.attention_overlap`` where it applies)."""
    from tilelang_core.autotune import attention_space

    names = {"tl.cuda.attention_overlap": "overlap", "tl.cuda.ws_keep_occupancy": "WS forced"}
    runs = []
    for c in attention_space("cuda", seq_len=S, dim=D, dtype=dt, options="hopper"):
        pcs = c.get("pass_configs")
        suffix = f" {', '.join(names.get(k, k) for k in sorted(pcs))}" if pcs else ""
        runs.append(((c["block_M"], c["block_N"], c["num_stages"], c["threads"]), (suffix, pcs)))
    return runs


def bench_shape(dt: str, key: tuple[int, int, int, int, bool], cfgs: list[tuple[int, int, int, int]],
                args: argparse.Namespace, tri: Any) -> None:
    """One shape and dtype: SDPA and Triton, then each config (wgmma, and off with --mma-too), checked first."""
    B, H, S, D, causal = key
    tdt = getattr(torch, dt)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(tdt) for _ in range(3))
    o = torch.empty_like(q)
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    ref = sdpa(qt, kt, vt, is_causal=causal).transpose(1, 2).float()
    fl = flops(B, H, S, D, causal)
    t_ref = bench_ms_clean(lambda: sdpa(qt, kt, vt, is_causal=causal), rep=args.rep)
    d_ref = do_bench_ms(lambda: sdpa(qt, kt, vt, is_causal=causal))
    line = (f"\n({B}, {H}, {S}, {D}){' causal' if causal else ''} {dt}  SDPA: {t_ref * 1e3:.1f} us clean "
            f"({fl / t_ref / 1e9:.0f} TF/s), {d_ref * 1e3:.1f} us do_bench")
    t_tri = None
    if tri is not None and dt == "float16":
        ot = torch.empty_like(qt)
        tri(qt, kt, vt, causal, out=ot)
        t_tri = bench_ms_clean(lambda: tri(qt, kt, vt, causal, out=ot), rep=args.rep)
        line += f"  Triton FA2: {t_tri * 1e3:.1f} us clean ({fl / t_tri / 1e9:.0f} TF/s)"
    print(line, flush=True)
    variants: list[tuple[str, dict | None]] = [("", None)]
    if args.mma_too:
        variants.append((" wgmma off", {"tl.cuda.wgmma": False}))
    if args.variants:  # what each of the TMA loads and the producer warpgroup is worth
        variants += [(" overlap", {"tl.cuda.attention_overlap": True}),
                     (" overlap, WS forced", {"tl.cuda.attention_overlap": True, "tl.cuda.ws_keep_occupancy": False}),
                     (" pingpong", {"tl.cuda.pingpong": True}), (" no WS", {"tl.disable_warp_specialized": True}),
                     (" cp.async", {"tl.disable_tma_lower": True})]
    runs = [(c, v) for v in variants for c in cfgs]
    if args.space:  # the tuning space instead of the fixed configs
        runs = space_runs(S, D, dt)
    for (bm, bn, st, th), (suffix, pcfg) in runs:
        label = f"{bm}x{bn} s{st} t{th}{suffix}"
        t0 = time.perf_counter()
        try:
            prog = flash_attention.get_program(B, H, S, D, causal, block_M=bm, block_N=bn, num_stages=st,
                                               threads=th, dtype=dt, accum_dtype="float32")
            kern = tilelang.compile(prog, target="cuda", pass_configs=pcfg)
        except Exception as ex:  # noqa: BLE001 - a config that does not build is reported, not fatal
            print(f"  {label:24s} build failed: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            continue
        build = time.perf_counter() - t0
        kern(q, k, v, o)
        torch.cuda.synchronize()
        err = float((o.float() - ref).abs().max())
        if not err <= 2e-2:
            print(f"  {label:24s} WRONG: max|err| {err:.3e} vs SDPA", flush=True)
            continue
        t = bench_ms_clean(lambda kern=kern: kern(q, k, v, o), rep=args.rep)
        d = do_bench_ms(lambda kern=kern: kern(q, k, v, o))
        tri_s = f", {t_tri / t:.2f}x Triton" if t_tri else ""
        print(f"  {label:24s} {t * 1e3:8.1f} us clean ({fl / t / 1e9:4.0f} TF/s) {t_ref / t:.2f}x SDPA"
              f"{tri_s}; do_bench {d * 1e3:.1f} us ({d_ref / d:.2f}x); max|err| {err:.1e}; "
              f"build {build:.1f} s{_resources(kern)}", flush=True)


def _resources(kern: Any) -> str:
    """"; 168 regs, 0 spills" and ptxas's first performance warning (wgmma serialised ...), or "" when unknown."""
    try:
        r = kern.resources()
    except Exception:  # noqa: BLE001 - no cubin or no cuobjdump: the timing stands without it
        return ""
    if r is None:
        return ""
    warn = f"; ptxas: {r.warnings[0][:160]}" if r.warnings else ""
    return f"; {r.registers} regs, {r.spills} spill bytes{warn}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--mma-too", action="store_true", help="also time each config with tl.cuda.wgmma off")
    ap.add_argument("--variants", action="store_true",
                    help="also time each config with ping-pong, without the producer warpgroup, and with cp.async")
    ap.add_argument("--space", action="store_true", help="time every config of tilelang_core.autotune."
                    "attention_space(options='hopper') instead of the fixed ones (with tl.cuda.attention_overlap "
                    "twins where it applies)")
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="shape indices (0, 1, 2) to run")
    args = ap.parse_args()
    tri = None
    if not args.no_triton:
        import triton_attn

        tri = triton_attn.attention
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  {time.strftime('%Y-%m-%d %H:%M')}",
          flush=True)
    for dt in args.dtypes:
        tdt = getattr(torch, dt)
        print(f"\nSDPA backend for {dt}: {sdpa_backend(tdt)}", flush=True)
        for n, ((B, H, S, D, causal), cfgs) in enumerate(SHAPES.items()):
            if args.only is not None and str(n) not in args.only:
                continue
            bench_shape(dt, (B, H, S, D, causal), cfgs, args, tri)


if __name__ == "__main__":
    main()

"""On the GPU host: flash decoding (split-KV, GQA) against the HBM copy bandwidth on the K/V bytes, and the flash
attention backward against SDPA's backward, all compiled through ``@jit(target="cuda")`` in this process.

Why this script exists: issue 16's figures for decoding (batch 64, 32 query heads, 8 K/V heads, KV 8192, d 128:
the goal is >= 0.9x the copy bandwidth on the bytes of K and V) and for the backward (goal >= 0.8x SDPA's
backward). Every kernel is checked against torch first (decoding against SDPA on repeated K/V heads; the
backward against ``torch.autograd`` of SDPA), then timed with CUDA events after an L2 clean (``run.py``'s
``bench_ms_clean``, the headline) and with ``triton.testing.do_bench``. SDPA's backend is printed.

    python3 bench/gpu/attention_variants.py [--log out.txt] [--splits 1 2 4 8] [--skip-bwd] [--skip-decoding]
        [--pass-config tl.cuda.tma_plain_tiles=True ...]

``--pass-config KEY=VALUE`` (a Python literal, repeatable) compiles the backward kernel with those pass_configs.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms, bench_ms_clean, copy_bandwidth  # noqa: E402

from examples import flash_attention_bwd as fb  # noqa: E402
from examples import flash_decoding as fd  # noqa: E402


def sdpa_backend() -> str:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 8, 256, 128, device="cuda", dtype=torch.float16)
    for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        try:
            with sdpa_kernel(getattr(SDPBackend, name)):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
            return name
        except RuntimeError:
            continue
    return "MATH"


def decoding(splits_list: list[int], out: list[str]) -> None:
    b, h, hk, sq, skv, d = 64, 32, 8, 1, 8192, 128
    copy_gbs = copy_bandwidth()
    nbytes = fd.kv_bytes(b, hk, skv, d, 2)
    out.append(f"decoding b={b} heads={h}/{hk} seq_q={sq} kv={skv} d={d} fp16; copy bandwidth {copy_gbs:.0f} GB/s; "
               f"K+V {nbytes / 1e6:.0f} MB -> floor {nbytes / copy_gbs / 1e6 * 1e3:.1f} us")
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.float16)
    k = torch.randn(b, skv, hk, d, device="cuda", dtype=torch.float16)
    v = torch.randn(b, skv, hk, d, device="cuda", dtype=torch.float16)
    ref = fd.reference(q, k, v)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)  # noqa: E731
    sdpa_ms = bench_ms_clean(sdpa)
    out.append(f"  SDPA (enable_gqa) clean {sdpa_ms * 1e3:.1f} us ({nbytes / sdpa_ms / 1e6:.0f} GB/s, "
               f"{nbytes / sdpa_ms / 1e6 / copy_gbs:.2f}x copy)")
    for splits in splits_list:
        for threads in (128, 64):
            dec = fd.FlashDecoding(b, h, hk, sq, skv, d, splits, threads=threads, dtype="float16", target="cuda")
            got = dec(q, k, v)
            err = (got.float() - ref.float()).abs().max().item()
            ok = err <= 2e-2
            clean = bench_ms_clean(lambda dec=dec: dec(q, k, v))
            db = bench_ms(lambda dec=dec: dec(q, k, v))
            gbs = nbytes / clean / 1e6
            out.append(f"  ours splits={dec.splits} threads={threads}: {'PASS' if ok else 'FAIL'} (max err {err:.1e}) "
                       f"clean {clean * 1e3:.1f} us = {gbs:.0f} GB/s = {gbs / copy_gbs:.2f}x copy, "
                       f"{sdpa_ms / clean:.2f}x SDPA; do_bench {db * 1e3:.1f} us")


def backward(out: list[str], pass_configs: dict | None = None) -> None:
    for (b, h, s, d, causal) in ((8, 16, 4096, 128, False), (8, 16, 4096, 128, True), (8, 32, 2048, 64, False)):
        backward_case(b, h, s, d, causal, out, pass_configs)


def backward_case(b: int, h: int, s: int, d: int, causal: bool, out: list[str],
                  pass_configs: dict | None = None) -> None:
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
    do = torch.randn(b, s, h, d, device="cuda", dtype=torch.float16)
    fwd = fb.tilelang.jit(out_idx=[3, 4], target="cuda")(fb.attention_forward_lse.factory)(
        b, h, s, d, causal, 128, 64, 2, 128, "float16")
    o, lse = fwd(q, k, v)
    bwd = fb.FlashAttentionBackward(b, h, s, d, causal, 64, 64, 2, 128, "float16", target="cuda",
                                    pass_configs=pass_configs)
    dq, dk, dv = bwd(q, k, v, o, lse, do)
    want = fb.reference_grads(q.float(), k.float(), v.float(), do.float(), causal)
    errs = [(g.float() - w).abs().max().item() for g, w in zip((dq, dk, dv), want)]
    ok = all(e <= 5e-2 for e in errs)
    ours = bench_ms_clean(lambda: bwd(q, k, v, o, lse, do))
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    ref_out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    dot = do.transpose(1, 2)

    def sdpa_bwd() -> None:
        torch.autograd.grad(ref_out, (qt, kt, vt), dot, retain_graph=True)

    ref = bench_ms_clean(sdpa_bwd)
    flops = 2.5 * 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)  # 5 matmuls of 2 s^2 d (fwd has 2)
    out.append(f"backward b={b} h={h} s={s} d={d} causal={causal} fp16{' ' + str(pass_configs) if pass_configs else ''}"
               f": {'PASS' if ok else 'FAIL'} "
               f"(max err dq/dk/dv {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}); ours {ours:.3f} ms "
               f"({flops / ours / 1e9:.0f} TF/s), SDPA backward {ref:.3f} ms ({flops / ref / 1e9:.0f} TF/s): "
               f"{ref / ours:.2f}x SDPA")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log")
    ap.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--skip-bwd", action="store_true")
    ap.add_argument("--skip-decoding", action="store_true")
    ap.add_argument("--pass-config", action="append", default=[], help="KEY=VALUE (a Python literal), for the "
                    "backward kernel")
    args = ap.parse_args()
    cfg = {k: ast.literal_eval(val) for k, val in (p.split("=", 1) for p in args.pass_config)}
    out: list[str] = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, SDPA backend {sdpa_backend()}"]
    try:
        if not args.skip_decoding:
            decoding(args.splits, out)
        if not args.skip_bwd:
            backward(out, cfg or None)
    finally:
        text = "\n".join(out)
        print(text)
        if args.log:
            Path(args.log).write_text(text + "\n")


if __name__ == "__main__":
    main()

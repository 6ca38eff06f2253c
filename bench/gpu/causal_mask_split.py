"""Benchmark: what testing the causal mask only on the diagonal tiles (tl.SplitMaskedIterations) saves on the GPU.

``python bench/gpu/causal_mask_split.py`` on the H200 (PYTHONPATH = the repo and TVM). For the causal flash-attention
forward (examples/flash_attention.py) at issue 16's shape (8, 16, 4096, 128) and a ragged one, fp16 and bf16, and
the causal split-KV decoding kernel (4 new tokens against an 8192-key cache), each config is built twice: as the
pipeline does by default (the mask nest has an unmasked copy under ``if k < bound``) and with
``pass_configs={"tl.cuda.split_masked_iterations": False}`` (the mask tested on every tile, as written). Both are
checked against SDPA and against each other (bit for bit: the unmasked copy writes what the select would have
chosen) and timed with the clean-L2 timer of ``run.py``, SDPA in the same run. Ratios above 1: the split is faster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import bench_ms_clean  # noqa: E402

import tilelang_core as tilelang  # noqa: E402
from examples import flash_decoding as fd  # noqa: E402
from examples.flash_attention import flash_attention, flops  # noqa: E402

ON, OFF = {"tl.cuda.split_masked_iterations": True}, {"tl.cuda.split_masked_iterations": False}
FWD = {(8, 16, 4096, 128): [(128, 64, 2, 256), (128, 128, 2, 256), (128, 64, 3, 128)],
       (8, 16, 4000, 128): [(128, 64, 2, 256)]}  # block M, N, stages, threads; 4000: a ragged last tile


def forward(dt: str, shape: tuple[int, int, int, int], cfgs: list[tuple[int, int, int, int]], rep: int) -> None:
    B, H, S, D = shape
    tdt = getattr(torch, dt)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(tdt) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref = sdpa(qt, kt, vt, is_causal=True).transpose(1, 2).float()
    fl = flops(B, H, S, D, True)
    t_ref = bench_ms_clean(lambda: sdpa(qt, kt, vt, is_causal=True), rep=rep)
    print(f"\n({B}, {H}, {S}, {D}) causal {dt}  SDPA {t_ref * 1e3:.1f} us ({fl / t_ref / 1e9:.0f} TF/s)", flush=True)
    for bm, bn, st, th in cfgs:
        outs, times = [], []
        for pc in (ON, OFF):
            prog = flash_attention.get_program(B, H, S, D, True, block_M=bm, block_N=bn, num_stages=st, threads=th,
                                               dtype=dt, accum_dtype="float32")
            kern = tilelang.compile(prog, target="cuda", pass_configs=pc)
            o = torch.empty_like(q)
            kern(q, k, v, o)
            torch.cuda.synchronize()
            outs.append(o)
            times.append(bench_ms_clean(lambda kern=kern, o=o: kern(q, k, v, o), rep=rep))
        err = float((outs[0].float() - ref).abs().max())
        same = torch.equal(outs[0], outs[1])
        t_split, t_whole = times
        print(f"  {bm}x{bn} s{st} t{th}: split {t_split * 1e3:.1f} us ({fl / t_split / 1e9:.0f} TF/s, "
              f"{t_ref / t_split:.2f}x SDPA), mask on every tile {t_whole * 1e3:.1f} us "
              f"({fl / t_whole / 1e9:.0f} TF/s): {t_whole / t_split:.3f}x; max|err| {err:.1e}; "
              f"bit-identical {same}", flush=True)


def decoding(dt: str, rep: int) -> None:
    batch, heads, heads_kv, seq_q, seq_kv, dim, splits = 64, 32, 8, 4, 8192, 128, 2
    tdt = getattr(torch, dt)
    q = torch.randn(batch, seq_q, heads, dim, device="cuda").to(tdt)
    k, v = (torch.randn(batch, seq_kv, heads_kv, dim, device="cuda").to(tdt) for _ in range(2))
    times, outs = [], []
    for pc in (ON, OFF):
        kern = tilelang.jit(out_idx=[3, 4], target="cuda", pass_configs=pc)(fd.flash_decode_split.factory)(
            batch, heads, heads_kv, seq_q, seq_kv, dim, splits, True, dtype=dt)
        outs.append(kern(q, k, v))
        times.append(bench_ms_clean(lambda kern=kern: kern(q, k, v), rep=rep))
    same = all(torch.equal(a, b) for a, b in zip(*outs))
    gb = fd.kv_bytes(batch, heads_kv, seq_kv, dim, q.element_size()) / 1e9
    print(f"\ndecoding {dt} (b={batch}, h={heads}/{heads_kv}, q={seq_q} causal, kv={seq_kv}, d={dim}, "
          f"{splits} splits; split kernel only): split {times[0] * 1e3:.1f} us ({gb / times[0] * 1e3:.0f} GB/s), "
          f"mask on every tile {times[1] * 1e3:.1f} us: {times[1] / times[0]:.3f}x; bit-identical {same}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--rep", type=int, default=30)
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}", flush=True)
    for dt in args.dtypes:
        for shape, cfgs in FWD.items():
            forward(dt, shape, cfgs, args.rep)
        decoding(dt, args.rep)


if __name__ == "__main__":
    main()

"""On the GPU host: float8 conversions of torch (CPU and CUDA) and of our CUDA kernel, compared byte for byte.

Prints, per format, how many of the probe values torch's CPU and CUDA conversions disagree on, and how many our
``@jit(target="cuda")`` encode/decode differs from each, with the first few differing inputs. Run from the repo
root with TVM on PYTHONPATH: ``python3 bench/gpu/fp8_probe.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tilelang_core.language as T  # noqa: E402
from tests.gpu.conftest import cuda  # noqa: E402
from tests.test_compat_dtypes import _all_bytes, _hard_floats, fp8_roundtrip  # noqa: E402


def _show(name: str, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    bad = (a != b).nonzero().flatten()
    print(f"  {name}: {bad.numel()} of {x.numel()} differ", end="")
    for i in bad[:6].tolist():
        print(f" | x={x[i].item()!r} ({x[i].view(torch.int32).item() & 0xffffffff:#010x}) -> {a[i].item():#04x} vs "
              f"{b[i].item():#04x}", end="")
    print()


def main() -> None:
    for fp8 in (T.float8_e4m3fn, T.float8_e5m2):
        x = _hard_floats(2048)
        n = x.numel()
        print(f"{fp8}: {n} values")
        cpu = x.to(fp8.as_torch()).view(torch.uint8)
        gpu = x.cuda().to(fp8.as_torch()).view(torch.uint8).cpu()
        _show("torch cpu vs torch cuda (encode)", x, cpu, gpu)
        a = _all_bytes(fp8).repeat(n // 256 + 1)[:n].contiguous()
        d, e = cuda(fp8_roundtrip)(n, fp8)(a.cuda(), x.cuda())
        e = e.view(torch.uint8).cpu()
        _show("ours (cuda) vs torch cpu (encode)", x, e, cpu)
        _show("ours (cuda) vs torch cuda (encode)", x, e, gpu)
        ref = a.float()
        d = d.cpu()
        same = (d == ref) | (d.isnan() & ref.isnan())
        print(f"  decode: {(~same).sum().item()} of {n} differ from torch")


if __name__ == "__main__":
    main()

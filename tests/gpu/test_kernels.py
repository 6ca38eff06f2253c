"""The GPU suite's kernels, each compiled through ``@jit(target="cuda")`` in this process and run on the device.

Every case draws random inputs, poisons the outputs, runs the CUDA kernel and compares it with a torch reference
computed in float64 and with the CPU build of the same program on the same inputs (differential: the two lowerings
must agree to the rounding of the output dtype; a disagreement is a failure, never a reason to widen a tolerance).
Covered: GEMM fp16/bf16/fp32/int8 with every transpose and ragged shapes, the W4A16 kernels (fused decode path with
split-K, ragged M/N, per-channel and group scales), flash attention causal and not, ragged sequence, the
shared-memory reuse tile, GEMV with streaming loads, elementwise, atomics, ``T.print``, and exported modules.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import cpu, cuda, poisoned

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import test_gemm  # noqa: E402
import test_language_features as features  # noqa: E402

from examples import dequant_gemm, elementwise, flash_attention, gemv  # noqa: E402

TOL = {torch.float16: 2e-2, torch.bfloat16: 3e-2, torch.float32: 2e-4, torch.int32: 0.0}


@dataclass
class Case:
    """One kernel of the suite: how to build it, its inputs, its reference."""

    name: str
    factory: Any
    args: tuple
    kwargs: dict[str, Any]
    inputs: Callable[[torch.Generator], list[torch.Tensor]]
    reference: Callable[..., torch.Tensor]
    tol: float | None = None  # default: by the output dtype
    source_has: list[str] = field(default_factory=list)  # strings the generated CUDA C must contain


def _rand(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def _gemm_case(M: int, N: int, K: int, tiles: tuple[int, int, int], ta: bool, tb: bool, dt: str) -> Case:
    in_dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8}[dt]
    out = {"int8": "int32"}.get(dt, dt)
    acc = "int32" if dt == "int8" else "float32"

    def inputs(g: torch.Generator) -> list[torch.Tensor]:
        a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
        if dt == "int8":
            return [torch.randint(-100, 100, a_shape, generator=g, dtype=torch.int8),
                    torch.randint(-100, 100, b_shape, generator=g, dtype=torch.int8)]
        return [_rand(g, *a_shape, dtype=in_dt), _rand(g, *b_shape, dtype=in_dt)]

    def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.double(), b.double()
        return (a.T if ta else a) @ (b.T if tb else b)

    return Case(f"gemm_{dt}_{M}x{N}x{K}_{'T' if ta else 'N'}{'T' if tb else 'N'}", test_gemm.matmul,
                (M, N, K, *tiles), {"trans_A": ta, "trans_B": tb, "in_dtype": dt, "out_dtype": out,
                                    "accum_dtype": acc}, inputs, reference)


def _dequant_case(M: int, N: int, K: int, gs: int, cfg: tuple[int, int, int, int, int]) -> Case:
    bm, bn, bk, st, th = cfg

    def inputs(g: torch.Generator) -> list[torch.Tensor]:
        B, Scale = dequant_gemm.random_packed(N, K, gs, torch.float16, generator=g)
        return [_rand(g, M, K, dtype=torch.float16), B, Scale]

    def reference(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return a.double() @ dequant_gemm.dequantize(b, s.float()).double().T

    return Case(f"w4a16_{M}x{N}x{K}_g{gs}_{bm}x{bn}x{bk}s{st}", dequant_gemm.dequant_gemm, (M, N, K, gs),
                {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th, "dtype": "float16"},
                inputs, reference, tol=3e-2)


def _attention_case(B: int, H: int, S: int, D: int, causal: bool, cfg: tuple[int, int, int, int],
                    dt: str = "float16") -> Case:
    bm, bn, st, th = cfg
    tdt = getattr(torch, dt)

    def inputs(g: torch.Generator) -> list[torch.Tensor]:
        return [_rand(g, B, S, H, D, dtype=tdt) for _ in range(3)]

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return flash_attention.reference(q.double(), k.double(), v.double(), causal)

    return Case(f"flash_{dt}_{B}x{H}x{S}x{D}{'_causal' if causal else ''}_{bm}x{bn}s{st}t{th}",
                flash_attention.flash_attention, (B, H, S, D, causal),
                {"block_M": bm, "block_N": bn, "num_stages": st, "threads": th, "dtype": dt}, inputs, reference)


def _gemv_case(N: int, K: int, dt: str, kw: dict[str, Any]) -> Case:
    tdt = getattr(torch, dt)
    return Case(f"gemv_{dt}_{N}x{K}", gemv.gemv, (N, K), {"dtype": dt, **kw},
                lambda g: [_rand(g, N, K, dtype=tdt), _rand(g, K, dtype=tdt)],
                lambda a, x: a.double() @ x.double(), source_has=["__ldcs"])


CASES: list[Case] = [
    *[_gemm_case(256, 192, 160, (64, 64, 32), ta, tb, "float16") for ta in (False, True) for tb in (False, True)],
    _gemm_case(300, 200, 136, (128, 128, 32), False, False, "float16"),
    _gemm_case(1024, 1024, 1024, (128, 128, 32), False, False, "float16"),
    _gemm_case(256, 256, 256, (64, 64, 32), False, False, "bfloat16"),  # NT: CPU twin hits issue 14 (bf16 ^T)
    _gemm_case(300, 200, 136, (64, 64, 32), True, False, "bfloat16"),
    _gemm_case(300, 200, 130, (64, 64, 32), False, False, "float32"),
    _gemm_case(128, 96, 64, (32, 32, 16), True, True, "float32"),
    _gemm_case(256, 256, 256, (64, 64, 32), False, False, "int8"),
    _gemm_case(200, 136, 96, (64, 64, 32), False, True, "int8"),
    _dequant_case(16, 1024, 4096, -1, (16, 128, 256, 3, 128)),  # decode: fused, split-K through the workspace
    _dequant_case(16, 512, 4096, 128, (16, 128, 256, 3, 128)),
    _dequant_case(5, 1000, 8192, -1, (16, 128, 256, 3, 128)),  # ragged M and N
    _dequant_case(7, 136, 640, 128, (16, 64, 256, 2, 128)),
    _dequant_case(64, 256, 512, 128, (64, 64, 128, 2, 128)),  # prefill-like: the classic path
    _attention_case(1, 2, 250, 64, False, (64, 64, 2, 128)),  # ragged sequence
    _attention_case(1, 2, 250, 64, True, (64, 64, 2, 128)),
    _attention_case(2, 2, 512, 128, False, (128, 64, 2, 128)),  # the tile whose shared memory is reused
    _attention_case(2, 2, 512, 128, True, (128, 32, 3, 128)),
    _attention_case(1, 4, 384, 64, True, (128, 64, 2, 256)),
    _gemv_case(1000, 1030, "float32", {}),
    _gemv_case(1024, 2048, "float16", {"block_N": 4, "block_K": 1024, "threads": 256}),
    Case("add_tiled_1000x1030", elementwise.add_tiled, (1000, 1030), {},
         lambda g: [_rand(g, 1000, 1030), _rand(g, 1000, 1030)], lambda a, b: a.double() + b.double(), tol=0.0),
    Case("add_direct_f16_1001x333", elementwise.add_direct, (1001, 333), {"dtype": "float16"},
         lambda g: [_rand(g, 1001, 333, dtype=torch.float16), _rand(g, 1001, 333, dtype=torch.float16)],
         lambda a, b: (a + b).double(), tol=0.0),
]


def _run_cuda(kernel: Any, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Call a CUDA kernel with poisoned preallocated outputs; returns the (single) output on the CPU."""
    dev = [t.cuda() for t in inputs]
    outs = [kernel.params[i] for i in kernel.out_idx]
    bufs = [poisoned(tuple(p.shape), _torch_dtype(p.dtype)) for p in outs]
    args: list[Any] = []
    it_in, it_out = iter(dev), iter(bufs)
    for i in range(len(kernel.params)):
        args.append(next(it_out) if i in kernel.out_idx else next(it_in))
    kernel(*args)
    torch.cuda.synchronize()
    return bufs[0].cpu()


def _torch_dtype(name: str) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32,
            "int8": torch.int8, "uint8": torch.uint8}[str(name)]


def _compare(name: str, got: torch.Tensor, want: torch.Tensor, tol: float, what: str) -> None:
    if got.dtype.is_floating_point:
        bad = torch.isnan(got) & ~torch.isnan(want)
        assert not bad.any(), f"{name}: {int(bad.sum())}/{got.numel()} outputs never written ({what})"
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol, msg=lambda m: f"{name} vs {what}: {m}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cuda_kernel_matches_torch_and_the_cpu_build(case: Case) -> None:
    kernel = cuda(case.factory)(*case.args, **case.kwargs)
    src = kernel.get_kernel_source()
    for s in case.source_has:
        assert s in src, f"{case.name}: expected {s!r} in the generated CUDA C"
    out_dtype = _torch_dtype(kernel.params[kernel.out_idx[0]].dtype)
    tol = TOL[out_dtype] if case.tol is None else case.tol
    g = torch.Generator().manual_seed(hash(case.name) % 2**31)
    for draw in range(2):  # two random draws: a kernel that reads a stale value differs between them
        inputs = case.inputs(g)
        got = _run_cuda(kernel, inputs)
        _compare(case.name, got, case.reference(*inputs).to(got.dtype), tol, f"torch (draw {draw})")
        if draw == 0:
            host = cpu(case.factory)(*case.args, **case.kwargs)(*inputs)
            _compare(case.name, got, host, tol, "the CPU build of the same program")


@pytest.mark.parametrize("form", ["scalar", "start", "slice"])
def test_atomic_add_split_k_accumulates_on_the_gpu(form: str) -> None:
    M, N = 100, 70
    if form == "scalar":
        K = 96
        kernel = cuda(features.split_k_accumulate_scalar)(M, N, K, 32, 32, 3)
    else:
        K = 128
        kernel = cuda(features.split_k_accumulate_tile)(M, N, K, 32, 32, 16, 4, form)
    a, b, c = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda"), torch.randn(M, N, device="cuda")
    expected = c.double() + a.double() @ b.double()
    kernel(a, b, c)
    torch.testing.assert_close(c.double(), expected, rtol=1e-4, atol=1e-4)


def test_atomic_histogram_counts_every_element_on_the_gpu() -> None:
    N, bins = 100_000, 8
    kernel = cuda(features.histogram)(N, bins, 256)
    x = torch.randint(0, bins, (N,), dtype=torch.int32, device="cuda")
    h = torch.randint(0, 5, (bins,), dtype=torch.int32, device="cuda")
    expected = h + torch.bincount(x, minlength=bins).to(torch.int32)
    kernel(x, h)
    assert torch.equal(h, expected)


def test_print_writes_device_values_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    kernel = cuda(features.printing_kernel)(4)
    x = torch.tensor([1.5, -2.25, 3.0, 0.125], device="cuda")
    y = kernel(x)
    torch.cuda.synchronize()
    ctypes.CDLL(None).fflush(None)
    out = capfd.readouterr().out
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    assert "tile" in out and "scalar" in out and "-2.25" in out, out


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", [c for c in CASES if c.name.startswith(("w4a16_16x1024", "flash_float16_2x2x512x128",
                                                                        "gemm_float16_300"))],
                         ids=lambda c: c.name)
def test_exported_cuda_module_matches_torch(case: Case, tmp_path: Path) -> None:
    kernel = cuda(case.factory)(*case.args, **case.kwargs)
    module = _load(kernel.export(tmp_path / f"{case.name.replace('-', 'm')}.py"))
    g = torch.Generator().manual_seed(7)
    inputs = case.inputs(g)
    got = _run_cuda(module.kernel, inputs)  # the exported launcher, without tilelang_core's
    tol = TOL[got.dtype] if case.tol is None else case.tol
    _compare(case.name, got, case.reference(*inputs).to(got.dtype), tol, "torch (exported module)")

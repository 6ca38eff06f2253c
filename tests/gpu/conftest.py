"""The GPU test suite: kernels compiled through ``@jit(target="cuda")`` in this process and run on the device.

Every test in this folder is marked ``gpu`` and skipped, with the reason shown, where no CUDA GPU is visible (CI);
``bench/gpu/test_suite.sh`` runs the folder on the GPU host. Helpers here poison outputs before a call (NaN for
floats, a sentinel for integers) so an element the kernel never wrote fails the comparison, and give a CUDA twin
of any factory (same program, ``target="cuda"``) and a CPU twin for differential checks.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import tilelang_core as tilelang

GPU_REASON = "no CUDA GPU visible: the GPU suite runs on the GPU host (bench/gpu/test_suite.sh)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = __file__.rsplit("/", 1)[0]
    skip = pytest.mark.skip(reason=GPU_REASON)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)


def on(target: str, factory: Any) -> Any:
    """The same ``@jit`` factory compiled for ``target`` ("cuda" or "cpu")."""
    return tilelang.jit(out_idx=factory.out_idx, target=target)(factory.factory)


def cuda(factory: Any) -> Any:
    return on("cuda", factory)


def cpu(factory: Any) -> Any:
    return on("cpu", factory)


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: str = "cuda") -> torch.Tensor:
    """An output buffer every element of which is a value no correct kernel writes (NaN, or the dtype's min)."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype, device=device)


def randn(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cuda") -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)


def assert_written_and_close(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> None:
    """Every element written (no poison left) and within tolerance of ``ref`` (compared in float64)."""
    if out.dtype.is_floating_point:
        unwritten = torch.isnan(out) & ~torch.isnan(ref.to(out.device))
        assert not unwritten.any(), f"{int(unwritten.sum())} of {out.numel()} output elements never written"
    torch.testing.assert_close(out.double().cpu(), ref.double().cpu(), rtol=rtol, atol=atol)

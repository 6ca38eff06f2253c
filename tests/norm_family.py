"""The LayerNorm family: programs where reductions feed per-row scalars that a ``T.Parallel`` epilogue uses.

Shared by the CPU regression tests (tests/test_cuda_norm_lowering.py: generated code, nvcc, emulation of the CUDA
kernels) and the GPU tests (tests/gpu/test_norms_and_reductions.py). Each :class:`Case` is one program with its
sizes, an input maker and a float64 torch reference of every output. The programs cover what the H200 LayerNorm
report put in question: several reductions in one block over one tile (sum and sum of squares, sum and max,
along dim 1 and dim 0), scalar ``(1,)`` / ``(block_M,)`` fragments computed from reductions and read in a
vectorised epilogue through scalar temporaries, and the classic RMSNorm and softmax, aligned and ragged.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples import layernorm, rmsnorm, softmax  # noqa: E402

LOG2E = math.log2(math.e)
# output tolerances by dtype: the rounding of one output element (the two builds may round differently)
TOL = {torch.float16: 2e-2, torch.bfloat16: 3e-2, torch.float32: 1e-4}


# -- programs ----------------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-3, -2, -1])
def sum_and_max(M, N, block_M=1, threads=256, dtype="float16"):
    """Row sum and row max of the same fragment (two reductions, one block), then ``(x - max) * scale`` with
    ``scale = 1 / (1 + |sum| / N)`` through a scalar temporary. Outputs Y (M, N), Sum (M,), Max (M,)."""
    acc = "float32"
    inv_n = 1.0 / N

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype), Sum: T.Tensor((M,), acc),
             Max: T.Tensor((M,), acc)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), acc)
            s = T.alloc_fragment((block_M,), acc)
            mx = T.alloc_fragment((block_M,), acc)
            scale = T.alloc_fragment((block_M,), acc)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.reduce_max(x, mx, dim=1)
            for i in T.Parallel(block_M):
                scale[i] = 1.0 / (1.0 + T.abs(s[i]) * inv_n)
            for i, j in T.Parallel(block_M, N):
                d = x[i, j] - mx[i]
                Y[bx * block_M + i, j] = T.cast(d * scale[i], dtype)
            T.copy(s, Sum[bx * block_M])
            T.copy(mx, Max[bx * block_M])

    return main


@tilelang.jit(out_idx=[-3, -2, -1])
def both_dims(M, N, block_M=32, block_N=64, threads=128):
    """Sums of each (block_M, block_N) tile along dim 1 and along dim 0 (two reductions of one fragment in one
    block), then the tile minus its row means and column means. Outputs Y (M, N), RowSum (N-blocks, M),
    ColSum (M-blocks, N); a ragged edge tile is zero-padded (T.copy reads 0 outside the tensor)."""
    acc = "float32"
    nb_n, nb_m = T.ceildiv(N, block_N), T.ceildiv(M, block_M)

    @T.prim_func
    def main(X: T.Tensor((M, N), acc), Y: T.Tensor((M, N), acc), RowSum: T.Tensor((nb_n, M), acc),
             ColSum: T.Tensor((nb_m, N), acc)):
        with T.Kernel(nb_n, nb_m, threads=threads) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), acc)
            r = T.alloc_fragment((block_M,), acc)
            c = T.alloc_fragment((block_N,), acc)
            T.copy(X[by * block_M, bx * block_N], x)
            T.reduce_sum(x, r, dim=1)
            T.reduce_sum(x, c, dim=0)
            for i, j in T.Parallel(block_M, block_N):
                centred = x[i, j] - r[i] * (1.0 / block_N)
                Y[by * block_M + i, bx * block_N + j] = centred - c[j] * (1.0 / block_M)
            T.copy(r, RowSum[bx, by * block_M])
            T.copy(c, ColSum[by, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def standardize_rows(M, N, block_M=4, threads=128, eps=1e-5):
    """Two-pass row standardisation over ``block_M`` rows per block: mean by one reduction, the centred rows in a
    second fragment, their sum of squares by a second reduction, ``rstd`` in a ``(block_M,)`` fragment, then
    ``t = d * rstd; y = t + 0.25 * t * t`` through scalar temporaries, stored straight to global memory."""
    acc = "float32"
    inv_n = 1.0 / N

    @T.prim_func
    def main(X: T.Tensor((M, N), acc), Y: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), acc)
            d = T.alloc_fragment((block_M, N), acc)
            dd = T.alloc_fragment((block_M, N), acc)
            mean = T.alloc_fragment((block_M,), acc)
            var = T.alloc_fragment((block_M,), acc)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_M):
                mean[i] = mean[i] * inv_n
            for i, j in T.Parallel(block_M, N):
                d[i, j] = x[i, j] - mean[i]
            for i, j in T.Parallel(block_M, N):
                dd[i, j] = d[i, j] * d[i, j]
            T.reduce_sum(dd, var, dim=1)
            for i in T.Parallel(block_M):
                var[i] = T.rsqrt(var[i] * inv_n + eps)
            for i, j in T.Parallel(block_M, N):
                t = d[i, j] * var[i]
                u = t * t
                Y[bx * block_M + i, j] = t + 0.25 * u

    return main


@tilelang.jit(out_idx=[-1])
def rms_norm_staged(M, N, block_M=1, threads=256, dtype="float16", eps=1e-6):
    """RMSNorm with the row staged in a fragment and the scaling through a scalar temporary: ``t = x * r``,
    ``y = t * w``."""
    acc = "float32"
    inv_n = 1.0 / N

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), acc)
            sq = T.alloc_fragment((block_M, N), acc)
            r = T.alloc_fragment((block_M,), acc)
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, r, dim=1)
            for i in T.Parallel(block_M):
                r[i] = T.rsqrt(r[i] * inv_n + eps)
            for i, j in T.Parallel(block_M, N):
                t = x[i, j] * r[i]
                Y[bx * block_M + i, j] = T.cast(t * T.cast(W[j], acc), dtype)

    return main


@tilelang.jit(out_idx=[-1])
def softmax_staged(M, N, block_M=1, threads=128, dtype="float16"):
    """Row softmax: max and sum reductions of one fragment, ``exp2`` of the shifted row, the reciprocal of the
    sum in a ``(block_M,)`` fragment, and the scaling through a scalar temporary."""
    acc = "float32"

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), acc)
            mx = T.alloc_fragment((block_M,), acc)
            sm = T.alloc_fragment((block_M,), acc)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2(x[i, j] * LOG2E - mx[i] * LOG2E)
            T.reduce_sum(x, sm, dim=1)
            for i in T.Parallel(block_M):
                sm[i] = 1.0 / sm[i]
            for i, j in T.Parallel(block_M, N):
                p = x[i, j] * sm[i]
                Y[bx * block_M + i, j] = T.cast(p, dtype)

    return main


# -- references (float64) ----------------------------------------------------------------------------------------

def ref_layer_norm(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, eps: float = layernorm.EPS) -> list[Any]:
    return layernorm.reference(x, g, b, eps)


def ref_sum_and_max(x: torch.Tensor) -> list[torch.Tensor]:
    xd = x.double()
    s, mx = xd.sum(-1), xd.amax(-1)
    scale = 1.0 / (1.0 + s.abs() / x.shape[-1])
    return [(xd - mx[:, None]) * scale[:, None], s, mx]


def ref_both_dims(x: torch.Tensor, block_M: int = 32, block_N: int = 64) -> list[torch.Tensor]:
    M, N = x.shape
    nb_m, nb_n = -(-M // block_M), -(-N // block_N)
    pad = torch.zeros(nb_m * block_M, nb_n * block_N, dtype=torch.float64)
    pad[:M, :N] = x.double()
    tiles = pad.reshape(nb_m, block_M, nb_n, block_N)
    r = tiles.sum(3)  # (nb_m, block_M, nb_n)
    c = tiles.sum(1)  # (nb_m, nb_n, block_N)
    y = tiles - r[..., None] / block_N - c[:, None] / block_M
    row_sum = r.permute(2, 0, 1).reshape(nb_n, nb_m * block_M)[:, :M]
    col_sum = c.reshape(nb_m, nb_n * block_N)[:, :N]
    return [y.reshape(nb_m * block_M, nb_n * block_N)[:M, :N], row_sum, col_sum]


def ref_standardize_rows(x: torch.Tensor, eps: float = 1e-5) -> list[torch.Tensor]:
    xd = x.double()
    d = xd - xd.mean(-1, keepdim=True)
    t = d * torch.rsqrt((d * d).mean(-1, keepdim=True) + eps)
    return [t + 0.25 * t * t]


def ref_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> list[torch.Tensor]:
    return [torch.nn.functional.rms_norm(x.double(), (x.shape[-1],), w.double(), eps)]


def ref_softmax(x: torch.Tensor) -> list[torch.Tensor]:
    return [torch.softmax(x.double(), -1)]


# -- cases -------------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One program at one size: ``inputs(gen, device)`` draws its inputs, ``reference(*inputs)`` gives every
    output in float64 (the outputs in ``out_idx`` order)."""

    name: str
    factory: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inputs: Callable[[torch.Generator, str], list[torch.Tensor]]
    reference: Callable[..., list[torch.Tensor]]
    atol: float | None = None  # absolute tolerance when outputs are small (softmax); else the dtype's rounding


def _randn(gen: torch.Generator, device: str, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype).to(device)


def layer_norm_case(M: int, D: int, dtype: str, via: str, blk_m: int = 1) -> Case:
    td = getattr(torch, dtype)
    return Case(f"layer_norm_{M}x{D}_{dtype}_via_{via}" + (f"_blk{blk_m}" if blk_m > 1 else ""),
                layernorm.layer_norm, (M, D), {"dtype": dtype, "via": via, "blk_m": blk_m},
                lambda g, dev: [_randn(g, dev, M, D, dtype=td), _randn(g, dev, D, dtype=td),
                                _randn(g, dev, D, dtype=td)],
                ref_layer_norm)


def sum_and_max_case(M: int, N: int, dtype: str = "float16", block_M: int = 1, threads: int = 256) -> Case:
    td = getattr(torch, dtype)
    return Case(f"sum_and_max_{M}x{N}_{dtype}_bm{block_M}", sum_and_max, (M, N),
                {"dtype": dtype, "block_M": block_M, "threads": threads},
                lambda g, dev: [_randn(g, dev, M, N, dtype=td)], ref_sum_and_max)


def both_dims_case(M: int, N: int, block_M: int = 32, block_N: int = 64) -> Case:
    return Case(f"both_dims_{M}x{N}_{block_M}x{block_N}", both_dims, (M, N), {"block_M": block_M, "block_N": block_N},
                lambda g, dev: [_randn(g, dev, M, N)],
                lambda x: ref_both_dims(x.cpu(), block_M, block_N))


def standardize_rows_case(M: int, N: int, block_M: int = 4) -> Case:
    return Case(f"standardize_rows_{M}x{N}_bm{block_M}", standardize_rows, (M, N), {"block_M": block_M},
                lambda g, dev: [_randn(g, dev, M, N)], ref_standardize_rows)


def rms_norm_case(M: int, N: int, dtype: str = "float16", staged: bool = True, block_M: int = 1) -> Case:
    td = getattr(torch, dtype)
    if staged:
        factory, kwargs, eps = rms_norm_staged, {"dtype": dtype, "block_M": block_M}, 1e-6
    else:  # the example, read straight from global memory
        factory, kwargs, eps = rmsnorm.rms_norm, {"dtype": dtype, "block_M": block_M}, rmsnorm.EPS
    return Case(f"rms_norm_{'staged' if staged else 'example'}_{M}x{N}_{dtype}_bm{block_M}", factory, (M, N), kwargs,
                lambda g, dev: [_randn(g, dev, M, N, dtype=td), _randn(g, dev, N, dtype=td)],
                lambda x, w: ref_rms_norm(x, w, eps))


def softmax_case(M: int, N: int, dtype: str = "float16", staged: bool = True, block_M: int = 1) -> Case:
    td = getattr(torch, dtype)
    factory = softmax_staged if staged else softmax.softmax
    return Case(f"softmax_{'staged' if staged else 'example'}_{M}x{N}_{dtype}_bm{block_M}", factory, (M, N),
                {"dtype": dtype, "block_M": block_M},
                lambda g, dev: [_randn(g, dev, M, N, dtype=td)], ref_softmax, atol=1e-5)


def tolerance(case: Case, out: torch.Tensor) -> tuple[float, float]:
    """(rtol, atol) of one output: the rounding of its dtype (fp32 outputs of long sums: 1e-4); a case with small
    outputs (softmax) sets its own absolute tolerance."""
    tol = TOL.get(out.dtype, 1e-4)
    return tol, tol if case.atol is None else case.atol

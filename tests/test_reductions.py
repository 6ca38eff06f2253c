"""Reductions against torch: every reduce kind along each dim, clear=False, softmax, RMSNorm, GEMV."""

from __future__ import annotations

import math

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T

REDUCE_KINDS = ["sum", "max", "min", "abssum", "absmax"]


def torch_reduce(x: torch.Tensor, kind: str, dim: int) -> torch.Tensor:
    if kind == "sum":
        return x.sum(dim)
    if kind == "max":
        return x.amax(dim)
    if kind == "min":
        return x.amin(dim)
    if kind == "abssum":
        return x.abs().sum(dim)
    return x.abs().amax(dim)


def torch_combine(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("sum", "abssum"):
        return a + b
    if kind in ("max", "absmax"):
        return torch.maximum(a, b)
    return torch.minimum(a, b)


@tilelang.jit(out_idx=[-1])
def tile_reduce(M, N, block_M, block_N, kind, dim, clear=True):
    """Reduce each (block_M, block_N) tile of X along ``dim``; with clear=False, start from Init's values.

    Output layout: for dim=1, O[bx, by * block_M + i]; for dim=0, O[by, bx * block_N + j].
    """
    out_rows = T.ceildiv(N, block_N) if dim == 1 else T.ceildiv(M, block_M)
    out_len = block_M if dim == 1 else block_N
    out_cols = M if dim == 1 else N

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Init: T.Tensor((out_rows, out_cols), "float32"),
             O: T.Tensor((out_rows, out_cols), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), "float32")
            r = T.alloc_fragment((out_len,), "float32")
            T.copy(X[by * block_M, bx * block_N], x)
            if dim == 1:
                T.copy(Init[bx, by * block_M], r)
            else:
                T.copy(Init[by, bx * block_N], r)
            if kind == "sum":
                T.reduce_sum(x, r, dim=dim, clear=clear)
            elif kind == "max":
                T.reduce_max(x, r, dim=dim, clear=clear)
            elif kind == "min":
                T.reduce_min(x, r, dim=dim, clear=clear)
            elif kind == "abssum":
                T.reduce_abssum(x, r, dim=dim, clear=clear)
            else:
                T.reduce_absmax(x, r, dim=dim, clear=clear)
            if dim == 1:
                T.copy(r, O[bx, by * block_M])
            else:
                T.copy(r, O[by, bx * block_N])

    return main


def reference_tile_reduce(x, init, block_M, block_N, kind, dim, clear):
    M, N = x.shape
    out = init.clone()
    for by in range(M // block_M):
        for bx in range(N // block_N):
            tile = x[by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N]
            red = torch_reduce(tile, kind, dim)
            if dim == 1:
                prev = out[bx, by * block_M:(by + 1) * block_M]
                out[bx, by * block_M:(by + 1) * block_M] = red if clear else torch_combine(prev, red, kind)
            else:
                prev = out[by, bx * block_N:(bx + 1) * block_N]
                out[by, bx * block_N:(bx + 1) * block_N] = red if clear else torch_combine(prev, red, kind)
    return out


@pytest.mark.parametrize("kind", REDUCE_KINDS)
@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_each_kind_along_each_dim_matches_torch(kind, dim):
    M, N, block_M, block_N = 128, 96, 32, 48
    kernel = tile_reduce(M, N, block_M, block_N, kind, dim)
    x = torch.randn(M, N)
    init = torch.randn(kernel.params[1].shape)
    expected = reference_tile_reduce(x, init, block_M, block_N, kind, dim, clear=True)
    torch.testing.assert_close(kernel(x, init), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", REDUCE_KINDS)
@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_with_clear_false_combines_with_existing_destination(kind, dim):
    M, N, block_M, block_N = 64, 64, 32, 32
    kernel = tile_reduce(M, N, block_M, block_N, kind, dim, clear=False)
    x = torch.randn(M, N)
    # values large enough that dropping either the old value or the new reduction shows up for every kind
    init = torch.randn(kernel.params[1].shape) * 3
    expected = reference_tile_reduce(x, init, block_M, block_N, kind, dim, clear=False)
    torch.testing.assert_close(kernel(x, init), expected, rtol=1e-5, atol=1e-5)
    if kind in ("sum", "abssum"):
        assert not torch.allclose(expected, reference_tile_reduce(x, init, block_M, block_N, kind, dim, True))


def test_reduce_on_odd_tile_widths_matches_torch():
    M, N, block_M, block_N = 30, 42, 10, 21
    for kind in ("sum", "max"):
        kernel = tile_reduce(M, N, block_M, block_N, kind, 1)
        x = torch.randn(M, N)
        init = torch.randn(kernel.params[1].shape)
        expected = reference_tile_reduce(x, init, block_M, block_N, kind, 1, clear=True)
        torch.testing.assert_close(kernel(x, init), expected, rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=[-1])
def row_max_from_shared(M, N, block_M):
    """reduce_max of a shared tile into a fragment, written to global inside T.Parallel."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            x = T.alloc_shared((block_M, N), "float32")
            mx = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i in T.Parallel(block_M):
                O[bx * block_M + i] = mx[i]

    return main


def test_reduce_max_of_shared_tile_with_ragged_rows_writes_only_valid_rows():
    M, N = 77, 64
    kernel = row_max_from_shared(M, N, 32)
    x = torch.randn(M, N)
    torch.testing.assert_close(kernel(x), x.amax(1), rtol=0, atol=0)


@tilelang.jit(out_idx=[-1])
def softmax(M, N, block_M):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp(x[i, j] - row_max[i])
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


@pytest.mark.parametrize("M,N,block_M", [(128, 64, 32), (100, 64, 32), (37, 96, 16), (129, 130, 64)])
def test_row_softmax_matches_torch_including_ragged_row_count(M, N, block_M):
    kernel = softmax(M, N, block_M)
    x = torch.randn(M, N) * 4
    y = kernel(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y.sum(1), torch.ones(M), rtol=1e-4, atol=1e-4)


@tilelang.jit(out_idx=[-1])
def online_softmax(M, N, block_M, block_N):
    """Softmax with N streamed in chunks: running max via reduce_max(clear=False), rescaled running sum."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            x = T.alloc_fragment((block_M, block_N), "float32")
            m_prev = T.alloc_fragment((block_M,), "float32")
            m_cur = T.alloc_fragment((block_M,), "float32")
            l_sum = T.alloc_fragment((block_M,), "float32")
            chunk = T.alloc_fragment((block_M,), "float32")
            T.fill(m_cur, -T.infinity("float32"))
            T.clear(l_sum)
            for k in T.serial(N // block_N):
                T.copy(X[bx * block_M, k * block_N], x)
                for i in T.Parallel(block_M):
                    m_prev[i] = m_cur[i]
                T.reduce_max(x, m_cur, dim=1, clear=False)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp(x[i, j] - m_cur[i])
                T.reduce_sum(x, chunk, dim=1)
                for i in T.Parallel(block_M):
                    l_sum[i] = l_sum[i] * T.exp(m_prev[i] - m_cur[i]) + chunk[i]
            for k in T.serial(N // block_N):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp(x[i, j] - m_cur[i]) / l_sum[i]
                T.copy(x, Y[bx * block_M, k * block_N])

    return main


def test_online_softmax_with_running_max_matches_torch():
    M, N = 70, 256
    kernel = online_softmax(M, N, 16, 64)
    x = torch.randn(M, N) * 3
    torch.testing.assert_close(kernel(x), torch.softmax(x, dim=1), rtol=1e-4, atol=1e-5)


@tilelang.jit(out_idx=[-1])
def rms_norm(M, N, block_M, eps):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            sq = T.alloc_fragment((block_M, N), "float32")
            w = T.alloc_shared((N,), "float32")
            ss = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.copy(W, w)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i in T.Parallel(block_M):
                ss[i] = T.rsqrt(ss[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * ss[i] * w[j]
            T.copy(x, Y[bx * block_M, 0])

    return main


@pytest.mark.parametrize("M,N", [(128, 256), (100, 96), (33, 130)])
def test_rms_norm_matches_torch(M, N):
    eps = 1e-5
    kernel = rms_norm(M, N, 16, eps)
    x = torch.randn(M, N) * 2
    w = torch.randn(N)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    torch.testing.assert_close(kernel(x, w), ref, rtol=1e-4, atol=1e-5)


@tilelang.jit(out_idx=[-1])
def gemv(M, K, block_M, block_K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), x: T.Tensor((K,), "float32"), y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            a_s = T.alloc_shared((block_M, block_K), "float32")
            x_s = T.alloc_shared((block_K,), "float32")
            prod = T.alloc_fragment((block_M, block_K), "float32")
            part = T.alloc_fragment((block_M,), "float32")
            acc = T.alloc_fragment((block_M,), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bx * block_M, k * block_K], a_s)
                T.copy(x[k * block_K], x_s)
                for i, j in T.Parallel(block_M, block_K):
                    prod[i, j] = a_s[i, j] * x_s[j]
                T.reduce_sum(prod, part, dim=1)
                for i in T.Parallel(block_M):
                    acc[i] += part[i]
            T.copy(acc, y[bx * block_M])

    return main


@pytest.mark.parametrize("M,K", [(256, 256), (300, 200), (65, 33)])
def test_gemv_matches_torch_including_ragged_shapes(M, K):
    kernel = gemv(M, K, 64, 64)
    a = torch.randn(M, K)
    x = torch.randn(K)
    torch.testing.assert_close(kernel(a, x), a @ x, rtol=1e-4, atol=1e-4)


# -- NaN: skipped by default (TileLang / CUDA fmaxf), propagated with nan_propagate=True (torch) ------------------


@tilelang.jit(out_idx=[-1])
def nan_reduce(M, N, kind, dim, nan_propagate, clear=True):
    keep = M if dim == 1 else N
    reduce_op = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((keep,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((keep,), "float32")
            T.copy(X, x)
            if not clear:
                T.fill(y, 0.5)
            reduce_op(x, y, dim=dim, clear=clear, nan_propagate=nan_propagate)
            T.copy(y, Y)

    return main


def _with_nans(M: int, N: int) -> torch.Tensor:
    x = torch.randn(M, N)
    x[2, 5] = math.nan
    x[M - 1, N - 1] = math.nan  # the last element of the last row and column
    x[4, :] = math.nan  # a whole row of NaN
    return x


@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("M,N", [(8, 64), (8, 13)], ids=["simd-width", "odd-width"])
def test_nan_propagate_reductions_give_nan_like_torch(kind, dim, M, N):
    x = _with_nans(M, N)
    y = nan_reduce(M, N, kind, dim, True)(x)
    ref = torch_reduce(x, kind, dim)  # torch.amax / amin propagate NaN
    assert ref.isnan().any()
    torch.testing.assert_close(y, ref, rtol=0, atol=0, equal_nan=True)
    if dim == 1:
        y2 = nan_reduce(M, N, kind, dim, True, clear=False)(x)  # combined with what dst holds (0.5)
        torch.testing.assert_close(y2, torch_combine(ref, torch.full_like(ref, 0.5), kind), rtol=0, atol=0,
                                   equal_nan=True)


@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
def test_reductions_skip_nan_by_default_as_tilelang_and_cuda_do(kind, dim):
    M, N = 8, 64
    x = _with_nans(M, N)
    x[4, :] = 1.0  # no all-NaN row: skipping leaves a number everywhere
    y = nan_reduce(M, N, kind, dim, False)(x)
    finite = torch.where(x.isnan(), {"max": -math.inf, "min": math.inf, "absmax": 0.0}[kind], x)
    ref = torch_reduce(finite, kind, dim)
    torch.testing.assert_close(y, ref, rtol=0, atol=0)



def test_nan_propagate_compiles_for_cuda_with_the_propagating_ops(tmp_path):
    """nan_propagate=True on CUDA (issue 18; was refused): the per-thread fold and the block all-reduce both
    propagate NaN (tl::MaxNanOp / MinNanOp). Run on a GPU by tests/gpu/test_compat_ops.py."""
    from tilelang_core.jit import _normalize_out_idx, _param_specs
    from tilelang_core.jit.cuda import build_artifact

    for kind, op in (("max", "MaxNanOp"), ("min", "MinNanOp")):
        func = nan_reduce.get_program(8, 64, kind, 1, True)
        specs = _param_specs(func)
        out = tmp_path / kind
        out.mkdir()
        build_artifact(func, out, {"kind": "cuda", "arch": "sm_90"}, specs, _normalize_out_idx([-1], len(specs)),
                       compile_cubin=False)
        assert f"tl::{op}" in (out / "kernel.cu").read_text()

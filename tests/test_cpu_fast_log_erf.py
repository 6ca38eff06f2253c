"""float32 log / log2 / log10 / erf on the CPU: vectorised like exp (no scalar libm calls in the loop), and equal to
torch's within a few ulps over every range, subnormals and the special values included; a GELU epilogue on a GEMM."""

from __future__ import annotations

import math
import re

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T

N = 4096
LIBM = {"log": "logf", "log2": "log2f", "log10": "log10f", "erf": "erff"}


@tilelang.jit(out_idx=[-1], target="cpu")
def unary(fn, n, dtype="float32"):
    op = getattr(T, fn)

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 512)) as bx:
            for i in T.Parallel(512):
                Y[bx * 512 + i] = op(X[bx * 512 + i])

    return main


def positive_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    x = torch.exp(torch.randn(N, generator=g) * 25).to(torch.float32)  # many decades, over- and underflowing
    x[:64] = 1.0 + torch.randn(64, generator=g) * 1e-4  # near 1: log's relative accuracy matters most there
    x[64:72] = torch.tensor([0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 1e-45, 3e-39])  # specials, subnormals
    x[72:80] = torch.tensor([1.0, 2.0, 8.0, 0.5, 1024.0, 1e-30, 3.4e38, 1.1754944e-38])
    return x


def erf_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(8)
    x = torch.randn(N, generator=g) * 2.5
    x[:8] = torch.tensor([0.0, -0.0, 1e-30, -1e-7, math.inf, -math.inf, math.nan, 3.99])
    x[8:16] = torch.tensor([0.999999, 1.0, 1.000001, -1.0, 4.0, -4.0, 10.0, 1e-40])
    return x


def assert_close_ulps(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float = 0.0) -> None:
    both_nan = torch.isnan(got) & torch.isnan(want)
    same_inf = torch.isinf(want) & (got == want)
    err = (got.double() - want.double()).abs()
    ok = both_nan | same_inf | (err <= atol + rtol * want.double().abs())
    bad = (~ok).nonzero().flatten()[:5].tolist()
    assert bool(ok.all()), [(float(i), float(g), float(w)) for i, g, w in zip(
        torch.as_tensor(bad), got[bad], want[bad])] if bad else None


@pytest.mark.parametrize("fn", ["log", "log2", "log10"])
def test_float32_logs_are_vectorised_and_match_torch(fn):
    k = unary(fn, N)
    asm = k.get_kernel_source("asm")
    assert LIBM[fn] + "@" not in asm and not re.search(rf"call\w*\s+{LIBM[fn]}\b", asm), "scalar libm call left"
    assert re.search(r"\bv\w+ps\s+%[yz]mm", asm), "no packed float32 vector op in the loop"
    x = positive_inputs()
    y = k(x)
    assert_close_ulps(y, getattr(torch, fn)(x), rtol=4e-7, atol=1e-7)
    assert float(k(torch.tensor([8.0] * N))[0]) == (3.0 if fn == "log2" else float(getattr(torch, fn)(
        torch.tensor(8.0))))


def test_float32_erf_is_vectorised_and_matches_torch():
    k = unary("erf", N)
    asm = k.get_kernel_source("asm")
    assert "erff@" not in asm and re.search(r"\bv\w+ps\s+%[yz]mm", asm)
    x = erf_inputs()
    assert_close_ulps(k(x), torch.erf(x), rtol=5e-7, atol=1e-7)


def test_half_precision_log_goes_through_the_float32_form():
    k = unary("log", N, "float16")
    x = (torch.rand(N, generator=torch.Generator().manual_seed(3)) * 100 + 1e-3).to(torch.float16)
    torch.testing.assert_close(k(x), torch.log(x.float()).to(torch.float16), rtol=1e-3, atol=1e-3)


@tilelang.jit(out_idx=[-1], target="cpu")
def matmul_gelu(M, N, K, block_M=64, block_N=64, block_K=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = C_f[i, j] * 0.5 * (1.0 + T.erf(C_f[i, j] * 0.7071067811865476))
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def test_gemm_with_an_exact_gelu_epilogue_has_no_scalar_erf_calls():
    k = matmul_gelu(128, 128, 64)
    assert "erff@" not in k.get_kernel_source("asm")
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(128, 64, generator=g), torch.randn(64, 128, generator=g)
    torch.testing.assert_close(k(a, b), torch.nn.functional.gelu(a @ b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn, libm", [("tanh", "tanhf"), ("sigmoid", "expf"), ("exp", "expf")])
def test_tanh_sigmoid_exp_stay_vectorised(fn, libm):
    """The functions that were vectorised before these: a guard that they stay so (no libm call in the loop)."""
    k = unary(fn, N)
    asm = k.get_kernel_source("asm")
    assert libm + "@" not in asm and re.search(r"\bv\w+ps\s+%[yz]mm", asm)
    x = erf_inputs()
    assert_close_ulps(k(x), getattr(torch, fn)(x), rtol=2e-6, atol=1e-7)


@tilelang.jit(out_idx=[-1], target="cpu")
def nested_sigmoid(n, depth):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 512)) as bx:
            for i in T.Parallel(512):  # one expression, as a user (or the fuzzer: seed 161) writes it
                if depth == 1:
                    Y[bx * 512 + i] = T.sigmoid(X[bx * 512 + i])
                elif depth == 2:
                    Y[bx * 512 + i] = T.sigmoid(T.sigmoid(X[bx * 512 + i]))
                else:
                    Y[bx * 512 + i] = T.sigmoid(T.sigmoid(T.sigmoid(X[bx * 512 + i])))

    return main


def test_nested_calls_bind_each_argument_once_so_the_code_grows_linearly():
    # inline, each expansion reads its argument ~26 times: three nested sigmoids were 17,576 copies of X[i]
    # (fuzz seed 161, 25 s to compile); stored once per call, the program grows by a constant per level
    sizes = []
    for depth in (1, 2, 3):
        k = nested_sigmoid(N, depth)
        sizes.append(max(len(st.text) for st in k.trace.stages))  # every stage, TVM's simplifier's included
        x = erf_inputs()
        want = x
        for _ in range(depth):
            want = torch.sigmoid(want)
        assert_close_ulps(k(x), want, rtol=4e-6, atol=1e-7)
    assert sizes[2] - sizes[1] < 1.5 * (sizes[1] - sizes[0]), sizes
    assert "fx0" in k.trace.stage("tl.FastExpCPU").text
    assert re.search(r"\bv\w+ps\s+%[yz]mm", k.get_kernel_source("asm"))  # still vectorised

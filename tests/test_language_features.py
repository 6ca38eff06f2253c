"""Language features against torch: locals, vars, loop kinds, compile-time branches, atomics, math, dtypes."""

from __future__ import annotations

import ctypes

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def row_cumsum(M, N, block_M):
    """Sequential prefix sum per row with a T.alloc_var accumulator and T.serial loops."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            x = T.alloc_local((block_M, N), "float32")
            acc = T.alloc_var("float32")
            T.copy(X[bx * block_M, 0], x)
            for i in T.serial(block_M):
                acc[0] = 0.0
                for j in T.serial(N):
                    acc[0] += x[i, j]
                    x[i, j] = acc[0]
            T.copy(x, Y[bx * block_M, 0])

    return main


def test_alloc_var_and_serial_loops_compute_row_prefix_sums():
    M, N = 70, 48
    kernel = row_cumsum(M, N, 32)
    x = torch.randn(M, N)
    torch.testing.assert_close(kernel(x), torch.cumsum(x, dim=1), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=[-1])
def cubic_horner(N, block_N):
    """y = c0 + c1 x + c2 x^2 + c3 x^3, Horner steps in a T.unroll loop over a per-thread local accumulator."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), C: T.Tensor((4,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            x = T.alloc_fragment((block_N,), "float32")
            c = T.alloc_local((4,), "float32")
            y = T.alloc_fragment((block_N,), "float32")
            T.copy(X[bx * block_N], x)
            T.copy(C, c)
            for i in T.Parallel(block_N):
                y[i] = c[3]
            for t in T.unroll(3):
                for i in T.Parallel(block_N):
                    y[i] = y[i] * x[i] + c[2 - t]
            T.copy(y, Y[bx * block_N])

    return main


def test_unrolled_horner_loop_matches_torch_polynomial():
    N = 1000
    kernel = cubic_horner(N, 128)
    x, c = torch.randn(N), torch.randn(4)
    ref = c[0] + c[1] * x + c[2] * x**2 + c[3] * x**3
    torch.testing.assert_close(kernel(x, c), ref, rtol=1e-5, atol=1e-5)
    assert "T.unroll(3)" in kernel.get_kernel_source("tir")


@tilelang.jit(out_idx=[-1])
def transpose(M, N, block_M, block_N):
    """Tile transpose with a T.grid loop between two on-chip tiles."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N, M), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            s = T.alloc_shared((block_M, block_N), "float32")
            t = T.alloc_fragment((block_N, block_M), "float32")
            T.copy(X[by * block_M, bx * block_N], s)
            for i, j in T.grid(block_M, block_N):
                t[j, i] = s[i, j]
            T.copy(t, Y[bx * block_N, by * block_M])

    return main


@pytest.mark.parametrize("M,N", [(128, 64), (100, 70)])
def test_grid_loop_tile_transpose_matches_torch_on_ragged_shapes(M, N):
    kernel = transpose(M, N, 32, 16)
    x = torch.randn(M, N)
    torch.testing.assert_close(kernel(x), x.T.contiguous(), rtol=0, atol=0)


@tilelang.jit(out_idx=[-1])
def augmented_ops(M, N, block_M, block_N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), "float32")
            y = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(X[by * block_M, bx * block_N], x)
            T.copy(Y[by * block_M, bx * block_N], y)
            for i, j in T.Parallel(block_M, block_N):
                x[i, j] *= 3.0
                x[i, j] -= y[i, j]
                x[i, j] += 0.5
                x[i, j] /= 2.0
            T.copy(x, Z[by * block_M, bx * block_N])

    return main


def test_augmented_assignments_in_parallel_loop_match_torch():
    M, N = 96, 80
    kernel = augmented_ops(M, N, 32, 32)
    x, y = torch.randn(M, N), torch.randn(M, N)
    torch.testing.assert_close(kernel(x, y), (3 * x - y + 0.5) / 2, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=[-1])
def activation(N, block_N, act):
    """The activation is chosen by a compile-time Python `if` on the factory argument."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            for i in T.Parallel(block_N):
                if act == "relu":
                    Y[bx * block_N + i] = T.max(X[bx * block_N + i], 0)
                elif act == "leaky_relu":
                    Y[bx * block_N + i] = T.if_then_else(X[bx * block_N + i] > 0, X[bx * block_N + i],
                                                         X[bx * block_N + i] * 0.1)
                elif act == "silu":
                    Y[bx * block_N + i] = X[bx * block_N + i] * T.sigmoid(X[bx * block_N + i])
                else:
                    Y[bx * block_N + i] = X[bx * block_N + i]

    return main


@pytest.mark.parametrize("act,ref", [
    ("relu", torch.relu),
    ("leaky_relu", lambda x: torch.nn.functional.leaky_relu(x, 0.1)),
    ("silu", torch.nn.functional.silu),
    ("identity", lambda x: x),
])
def test_compile_time_if_selects_activation_matching_torch(act, ref):
    N = 777
    kernel = activation(N, 128, act)
    x = torch.randn(N)
    torch.testing.assert_close(kernel(x), ref(x), rtol=1e-5, atol=1e-6)


def test_compile_time_if_branches_produce_different_programs():
    relu_src = activation.get_program(256, 128, "relu").script()
    id_src = activation.get_program(256, 128, "identity").script()
    assert relu_src != id_src
    assert "sigmoid" not in relu_src


@tilelang.jit(out_idx=None)
def split_k_accumulate_scalar(M, N, K, block_M, block_N, split_k):
    """C += A @ B, K split over a third grid dim; every split adds into the same C elements with T.atomic_add."""
    k_per_split = K // split_k

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, k_per_split), "float32")
            B_s = T.alloc_shared((k_per_split, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            T.copy(A[by * block_M, bz * k_per_split], A_s)
            T.copy(B[bz * k_per_split, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                T.atomic_add(C[by * block_M + i, bx * block_N + j], C_f[i, j])

    return main


@tilelang.jit(out_idx=None)
def split_k_accumulate_tile(M, N, K, block_M, block_N, block_K, split_k, dst_form):
    """Same as above with the tile form of T.atomic_add (start-index C[i0, j0] or an explicit slice) and a
    pipelined K loop per split."""
    k_per_split = K // split_k

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k) as (bx, by, bz):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(k_per_split // block_K, num_stages=2):
                T.copy(A[by * block_M, bz * k_per_split + k * block_K], A_s)
                T.copy(B[bz * k_per_split + k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            if dst_form == "start":
                T.atomic_add(C[by * block_M, bx * block_N], C_f)
            else:
                T.atomic_add(C[by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N], C_f)

    return main


@pytest.mark.parametrize("M,N", [(128, 128), (100, 70)])
def test_atomic_add_split_k_accumulates_all_splits_into_output(M, N):
    K, split_k = 96, 3
    kernel = split_k_accumulate_scalar(M, N, K, 32, 32, split_k)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.randn(M, N)
    expected = c + a @ b
    assert kernel(a, b, c) is None
    torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dst_form", ["start", "slice"])
@pytest.mark.parametrize("M,N", [(128, 64), (90, 50)])
def test_tile_atomic_add_split_k_accumulates_all_splits_into_output(M, N, dst_form):
    K, split_k = 128, 4
    kernel = split_k_accumulate_tile(M, N, K, 32, 32, 16, split_k, dst_form)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.randn(M, N)
    expected = c + a @ b
    kernel(a, b, c)
    torch.testing.assert_close(c, expected, rtol=1e-4, atol=1e-4)


@tilelang.jit(out_idx=None)
def histogram(N, bins, block_N):
    """Many blocks atomically add 1 into a few shared bins of the output."""

    @T.prim_func
    def main(X: T.Tensor((N,), "int32"), H: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            for i in T.serial(block_N):
                if bx * block_N + i < N:
                    T.atomic_add(H[X[bx * block_N + i]], 1)

    return main


def test_atomic_add_histogram_counts_every_element_exactly():
    N, bins = 1000, 8
    kernel = histogram(N, bins, 64)
    x = torch.randint(0, bins, (N,), dtype=torch.int32)
    h = torch.randint(0, 5, (bins,), dtype=torch.int32)
    expected = h + torch.bincount(x.long(), minlength=bins).int()
    kernel(x, h)
    torch.testing.assert_close(h, expected, rtol=0, atol=0)


@tilelang.jit(out_idx=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
def math_functions(N, block_N, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype),
             o_exp: T.Tensor((N,), dtype), o_exp2: T.Tensor((N,), dtype), o_log: T.Tensor((N,), dtype),
             o_log2: T.Tensor((N,), dtype), o_sqrt: T.Tensor((N,), dtype), o_rsqrt: T.Tensor((N,), dtype),
             o_tanh: T.Tensor((N,), dtype), o_sigmoid: T.Tensor((N,), dtype), o_abs: T.Tensor((N,), dtype),
             o_minmax: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            x = T.alloc_fragment((block_N,), dtype)
            T.copy(X[bx * block_N], x)
            for i in T.Parallel(block_N):
                o_exp[bx * block_N + i] = T.exp(x[i] - 2.0)
                o_exp2[bx * block_N + i] = T.exp2(x[i] - 2.0)
                o_log[bx * block_N + i] = T.log(T.abs(x[i]) + 0.5)
                o_log2[bx * block_N + i] = T.log2(T.abs(x[i]) + 0.5)
                o_sqrt[bx * block_N + i] = T.sqrt(T.abs(x[i]))
                o_rsqrt[bx * block_N + i] = T.rsqrt(T.abs(x[i]) + 0.5)
                o_tanh[bx * block_N + i] = T.tanh(x[i])
                o_sigmoid[bx * block_N + i] = T.sigmoid(x[i])
                o_abs[bx * block_N + i] = T.abs(x[i])
                o_minmax[bx * block_N + i] = T.min(T.max(x[i], -0.5), 0.5)

    return main


def _math_references(x):
    ax = x.abs()
    return [torch.exp(x - 2), torch.exp2(x - 2), torch.log(ax + 0.5), torch.log2(ax + 0.5), torch.sqrt(ax),
            torch.rsqrt(ax + 0.5), torch.tanh(x), torch.sigmoid(x), ax, x.clamp(-0.5, 0.5)]


def test_math_functions_match_torch_in_float32():
    N = 1000
    kernel = math_functions(N, 128)
    x = torch.randn(N) * 2
    outs = kernel(x)
    assert isinstance(outs, tuple) and len(outs) == 10
    names = [p.name for p in kernel.params[1:]]
    for name, out, ref in zip(names, outs, _math_references(x)):
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_math_functions_match_torch_in_float64():
    N = 300
    kernel = math_functions(N, 64, dtype="float64")
    x = torch.randn(N, dtype=torch.float64) * 2
    outs = kernel(x)
    names = [p.name for p in kernel.params[1:]]
    for name, out, ref in zip(names, outs, _math_references(x)):
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}")


@tilelang.jit(out_idx=[-1])
def int_arith(M, N, block_M, block_N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "int32"), B: T.Tensor((M, N), "int32"), C: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            a = T.alloc_fragment((block_M, block_N), "int32")
            b = T.alloc_fragment((block_M, block_N), "int32")
            T.copy(A[by * block_M, bx * block_N], a)
            T.copy(B[by * block_M, bx * block_N], b)
            for i, j in T.Parallel(block_M, block_N):
                a[i, j] = a[i, j] * b[i, j] - T.max(a[i, j], b[i, j]) + T.abs(b[i, j]) + 3
            T.copy(a, C[by * block_M, bx * block_N])

    return main


def test_int32_arithmetic_is_exact_against_torch():
    M, N = 100, 70
    kernel = int_arith(M, N, 32, 32)
    a = torch.randint(-1000, 1000, (M, N), dtype=torch.int32)
    b = torch.randint(-1000, 1000, (M, N), dtype=torch.int32)
    ref = a * b - torch.maximum(a, b) + b.abs() + 3
    torch.testing.assert_close(kernel(a, b), ref, rtol=0, atol=0)


@tilelang.jit(out_idx=[2, 3])
def masked_select_and_compare(M, N, block_M, block_N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Mask: T.Tensor((M, N), "bool"), Y: T.Tensor((M, N), "float32"),
             Pos: T.Tensor((M, N), "bool")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M)) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                Y[by * block_M + i, bx * block_N + j] = T.if_then_else(
                    Mask[by * block_M + i, bx * block_N + j], X[by * block_M + i, bx * block_N + j], -1.0)
                Pos[by * block_M + i, bx * block_N + j] = X[by * block_M + i, bx * block_N + j] > 0.0

    return main


def test_bool_mask_input_and_bool_output_match_torch():
    M, N = 70, 90
    kernel = masked_select_and_compare(M, N, 32, 32)
    x = torch.randn(M, N)
    mask = torch.rand(M, N) > 0.5
    y, pos = kernel(x, mask)
    assert pos.dtype == torch.bool
    torch.testing.assert_close(y, torch.where(mask, x, torch.full_like(x, -1.0)), rtol=0, atol=0)
    assert torch.equal(pos, x > 0)


@tilelang.jit(out_idx=[1, 2])
def casts(N, block_N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int32"), H: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            for i in T.Parallel(block_N):
                I[bx * block_N + i] = T.cast(X[bx * block_N + i] * 10.0, "int32")
                H[bx * block_N + i] = T.cast(X[bx * block_N + i], "float16")

    return main


def test_cast_to_int32_truncates_and_to_float16_rounds_like_torch():
    N = 500
    kernel = casts(N, 128)
    x = torch.randn(N)
    i, h = kernel(x)
    assert i.dtype == torch.int32 and h.dtype == torch.float16
    torch.testing.assert_close(i, (x * 10.0).to(torch.int32), rtol=0, atol=0)
    torch.testing.assert_close(h, x.half(), rtol=0, atol=0)


@tilelang.jit(out_idx=[-1])
def uint8_dequant(M, N, block_M, scale, zero):
    @T.prim_func
    def main(Q: T.Tensor((M, N), "uint8"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            q = T.alloc_fragment((block_M, N), "uint8")
            y = T.alloc_fragment((block_M, N), "float32")
            T.copy(Q[bx * block_M, 0], q)
            for i, j in T.Parallel(block_M, N):
                y[i, j] = (T.cast(q[i, j], "float32") - zero) * scale
            T.copy(y, Y[bx * block_M, 0])

    return main


def test_uint8_dequantisation_matches_torch():
    M, N = 50, 64
    kernel = uint8_dequant(M, N, 16, 0.25, 128.0)
    q = torch.randint(0, 256, (M, N), dtype=torch.uint8)
    torch.testing.assert_close(kernel(q), (q.float() - 128.0) * 0.25, rtol=0, atol=0)


@tilelang.jit(out_idx=[-1])
def fill_then_scatter(M, N, block_M, block_N, value):
    """T.fill of a fragment with a constant, partially overwritten from the input."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=[32, 4]) as (bx, by):
            t = T.alloc_fragment((block_M, block_N), "float32")
            T.fill(t, value)
            for i, j in T.Parallel(block_M, block_N):
                if j % 2 == 0:
                    t[i, j] = X[by * block_M + i, bx * block_N + j]
            T.copy(t, Y[by * block_M, bx * block_N])

    return main


def test_fill_and_conditional_overwrite_match_torch():
    M, N = 70, 64
    kernel = fill_then_scatter(M, N, 32, 32, 7.5)
    x = torch.randn(M, N)
    ref = torch.full_like(x, 7.5)
    ref[:, 0::2] = x[:, 0::2]
    torch.testing.assert_close(kernel(x), ref, rtol=0, atol=0)


@tilelang.jit(out_idx=[-1])
def printing_kernel(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[bx * N], x)
            T.print(x, msg="tile")
            T.print(x[1] + 1.0, msg="scalar")
            T.copy(x, Y[bx * N])

    return main


def test_print_writes_tile_and_scalar_values_to_stdout(capfd):
    kernel = printing_kernel(4)
    x = torch.tensor([1.5, -2.25, 3.0, 0.125]) + torch.randn(4).round()
    y = kernel(x)
    ctypes.CDLL(None).fflush(None)  # C stdio is block-buffered when stdout is not a terminal
    out = capfd.readouterr().out
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    for k in range(4):
        assert f"tile x[{k}] = {float(x[k]):.6g}" in out
    assert f"scalar {float(x[1]) + 1.0:.6g}" in out

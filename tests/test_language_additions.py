"""The language features attention and dequantized GEMM kernels need, each against torch on random inputs.

T.infinity and exp2(-inf) == 0 through the CPU's fast exp2, T.GemmWarpPolicy, T.gemm with a fragment as A,
reductions with clear=False, ':' slices of 4-D tensors in T.copy, compile-time branches on Python values, loop
bounds that depend on the block index, bit operations and casts on 8-bit integers, and T.macro.
"""

from __future__ import annotations

import math

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T

# -- infinities ------------------------------------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def masked_row_max(M, N, limit):
    """Row max over the columns j < limit of each row; columns at or past it become -inf first."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(M, N):
                x[i, j] = T.if_then_else(j < limit, x[i, j], -T.infinity("float32"))
            T.reduce_max(x, m, dim=1)
            T.copy(m, Y)

    return main


def test_infinity_masks_a_reduction():
    x = torch.randn(8, 64)
    torch.testing.assert_close(masked_row_max(8, 64, 40)(x), x[:, :40].amax(dim=1))
    assert torch.equal(masked_row_max(8, 64, 0)(x), torch.full((8,), -math.inf))


@tilelang.jit(out_idx=[-1])
def exponentials(N, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N, 3), dtype)):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i, 0] = T.exp2(X[bx * 64 + i])
                Y[bx * 64 + i, 1] = T.exp(X[bx * 64 + i])
                Y[bx * 64 + i, 2] = T.sigmoid(X[bx * 64 + i])

    return main


def test_fast_exp2_handles_infinities_and_extremes():
    """The CPU's vectorised exp2 clamps its input: exp2(-inf) must still be exactly 0, exp2(inf) inf."""
    specials = torch.tensor([-math.inf, math.inf, -1e30, 1e30, -200.0, -126.5, -60.0, 0.0, 1.0, 127.0, 200.0])
    x = torch.cat([specials, torch.randn(256 - len(specials)) * 30])
    y = exponentials(256)(x)
    ref = torch.stack([torch.exp2(x), torch.exp(x), torch.sigmoid(x)], dim=1)
    assert y[0].tolist() == [0.0, 0.0, 0.0] and y[1].tolist() == [math.inf, math.inf, 1.0]
    tiny = ref[:, :2].abs() < 2.0**-126  # below float32's normal range results may flush to zero
    assert ((y[:, :2] - ref[:, :2]).abs()[tiny] <= 2.0**-126).all()
    torch.testing.assert_close(y[:, 0][~tiny[:, 0]], ref[:, 0][~tiny[:, 0]], rtol=2e-6, atol=0)
    torch.testing.assert_close(y[:, 1][~tiny[:, 1]], ref[:, 1][~tiny[:, 1]], rtol=1e-5, atol=0)
    torch.testing.assert_close(y[:, 2], ref[:, 2], rtol=1e-5, atol=1e-37)


@pytest.mark.parametrize("lo,hi", [(88.0, 88.7228), (127.0, 127.99999), (-1.0, 1.0), (-103.0, -80.0),
                                   (-150.0, -120.0)], ids=["exp-top", "exp2-top", "unit", "exp-low", "exp2-low"])
def test_fast_exp_is_finite_wherever_float32_is_and_within_an_ulp(lo, hi):
    """exp(x) for x up to 88.72 and exp2(x) up to 128 are finite in float32; the fast exp used to give inf from
    88.38 and 127.5 (2^n with n = 128 overflowed before the polynomial's factor < 1 was applied). Also accurate
    near the top: the argument is reduced with ln(2) in two parts, not by rounding x * log2(e)."""
    n = 4096
    x = lo + (hi - lo) * torch.rand(n)
    x[:2] = torch.tensor([lo, hi])
    y = exponentials(n)(x)
    for col, fn in ((0, torch.exp2), (1, torch.exp)):
        ref = fn(x.double()).float()
        finite = torch.isfinite(ref)
        assert torch.isfinite(y[:, col][finite]).all(), fn.__name__
        torch.testing.assert_close(y[:, col], ref, rtol=2.5e-7, atol=3e-45)  # 1 ulp; 2 subnormal steps
    torch.testing.assert_close(y[:, 2], torch.sigmoid(x), rtol=5e-7, atol=3e-45)


def test_fast_exp_exp2_and_sigmoid_of_nan_are_nan():
    """The clamp in the fast exp turned NaN into +inf: exp(NaN) = inf, sigmoid(NaN) = 0."""
    x = torch.randn(256) * 20
    x[[0, 7, 100, 255]] = math.nan
    x[1], x[2] = math.inf, -math.inf
    y = exponentials(256)(x)
    ref = torch.stack([torch.exp2(x), torch.exp(x), torch.sigmoid(x)], dim=1)
    assert y[[0, 7, 100, 255]].isnan().all()
    torch.testing.assert_close(y, ref, rtol=5e-7, atol=3e-45, equal_nan=True)


def test_softmax_row_holding_a_nan_is_nan_like_torch():
    """A row with a NaN became zeros (exp2(NaN) was +inf, then inf / inf ... ) instead of torch's NaN row."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "softmax.py"
    spec = importlib.util.spec_from_file_location("tl_example_softmax_nan", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    x = torch.randn(8, 256)
    x[3, 17] = math.nan
    y = example.softmax(8, 256)(x)
    ref = torch.softmax(x, dim=-1)
    assert y[3].isnan().all()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_exp2_in_float64_keeps_libm_accuracy():
    x = torch.randn(128, dtype=torch.float64) * 10
    x[0] = -math.inf
    y = exponentials(128, "float64")(x)
    torch.testing.assert_close(y[:, 0], torch.exp2(x), rtol=1e-12, atol=0)


# -- gemm ------------------------------------------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def policy_gemm(M, N, K, policy):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float32")
            B_s = T.alloc_shared((K, N), "float32")
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, policy=policy, clear_accum=True)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("policy", list(T.GemmWarpPolicy), ids=lambda p: p.name)
def test_gemm_warp_policy_is_accepted_and_does_not_change_the_result(policy):
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    torch.testing.assert_close(policy_gemm(64, 48, 32, policy)(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_gemm_warp_policy_names_match_tilelang():
    assert [p.name for p in T.GemmWarpPolicy] == ["Square", "FullRow", "FullCol"]


@tilelang.jit(out_idx=[-1])
def fragment_a_gemm(M, N, K, transpose_A):
    """C = relu(X)^{(T)} @ V: the A operand is computed in a fragment, as P is in attention's P @ V."""
    a_shape = (K, M) if transpose_A else (M, K)

    @T.prim_func
    def main(X: T.Tensor(a_shape, "float32"), V: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            P = T.alloc_fragment(a_shape, "float32")
            V_s = T.alloc_shared((K, N), "float32")
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(X, P)
            for i, j in T.Parallel(*a_shape):
                P[i, j] = T.max(P[i, j], 0)
            T.copy(V, V_s)
            T.clear(C_f)
            T.gemm(P, V_s, C_f, transpose_A=transpose_A, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("transpose_A", [False, True])
def test_gemm_with_a_fragment_as_a(transpose_A):
    M, N, K = 32, 64, 48
    x = torch.randn((K, M) if transpose_A else (M, K))
    v = torch.randn(K, N)
    p = torch.relu(x.T if transpose_A else x)
    torch.testing.assert_close(fragment_a_gemm(M, N, K, transpose_A)(x, v), p @ v, rtol=1e-5, atol=1e-5)


# -- reductions with clear=False ----------------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def running_reduce(M, N, kind):
    """dst starts as Init[i]; reduce with clear=False folds the row into it."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Init: T.Tensor((M,), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((M, N), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.copy(Init, acc)
            if kind == "sum":
                T.reduce_sum(x, acc, dim=1, clear=False)
            elif kind == "max":
                T.reduce_max(x, acc, dim=1, clear=False)
            elif kind == "min":
                T.reduce_min(x, acc, dim=1, clear=False)
            elif kind == "abssum":
                T.reduce_abssum(x, acc, dim=1, clear=False)
            else:
                T.reduce_absmax(x, acc, dim=1, clear=False)
            T.copy(acc, Y)

    return main


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
@pytest.mark.parametrize("N", [64, 37])
def test_reductions_without_clear_combine_with_what_dst_holds(kind, N):
    M = 16
    x, init = torch.randn(M, N), torch.randn(M) * 2
    ref = {"sum": init + x.sum(1), "max": torch.maximum(init, x.amax(1)), "min": torch.minimum(init, x.amin(1)),
           "abssum": init + x.abs().sum(1), "absmax": torch.maximum(init, x.abs().amax(1))}[kind]
    torch.testing.assert_close(running_reduce(M, N, kind)(x, init), ref, rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=[-1])
def column_running_max(M, N):
    """clear=False along a non-contiguous dimension, starting from -inf."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((N,), "float32")
            T.fill(m, -T.infinity("float32"))
            for _ in T.serial(2):  # two passes over the same tile: the second must not change the max
                T.copy(X, x)
                T.reduce_max(x, m, dim=0, clear=False)
            T.copy(m, Y)

    return main


def test_column_reduction_without_clear():
    x = torch.randn(24, 40)
    torch.testing.assert_close(column_running_max(24, 40)(x), x.amax(0))


# -- 4-D slices in T.copy ----------------------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def head_slices(batch, seq, heads, dim, block_M):
    """Copy [b, rows, h, :] tiles of a [batch, seq, heads, dim] tensor through shared memory, doubled."""
    shape = [batch, seq, heads, dim]

    @T.prim_func
    def main(X: T.Tensor(shape, "float32"), Y: T.Tensor(shape, "float32")):
        with T.Kernel(T.ceildiv(seq, block_M), heads, batch) as (bx, by, bz):
            s = T.alloc_shared((block_M, dim), "float32")
            T.copy(X[bz, bx * block_M:(bx + 1) * block_M, by, :], s)
            for i, j in T.Parallel(block_M, dim):
                s[i, j] = s[i, j] * 2.0
            T.copy(s, Y[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


@pytest.mark.parametrize("seq", [128, 200])
def test_four_d_slice_copies_round_trip(seq):
    x = torch.randn(2, seq, 3, 64)
    torch.testing.assert_close(head_slices(2, seq, 3, 64, 64)(x), 2 * x, rtol=0, atol=0)


# -- compile-time branches and block-dependent loop bounds ----------------------------------------------------


@tilelang.jit(out_idx=[-1])
def maybe_square(N, square, offset=None):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                if square:
                    Y[bx * 64 + i] = X[bx * 64 + i] * X[bx * 64 + i]
                elif offset is not None:
                    Y[bx * 64 + i] = X[bx * 64 + i] + offset
                else:
                    Y[bx * 64 + i] = -X[bx * 64 + i]

    return main


def test_python_if_inside_a_kernel_is_resolved_at_compile_time():
    x = torch.randn(200)
    torch.testing.assert_close(maybe_square(200, True)(x), x * x)
    torch.testing.assert_close(maybe_square(200, False, 1.5)(x), x + 1.5)
    torch.testing.assert_close(maybe_square(200, False)(x), -x)
    tir = maybe_square(200, True).get_kernel_source("tir")
    assert "1.5" not in tir and "T.if_then_else(blk" in tir  # one branch, no runtime test of `square`
    assert maybe_square(200, False).get_kernel_source("tir").count("X[") == 1


@tilelang.jit(out_idx=[-1])
def block_prefix_sums(N, block, block_K):
    """Y[bx * block + i] = sum of X[0 : (bx + 1) * block] (a causal-like, block-dependent trip count)."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block)) as bx:
            chunk = T.alloc_fragment((block_K,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.clear(total)
            for k in T.Pipelined(T.min(T.ceildiv((bx + 1) * block, block_K), T.ceildiv(N, block_K)), num_stages=2):
                T.copy(X[k * block_K], chunk)
                for j in T.Parallel(block_K):
                    chunk[j] = T.if_then_else(k * block_K + j < (bx + 1) * block, chunk[j], 0)
                T.reduce_sum(chunk, total, dim=0, clear=False)
            for i in T.Parallel(block):
                Y[bx * block + i] = total[0]

    return main


@pytest.mark.parametrize("N,block,block_K", [(256, 32, 64), (200, 64, 32), (130, 16, 48)])
def test_loop_bound_depending_on_the_block_index(N, block, block_K):
    x = torch.randn(N)
    ends = torch.clamp((torch.arange(N) // block + 1) * block, max=N)
    ref = torch.stack([x[:e].sum() for e in ends.tolist()])
    torch.testing.assert_close(block_prefix_sums(N, block, block_K)(x), ref, rtol=1e-5, atol=1e-4)


# -- integer bit operations and casts ----------------------------------------------------------------------


@tilelang.jit(out_idx=[-1])
def bit_ops(N):
    @T.prim_func
    def main(S: T.Tensor((N,), "int8"), U: T.Tensor((N,), "uint8"), Y: T.Tensor((N, 8), "int32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                s = S[bx * 64 + i]
                u = U[bx * 64 + i]
                Y[bx * 64 + i, 0] = T.cast(s >> 4, "int32")  # arithmetic shift of a signed byte
                Y[bx * 64 + i, 1] = T.cast(u >> 4, "int32")  # logical shift of an unsigned byte
                Y[bx * 64 + i, 2] = T.cast(u & 0xF, "int32") - 8  # low nibble as signed int4
                Y[bx * 64 + i, 3] = T.cast(u ^ 0x5A, "int32")
                Y[bx * 64 + i, 4] = T.cast(~u, "int32")
                Y[bx * 64 + i, 5] = (T.cast(u, "int32") << 3) | 1
                Y[bx * 64 + i, 6] = T.cast(s, "int32") & 0xF
                Y[bx * 64 + i, 7] = T.cast(T.cast(u, "float32") * 0.5, "int32")

    return main


def test_bit_operations_and_casts_on_bytes_match_torch():
    s = torch.arange(-128, 128, dtype=torch.int8)[torch.randperm(256)]
    u = torch.randint(0, 256, (256,), dtype=torch.uint8)
    ref = torch.stack([(s >> 4).int(), (u >> 4).int(), (u & 0xF).int() - 8, (u ^ 0x5A).int(), (~u).int(),
                       (u.int() << 3) | 1, s.int() & 0xF, (u.float() * 0.5).int()], dim=1)
    assert torch.equal(bit_ops(256)(s, u), ref)


@tilelang.jit(out_idx=[-1])
def unpack_nibbles(N, K):
    """TileLang's unpacking spelling: element j of a row lives in byte j // 2, nibble j % 2."""

    @T.prim_func
    def main(B: T.Tensor((N, K // 2), "uint8"), W: T.Tensor((N, K), "float32")):
        with T.Kernel(T.ceildiv(N, 16)) as bx:
            packed = T.alloc_shared((16, K // 2), "uint8")
            w = T.alloc_fragment((16, K), "float32")
            T.copy(B[bx * 16, 0], packed)
            for i, j in T.Parallel(16, K):
                w[i, j] = T.cast(T.cast((packed[i, j // 2] >> (4 * (j % 2))) & 0xF, "int32") - 8, "float32")
            T.copy(w, W[bx * 16, 0])

    return main


def test_nibble_unpacking_matches_torch():
    B = torch.randint(0, 256, (40, 32), dtype=torch.uint8)
    ref = torch.stack([(B & 0xF), (B >> 4)], dim=-1).reshape(40, 64).float() - 8
    assert torch.equal(unpack_nibbles(40, 64)(B), ref)


# -- T.macro -----------------------------------------------------------------------------------------------

x = "a notebook global that shares its name with the macro's parameter"


@tilelang.jit(out_idx=[-1])
def macro_kernel(N):
    @T.macro
    def axpy(x, y, a):
        for i in T.Parallel(N):
            y[i] = y[i] + a * x[i]

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1):
            x = T.alloc_fragment((N,), "float32")
            y = T.alloc_fragment((N,), "float32")
            T.copy(X, x)
            T.clear(y)
            axpy(x, y, 2.0)
            axpy(x, y, 0.5)
            T.copy(y, Y)

    return main


def test_macro_parameters_shadow_globals_of_the_same_name():
    v = torch.randn(64)
    torch.testing.assert_close(macro_kernel(64)(v), 2.5 * v)


@tilelang.jit(out_idx=[-1])
def tanh_of(N, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = T.tanh(X[bx * 64 + i])

    return main


@pytest.mark.parametrize("dtype,rtol", [("float32", 2.5e-7), ("float64", 1e-15), ("bfloat16", 8e-3),
                                        ("float16", 1e-3)])
def test_tanh_keeps_relative_accuracy_from_tiny_to_saturated_arguments(dtype, rtol):
    """TVM's tanh lowering cancels for small |x|: tanh(1e-6) was 0 and the relative error 1e-4 near 1e-3."""
    n = 4096
    tdt = getattr(torch, dtype)
    tiny = 6e-5 if dtype == "float16" else 1e-30  # float16's smallest normal
    mag = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(math.log(tiny), math.log(20.0)))
    x = (mag * torch.where(torch.rand(n) < 0.5, -1.0, 1.0).double()).to(tdt)
    x[:4] = torch.tensor([math.nan, math.inf, -math.inf, 0.0])
    y = tanh_of(n, dtype)(x)
    ref = torch.tanh(x.double()).to(tdt)
    torch.testing.assert_close(y, ref, rtol=rtol, atol=0, equal_nan=True)

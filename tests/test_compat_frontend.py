"""TileLang's frontend spellings (issue 18, "Language" and "Internal errors"): the subscript annotation
``T.Tensor[shape, dtype]``, scalar kernel parameters, symbolic sizes (``T.symbolic`` / ``T.dynamic``), views of a
parameter (``T.Tensor(shape, dtype, A.data)``), chained assignment, ``T.alloc_var`` scalars read by name, and
``16 < row_idx < 96`` on a let-bound index. Each runs on the CPU against torch here; the CUDA compiles are in
test_compat_frontend_cuda.py and the GPU runs in tests/gpu/test_compat_frontend.py."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.errors import TileLangCompileError

# -- T.Tensor[shape, dtype] ----------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1], target="cpu")
def axpy_subscript(M, N, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor[(M, N), dtype], Y: T.Buffer[(M, N), dtype], Z: T.Tensor[M, N]):
        with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
            for i, j in T.Parallel(8, N):
                Z[bx * 8 + i, j] = X[bx * 8 + i, j] * 2.0 + Y[bx * 8 + i, j]

    return main


def test_subscript_annotation_is_a_tensor_parameter():
    k = axpy_subscript(20, 16)
    assert [(p.name, p.shape, p.dtype) for p in k.params] == [("X", (20, 16), "float32"), ("Y", (20, 16), "float32"),
                                                              ("Z", (20, 16), "float32")]  # T.Tensor[M, N]: float32
    x, y = torch.randn(20, 16), torch.randn(20, 16)
    torch.testing.assert_close(k(x, y), 2 * x + y)


@tilelang.jit(out_idx=[-1], target="cpu")
def copy_strided(M, N, strides):
    @T.prim_func
    def main(X: T.StridedTensor((M, N), strides, "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            for i, j in T.Parallel(M, N):
                Y[i, j] = X[i, j] + 1.0

    return main


def test_strided_tensor_reads_its_layout_and_a_non_positive_stride_is_refused_at_the_users_line():
    x = torch.randn(4, 8)
    torch.testing.assert_close(copy_strided(4, 8, (8, 1))(x), x + 1)
    view = torch.randn(4, 16)[:, :8]  # strides (16, 1): read in place (tests/test_strided_tensors.py)
    torch.testing.assert_close(copy_strided(4, 8, (16, 1))(view), view + 1)
    with pytest.raises(TileLangCompileError, match=r"expected constant positive ints") as ei:
        copy_strided(4, 8, (0, 1))
    assert ei.value.location is not None and ei.value.location.file == __file__


# -- scalar parameters -----------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1], target="cpu")
def scale_shift(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), alpha: T.float32, n: T.int32, Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 16), threads=32) as bx:
            for i in T.Parallel(16):
                if bx * 16 + i < N:
                    Y[bx * 16 + i] = X[bx * 16 + i] * alpha + n

    return main


def test_scalar_parameters_take_python_numbers():
    k = scale_shift(50)
    assert [(p.name, p.kind) for p in k.params] == [("X", "tensor"), ("alpha", "scalar"), ("n", "scalar"),
                                                    ("Y", "tensor")]
    x = torch.randn(50)
    torch.testing.assert_close(k(x, 1.5, 3), x * 1.5 + 3)
    torch.testing.assert_close(k(x, -0.25, -7), x * -0.25 - 7)  # the same kernel, other values
    y = torch.empty(50)
    k(x, 2, 1, y)  # an int for a float parameter is fine; all arguments including the output
    torch.testing.assert_close(y, x * 2 + 1)


@pytest.mark.parametrize("alpha,n,err,match", [
    ("2.0", 1, TypeError, r"argument 'alpha': expected a number for the scalar parameter alpha: float32, got str"),
    (torch.ones(3), 1, TypeError, r"argument 'alpha': expected a number .* got Tensor"),
    (1.0, 2.5, TypeError, r"argument 'n': expected an integer for the scalar parameter n: int32, got float 2.5"),
    (1.0, True, TypeError, r"argument 'n': expected an integer .* got a bool"),
    (1.0, 2 ** 31, ValueError, r"argument 'n': 2147483648 is out of range for the scalar parameter n: int32"),
])
def test_scalar_arguments_are_checked_at_call_time(alpha, n, err, match):
    with pytest.raises(err, match=match):
        scale_shift(50)(torch.randn(50), alpha, n)


def test_scalar_kernel_argument_count_names_the_scalars():
    with pytest.raises(TypeError, match=r"expected 3 input argument\(s\) \(X, alpha, n\)"):
        scale_shift(50)(torch.randn(50), 1.0)


# -- symbolic sizes --------------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1], target="cpu")
def rows_plus_bias(N, block_M=8, spelling="symbolic"):
    m = T.symbolic("m") if spelling == "symbolic" else T.dynamic("m")

    @T.prim_func
    def main(X: T.Tensor((m, N), "float32"), b: T.Tensor((N,), "float32"), Y: T.Tensor((m, N), "float32")):
        with T.Kernel(T.ceildiv(m, block_M), threads=32) as bx:
            for i, j in T.Parallel(block_M, N):
                if bx * block_M + i < m:
                    Y[bx * block_M + i, j] = X[bx * block_M + i, j] + b[j]

    return main


@pytest.mark.parametrize("spelling", ["symbolic", "dynamic"])
def test_one_kernel_serves_every_symbolic_size(spelling):
    k = rows_plus_bias(16, spelling=spelling)
    assert k.params[0].shape == ("m", 16) and k.params[2].shape == ("m", 16)
    b = torch.randn(16)
    for m in (1, 13, 40):
        x = torch.randn(m, 16)
        y = k(x, b)  # out_idx allocates (m, 16) from the bound m
        assert y.shape == (m, 16)
        torch.testing.assert_close(y, x + b)
    assert rows_plus_bias(16, spelling=spelling) is k  # no recompilation per size


@tilelang.jit(out_idx=[-1], target="cpu")
def gemm_dynamic_m(N, K, block_M=64, block_N=64, block_K=32):
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((m, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(m, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def test_gemm_with_a_dynamic_m_handles_ragged_row_tiles():
    k = gemm_dynamic_m(128, 64)
    b = torch.randn(64, 128).half()
    for m in (1, 100):
        a = torch.randn(m, 64).half()
        torch.testing.assert_close(k(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_symbolic_size_must_agree_across_arguments():
    k = rows_plus_bias(16)
    with pytest.raises(ValueError, match=r"argument 'Y': dimension 0 is the symbolic size m, which argument 'X' "
                                         r"\(dimension 0\) fixed at 10; got 11"):
        k(torch.randn(10, 16), torch.randn(16), torch.empty(11, 16))
    with pytest.raises(ValueError, match=r"argument 'b': expected shape \[16\], got \[15\]"):
        k(torch.randn(10, 16), torch.randn(15))


def test_symbolic_size_only_inside_an_expression_is_a_compile_error():
    @tilelang.jit(out_idx=[-1], target="cpu")
    def doubled(N):
        m = T.symbolic("m")

        @T.prim_func
        def main(X: T.Tensor((m * 2,), "float32"), Y: T.Tensor((m * 2,), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                for i in T.Parallel(32):
                    Y[i] = X[i]

        return main

    with pytest.raises(TileLangCompileError, match=r"the symbolic size m appears only inside an expression"):
        doubled(4)


def test_exported_kernel_keeps_scalars_and_symbolic_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_EXPORT_CACHE_DIR", str(tmp_path / "cache"))
    path = rows_plus_bias(16).export(tmp_path / "rows_bias.py")
    path2 = scale_shift(50).export(tmp_path / "scale_shift.py")
    mods = []
    for p in (path, path2):
        spec = importlib.util.spec_from_file_location(p.stem, p)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    rb, ss = mods
    b = torch.randn(16)
    for m in (3, 21):
        x = torch.randn(m, 16)
        torch.testing.assert_close(rb.kernel(x, b), x + b)
    with pytest.raises(ValueError, match=r"symbolic size m, which argument 'X'"):
        rb.kernel(torch.randn(4, 16), b, torch.empty(5, 16))
    x = torch.randn(50)
    torch.testing.assert_close(ss.kernel(x, 0.5, 4), x * 0.5 + 4)
    with pytest.raises(TypeError, match=r"argument 'n': expected an integer"):
        ss.kernel(x, 0.5, 4.5)


# -- views of a parameter --------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1], target="cpu")
def flat_plus_one(M, N, inside=False):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M * N,), "float32")):
        A_flat = T.Tensor((M * N,), "float32", A.data)  # a view: same memory, another shape
        with T.Kernel(1, threads=32) as _bx:
            for i in T.Parallel(M * N):
                B[i] = A_flat[i] + 1.0

    @T.prim_func
    def main_inside(A: T.Tensor((M, N), "float32"), B: T.Tensor((M * N,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            A_flat = T.Tensor((M * N,), "float32", A.data)
            for i in T.Parallel(M * N):
                B[i] = A_flat[i] + 1.0

    return main_inside if inside else main


@pytest.mark.parametrize("inside", [False, True])
def test_view_of_a_parameter_reads_its_memory(inside):
    a = torch.randn(4, 8)
    torch.testing.assert_close(flat_plus_one(4, 8, inside)(a), a.reshape(-1) + 1)


def test_view_needs_a_data_pointer():
    @tilelang.jit(out_idx=[-1], target="cpu")
    def bad(M):
        @T.prim_func
        def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
            V = T.Tensor((M,), "float32", A)
            with T.Kernel(1, threads=32) as _bx:
                for i in T.Parallel(M):
                    B[i] = V[i]

        return main

    with pytest.raises(TileLangCompileError, match=r"expected a data pointer such as A.data, got the buffer A"):
        bad(8)


# -- chained assignment ----------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[1, 2, 3], target="cpu")
def chained(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32"),
             D: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            for i in T.serial(M):
                B[i] = C[i] = A[i] + 1.0  # two stores of one value
                x = y = A[i] * 2.0  # two new names
                D[i] = x * y

    return main


def test_chained_assignment_assigns_every_target():
    a = torch.randn(24)
    b, c, d = chained(24)(a)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, a + 1)
    torch.testing.assert_close(d, (2 * a) ** 2)


# -- T.alloc_var read by name ----------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1], target="cpu")
def var_scalars(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), idx: T.Tensor((1,), "int32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            s = T.alloc_var("float32")
            k = T.alloc_var("int32")
            s = 0.0
            k = idx[0]
            for i in T.serial(M):
                s = s + A[i]  # 'Var' + 'TensorLoad'
                B[i] = A[i] * s + T.if_then_else(A[i] > 0, s, 0.0) + T.max(s, A[k])  # var in arithmetic and calls
            B[k] = s  # a var as a stored value and as an index

    return main


def test_alloc_var_reads_as_its_value_in_arithmetic_calls_and_indices():
    a = torch.randn(20)
    k = 7
    out = var_scalars(20)(a, torch.tensor([k], dtype=torch.int32))
    s = torch.cumsum(a, 0)
    ref = a * s + torch.where(a > 0, s, torch.zeros(())) + torch.maximum(s, a[k])
    ref[k] = s[-1]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_tile_annotations_of_a_kernel_parameter_are_refused_pointing_to_the_compat_page():
    @tilelang.jit(target="cpu")
    def tile_param(M):
        @T.prim_func
        def main(A: T.Tensor((M,), "float32"), F: T.FragmentBuffer((M,), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                for i in T.Parallel(M):
                    A[i] = F[i]

        return main

    with pytest.raises(Exception, match=r"T.FragmentBuffer is not supported .* docs/compat.md"):
        tile_param(8)


@tilelang.jit(out_idx=[2], target="cpu")
def macro_with_tile_annotations(M, N, block_M=16):
    # TileLang's examples annotate a macro's parameters with T.Tensor / T.SharedBuffer / T.FragmentBuffer / T.int32
    @T.macro
    def stage_rows(X: T.Tensor((M, N), "float32"), X_s: T.SharedBuffer([block_M, N], "float32"),
                   acc: T.FragmentBuffer([block_M, N], "float32"), bx: T.int32):
        T.copy(X[bx * block_M:(bx + 1) * block_M, :], X_s)
        T.copy(X_s, acc)

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            X_s = T.alloc_shared([block_M, N], "float32")
            acc = T.alloc_fragment([block_M, N], "float32")
            r = T.alloc_fragment([block_M], "float32")
            stage_rows(X, X_s, acc, bx)
            T.reduce_sum(acc, r, dim=1)
            for i in T.Parallel(block_M):
                Y[bx * block_M + i] = r[i] * S[bx * block_M + i]

    return main


def test_macro_parameters_annotated_as_tiles_take_the_callers_tiles():
    assert repr(T.SharedBuffer([16, 8], "float16")) == "T.SharedBuffer([16, 8], 'float16')"
    x, s = torch.randn(48, 24), torch.randn(48)
    torch.testing.assert_close(macro_with_tile_annotations(48, 24)(x, s), x.sum(1) * s, rtol=1e-5, atol=1e-5)


def test_pointer_annotations_are_refused_pointing_to_the_compat_page():
    with pytest.raises(NotImplementedError, match=r"T.Tensor.from_ptr is not supported .* docs/compat.md"):
        T.Tensor.from_ptr(None, (4,), "float32")

    @tilelang.jit(target="cpu")
    def with_handle(M):
        @T.prim_func
        def main(A: T.Tensor((M,), "float32"), p: T.handle):
            with T.Kernel(1, threads=32) as _bx:
                for i in T.Parallel(M):
                    A[i] = 1.0

        return main

    with pytest.raises(TileLangCompileError, match=r"kernel parameter p: expected a tensor .* or a scalar"):
        with_handle(8)


def test_profiler_with_scalars_and_symbolic_sizes():
    x = torch.randn(50)
    err = scale_shift(50).get_profiler().max_error(lambda x, alpha, n: x * alpha + n)  # scalars drawn as numbers
    assert err["max_abs"] < 1e-5
    prof = rows_plus_bias(16).get_profiler()
    with pytest.raises(ValueError, match=r"input 'X' has the symbolic size m, so the profiler cannot draw its inputs"):
        prof.max_error(lambda x, b: x + b)
    x, b = torch.randn(9, 16), torch.randn(16)
    assert prof.max_error(lambda x, b: x + b, inputs=[x, b])["max_abs"] < 1e-6


@tilelang.jit(out_idx=[-1], target="cpu")
def prefix_count(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), n: T.Tensor((1,), "int32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            cnt = T.alloc_var("int32")
            acc = T.alloc_var("float32")
            cnt = n[0]
            acc = 0.0
            for i in T.serial(cnt):  # a T.alloc_var as a loop bound
                if acc < 100.0:
                    acc += A[i]
            B[0] = acc

    return main


def test_alloc_var_as_a_loop_bound_and_in_a_condition():
    a = torch.rand(32)
    out = prefix_count(32)(a, torch.tensor([11], dtype=torch.int32))
    torch.testing.assert_close(out, a[:11].sum().reshape(1), rtol=1e-5, atol=1e-5)

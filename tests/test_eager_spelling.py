"""TileLang's eager spelling: the ``@jit`` function's body is the kernel (``T.const``, ``T.empty``, annotated
parameters), beside the classic spelling (a factory returning a ``@T.prim_func``). See tilelang_core/jit/eager.py."""

from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit.eager import EagerJITFactory

THIS_FILE = str(Path(__file__).resolve())


def marker_line(tag: str) -> int:
    """1-based line number of the single line of this file that carries the comment ``# DIAG:<tag>``."""
    hits = [n for n, text in enumerate(Path(THIS_FILE).read_text().splitlines(), start=1) if f"# DIAG:{tag}" in text]
    assert len(hits) == 1, f"marker {tag!r} found on lines {hits}"
    return hits[0]


@tilelang.jit
def matmul_eager(A, B, block_M, block_N, block_K, dtype="float32", accum_dtype="float32"):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), dtype)
        B_s = T.alloc_shared((block_K, block_N), dtype)
        C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * block_M, bx * block_N])
    return C


@tilelang.jit(out_idx=[-1])
def matmul_classic(M, N, K, block_M, block_N, block_K, dtype="float32", accum_dtype="float32"):
    @T.prim_func
    def matmul_eager(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return matmul_eager


ROWS, COLS = 48, 40


@tilelang.jit
def scale_into(X: T.Tensor((ROWS, COLS), "float32"), Y: T.Tensor((ROWS, COLS), "float32"), factor=2.0, block=16):
    with T.Kernel(T.ceildiv(ROWS, block)) as bx:
        for i, j in T.Parallel(block, COLS):
            Y[bx * block + i, j] = X[bx * block + i, j] * factor


@tilelang.jit
def scaled(X, block: int = 16, factor: float = 2.0, dtype: str = "float32"):
    N = T.const("N")
    X: T.Tensor((N,), dtype)
    Y = T.empty((N,), dtype)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] * factor
    return Y


@tilelang.jit
def twice_and_plus_one(X, block=32):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Twice = T.empty((N,), "float32")
    PlusOne = T.empty(N, dtype="float32")
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Twice[bx * block + i] = X[bx * block + i] * 2
            PlusOne[bx * block + i] = X[bx * block + i] + 1
    return PlusOne, Twice


@tilelang.jit
def doubled_by_a_macro(X, block=16):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    factor = 2.0 if N > 32 else 3.0  # a host value computed from a size, after the declarations

    @T.macro
    def scale_block(bx):  # closes over the parameters X and Y
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] * factor

    with T.Kernel(T.ceildiv(N, block)) as bx:
        scale_block(bx)
    return Y


@tilelang.jit
def iota(block=16):
    N = T.const("N")
    Y = T.empty((N,), "int32")
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = bx * block + i
    return Y


def _helper_program(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1) as bx:
            for i in T.Parallel(n):
                B[i] = A[i] + bx
    return main


@tilelang.jit(out_idx=[-1])
def classic_from_helper(n):
    return _helper_program(n)


# -- behaviour ------------------------------------------------------------------------------------------------------

def test_eager_gemm_runs_on_the_call_and_returns_its_t_empty_output():
    a, b = torch.randn(96, 64), torch.randn(64, 80)
    c = matmul_eager(a, b, 32, 32, 32)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    assert isinstance(matmul_eager, EagerJITFactory)


def test_eager_program_is_the_classic_program_for_the_same_sizes():
    eager = matmul_eager.get_program(torch.empty(96, 64), torch.empty(64, 80), 32, 32, 32)
    classic = matmul_classic.get_program(96, 80, 64, 32, 32, 32)
    assert eager.script() == classic.script()


def test_sizes_come_from_the_tensors_one_compile_per_shape_and_compile_takes_them_as_keywords():
    shapes = [(64, 32, 48), (32, 32, 32), (64, 32, 48)]
    kernels = []
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.testing.assert_close(matmul_eager(a, b, 32, 16, 16), a @ b, rtol=1e-4, atol=1e-4)
        kernels.append(matmul_eager.compile(a, b, 32, 16, 16))
    assert kernels[0] is kernels[2] and kernels[0] is not kernels[1]
    by_keywords = matmul_eager.compile(M=64, N=48, K=32, block_M=32, block_N=16, block_K=16)
    assert by_keywords is kernels[0]
    assert [p.shape for p in by_keywords.params] == [(64, 32), (32, 48), (64, 48)]
    assert by_keywords.out_idx == [2]


def test_signature_annotations_make_runtime_parameters_and_no_output_returns_none():
    x = torch.randn(ROWS, COLS)
    y = torch.full((ROWS, COLS), float("nan"))
    assert scale_into(x, y, factor=3.0) is None
    torch.testing.assert_close(y, x * 3.0)


def test_parameters_annotated_with_python_types_are_compile_time_arguments():
    x = torch.randn(50)
    torch.testing.assert_close(scaled(x, 8, 0.5), x * 0.5)
    kernel = scaled.compile(x, block=8, factor=0.5)
    assert [p.name for p in kernel.params] == ["X", "Y"] and kernel.config["factor"] == 0.5


def test_par_compile_builds_each_config_and_the_call_then_finds_it():
    kernels = scaled.par_compile([dict(N=24, block=8), dict(N=40, block=8, factor=3.0), (torch.empty(10), 4)],
                                 num_workers=2)
    assert [k.params[0].shape for k in kernels] == [(24,), (40,), (10,)]
    x = torch.randn(40)
    assert scaled.compile(x, block=8, factor=3.0) is kernels[1]
    torch.testing.assert_close(kernels[1](x), x * 3.0)
    assert scaled.par_compile([dict(block=8)], ignore_error=True) == [None]  # N neither given nor readable


def test_several_outputs_come_back_in_the_order_of_the_return():
    x = torch.randn(100)
    plus_one, twice = twice_and_plus_one(x)
    torch.testing.assert_close(plus_one, x + 1)
    torch.testing.assert_close(twice, x * 2)
    assert twice_and_plus_one.compile(N=100).out_idx == [1, 2]


def test_host_values_and_macros_after_the_declarations_see_the_sizes_and_the_parameters():
    x = torch.randn(64)
    torch.testing.assert_close(doubled_by_a_macro(x), x * 2.0)
    x = torch.randn(32)
    torch.testing.assert_close(doubled_by_a_macro(x), x * 3.0)


@tilelang.jit
def scale_any_length(X, alpha, block=16):
    N = T.dynamic("N")
    X: T.Tensor[(N,), T.float32]
    alpha: T.float32
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * alpha
    return Y


def test_a_dynamic_size_gives_one_kernel_and_a_scalar_annotation_a_runtime_scalar():
    for n, alpha in ((40, 1.5), (100, -2.0), (7, 0.25)):
        x = torch.randn(n)
        torch.testing.assert_close(scale_any_length(x, alpha), x * alpha)
    kernel = scale_any_length.compile(block=16)
    assert [p.name for p in kernel.params] == ["X", "alpha", "Y"] and kernel.params[1].shape == ()
    assert "specialisation" in repr(scale_any_length) and len(scale_any_length._memory) == 1


def test_a_size_only_in_an_output_is_given_as_a_keyword():
    torch.testing.assert_close(iota(N=40), torch.arange(40, dtype=torch.int32))


def test_classic_factories_stay_classic_also_when_the_program_comes_from_a_helper():
    assert not isinstance(matmul_classic, EagerJITFactory)
    assert not isinstance(classic_from_helper, EagerJITFactory)
    a = torch.randn(8)
    torch.testing.assert_close(classic_from_helper(8)(a), a)


# -- bad calls ------------------------------------------------------------------------------------------------------

def test_call_without_the_tensors_says_to_use_compile():
    with pytest.raises(TypeError, match=r"missing tensor argument\(s\) 'A', 'B'.*matmul_eager.compile"):
        matmul_eager(block_M=32, block_N=32, block_K=32, M=64, N=64, K=64)


def test_wrong_rank_names_the_argument():
    with pytest.raises(ValueError, match=r"argument 'A': expected a 2-D tensor, got shape \(64,\)"):
        matmul_eager(torch.randn(64), torch.randn(64, 64), 32, 32, 32)


def test_unknown_keyword_is_refused_naming_the_sizes():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'Q'.*\['K', 'M', 'N'\]"):
        matmul_eager.compile(Q=3, block_M=32, block_N=32, block_K=32)


def test_out_idx_with_the_eager_spelling_is_refused():
    with pytest.raises(ValueError, match="out_idx is not used by an eager @jit function.*T.empty"):
        tilelang.jit(out_idx=[-1])(matmul_eager.factory)


# -- diagnostics at the user's line ---------------------------------------------------------------------------------

def bad_tile_shapes(A, dtype="float32"):
    M, K = T.const("M, K")
    A: T.Tensor((M, K), dtype)
    C = T.empty((M, M), dtype)
    with T.Kernel(1) as bx:
        A_s = T.alloc_shared((32, 16), dtype)
        B_s = T.alloc_shared((8, 32), dtype)
        C_f = T.alloc_fragment((32, 32), dtype)
        T.copy(A[bx, 0], A_s)
        T.copy(A[0, 0], B_s)
        T.gemm(A_s, B_s, C_f)  # DIAG:eager-gemm
        T.copy(C_f, C[0, 0])
    return C


def undefined_name(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    with T.Kernel(1) as bx:
        A[bx] = not_defined_anywhere + 1  # DIAG:eager-undefined  # noqa: F821


def bad_dtype(A):
    N = T.const("N")
    A: T.Tensor((N,), "float33")  # DIAG:eager-dtype
    with T.Kernel(1) as bx:
        A[bx] = 1.0


def const_in_expression_only(A):
    N = T.const("N")  # DIAG:eager-const
    A: T.Tensor((N * 2,), "float32")
    with T.Kernel(1) as bx:
        A[bx] = 1.0


def declaration_after_the_kernel(A):
    N = T.const("N")
    with T.Kernel(1) as bx:  # DIAG:eager-late
        A[bx] = 1.0
    A: T.Tensor((N,), "float32")


def returns_a_non_output(A):  # DIAG:eager-return
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    with T.Kernel(1) as bx:
        A[bx] = 1.0
    return A


@pytest.mark.parametrize("program,marker,fragment", [
    (bad_tile_shapes, "eager-gemm", "T.gemm: incompatible tile shapes"),
    (undefined_name, "eager-undefined", "not_defined_anywhere"),
    (bad_dtype, "eager-dtype", "unknown dtype 'float33'"),
    (const_in_expression_only, "eager-const", "T.const 'N' is not, by itself, a dimension"),
])
def test_errors_in_an_eager_program_are_reported_at_the_users_line(program, marker, fragment):
    f = tilelang.jit(target="cpu")(program)
    with pytest.raises(TileLangCompileError) as info:
        f(torch.randn(32, 16) if program is bad_tile_shapes else torch.randn(8))
    err = info.value
    assert fragment in str(err)
    assert err.location is not None and err.location.file == THIS_FILE
    assert err.location.line == marker_line(marker)


def annotation_in_a_branch(A, wide=False):
    N = T.const("N")
    if wide:
        A: T.Tensor((N, 2), "float32")  # DIAG:eager-branch
    else:
        A: T.Tensor((N,), "float32")
    with T.Kernel(1) as bx:
        A[bx] = 1.0


def empty_in_a_macro(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")

    @T.macro
    def make():
        return T.empty((N,), "float32")  # DIAG:eager-macro-empty

    with T.Kernel(1) as bx:
        A[bx] = 1.0


def star_args(A, *rest):  # DIAG:eager-star
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    with T.Kernel(1) as bx:
        A[bx] = 1.0


@pytest.mark.parametrize("program,marker,fragment", [
    (star_args, "eager-star", "cannot take *args or **kwargs"),
    (annotation_in_a_branch, "eager-branch", "with a statement of its own at the top of the body"),
    (empty_in_a_macro, "eager-macro-empty", "T.empty declares an output of the kernel"),
    (declaration_after_the_kernel, "eager-late", "declare every parameter, size and output first"),
    (returns_a_non_output, "eager-return", "`return A` names no T.empty output"),
])
def test_misplaced_declarations_and_returns_fail_at_the_decorator_at_the_users_line(program, marker, fragment):
    with pytest.raises(TileLangCompileError) as info:
        tilelang.jit(program)
    assert fragment in str(info.value)
    assert info.value.location.line == marker_line(marker)


def test_t_const_outside_an_eager_function_says_where_it_belongs():
    with pytest.raises(TypeError, match="T.const.*only meaningful in the body of an eager @tilelang.jit"):
        T.const("M")


# -- CUDA (code generated and compiled with nvcc; no GPU needed) ----------------------------------------------------

@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA toolkit")
def test_eager_gemm_compiles_for_cuda_to_the_classic_kernel():
    on_cuda = tilelang.jit(target="cuda")(matmul_eager.factory)
    kernel = on_cuda.compile(M=128, N=128, K=64, block_M=64, block_N=64, block_K=32, dtype="float16")
    assert kernel.target["kind"] == "cuda"
    meta = kernel.artifact.extra["cuda"]
    assert (kernel.artifact.path / meta["cubin"]).stat().st_size > 0
    classic = tilelang.jit(out_idx=[-1], target="cuda")(matmul_classic.factory)(128, 128, 64, 64, 64, 32,
                                                                                  dtype="float16")
    assert kernel.get_kernel_source() == classic.get_kernel_source()
    assert "mma" in kernel.get_kernel_source()


# -- the tools around a kernel --------------------------------------------------------------------------------------

def test_trace_of_an_eager_function_compiles_it_by_sizes():
    trace = tilelang.trace(matmul_eager, M=64, N=64, K=32, block_M=32, block_N=32, block_K=32)
    assert trace.stages[0].origin == "input" and "tl.gemm" in trace.stages[0].text
    assert "tl.gemm" not in trace.stages[-1].text  # lowered: the code generator sees no tile op


def test_trace_command_line_builds_an_eager_function_from_keywords():
    from tilelang_core.trace.cli import build_kernel

    kernel = build_kernel(matmul_eager, dict(M=64, N=32, K=32, block_M=32, block_N=32, block_K=32), "cpu", None)
    assert [p.shape for p in kernel.params] == [(64, 32), (32, 32), (64, 32)]


@tilelang.jit
def gemm_wrong_tiles(A, B):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), "float32")
    B: T.Tensor((K, N), "float32")
    C = T.empty((M, N), "float32")
    with T.Kernel(1) as bx:
        A_s = T.alloc_shared((32, 16), "float32")
        B_s = T.alloc_shared((8, 32), "float32")
        C_f = T.alloc_fragment((32, 32), "float32")
        T.copy(A[bx, 0], A_s)
        T.copy(B[0, 0], B_s)
        T.gemm(A_s, B_s, C_f)  # DIAG:eager-repro
        T.copy(C_f, C[0, 0])
    return C


def test_a_failed_eager_compile_saves_a_reproducer_that_fails_the_same_way(tmp_path):
    import subprocess
    import sys

    with pytest.raises(TileLangCompileError) as info:
        gemm_wrong_tiles(torch.randn(32, 16), torch.randn(16, 32))
    assert info.value.location.line == marker_line("eager-repro")
    script = tmp_path / "repro.py"
    info.value.save_repro(script)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "TILELANG_CORE_CACHE_DIR": str(tmp_path / "cache")})
    assert "T.gemm: incompatible tile shapes" in proc.stdout + proc.stderr


def with_body_options(X, decorator_wins=False):
    N = T.const("N")
    T.annotate_pass_configs({"tl.disable_vectorize_256": True, "tl.cuda.wgmma": False})
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(1) as bx:
        for i in T.Parallel(N):
            Y[i] = X[i] + bx
    return Y


def with_body_flags(X):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    T.annotate_compile_flags("-lineinfo")  # DIAG:eager-flags
    with T.Kernel(1) as bx:
        for i in T.Parallel(N):
            Y[i] = X[i] + bx
    return Y


def bad_body_option(X):
    N = T.const("N")
    T.annotate_pass_configs({"tl.no_such_option": 1})  # DIAG:eager-option
    X: T.Tensor((N,), "float32")
    with T.Kernel(1) as bx:
        X[bx] = 0.0


def test_pass_configs_from_the_body_yield_to_the_decorators():
    x = torch.randn(16)
    plain = tilelang.jit(target="cpu")(with_body_options)
    torch.testing.assert_close(plain(x), x)
    kernel = plain.compile(x)
    assert kernel.pass_configs.explicit() == {"tl.disable_vectorize_256": True, "tl.cuda.wgmma": False}
    over = tilelang.jit(target="cpu", pass_configs={"tl.cuda.wgmma": True})(with_body_options).compile(x)
    assert over.pass_configs.as_dict()["tl.cuda.wgmma"] is True
    assert over.pass_configs.as_dict()["tl.disable_vectorize_256"] is True


def test_a_bad_pass_config_in_the_body_is_reported_at_its_line():
    with pytest.raises(TileLangCompileError) as info:
        tilelang.jit(target="cpu")(bad_body_option)(torch.randn(4))
    assert "tl.no_such_option" in str(info.value) and info.value.location.line == marker_line("eager-option")


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA toolkit")
def test_compile_flags_from_the_body_reach_nvcc():
    kernel = tilelang.jit(target="cuda")(with_body_flags).compile(N=64)
    assert "-lineinfo" in kernel.artifact.extra["cuda"]["nvcc_command"]


def test_compile_flags_from_the_body_on_the_cpu_are_refused_at_their_line():
    with pytest.raises(TileLangCompileError) as info:
        tilelang.jit(target="cpu")(with_body_flags)(torch.randn(4))
    assert "nvcc/NVRTC flags" in str(info.value) and info.value.location.line == marker_line("eager-flags")


def test_a_factory_without_readable_source_stays_classic():
    namespace: dict = {}
    exec("def made_at_runtime(n):\n    return None\n", namespace)  # noqa: S102 (no source file to read)
    f = tilelang.jit(namespace["made_at_runtime"])
    assert not isinstance(f, EagerJITFactory)

"""Invalid kernel programs raise TileLangCompileError naming the problem and the user's file and line.

(No ``from __future__ import annotations`` here; test_diagnostics_future_annotations.py covers that mode.)
"""

import os
from pathlib import Path

import pytest

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError

THIS_FILE = Path(__file__).resolve()


def marker_line(tag: str) -> int:
    """1-based line number of the single line of this file that carries the comment ``# DIAG:<tag>``."""
    hits = [n for n, text in enumerate(THIS_FILE.read_text().splitlines(), start=1)
            if text.rstrip().endswith(f"# DIAG:{tag}")]
    assert len(hits) == 1, f"marker {tag!r} found on lines {hits}"
    return hits[0]


@tilelang.jit(out_idx=[-1])
def copy_extent_mismatch(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            S = T.alloc_shared((32, 32), "float32")
            T.copy(A[0:16, 0:16], S)  # DIAG:copy-extent
            T.copy(S, B[bx * 32, 0])

    return main


@tilelang.jit(out_idx=[-1])
def copy_transposed_tile(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            S = T.alloc_shared((32, 16), "float32")
            F = T.alloc_fragment((16, 32), "float32")
            T.copy(A[bx * 32, 0], S)
            T.copy(S, F)  # DIAG:copy-transposed
            T.copy(F, B[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def copy_both_start_index(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            T.copy(A[bx, 0], B[0, 0])  # DIAG:copy-both-start

    return main


@tilelang.jit(out_idx=[-1])
def gemm_incompatible(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            A_s = T.alloc_shared((32, 16), "float32")
            B_s = T.alloc_shared((8, 32), "float32")
            C_f = T.alloc_fragment((32, 32), "float32")
            T.copy(A[bx * 32, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f)  # DIAG:gemm-shapes
            T.copy(C_f, C[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_wrong_output_tile(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            A_s = T.alloc_shared((32, 16), "float32")
            B_s = T.alloc_shared((16, 32), "float32")
            C_f = T.alloc_fragment((16, 32), "float32")
            T.copy(A[bx * 32, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f, transpose_A=False)  # DIAG:gemm-c-shape
            T.copy(C_f, C[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_fragment_b(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            A_s = T.alloc_shared((32, 16), "float32")
            B_f = T.alloc_fragment((16, 32), "float32")
            C_f = T.alloc_fragment((32, 32), "float32")
            T.copy(A[bx * 32, 0], A_s)
            T.copy(B[0, 0], B_f)
            T.gemm(A_s, B_f, C_f)  # DIAG:gemm-fragment-b
            T.copy(C_f, C[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_shared_accumulator(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            A_s = T.alloc_shared((32, 16), "float32")
            B_s = T.alloc_shared((16, 32), "float32")
            C_s = T.alloc_shared((32, 32), "float32")
            T.copy(A[bx * 32, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_s)  # DIAG:gemm-shared-acc
            T.copy(C_s, C[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_global_operand(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            B_s = T.alloc_shared((K, N), "float32")
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(B[bx, 0], B_s)
            T.gemm(A, B_s, C_f)  # DIAG:gemm-global-a
            T.copy(C_f, C[0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def reduce_on_global(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            r = T.alloc_fragment((M,), "float32")
            T.reduce_sum(A, r, dim=1)  # DIAG:reduce-global
            T.copy(r, O[bx])

    return main


@tilelang.jit(out_idx=[-1])
def reduce_wrong_dst(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((N,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_max(x, r, dim=1)  # DIAG:reduce-dst
            T.copy(r, O[0])

    return main


@tilelang.jit(out_idx=[-1])
def reduce_bad_dim(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_sum(x, r, dim=2)  # DIAG:reduce-dim
            T.copy(r, O[0])

    return main


@tilelang.jit(out_idx=[-1])
def tensor_bad_dtype(N):
    @T.prim_func
    def main(
        A: T.Tensor((N,), "float33"),  # DIAG:tensor-dtype
        B: T.Tensor((N,), "float32"),
    ):
        with T.Kernel(1) as bx:
            for i in T.Parallel(N):
                B[bx * N + i] = A[i]

    return main


@tilelang.jit(out_idx=[-1])
def shared_bad_dtype(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1) as bx:
            S = T.alloc_shared((N,), "float33")  # DIAG:shared-dtype
            T.copy(A[bx * N], S)
            T.copy(S, B[0])

    return main


@tilelang.jit(out_idx=[-1])
def fragment_bad_dtype(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1) as bx:
            F = T.alloc_fragment((N,), "int33")  # DIAG:fragment-dtype
            T.copy(A[bx * N], F)
            T.copy(F, B[0])

    return main


@tilelang.jit(out_idx=[-1])
def nonpositive_grid(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(0) as bx:  # DIAG:grid-zero
            for i in T.Parallel(N):
                B[bx * N + i] = A[i]

    return main


CASES = [
    # (factory, args, marker, expected message fragments, stage)
    (copy_extent_mismatch, (64, 64), "copy-extent", ["T.copy", "extents differ", "[16, 16]", "[32, 32]"],
     "tl.ValidateTileOps"),
    (copy_transposed_tile, (64, 64), "copy-transposed", ["T.copy", "extents differ", "[32, 16]", "[16, 32]"],
     "tl.ValidateTileOps"),
    (gemm_incompatible, (64, 64, 64), "gemm-shapes", ["T.gemm", "incompatible tile shapes", "A_s", "B_s"],
     "tl.ValidateTileOps"),
    (gemm_wrong_output_tile, (64, 64, 64), "gemm-c-shape", ["T.gemm", "incompatible tile shapes", "C_f"],
     "tl.ValidateTileOps"),
    (gemm_fragment_b, (64, 64, 64), "gemm-fragment-b", ["T.gemm", "B_f", "fragment", "shared"],
     "tl.ValidateTileOps"),
    (gemm_shared_accumulator, (64, 64, 64), "gemm-shared-acc", ["T.gemm", "accumulator", "C_s", "fragment"],
     "tl.ValidateTileOps"),
    (gemm_global_operand, (32, 32, 16), "gemm-global-a", ["T.gemm", "operand A", "global"], "tl.ValidateTileOps"),
    (reduce_on_global, (32, 16), "reduce-global", ["reduce_sum", "global"], "tl.ValidateTileOps"),
    (reduce_wrong_dst, (32, 16), "reduce-dst", ["reduce_max", "dst r", "[16]", "[32]"], "tl.ValidateTileOps"),
]


@pytest.mark.parametrize("factory,args,marker,fragments,stage", CASES, ids=[c[2] for c in CASES])
def test_invalid_tile_op_raises_compile_error_at_the_offending_line(factory, args, marker, fragments, stage):
    with pytest.raises(TileLangCompileError) as info:
        factory(*args)
    err = info.value
    for fragment in fragments:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    assert err.stage == stage
    assert err.location is not None
    assert Path(err.location.file).resolve() == THIS_FILE
    assert err.location.line == marker_line(marker)
    rendered = str(err)
    assert f"{err.location.file}:{err.location.line}:" in rendered
    assert f"# DIAG:{marker}" in rendered  # the offending source line is quoted


PARSE_CASES = [
    (tensor_bad_dtype, (64,), "tensor-dtype", ["float33"]),
    (shared_bad_dtype, (64,), "shared-dtype", ["float33"]),
    (fragment_bad_dtype, (64,), "fragment-dtype", ["int33"]),
    (reduce_bad_dim, (32, 16), "reduce-dim", ["dim"]),
    (copy_both_start_index, (32, 16), "copy-both-start", ["T.copy", "start-index"]),
    (nonpositive_grid, (64,), "grid-zero", ["T.Kernel", "positive"]),
]


@pytest.mark.parametrize("factory,args,marker,fragments", PARSE_CASES, ids=[c[2] for c in PARSE_CASES])
def test_invalid_program_text_raises_compile_error_at_the_offending_line(factory, args, marker, fragments):
    with pytest.raises(TileLangCompileError) as info:
        factory(*args)
    err = info.value
    for fragment in fragments:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    assert err.stage == "parse"
    assert err.location is not None
    assert Path(err.location.file).resolve() == THIS_FILE
    assert err.location.line == marker_line(marker)
    assert f"{err.location.file}:{err.location.line}:" in str(err)


def test_unknown_dtype_message_lists_the_supported_dtypes():
    with pytest.raises(TileLangCompileError) as info:
        tensor_bad_dtype(64)
    for dt in ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"):
        assert dt in info.value.message


def test_get_program_reports_parse_errors_the_same_way():
    with pytest.raises(TileLangCompileError) as info:
        shared_bad_dtype.get_program(64)
    assert info.value.location.line == marker_line("shared-dtype")


def test_invalid_program_leaves_no_cache_entry_and_counts_no_compile(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(cache))
    before = tilelang.cache_stats()
    with pytest.raises(TileLangCompileError):
        tilelang.jit(out_idx=[-1])(copy_extent_mismatch.__wrapped__)(64, 64)
    after = tilelang.cache_stats()
    assert after["compiles"] == before["compiles"]
    kernels = cache / "kernels"
    leftovers = os.listdir(kernels) if kernels.exists() else []
    assert leftovers == []


def test_fixing_the_error_compiles_after_a_failure():
    with pytest.raises(TileLangCompileError):
        copy_extent_mismatch(64, 64)
    with pytest.raises(TileLangCompileError):
        copy_extent_mismatch(64, 64)  # failures are not cached as kernels


def test_compile_error_is_a_tilelang_error():
    with pytest.raises(tilelang.TileLangError):
        gemm_fragment_b(64, 64, 64)

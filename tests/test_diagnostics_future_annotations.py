"""Kernels in a module using ``from __future__ import annotations`` (annotations kept as strings, PEP 563).

The parameter annotations ``T.Tensor(shape, dtype)`` must behave exactly as without the future import: valid
programs compile, and a bad dtype is reported with its name at the line that wrote it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError

THIS_FILE = Path(__file__).resolve()


def marker_line(tag: str) -> int:
    hits = [n for n, text in enumerate(THIS_FILE.read_text().splitlines(), start=1)
            if text.rstrip().endswith(f"# DIAG:{tag}")]
    assert len(hits) == 1, f"marker {tag!r} found on lines {hits}"
    return hits[0]


@tilelang.jit(out_idx=[-1])
def scaled_copy(N, block_N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:  # DIAG:ceildiv
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] * 2.0

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
def tensor_bad_dtype_one_line(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "bfloat8")):  # DIAG:tensor-dtype-one-line
        with T.Kernel(1) as bx:
            for i in T.Parallel(N):
                B[bx * N + i] = A[i]

    return main


def test_valid_kernel_compiles_and_matches_torch_under_postponed_annotations():
    kernel = scaled_copy(300, 64)
    x = torch.randn(300)
    torch.testing.assert_close(kernel(x), 2.0 * x, rtol=0, atol=0)


@pytest.mark.parametrize("factory,marker,dtype", [
    (tensor_bad_dtype, "tensor-dtype", "float33"),
    (tensor_bad_dtype_one_line, "tensor-dtype-one-line", "bfloat8"),
])
def test_unknown_tensor_dtype_is_named_at_its_line_under_postponed_annotations(factory, marker, dtype):
    with pytest.raises(TileLangCompileError) as info:
        factory(64)
    err = info.value
    assert f"unknown dtype '{dtype}'" in err.message, err.message
    assert err.location is not None
    assert Path(err.location.file).resolve() == THIS_FILE
    assert err.location.line == marker_line(marker)


# -- sizes that are not integers (factory arguments) ------------------------------------------------------------


def check_none_block_size_reaching_ceildiv_is_reported() -> None:
    with pytest.raises(TileLangCompileError) as info:
        scaled_copy(300, None)  # used to segfault inside TVM
    err = info.value
    assert "T.ceildiv" in err.message and "got None" in err.message and "block_N" in err.message, err.message
    assert err.location is not None and err.location.line == marker_line("ceildiv")


def test_none_size_reaching_ceildiv_is_a_clear_error_naming_it_not_a_crash(run_isolated):
    run_isolated(check_none_block_size_reaching_ceildiv_is_reported)


@pytest.mark.parametrize("args,expected", [
    ((300, 32.0), "T.ceildiv: second operand: expected an integer, got 32.0 (float), the value of block_N"),
    ((None, 64), "T.Tensor shape: dimension 0: expected an integer, got None"),
    ((0, 64), "T.Tensor shape: dimension 0 must be positive, got 0"),
    ((300.0, 64), "T.Tensor shape: dimension 0: expected an integer, got 300.0"),
], ids=["float-block", "none-shape", "zero-shape", "float-shape"])
def test_non_integer_or_zero_sizes_get_our_message_not_a_tvm_check_failure(args, expected):
    with pytest.raises(TileLangCompileError) as info:
        scaled_copy(*args)
    err = info.value
    assert expected in err.message, err.message
    assert err.location is not None and Path(err.location.file).resolve() == THIS_FILE


def test_numpy_integer_sizes_behave_as_python_ints():
    import numpy as np

    kernel = scaled_copy(np.int64(300), np.int32(64))
    x = torch.randn(300)
    torch.testing.assert_close(kernel(x), 2.0 * x, rtol=0, atol=0)

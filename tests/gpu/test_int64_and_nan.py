"""On the GPU: a kernel writing the last rows of an int8 tensor past 2³¹ elements (64-bit offsets,
tl.PromoteIndexInt64), and element-wise max/min/ReLU skipping NaN wherever it sits (tl.NanSkippingMinMax), as
the CPU build does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_int64_indexing import BIG_ROWS, COLS, add_one_in_place, add_one_in_place_symbolic  # noqa: E402


@pytest.mark.parametrize("make", [lambda: add_one_in_place(BIG_ROWS, COLS, 64), lambda: add_one_in_place_symbolic(64)],
                         ids=["static", "symbolic"])
def test_cuda_kernel_writes_the_last_row_of_a_tensor_past_two_to_the_31_elements(make):
    free, _ = torch.cuda.mem_get_info()
    if free < 4 * 2**30:
        pytest.skip(f"needs 4 GB of free GPU memory, {free / 2**30:.1f} GB free")
    kernel = tilelang.compile(make(), target="cuda")
    g = torch.Generator().manual_seed(14)
    A = torch.randint(-128, 128, (BIG_ROWS, COLS), dtype=torch.int8, device="cuda")
    rows = [0, 1, 262143, 524223, BIG_ROWS - 2, BIG_ROWS - 1]
    A[rows] = torch.randint(-128, 128, (len(rows), COLS), dtype=torch.int8, generator=g).cuda()
    before = A[rows].clone()
    try:
        kernel(A)
        torch.cuda.synchronize()
        torch.testing.assert_close(A[rows], before + 3, rtol=0, atol=0)
    finally:
        del A
        torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_elementwise_max_min_and_relu_skip_nan_in_either_operand(dtype):
    from test_nan_minmax import DTYPES, _expected, _inputs, minmax_both_orders

    M, N = 48, 40
    A, B = _inputs(M, N, DTYPES[dtype])
    kernel = tilelang.jit(out_idx=[-1], target="cuda")(minmax_both_orders.factory)(M, N, dtype)
    out = kernel(A.cuda(), B.cuda()).cpu()
    torch.testing.assert_close(out, _expected(A, B), rtol=0, atol=0, equal_nan=True)
    assert not out[4].isnan().any()  # ReLU(NaN) = 0

"""Element-wise add, eager spelling, twice: TileLang's examples/elementwise/example_elementwise_add.py (dtypes
as call arguments, a shared staging tile), and one with subscript annotations on the function's own parameters
under postponed annotations (``from __future__ import annotations``)."""

from __future__ import annotations

import tilelang
import tilelang.language as T
import torch

ROWS, COLS = 64, 96


@tilelang.jit
def elementwise_add(A, B, block_M, block_N, in_dtype, out_dtype, threads):
    M, N = T.const("M, N")

    A: T.Tensor((M, N), in_dtype)
    B: T.Tensor((M, N), in_dtype)
    C = T.empty((M, N), out_dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_N), in_dtype)
        B_shared = T.alloc_shared((block_M, block_N), in_dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        C_shared = T.alloc_shared((block_M, block_N), out_dtype)

        T.copy(A[by * block_M, bx * block_N], A_shared)
        T.copy(B[by * block_M, bx * block_N], B_shared)
        for local_y, local_x in T.Parallel(block_M, block_N):
            C_local[local_y, local_x] = A_shared[local_y, local_x] + B_shared[local_y, local_x]
        T.copy(C_local, C_shared)
        T.copy(C_shared, C[by * block_M, bx * block_N])

    return C


@tilelang.jit
def axpy(X: T.Tensor[(ROWS, COLS), T.float32], Y: T.Tensor[(ROWS, COLS), T.float32], alpha: float = 2.0):
    Out = T.empty((ROWS, COLS), T.float32)
    with T.Kernel(T.ceildiv(ROWS, 16), threads=128) as bx:
        for i, j in T.Parallel(16, COLS):
            Out[bx * 16 + i, j] = alpha * X[bx * 16 + i, j] + Y[bx * 16 + i, j]
    return Out


def run(device):
    a = torch.randn(100, 72, device=device)  # ragged in both dimensions
    b = torch.randn(100, 72, device=device)
    out = elementwise_add(a, b, block_M=32, block_N=32, threads=128, in_dtype=T.float32, out_dtype=T.float32)
    torch.testing.assert_close(out, a + b, rtol=1e-6, atol=1e-6)

    x, y = torch.randn(ROWS, COLS, device=device), torch.randn(ROWS, COLS, device=device)
    torch.testing.assert_close(axpy(x, y, alpha=-0.5), -0.5 * x + y, rtol=1e-6, atol=1e-6)

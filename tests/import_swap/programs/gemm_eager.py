"""GEMM, eager spelling (TileLang's examples/gemm/example_gemm.py): the ``@tilelang.jit`` body is the kernel;
sizes come from the tensors (``T.const``), the output from ``T.empty``; ``.compile(M=..., ...)`` too."""

import tilelang
import tilelang.language as T
import torch


@tilelang.jit
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


@tilelang.jit
def gemm_into(A, B, C, dtype: T.dtype = T.float16, accum_dtype: T.dtype = T.float32, block_M: int = 64,
              block_N: int = 64, block_K: int = 32):
    # TileLang's test_jit2_gemm: subscript annotations, the output passed in, options hinted with Python types
    M, N, K = T.const("M N K")

    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[K, N], dtype]
    C: T.Tensor[[M, N], dtype]

    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (by, bx):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.copy(C_local, C[by * block_M, bx * block_N])


def run(device):
    a = torch.randn(192, 128, device=device).half()
    b = torch.randn(128, 160, device=device).half()
    c = matmul(a, b, block_M=64, block_N=64, block_K=32)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)

    kernel = matmul.compile(M=192, N=160, K=128, block_M=64, block_N=64, block_K=32)
    torch.testing.assert_close(kernel(a, b), c, rtol=0, atol=0)
    assert "void" in kernel.get_kernel_source() or "define" in kernel.get_kernel_source()

    out = torch.full((192, 160), float("nan"), device=device, dtype=torch.float16)
    assert gemm_into(a, b, out) is None
    torch.testing.assert_close(out, c, rtol=1e-2, atol=1e-2)

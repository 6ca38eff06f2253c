"""A Triton matmul (+ optional ReLU), tutorial-style, as the second reference of ``bench/gpu/run.py``.

Why this module exists: the issue measures our tensor-core GEMM against cuBLAS *and* Triton in the same run. This
is Triton's own tutorial kernel (grouped block order for L2 reuse, fp32 accumulation) autotuned over a handful
of configurations, the way the anchors in ANCHORS.md were measured. Imported only on the GPU host.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


def _configs() -> list[Any]:
    out = []
    for bm, bn, bk, stages, warps in ((128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4),
                                      (128, 256, 32, 4, 8), (64, 256, 32, 4, 4), (64, 128, 64, 4, 4),
                                      (16, 64, 128, 4, 4), (32, 128, 64, 4, 4)):
        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=stages,
                                 num_warps=warps))
    return out


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   RELU: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if RELU:
        acc = tl.maximum(acc, 0.0)
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, relu: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = out if out is not None else torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                         c.stride(1), RELU=relu)
    return c

"""A Triton flash-attention forward (FlashAttention-2 style, as in Triton's fused-attention tutorial), the Triton
column of ``bench/gpu/run.py``'s attention rows.

Why this module exists: the issue measures our flash attention against torch SDPA *and* Triton in the same run.
This is the tutorial's algorithm written compactly — one program per (128 or 64 query rows, batch x head), an
online softmax in fp32 with ``exp2``, ``tl.dot`` on fp16 tiles — with plain pointer loads (no TMA / warp
specialisation) and causal masking on every tile instead of the tutorial's two-stage loop, so it is a fair
"straightforward Triton" reference, not Triton's best. Inputs are ``[batch, heads, seq, dim]``, contiguous.
Imported only on the GPU host.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


def _configs() -> list[Any]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in ((128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3))]


@triton.autotune(configs=_configs(), key=["N_CTX", "HEAD_DIM", "CAUSAL"])
@triton.jit
def _attn_fwd(Q, K, V, O, qk_scale, N_CTX, stride_bh, stride_s, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * stride_bh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * stride_s + offs_d[:, None], mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        keep = cols[None, :] < N_CTX
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + cols[:, None] * stride_s + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(tl.float16), mask=offs_m[:, None] < N_CTX)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v for contiguous fp16 ``[batch, heads, seq, dim]`` tensors."""
    B, H, S, D = q.shape
    o = out if out is not None else torch.empty_like(q)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(S, meta["BLOCK_M"]), B * H)

    _attn_fwd[grid](q, k, v, o, (1.0 / D) ** 0.5 * 1.4426950408889634, S, S * D, D, HEAD_DIM=D, CAUSAL=causal)
    return o

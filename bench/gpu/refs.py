"""torch references for the kernels of ``bench/gpu/kernels.py`` (runs on the GPU host: torch only, no TVM).

Each reference takes the kernel's input tensors (parameters that are not outputs, in signature order) and the
entry's ``ref_kw``, and returns the expected outputs in order. In-place kernels (no ``out_idx``) return the
expected final value of every parameter they modify, as a dict ``{parameter index: tensor}``. References compute
in float64 where the kernel's dtype allows, so they are the more accurate side of every comparison.
"""

from __future__ import annotations

from typing import Any

import torch


def _hi(x: torch.Tensor) -> torch.Tensor:
    # integers in float64: exact below 2^53, and CUDA has no integer matmul
    return x.double()


def matmul(A: torch.Tensor, B: torch.Tensor, trans_A: bool = False, trans_B: bool = False) -> list[Any]:
    a = _hi(A).T if trans_A else _hi(A)
    b = _hi(B).T if trans_B else _hi(B)
    return [a @ b]


def matmul_relu(A: torch.Tensor, B: torch.Tensor) -> list[Any]:
    return [torch.relu(_hi(A) @ _hi(B))]


def matmul_scaled_a(A: torch.Tensor, B: torch.Tensor, scale: float) -> list[Any]:
    return [(scale * _hi(A)) @ _hi(B)]


def bmm(A: torch.Tensor, B: torch.Tensor) -> list[Any]:
    return [torch.bmm(_hi(A), _hi(B))]


def add(A: torch.Tensor, B: torch.Tensor) -> list[Any]:
    return [A + B]


def add_bias(X: torch.Tensor, bias: torch.Tensor) -> list[Any]:
    return [X + bias]


def axpy(X: torch.Tensor, Y: torch.Tensor, alpha: float) -> list[Any]:
    return [alpha * _hi(X) + _hi(Y)]


def softmax(X: torch.Tensor) -> list[Any]:
    return [torch.softmax(_hi(X), dim=-1)]


def rmsnorm(X: torch.Tensor, W: torch.Tensor, eps: float = 1e-6) -> list[Any]:
    x = _hi(X)
    return [x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * _hi(W)]


def gemv(A: torch.Tensor, x: torch.Tensor) -> list[Any]:
    return [_hi(A) @ _hi(x)]


def cumsum(X: torch.Tensor) -> list[Any]:
    return [torch.cumsum(_hi(X), dim=1)]


def horner(X: torch.Tensor, C: torch.Tensor) -> list[Any]:
    x, c = _hi(X), _hi(C)
    return [c[0] + c[1] * x + c[2] * x**2 + c[3] * x**3]


def transpose(X: torch.Tensor) -> list[Any]:
    return [X.T.contiguous()]


def augmented(X: torch.Tensor, Y: torch.Tensor) -> list[Any]:
    return [(3 * _hi(X) - _hi(Y) + 0.5) / 2]


def silu(X: torch.Tensor) -> list[Any]:
    return [torch.nn.functional.silu(_hi(X))]


def accumulate_matmul(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> dict[int, Any]:
    return {2: _hi(C) + _hi(A) @ _hi(B)}


def histogram(X: torch.Tensor, H: torch.Tensor) -> dict[int, Any]:
    return {1: H.long() + torch.bincount(X.long(), minlength=H.numel())}


def math10(X: torch.Tensor) -> list[Any]:
    x = _hi(X)
    ax = x.abs()
    return [torch.exp(x - 2), torch.exp2(x - 2), torch.log(ax + 0.5), torch.log2(ax + 0.5), torch.sqrt(ax),
            torch.rsqrt(ax + 0.5), torch.tanh(x), torch.sigmoid(x), ax, x.clamp(-0.5, 0.5)]


def row_max(X: torch.Tensor) -> list[Any]:
    return [X.amax(dim=1)]


def tile_reduce(X: torch.Tensor, Init: torch.Tensor, block_M: int, block_N: int, kind: str, dim: int,
                clear: bool) -> list[Any]:
    def red(t: torch.Tensor) -> torch.Tensor:
        if kind == "sum":
            return t.sum(dim)
        if kind == "max":
            return t.amax(dim)
        if kind == "min":
            return t.amin(dim)
        if kind == "abssum":
            return t.abs().sum(dim)
        return t.abs().amax(dim)

    def comb(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if kind in ("sum", "abssum"):
            return a + b
        return torch.maximum(a, b) if kind in ("max", "absmax") else torch.minimum(a, b)

    x = _hi(X)
    out = _hi(Init).clone()
    M, N = x.shape
    for by in range(M // block_M):
        for bx in range(N // block_N):
            r = red(x[by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])
            if dim == 1:
                sl = (bx, slice(by * block_M, (by + 1) * block_M))
            else:
                sl = (by, slice(bx * block_N, (bx + 1) * block_N))
            out[sl] = r if clear else comb(out[sl], r)
    return [out]


def attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool = False) -> list[Any]:
    """softmax(Q K^T / sqrt(d)) V on ``[batch, seq, heads, dim]``, in float64 (float32 SDPA for the benchmark
    shapes, whose float64 score matrices would take tens of GB: still far more accurate than fp16)."""
    B, S, H, D = Q.shape
    if B * H * S * S > 1 << 27:
        q, k, v = (t.float().transpose(1, 2) for t in (Q, K, V))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        return [o.transpose(1, 2).contiguous()]
    q, k, v = (_hi(t).transpose(1, 2) for t in (Q, K, V))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if is_causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return [(torch.softmax(s, -1) @ v).transpose(1, 2).contiguous()]


def dequant_gemm(A: torch.Tensor, B: torch.Tensor, Scale: torch.Tensor) -> list[Any]:
    """``A @ ((q - 8) * scale)^T`` with int4 ``q`` packed two per byte (low nibble first). The weight is formed in
    the scale's dtype, as the program does (``T.cast(q - 8, dtype) * Scale``: one fp16 rounding per weight, which
    over K = 8192 terms moves an output by ~1e-2 — more than the tolerance near zero), then multiplied in float64."""
    N, half = B.shape
    q = torch.stack([(B & 0xF), (B >> 4)], dim=-1).reshape(N, 2 * half).to(torch.int32) - 8
    w = q.to(Scale.dtype) * Scale.repeat_interleave(2 * half // Scale.shape[1], dim=1)
    return [_hi(A) @ _hi(w).T]


def dequant_gemm_exact(A: torch.Tensor, B: torch.Tensor, Scale: torch.Tensor) -> list[Any]:
    """The exact product ``A @ ((q - 8) * scale)^T`` (weights formed in float64, no per-weight rounding): what a
    kernel that scales its accumulators instead of every weight (per-channel scales) computes, up to fp32 sums."""
    N, half = B.shape
    q = torch.stack([(B & 0xF), (B >> 4)], dim=-1).reshape(N, 2 * half).to(torch.int32) - 8
    w = _hi(q) * _hi(Scale).repeat_interleave(2 * half // Scale.shape[1], dim=1)
    return [_hi(A) @ w.T]


REFS = {name: fn for name, fn in globals().items() if callable(fn) and not name.startswith("_")
        and getattr(fn, "__module__", None) == __name__}

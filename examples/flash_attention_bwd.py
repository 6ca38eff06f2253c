"""Flash attention backward: ``dQ, dK, dV`` of ``O = softmax(Q K^T / sqrt(d)) V`` on ``[batch, seq, heads, dim]``.

FlashAttention-2's backward in the classic spelling, three programs:

* ``attention_forward_lse``: the forward pass that also keeps each row's log-sum-exp (base 2, of the scaled
  scores), ``LSE[b, h, i]``, so the backward can recompute ``P = 2^(S * scale - LSE)`` tile by tile instead of
  storing the ``seq × seq`` probabilities;
* ``attention_bwd_preprocess``: ``Delta[b, h, i] = Σ_d O[i, d] · dO[i, d]`` (the row term of softmax's gradient);
* ``attention_bwd``: one block per ``block_N`` keys of one (batch, head). It keeps ``K``, ``V`` and the ``dK``,
  ``dV`` accumulators on chip and walks the query tiles (from the diagonal on, when causal): ``Pᵀ = 2^(K Qᵀ ·
  scale - LSE)``, ``dV += Pᵀ dO``, ``dPᵀ = V dOᵀ``, ``dSᵀ = Pᵀ ∘ (dPᵀ - Delta) / sqrt(d)``, ``dK += dSᵀ Q``, and the
  query tile's share of ``dQ = dS K`` is added to a float32 ``dQ`` with ``T.atomic_add`` (blocks of different keys
  add into the same rows).

``FlashAttentionBackward(...)(q, k, v, o, lse, do)`` runs the last two and returns ``(dq, dk, dv)``;
``FlashAttentionFunction`` wraps forward and backward as a ``torch.autograd.Function``. Ragged ``seq`` is masked.
Run ``python examples/flash_attention_bwd.py`` to check the gradients against ``torch.autograd`` of SDPA.
"""

from __future__ import annotations

import math

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

LOG2E = math.log2(math.e)


@tilelang.jit(out_idx=[3, 4])
def attention_forward_lse(batch, heads, seq_len, dim, is_causal=False, block_M=64, block_N=64, num_stages=1,
                          threads=128, dtype="float32", accum_dtype="float32"):
    """``O`` and ``LSE[b, h, i] = log2 Σ_j 2^(S_ij * scale)`` (``scale = log2(e) / sqrt(d)``)."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    shape = [batch, seq_len, heads, dim]
    neg_inf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype), LSE: T.Tensor([batch, heads, seq_len], accum_dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            m = T.alloc_fragment([block_M], accum_dtype)
            m_prev = T.alloc_fragment([block_M], accum_dtype)
            rescale = T.alloc_fragment([block_M], accum_dtype)
            row_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, neg_inf)
            n_tiles = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                       if is_causal else T.ceildiv(seq_len, block_N))
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                for i, j in T.Parallel(block_M, block_N):
                    visible = k * block_N + j < seq_len
                    if is_causal:
                        visible = visible and (bx * block_M + i >= k * block_N + j)
                    acc_s[i, j] = T.if_then_else(visible, 0, neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])
            for i in T.Parallel(block_M):
                if bx * block_M + i < seq_len:
                    LSE[bz, by, bx * block_M + i] = m[i] * scale + T.log2(logsum[i])

    return main


@tilelang.jit(out_idx=[2])
def attention_bwd_preprocess(batch, heads, seq_len, dim, block=64, threads=128, dtype="float32",
                             accum_dtype="float32"):
    """``Delta[b, h, i] = Σ_d O[b, i, h, d] · dO[b, i, h, d]``."""
    shape = [batch, seq_len, heads, dim]

    @T.prim_func
    def main(O: T.Tensor(shape, dtype), dO: T.Tensor(shape, dtype),  # noqa: N803
             Delta: T.Tensor([batch, heads, seq_len], accum_dtype)):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment([block, dim], dtype)
            do = T.alloc_fragment([block, dim], dtype)
            prod = T.alloc_fragment([block, dim], accum_dtype)
            delta = T.alloc_fragment([block], accum_dtype)
            T.copy(O[bz, bx * block:(bx + 1) * block, by, :], o)
            T.copy(dO[bz, bx * block:(bx + 1) * block, by, :], do)
            for i, j in T.Parallel(block, dim):
                prod[i, j] = T.cast(o[i, j], accum_dtype) * T.cast(do[i, j], accum_dtype)
            T.reduce_sum(prod, delta, dim=1)
            T.copy(delta, Delta[bz, by, bx * block:(bx + 1) * block])

    return main


@tilelang.jit(out_idx=[7, 8])
def attention_bwd(batch, heads, seq_len, dim, is_causal=False, block_M=64, block_N=64, num_stages=1, threads=128,
                  dtype="float32", accum_dtype="float32"):
    """``dK``, ``dV`` (outputs) and ``dQ`` (float32, accumulated into with atomics: pass it zeroed)."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    sm_scale = (1.0 / dim) ** 0.5
    shape = [batch, seq_len, heads, dim]

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             dO: T.Tensor(shape, dtype), LSE: T.Tensor([batch, heads, seq_len], accum_dtype),  # noqa: N803
             Delta: T.Tensor([batch, heads, seq_len], accum_dtype), dQ: T.Tensor(shape, accum_dtype),  # noqa: N803
             dK: T.Tensor(shape, dtype), dV: T.Tensor(shape, dtype)):  # noqa: N803
        with T.Kernel(T.ceildiv(seq_len, block_N), heads, batch, threads=threads) as (bx, by, bz):
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            q = T.alloc_shared([block_M, dim], dtype)
            do = T.alloc_shared([block_M, dim], dtype)
            lse = T.alloc_shared([block_M], accum_dtype)
            delta = T.alloc_shared([block_M], accum_dtype)
            ds_shared = T.alloc_shared([block_N, block_M], dtype)
            p_t = T.alloc_fragment([block_N, block_M], accum_dtype)  # Pᵀ, recomputed from LSE
            p_t_cast = T.alloc_fragment([block_N, block_M], dtype)
            dp_t = T.alloc_fragment([block_N, block_M], accum_dtype)  # dPᵀ = V dOᵀ
            ds_t = T.alloc_fragment([block_N, block_M], dtype)  # dSᵀ
            dv = T.alloc_fragment([block_N, dim], accum_dtype)
            dk = T.alloc_fragment([block_N, dim], accum_dtype)
            dq = T.alloc_fragment([block_M, dim], accum_dtype)

            T.copy(K[bz, bx * block_N:(bx + 1) * block_N, by, :], K_shared)
            T.copy(V[bz, bx * block_N:(bx + 1) * block_N, by, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            first = T.floordiv(bx * block_N, block_M) if is_causal else 0  # no query tile above the diagonal
            for kk in T.Pipelined(T.ceildiv(seq_len, block_M) - first, num_stages=num_stages):
                q0 = (first + kk) * block_M
                T.copy(Q[bz, q0:q0 + block_M, by, :], q)
                T.copy(dO[bz, q0:q0 + block_M, by, :], do)
                T.copy(LSE[bz, by, q0:q0 + block_M], lse)
                T.copy(Delta[bz, by, q0:q0 + block_M], delta)
                T.clear(p_t)
                T.gemm(K_shared, q, p_t, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_N, block_M):
                    visible = (q0 + j < seq_len) and (bx * block_N + i < seq_len)
                    if is_causal:
                        visible = visible and (bx * block_N + i <= q0 + j)
                    p_t[i, j] = T.if_then_else(visible, T.exp2(p_t[i, j] * scale - lse[j]), 0)
                T.clear(dp_t)
                T.gemm(V_shared, do, dp_t, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(p_t, p_t_cast)
                T.gemm(p_t_cast, do, dv, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_N, block_M):
                    ds_t[i, j] = p_t[i, j] * (dp_t[i, j] - delta[j]) * sm_scale
                T.gemm(ds_t, q, dk, policy=T.GemmWarpPolicy.FullRow)
                T.copy(ds_t, ds_shared)
                T.clear(dq)
                T.gemm(ds_shared, K_shared, dq, transpose_A=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_M, dim):
                    if q0 + i < seq_len:
                        T.atomic_add(dQ[bz, q0 + i, by, j], dq[i, j])
            T.copy(dv, dV[bz, bx * block_N:(bx + 1) * block_N, by, :])
            T.copy(dk, dK[bz, bx * block_N:(bx + 1) * block_N, by, :])

    return main


class FlashAttentionBackward:
    """The backward kernels for one problem: ``(q, k, v, o, lse, do) -> (dq, dk, dv)``."""

    def __init__(self, batch: int, heads: int, seq_len: int, dim: int, is_causal: bool = False,
                 block_M: int = 64, block_N: int = 64, num_stages: int = 1, threads: int = 128,
                 dtype: str = "float32", target: str = "auto", pass_configs: dict | None = None) -> None:
        # pass_configs: for the backward kernel (e.g. {"tl.cuda.tma_plain_tiles": True} on sm_90a)
        pre = tilelang.jit(out_idx=[2], target=target)(attention_bwd_preprocess.factory)
        bwd = tilelang.jit(out_idx=[7, 8], target=target, pass_configs=pass_configs)(attention_bwd.factory)
        self.preprocess = pre(batch, heads, seq_len, dim, dtype=dtype)
        self.backward = bwd(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages, threads, dtype)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                 do: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        delta = self.preprocess(o, do.contiguous())
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk, dv = self.backward(q, k, v, do.contiguous(), lse, delta, dq)
        return dq.to(q.dtype), dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """``FlashAttentionFunction.apply(q, k, v, is_causal)``: our forward and backward kernels under autograd."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):  # noqa: ANN001, ANN205
        b, s, h, d = q.shape
        dtype = str(q.dtype).removeprefix("torch.")
        target = "cuda" if q.is_cuda else "cpu"
        fwd = tilelang.jit(out_idx=[3, 4], target=target)(attention_forward_lse.factory)
        o, lse = fwd(b, h, s, d, is_causal, dtype=dtype)(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.kernels = FlashAttentionBackward(b, h, s, d, is_causal, dtype=dtype, target=target)
        return o

    @staticmethod
    def backward(ctx, do):  # noqa: ANN001, ANN205
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = ctx.kernels(q, k, v, o, lse, do)
        return dq, dk, dv, None


def reference_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                    is_causal: bool) -> tuple[torch.Tensor, ...]:
    """``torch.autograd`` of SDPA on ``[batch, seq, heads, dim]`` tensors."""
    q, k, v = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out.backward(do.transpose(1, 2))
    return tuple(x.grad.transpose(1, 2).contiguous() for x in (q, k, v))


def main() -> None:
    for batch, heads, seq, dim, causal in ((1, 2, 128, 64, False), (1, 2, 200, 64, True), (2, 1, 136, 128, True)):
        q, k, v = (torch.randn(batch, seq, heads, dim, requires_grad=True) for _ in range(3))
        out = FlashAttentionFunction.apply(q, k, v, causal)
        do = torch.randn_like(out)
        out.backward(do)
        for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), reference_grads(q, k, v, do, causal)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"d{n}: {m}")
        print(f"flash_attention_bwd b={batch} h={heads} s={seq} d={dim} causal={causal}: OK")


if __name__ == "__main__":
    main()

"""Flash attention forward, eager spelling (TileLang's example_mha_fwd_bshd body): ``[batch, seq, heads, dim]``
tensors, sizes read off Q, an online softmax over K/V tiles with two ``T.gemm`` (scores with ``transpose_B``, then
``P V`` from a fragment), ``T.if_then_else`` masks with ``-T.infinity``, ``T.macro`` for the softmax step."""

import tilelang
import tilelang.language as T
import torch
import torch.nn.functional as F


@tilelang.jit
def flashattn(Q, K, V, is_causal: bool = False, block_M: int = 32, block_N: int = 32, dtype: T.dtype = T.float32,
              accum_dtype: T.dtype = T.float32):
    batch, seq_len, heads, dim = T.const("batch, seq_len, heads, dim")
    shape = [batch, seq_len, heads, dim]
    Q: T.Tensor(shape, dtype)
    K: T.Tensor(shape, dtype)
    V: T.Tensor(shape, dtype)
    Output = T.empty(shape, dtype)

    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e)

    @T.macro
    def online_softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum):
        T.copy(scores_max, scores_max_prev)
        T.fill(scores_max, -T.infinity(accum_dtype))
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        for i in T.Parallel(block_M):
            scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=128) as (bx, by, bz):
        Q_shared = T.alloc_shared([block_M, dim], dtype)
        K_shared = T.alloc_shared([block_N, dim], dtype)
        V_shared = T.alloc_shared([block_N, dim], dtype)
        O_shared = T.alloc_shared([block_M, dim], dtype)
        acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
        acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
        acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
        scores_max = T.alloc_fragment([block_M], accum_dtype)
        scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
        scores_scale = T.alloc_fragment([block_M], accum_dtype)
        scores_sum = T.alloc_fragment([block_M], accum_dtype)
        logsum = T.alloc_fragment([block_M], accum_dtype)

        T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(accum_dtype))

        loop_range = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                      if is_causal else T.ceildiv(seq_len, block_N))

        for k in T.Pipelined(loop_range, num_stages=1):
            T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
            if is_causal:
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype))
            else:
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(k * block_N + j >= seq_len, -T.infinity(acc_s.dtype), 0)
            T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

            online_softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] *= scores_scale[i]
            T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
            T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] /= logsum[i]
        T.copy(acc_o, O_shared)
        T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return Output


def ref_program(Q, K, V, is_causal):
    dim = Q.size(-1)
    scores = torch.einsum("bqhd,bkhd->bhqk", Q.float(), K.float()) / dim ** 0.5
    if is_causal:
        seq_len = Q.size(1)
        mask = torch.tril(torch.ones(seq_len, seq_len, device=scores.device))
        scores = scores.masked_fill(mask == 0, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", F.softmax(scores, dim=-1), V.float())


def run(device):
    dtype = T.float16 if device == "cuda" else T.float32
    tol = 1e-2 if device == "cuda" else 1e-4
    q, k, v = (torch.randn(1, 64, 2, 32, device=device, dtype=getattr(torch, dtype)) for _ in range(3))
    out = flashattn(q, k, v, True, dtype=dtype)
    torch.testing.assert_close(out.float(), ref_program(q, k, v, True), rtol=tol, atol=tol)

"""Flash attention forward ``O = softmax(Q K^T / sqrt(d)) V`` on ``[batch, seq, heads, dim]`` tensors.

TileLang's ``example_mha_fwd`` program in the classic spelling, unchanged between targets: each block owns
``block_M`` query rows of one (batch, head). The Q tile is copied into shared memory once; the loop over K/V
tiles (``T.Pipelined``) computes the scores ``S = Q K^T`` with ``T.gemm(..., transpose_B=True)``, keeps an
*online softmax* (running row max ``m`` and row sum ``l``; each new tile rescales the output accumulator by
``2^(m_old - m_new)``) and adds ``P V`` with a second ``T.gemm`` whose A operand is the probability tile ``P``
held in a fragment. Exponentials are ``exp2`` with ``scale * log2(e)`` folded into one multiply.

* **Causal**: the loop stops at the last K/V tile a query row of the block can see
  (``T.ceildiv((bx + 1) * block_M, block_N)``, a bound that depends on the block index) and scores above the
  diagonal are set to ``-inf`` before the gemm accumulates into them.
* **GQA / MQA** (``heads_kv`` < ``heads``): query head ``h`` reads K/V head ``h // (heads // heads_kv)``; ``heads_kv
  = 1`` is multi-query attention. Only the K/V tensors' shape and the head index of their copies change.
* **Ragged ``seq``** (not a multiple of the tiles): K/V rows past ``seq`` read as zeros, so their scores are
  masked to ``-inf`` (``exp2(-inf) = 0``); query rows past ``seq`` are computed on zeros and never stored.

fp16 inputs with fp32 accumulation on GPUs (``dtype="float16"``), fp32 throughout on CPUs.
Run ``python examples/flash_attention.py`` to check it against ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

LOG2E = math.log2(math.e)


@tilelang.jit(out_idx=[3])
def flash_attention(batch, heads, seq_len, dim, is_causal=False, block_M=64, block_N=64, num_stages=1,
                    threads=128, dtype="float32", accum_dtype="float32", heads_kv=None):
    scale = (1.0 / dim) ** 0.5 * LOG2E  # softmax scale folded with log2(e): exp(x / sqrt(d)) = exp2(x * scale)
    heads_kv = heads if heads_kv is None else heads_kv
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"flash_attention heads_kv: expected a divisor of heads={heads}, got {heads_kv}")
    groups = heads // heads_kv  # query heads per K/V head
    shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, heads_kv, dim]
    ragged = seq_len % block_N != 0  # a compile-time Python value: the masks below exist only when needed

    @T.macro
    def MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz):  # noqa: N802, N803 (TileLang's names)
        """S = Q K^T for K/V tile k, accumulated onto 0, or onto -inf where the score is masked."""
        T.copy(K[bz, k * block_N:(k + 1) * block_N, by // groups, :], K_shared)
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else((bx * block_M + i >= k * block_N + j) and (k * block_N + j < seq_len),
                                             0, -T.infinity(acc_s.dtype))
        elif ragged:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0, -T.infinity(acc_s.dtype))
        else:
            T.clear(acc_s)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz):  # noqa: N802, N803
        """O += P V, with P (the probabilities) the gemm's A operand straight from its fragment."""
        T.copy(V[bz, k * block_N:(k + 1) * block_N, by // groups, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum):  # noqa: N802
        """Online softmax step: new running row max, P = exp2(S - max), running row sum, rescale factor."""
        T.copy(scores_max, scores_max_prev)
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)  # max(previous max, this tile's row max)
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    @T.macro
    def Rescale(acc_o, scores_scale):  # noqa: N802
        """Bring what O accumulated so far to the new running max."""
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
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

            # causal: the last K/V tile a row of this block can see depends on the block index
            loop_range = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                          if is_causal else T.ceildiv(seq_len, block_N))

            for k in T.Pipelined(loop_range, num_stages=num_stages):
                MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz)
                Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum)
                Rescale(acc_o, scores_scale)
                MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def reference(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """torch reference on ``[batch, seq, heads, dim]``: SDPA works on ``[batch, heads, seq, dim]``; K/V with fewer
    heads (GQA) are repeated to the query heads."""
    groups = Q.shape[2] // K.shape[2]
    if groups > 1:
        K, V = K.repeat_interleave(groups, dim=2), V.repeat_interleave(groups, dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(
        Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), is_causal=is_causal)
    return out.transpose(1, 2).contiguous()


def flops(batch: int, heads: int, seq_len: int, dim: int, is_causal: bool) -> float:
    """FLOPs of the forward pass (two matmuls of 2 * seq^2 * dim each; half of that when causal)."""
    f = 4.0 * batch * heads * seq_len * seq_len * dim
    return f / 2 if is_causal else f


def main() -> None:
    for batch, heads, seq_len, dim, causal in ((1, 4, 256, 64, False), (1, 4, 256, 64, True),
                                               (2, 2, 200, 128, False), (2, 2, 200, 128, True)):
        kernel = flash_attention(batch, heads, seq_len, dim, causal)
        kernel.get_profiler().assert_allclose(lambda q, k, v, c=causal: reference(q, k, v, c), rtol=1e-4, atol=1e-4,
                                                 max_mismatched_ratio=0)
        print(f"flash_attention b={batch} h={heads} s={seq_len} d={dim} causal={causal}: OK")
    batch, heads, seq_len, dim = 1, 8, 1024, 64
    for causal in (False, True):
        kernel = flash_attention(batch, heads, seq_len, dim, causal)
        prof = kernel.get_profiler()
        ms = prof.do_bench()
        ref_ms = prof.do_bench(lambda q, k, v, c=causal: reference(q, k, v, c))
        gf = flops(batch, heads, seq_len, dim, causal) / 1e9
        print(f"flash_attention {batch}x{heads}x{seq_len}x{dim} causal={causal}: {ms:.3f} ms "
              f"({gf / ms * 1e3:.1f} GFLOP/s); SDPA {ref_ms:.3f} ms ({gf / ref_ms * 1e3:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()

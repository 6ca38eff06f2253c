"""Flash decoding: attention of a few new query tokens against a long K/V cache, split over the cache, with GQA.

Decoding asks for ``O = softmax(Q K^T / sqrt(d)) V`` with ``seq_q`` = 1..16 new tokens per sequence against a
cache of ``seq_kv`` (thousands of) keys and values. Two things make it differ from the prefill kernel
(examples/flash_attention.py):

* **GQA packing.** ``heads // heads_kv`` query heads share one K/V head. One block takes all of them (times the
  ``seq_q`` tokens) as the rows of its Q tile, so each K/V tile read from memory serves ``groups * seq_q`` rows of
  the two GEMMs instead of one; the rows are padded to ``block_M`` (16 at least, a tensor-core tile).
* **Split-KV.** One (batch, K/V head) pair is far too little work for a GPU, so the cache is cut into
  ``num_splits`` ranges, each a block of its own (grid ``num_splits × heads_kv × batch``). A block writes its
  normalised partial output and the row's log-sum-exp (base 2) for its range; ``combine`` then merges the splits
  per row: ``O = Σ_s 2^(lse_s - m) O_s / Σ_s 2^(lse_s - m)`` with ``m = max_s lse_s``.

``causal=True`` aligns the new tokens with the end of the cache (token ``t`` sees keys ``0 .. seq_kv - seq_q + t``:
speculative decoding); rows a split cannot see at all get ``lse = -inf`` and weigh nothing in the merge.
Run ``python examples/flash_decoding.py`` to check it against torch's ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

LOG2E = math.log2(math.e)


def split_plan(seq_kv: int, num_splits: int, block_N: int) -> tuple[int, int]:
    """(tiles per split, splits actually used): every split but the last holds whole tiles, none is empty."""
    tiles = -(-seq_kv // block_N)
    per_split = -(-tiles // max(1, min(num_splits, tiles)))
    return per_split, -(-tiles // per_split)


def rows_per_block(heads: int, heads_kv: int, seq_q: int) -> int:
    rows = heads // heads_kv * seq_q
    return max(16, 1 << (rows - 1).bit_length())


@tilelang.jit(out_idx=[3, 4])
def flash_decode_split(batch, heads, heads_kv, seq_q, seq_kv, dim, num_splits=4, causal=False, block_N=64,
                       num_stages=2, threads=128, dtype="float32", accum_dtype="float32"):
    """Partial attention of every split: ``O_part[b, h, s, t, :]`` and ``LSE[b, h, s, t]`` (base 2)."""
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"flash_decode_split heads_kv: expected a divisor of heads={heads}, got {heads_kv}")
    groups = heads // heads_kv
    rows = groups * seq_q  # real rows of the block's Q tile: (query head in the group, token)
    block_M = rows_per_block(heads, heads_kv, seq_q)
    per_split, splits = split_plan(seq_kv, num_splits, block_N)
    scale = (1.0 / dim) ** 0.5 * LOG2E
    neg_inf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(Q: T.Tensor((batch, seq_q, heads, dim), dtype), K: T.Tensor((batch, seq_kv, heads_kv, dim), dtype),
             V: T.Tensor((batch, seq_kv, heads_kv, dim), dtype),
             O_part: T.Tensor((batch, heads, splits, seq_q, dim), accum_dtype),
             LSE: T.Tensor((batch, heads, splits, seq_q), accum_dtype)):
        with T.Kernel(splits, heads_kv, batch, threads=threads) as (sx, hk, bz):
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

            # row r of the tile is query head hk * groups + r // seq_q, token r % seq_q; padding rows are zeros
            for r, d in T.Parallel(block_M, dim):
                Q_shared[r, d] = T.if_then_else(r < rows, Q[bz, r % seq_q, hk * groups + r // seq_q, d], 0)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, neg_inf)
            first = sx * per_split * block_N  # the split's first key
            n_tiles = T.min(per_split, T.ceildiv(seq_kv - first, block_N))

            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                kv0 = first + k * block_N
                T.copy(K[bz, kv0:kv0 + block_N, hk, :], K_shared)
                T.copy(V[bz, kv0:kv0 + block_N, hk, :], V_shared)
                for i, j in T.Parallel(block_M, block_N):
                    if causal:
                        acc_s[i, j] = T.if_then_else(
                            (kv0 + j < seq_kv) and (kv0 + j <= seq_kv - seq_q + i % seq_q), 0, neg_inf)
                    else:
                        acc_s[i, j] = T.if_then_else(kv0 + j < seq_kv, 0, neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                # a row that has seen no visible key yet keeps m = -inf: its factors are 1 and 0, not NaN
                for i in T.Parallel(block_M):
                    rescale[i] = T.if_then_else(m[i] == neg_inf, 1, T.exp2(m_prev[i] * scale - m[i] * scale))
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(m[i] == neg_inf, 0, T.exp2(acc_s[i, j] * scale - m[i] * scale))
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)

            for i, d in T.Parallel(block_M, dim):
                if i < rows:
                    O_part[bz, hk * groups + i // seq_q, sx, i % seq_q, d] = T.if_then_else(
                        logsum[i] > 0, acc_o[i, d] / logsum[i], 0)
            for i in T.Parallel(block_M):
                if i < rows:
                    LSE[bz, hk * groups + i // seq_q, sx, i % seq_q] = T.if_then_else(
                        logsum[i] > 0, m[i] * scale + T.log2(logsum[i]), neg_inf)

    return main


@tilelang.jit(out_idx=[2])
def flash_decode_combine(batch, heads, seq_q, dim, splits, dtype="float32", accum_dtype="float32", threads=128):
    """Merge the splits' partial outputs: ``O[b, t, h, :]`` weighted by ``2^(lse_s - max_s lse_s)``."""

    @T.prim_func
    def main(O_part: T.Tensor((batch, heads, splits, seq_q, dim), accum_dtype),
             LSE: T.Tensor((batch, heads, splits, seq_q), accum_dtype),
             Output: T.Tensor((batch, seq_q, heads, dim), dtype)):
        with T.Kernel(heads, batch, threads=threads) as (h, bz):
            lse = T.alloc_fragment([seq_q, splits], accum_dtype)
            top = T.alloc_fragment([seq_q], accum_dtype)
            total = T.alloc_fragment([seq_q], accum_dtype)
            acc = T.alloc_fragment([seq_q, dim], accum_dtype)
            for t, s in T.Parallel(seq_q, splits):
                lse[t, s] = LSE[bz, h, s, t]
            T.reduce_max(lse, top, dim=1)
            for t, s in T.Parallel(seq_q, splits):
                lse[t, s] = T.exp2(lse[t, s] - top[t])  # the split's weight (0 for a split that saw nothing)
            T.reduce_sum(lse, total, dim=1)
            T.clear(acc)
            for s in T.serial(splits):
                for t, d in T.Parallel(seq_q, dim):
                    acc[t, d] += lse[t, s] * O_part[bz, h, s, t, d]
            for t, d in T.Parallel(seq_q, dim):
                Output[bz, t, h, d] = acc[t, d] / total[t]

    return main


class FlashDecoding:
    """Both kernels for one problem: ``FlashDecoding(...)(q, k, v)`` → ``[batch, seq_q, heads, dim]``."""

    def __init__(self, batch: int, heads: int, heads_kv: int, seq_q: int, seq_kv: int, dim: int,
                 num_splits: int = 4, causal: bool = False, block_N: int = 64, num_stages: int = 2,
                 threads: int = 128, dtype: str = "float32", target: str = "auto") -> None:
        split = tilelang.jit(out_idx=[3, 4], target=target)(flash_decode_split.factory)
        combine = tilelang.jit(out_idx=[2], target=target)(flash_decode_combine.factory)
        self.split = split(batch, heads, heads_kv, seq_q, seq_kv, dim, num_splits, causal, block_N, num_stages,
                           threads, dtype)
        self.splits = split_plan(seq_kv, num_splits, block_N)[1]
        self.combine = combine(batch, heads, seq_q, dim, self.splits, dtype)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o_part, lse = self.split(q, k, v)
        return self.combine(o_part, lse)

    def __repr__(self) -> str:
        return f"FlashDecoding(splits={self.splits}, split={self.split!r}, combine={self.combine!r})"


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """SDPA on ``[batch, seq, heads, dim]`` tensors, K/V heads repeated to the query heads, the causal mask aligned
    with the end of the cache."""
    groups = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, dim=2), v.repeat_interleave(groups, dim=2)
    mask = None
    if causal:
        sq, skv = q.shape[1], k.shape[1]
        mask = torch.arange(skv, device=q.device)[None, :] <= (skv - sq + torch.arange(sq, device=q.device))[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), attn_mask=mask)
    return out.transpose(1, 2).to(q.dtype).contiguous()


def kv_bytes(batch: int, heads_kv: int, seq_kv: int, dim: int, itemsize: int) -> int:
    """Bytes of K and V the kernel must read: the HBM floor of decoding."""
    return 2 * batch * seq_kv * heads_kv * dim * itemsize


def main() -> None:
    for batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal in (
            (2, 8, 2, 1, 1000, 64, 4, False), (1, 8, 8, 4, 777, 64, 3, True), (2, 4, 1, 16, 300, 128, 2, True)):
        dec = FlashDecoding(batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal)
        q = torch.randn(batch, seq_q, heads, dim)
        k, v = torch.randn(batch, seq_kv, heads_kv, dim), torch.randn(batch, seq_kv, heads_kv, dim)
        torch.testing.assert_close(dec(q, k, v), reference(q, k, v, causal), rtol=1e-4, atol=1e-4)
        print(f"flash_decoding b={batch} h={heads}/{heads_kv} q={seq_q} kv={seq_kv} d={dim} splits={dec.splits} "
              f"causal={causal}: OK")


if __name__ == "__main__":
    main()

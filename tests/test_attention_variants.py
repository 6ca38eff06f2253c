"""GQA / MQA flash attention, split-KV flash decoding and the flash-attention backward (examples/) against torch
SDPA (and its autograd) on the CPU; the GPU suite runs the same programs: tests/gpu/test_attention_variants.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples import flash_attention as fa  # noqa: E402
from examples import flash_attention_bwd as fb  # noqa: E402
from examples import flash_decoding as fd  # noqa: E402


@pytest.mark.parametrize("heads,heads_kv", [(4, 2), (4, 1)], ids=["gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_matches_sdpa_with_repeated_kv_heads(heads, heads_kv, causal):
    kernel = fa.flash_attention(1, heads, 136, 64, causal, heads_kv=heads_kv)
    q = torch.randn(1, 136, heads, 64)
    k, v = torch.randn(1, 136, heads_kv, 64), torch.randn(1, 136, heads_kv, 64)
    torch.testing.assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), rtol=1e-4, atol=1e-4)


def test_grouped_query_attention_refuses_a_head_count_that_does_not_divide():
    with pytest.raises(ValueError, match="heads_kv: expected a divisor of heads=4, got 3"):
        fa.flash_attention(1, 4, 64, 64, heads_kv=3)


@pytest.mark.parametrize("batch,heads,heads_kv,seq_q,seq_kv,dim,splits,causal", [
    (2, 8, 2, 1, 1000, 64, 4, False),   # one new token, GQA 4:1, ragged last tile
    (1, 4, 4, 3, 333, 64, 3, True),     # MHA, three speculative tokens, causal mask at the cache's end
    (1, 4, 1, 16, 300, 128, 2, True),   # MQA, 64 rows per block, dim 128
    (1, 2, 1, 2, 40, 64, 8, True),      # more splits asked than tiles: one split; token 0 cannot see key 39
])
def test_split_kv_decoding_matches_sdpa(batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal):
    dec = fd.FlashDecoding(batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal)
    q = torch.randn(batch, seq_q, heads, dim)
    k, v = torch.randn(batch, seq_kv, heads_kv, dim) * 2, torch.randn(batch, seq_kv, heads_kv, dim)
    torch.testing.assert_close(dec(q, k, v), fd.reference(q, k, v, causal), rtol=1e-4, atol=1e-4)
    assert dec.splits == fd.split_plan(seq_kv, splits, 64)[1] and "splits=" in repr(dec)


def test_a_split_that_sees_no_key_of_a_row_weighs_nothing():
    """Causal, 16 new tokens against 130 keys in 3 splits of one 64-key tile: the last split holds keys 128 and 129,
    which tokens 0..13 (token t sees keys 0..114 + t) cannot see: their lse there is -inf, not NaN."""
    dec = fd.FlashDecoding(1, 2, 2, 16, 130, 64, 3, True)
    q, k, v = (torch.randn(1, 16, 2, 64), torch.randn(1, 130, 2, 64), torch.randn(1, 130, 2, 64))
    o_part, lse = dec.split(q, k, v)
    assert not torch.isnan(o_part).any() and not torch.isnan(lse).any()
    assert torch.isinf(lse[0, :, 2, :14]).all() and torch.isfinite(lse[0, :, 2, 14:]).all()
    torch.testing.assert_close(dec.combine(o_part, lse), fd.reference(q, k, v, True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch,heads,seq,dim,causal", [
    (1, 2, 128, 64, False),
    (1, 2, 200, 64, True),      # ragged: the last query and key tiles are partly outside
    (2, 1, 136, 128, True),
])
def test_flash_attention_backward_matches_autograd_of_sdpa(batch, heads, seq, dim, causal):
    q, k, v = (torch.randn(batch, seq, heads, dim, requires_grad=True) for _ in range(3))
    out = fb.FlashAttentionFunction.apply(q, k, v, causal)
    torch.testing.assert_close(out, fa.reference(q.detach(), k.detach(), v.detach(), causal), rtol=1e-4, atol=1e-4)
    do = torch.randn_like(out)
    out.backward(do)
    for got, want in zip((q.grad, k.grad, v.grad), fb.reference_grads(q, k, v, do, causal)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

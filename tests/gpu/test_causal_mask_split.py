"""On the GPU: causal and ragged attention with tl.SplitMaskedIterations (the mask tested per element only on the
diagonal and ragged K/V tiles) against SDPA, and bit for bit against the same program built with the split off
(``pass_configs={"tl.cuda.split_masked_iterations": False}``: the mask on every tile, as written) on the same
inputs — the unmasked copy writes the value the select would have chosen, so nothing else may change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tilelang_core as tilelang  # noqa: E402
from examples import flash_attention as fa  # noqa: E402
from examples import flash_decoding as fd  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float16": 2e-2, "bfloat16": 3e-2}
ON, OFF = {"tl.cuda.split_masked_iterations": True}, {"tl.cuda.split_masked_iterations": False}


def _branches(src: str) -> int:
    """The split's per-iteration branches: ``if (k < <bound in blockIdx.x>)`` (the pipeline's own ``if (k < 2)``
    tests of its prologue do not count)."""
    return sum(1 for line in src.splitlines() if line.strip().startswith("if (k < ") and "blockIdx.x" in line)


def _built(factory, pass_configs):
    return tilelang.jit(out_idx=factory.out_idx, target="cuda", pass_configs=pass_configs)(factory.factory)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("seq,dim,block_M,block_N,stages,threads", [
    (1000, 128, 128, 64, 2, 256),  # two diagonal tiles per block (k < 2 bx), ragged last tile
    (333, 64, 64, 64, 2, 128),     # one diagonal tile (k < bx), ragged
    (200, 64, 64, 128, 2, 128),    # K/V tiles taller than the query block: k < (64 bx - 127) // 128 + 1
    (512, 128, 128, 128, 3, 256),  # not ragged, three stages
])
def test_causal_attention_with_the_mask_split_matches_sdpa_and_the_unsplit_build(dtype, seq, dim, block_M,
                                                                                 block_N, stages, threads):
    args = (2, 4, seq, dim, True)
    kw = dict(block_M=block_M, block_N=block_N, num_stages=stages, threads=threads, dtype=dtype)
    split = _built(fa.flash_attention, ON)(*args, **kw)
    whole = _built(fa.flash_attention, OFF)(*args, **kw)
    assert _branches(split.get_kernel_source()) == 1 and _branches(whole.get_kernel_source()) == 0
    q, k, v = ((torch.randn(2, seq, 4, dim, device="cuda") * 2).to(DT[dtype]) for _ in range(3))
    out = split(q, k, v)
    torch.testing.assert_close(out.float(), fa.reference(q.float(), k.float(), v.float(), True),
                               rtol=TOL[dtype], atol=TOL[dtype])
    assert torch.equal(out, whole(q, k, v))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_causal_split_kv_decoding_with_the_mask_split_matches_the_unsplit_build(dtype):
    args = (2, 8, 2, 4, 1000, 128, 4, True)  # 4 new tokens, causal against the end of a ragged cache
    split = _built(fd.flash_decode_split, ON)(*args, dtype=dtype)
    whole = _built(fd.flash_decode_split, OFF)(*args, dtype=dtype)
    q = torch.randn(2, 4, 8, 128, device="cuda").to(DT[dtype])
    k, v = (torch.randn(2, 1000, 2, 128, device="cuda").to(DT[dtype]) for _ in range(2))
    o_split, lse_split = split(q, k, v)
    o_whole, lse_whole = whole(q, k, v)
    assert torch.equal(o_split, o_whole) and torch.equal(lse_split, lse_whole)
    dec = fd.FlashDecoding(2, 8, 2, 4, 1000, 128, 4, True, dtype=dtype, target="cuda")
    torch.testing.assert_close(dec(q, k, v).float(), fd.reference(q.float(), k.float(), v.float(), True),
                               rtol=TOL[dtype], atol=TOL[dtype])

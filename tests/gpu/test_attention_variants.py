"""On the GPU: GQA / MQA flash attention and split-KV flash decoding (examples/) through ``@jit(target="cuda")``,
fp16 and bf16, against SDPA in float32 and against the CPU build of the same program on the same inputs, and the
flash-attention backward against torch.autograd of SDPA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples import flash_attention as fa  # noqa: E402
from examples import flash_attention_bwd as fb  # noqa: E402
from examples import flash_decoding as fd  # noqa: E402

from .conftest import cuda  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float16": 2e-2, "bfloat16": 3e-2}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("heads,heads_kv,causal", [(8, 2, False), (8, 1, True), (4, 4, True)])
def test_grouped_query_attention_on_the_gpu(dtype, heads, heads_kv, causal):
    seq, dim = 200, 128
    kernel = cuda(fa.flash_attention)(2, heads, seq, dim, causal, block_M=64, block_N=64, num_stages=2,
                                      dtype=dtype, heads_kv=heads_kv)
    q = torch.randn(2, seq, heads, dim, device="cuda").to(DT[dtype])
    k = torch.randn(2, seq, heads_kv, dim, device="cuda").to(DT[dtype])
    v = torch.randn(2, seq, heads_kv, dim, device="cuda").to(DT[dtype])
    ref = fa.reference(q.float(), k.float(), v.float(), causal)
    torch.testing.assert_close(kernel(q, k, v).float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch,heads,heads_kv,seq_q,seq_kv,dim,splits,causal,threads", [
    (4, 32, 8, 1, 8192, 128, 4, False, 128),
    (2, 8, 2, 1, 1000, 64, 4, False, 128),
    (1, 4, 4, 3, 333, 64, 3, True, 128),
    (2, 4, 1, 16, 300, 128, 2, True, 128),
    (2, 8, 2, 4, 2000, 128, 8, True, 64),
])
def test_split_kv_decoding_on_the_gpu(dtype, batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal, threads):
    dec = fd.FlashDecoding(batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal, threads=threads,
                           dtype=dtype, target="cuda")
    q = torch.randn(batch, seq_q, heads, dim, device="cuda").to(DT[dtype])
    k = (torch.randn(batch, seq_kv, heads_kv, dim, device="cuda") * 2).to(DT[dtype])
    v = torch.randn(batch, seq_kv, heads_kv, dim, device="cuda").to(DT[dtype])
    out = dec(q, k, v)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), fd.reference(q.float(), k.float(), v.float(), causal),
                               rtol=TOL[dtype], atol=TOL[dtype])
    # differential: the CPU build of the same two programs on the same inputs
    host = fd.FlashDecoding(batch, heads, heads_kv, seq_q, seq_kv, dim, splits, causal, dtype="float32",
                            target="cpu") if seq_kv <= 2000 else None
    if host is not None:
        ref_cpu = host(q.float().cpu(), k.float().cpu(), v.float().cpu())
        torch.testing.assert_close(out.float().cpu(), ref_cpu, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch,heads,seq,dim,causal", [(2, 4, 256, 64, False), (1, 4, 200, 128, True),
                                                        (2, 2, 1000, 128, True)])
def test_flash_attention_backward_on_the_gpu(dtype, batch, heads, seq, dim, causal):
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda").to(DT[dtype]).requires_grad_() for _ in range(3))
    out = fb.FlashAttentionFunction.apply(q, k, v, causal)
    do = torch.randn_like(out)
    out.backward(do)
    want = fb.reference_grads(q.float(), k.float(), v.float(), do.float(), causal)
    for name, got, ref in zip("qkv", (q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got.float(), ref, rtol=TOL[dtype], atol=2 * TOL[dtype],
                                   msg=lambda m, n=name: f"d{n}: {m}")

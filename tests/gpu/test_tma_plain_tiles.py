"""``tl.cuda.tma_plain_tiles`` on the H200: loops whose loads into plain row-major shared tiles become TMA boxes
(SWIZZLE_NONE) — the flash-attention backward (float32 LSE / Delta rows), the dequantised prefill with
``tl.cuda.wgmma_written_tiles`` (the packed uint8 / int8 weight tile) and a GEMM that also loads a 1-D float32
vector and a uint8 tile — against torch, and identical to the cp.async build of the same program.

Written without a GPU and not yet run on one (the CPU side: tests/test_cuda_tma_plain_tiles.py, the CUDA
emulator); run with ``bash bench/gpu/test_suite.sh -k tma_plain_tiles`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402

from examples import flash_attention_bwd as fb  # noqa: E402
from tests.test_cuda_tma_plain_tiles import gemm_with_plain_loads  # noqa: E402

PLAIN = {"tl.cuda.tma_plain_tiles": True}
VARIANTS = {v.name: v for v in dv.VARIANTS}


def _no_cp_async(kernel) -> None:
    src = kernel.get_kernel_source()
    assert "tl::tma_load_" in src and "tl::cp_async" not in src, kernel.notes


@pytest.mark.parametrize("batch,heads,seq,dim,causal", [(2, 4, 256, 64, False), (1, 4, 200, 128, True),
                                                        (2, 2, 1000, 128, False), (8, 16, 1024, 128, True)])
def test_tma_backward_matches_torch_autograd_and_the_cp_async_build(batch, heads, seq, dim, causal):
    q, k, v, do = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.float16) for _ in range(4))
    fwd = tilelang.jit(out_idx=[3, 4], target="cuda")(fb.attention_forward_lse.factory)(
        batch, heads, seq, dim, causal, 128, 64, 2, 128, "float16")
    o, lse = fwd(q, k, v)
    on = fb.FlashAttentionBackward(batch, heads, seq, dim, causal, 64, 64, 2, 128, "float16", target="cuda",
                                   pass_configs=PLAIN)
    _no_cp_async(on.backward)
    dq, dk, dv_ = on(q, k, v, o, lse, do)
    want = fb.reference_grads(q.float(), k.float(), v.float(), do.float(), causal)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv_), want):
        torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=4e-2, msg=lambda m, n=name: f"{n}: {m}")
    off = fb.FlashAttentionBackward(batch, heads, seq, dim, causal, 64, 64, 2, 128, "float16", target="cuda")
    dq0, dk0, dv0 = off(q, k, v, o, lse, do)
    # the same loads into the same tiles, the same instructions after them: dK and dV bit for bit (dQ is summed by
    # float atomics in any order)
    assert torch.equal(dk, dk0) and torch.equal(dv_, dv0)
    torch.testing.assert_close(dq.float(), dq0.float(), rtol=1e-3, atol=1e-3)


def test_tma_backward_with_a_producer_warpgroup_matches_torch_autograd():
    batch, heads, seq, dim, causal = 1, 4, 200, 128, True
    q, k, v, do = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.float16) for _ in range(4))
    fwd = tilelang.jit(out_idx=[3, 4], target="cuda")(fb.attention_forward_lse.factory)(
        batch, heads, seq, dim, causal, 128, 64, 2, 128, "float16")
    o, lse = fwd(q, k, v)
    ws = fb.FlashAttentionBackward(batch, heads, seq, dim, causal, 64, 64, 2, 128, "float16", target="cuda",
                                   pass_configs={**PLAIN, "tl.cuda.ws_keep_occupancy": False})
    _no_cp_async(ws.backward)
    want = fb.reference_grads(q.float(), k.float(), v.float(), do.float(), causal)
    for name, got, ref in zip(("dq", "dk", "dv"), ws(q, k, v, o, lse, do), want):
        torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=4e-2, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("name", ["hi_first", "bf16", "zp_g128", "g128", "fp4_e2m1_g32", "int8", "bk64"])
@pytest.mark.parametrize("M,N,K", [(128, 1024, 2048), (200, 1000, 1024)])
def test_tma_dequant_prefill_matches_torch_and_the_cp_async_build(name, M, N, K):
    v = VARIANTS[name]
    func = dv.program(v, M, N, K, **dv.tiles(128, v))
    base = {"tl.cuda.wgmma_written_tiles": True, "tl.cuda.fuse_dequant": False}
    on = tilelang.compile(func, out_idx=[-1], target="cuda", pass_configs={**base, **PLAIN})
    _no_cp_async(on)
    ins = dv.inputs(v, M, N, K)
    ref = dv.reference(v, *ins)
    out = poisoned((M, N), getattr(torch, v.dtype))
    on(*ins, out)
    assert_written_and_close(out, ref, 2e-2, 2e-2)
    off = tilelang.compile(func, out_idx=[-1], target="cuda", pass_configs=base)(*ins)
    assert torch.equal(out, off)  # the same wgmma and decode on the same tiles; only the loads differ


@pytest.mark.parametrize("nv", [1008, 1001])
def test_tma_1d_and_uint8_boxes_match_torch(nv):
    # ragged: the last k-step's boxes cross the ends of A, B, Vv and U (zero-filled); Vv is the 2-D map (nv, 1), and
    # at nv = 1001 its 4004-byte stride (never stepped) is rounded up to 4016 (tests/test_cuda_tma_plain_tiles_maps.py)
    M, N, K = 300, 128, 1008
    kernel = tilelang.compile(gemm_with_plain_loads(M, N, K, ku=K, nv=nv), out_idx=[4, 5, 6], target="cuda",
                              pass_configs=PLAIN)
    _no_cp_async(kernel)
    steps = -(-K // 64)
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    vv = torch.randn(nv, device="cuda")
    u = torch.randint(0, 256, (M, K), device="cuda", dtype=torch.uint8)
    c, vs, us = kernel(a, b, vv, u)
    want_vs = torch.cat([vv, vv.new_zeros(steps * 64 - nv)]).view(steps, 64).sum(0)
    torch.testing.assert_close(vs, want_vs, rtol=1e-4, atol=1e-4)
    pad = steps * 64 - K
    torch.testing.assert_close(us, torch.cat([u.float(), u.new_zeros(M, pad).float()], 1).view(M, steps, 64).sum(1))
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)

"""GPU twins of the tools a user steers the compiler with: a ``T.import_source`` decoder called through
``T.call_extern``, ``T.copy(..., eviction_policy=)`` loads (synchronous, pipelined, the fused W4A16 weights) and
``T.annotate_layout`` (user index maps, a requested swizzle, an un-swizzled mma.sync operand), against torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import user_device_code_kernels as kernels  # noqa: E402
from test_annotate_layout import LAYOUTS, gemm_annotated, staged, swizzle_requested  # noqa: E402
from test_copy_eviction_policy import pipelined_gemm, staged_scale, w4a16  # noqa: E402

from .conftest import cuda  # noqa: E402


def test_imported_lop3_decoder_matches_torch_on_the_gpu():
    w = torch.randint(-(1 << 31), (1 << 31) - 1, (1000,), dtype=torch.int32)
    out = cuda(kernels.decode_u4)(1000)(w.cuda().view(torch.uint32))
    torch.testing.assert_close(out.cpu(), kernels.decode_u4_reference(w), rtol=0, atol=0)


@pytest.mark.parametrize("policy", ["evict_first", "evict_last", "evict_normal"])
def test_hinted_synchronous_copy_matches_torch_on_the_gpu(policy):
    a = torch.randn(300, 64, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(cuda(staged_scale)(300, 64, policy)(a), a * 2)


@pytest.mark.parametrize("policy", ["evict_first", "evict_last"])
def test_hinted_pipelined_gemm_matches_torch_on_the_gpu(policy):
    a = torch.randn(200, 256, dtype=torch.float16, device="cuda")
    b = torch.randn(256, 192, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(cuda(pipelined_gemm)(200, 192, 256, policy)(a, b), a.float() @ b.float(),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("policy", [None, "evict_normal", "evict_last"])
def test_fused_w4a16_with_a_weight_eviction_policy_matches_torch_on_the_gpu(policy):
    M, N, K = 16, 512, 1024
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    q = torch.randint(0, 16, (N, K), dtype=torch.int32)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8).cuda()
    scale = (torch.rand(N, 1) * 0.1 + 0.01).half().cuda()
    w = ((q - 8).half().cuda() * scale)
    out = cuda(w4a16)(M, N, K, policy)(a, packed, scale)
    torch.testing.assert_close(out.float(), a.float() @ w.float().t(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("kind", sorted(LAYOUTS))
def test_user_layouts_of_a_shared_tile_match_torch_on_the_gpu(kind):
    a = torch.randn(300, 64, device="cuda")
    ref = a + (torch.arange(300, device="cuda") % 16)[:, None].float()
    torch.testing.assert_close(cuda(staged)(300, 64, kind)(a), ref)


def test_requested_swizzle_matches_torch_on_the_gpu():
    a = torch.randn(300, 64, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(cuda(swizzle_requested)(300, True)(a), a * 2)


@pytest.mark.parametrize("kind", ["linear", "fragment"])
def test_annotated_gemm_matches_torch_on_the_gpu(kind):
    a = torch.randn(64, 64, dtype=torch.float16, device="cuda")
    b = torch.randn(64, 64, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(cuda(gemm_annotated)(kind)(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)

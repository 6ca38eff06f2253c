"""GPU twins of the tools a user steers the compiler with: a ``T.import_source`` decoder called through
``T.call_extern``, and ``T.copy(..., eviction_policy=)`` loads (synchronous and pipelined), against torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import user_device_code_kernels as kernels  # noqa: E402
from test_copy_eviction_policy import pipelined_gemm, staged_scale  # noqa: E402

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

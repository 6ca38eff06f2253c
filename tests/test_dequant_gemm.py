"""W4A16 dequantized GEMM (examples/dequant_gemm.py) against torch on the dequantized weights, on the CPU.

Per-channel and per-group-of-128 scales, the decode shapes (M = 1..16, memory-bound), a prefill shape and ragged
M / N; every packed byte value 0..255 is exercised, so both nibbles and both ends of the int4 range are checked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dequant_gemm.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("tl_example_dequant_gemm", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


dq = _load_example()


def test_dequantize_helper_decodes_low_then_high_nibble_as_signed_int4():
    B = torch.tensor([[0x00, 0xFF, 0x8F, 0x3C]], dtype=torch.uint8)
    W = dq.dequantize(B, torch.ones(1, 1))
    assert W.tolist() == [[-8, -8, 7, 7, 7, 0, 4, -5]]


def test_quantize_round_trips_within_half_a_step():
    W = torch.randn(64, 256)
    for group_size in (-1, 128):
        B, Scale = dq.quantize(W, group_size)
        assert B.dtype == torch.uint8 and B.shape == (64, 128)
        assert Scale.shape == ((64, 1) if group_size == -1 else (64, 2))
        step = Scale.repeat_interleave(256 // Scale.shape[1], dim=1)
        assert ((dq.dequantize(B, Scale) - W).abs() <= step / 2 + 1e-6).all()


@pytest.mark.parametrize("M,N,K,group_size,block_M", [
    (1, 256, 512, -1, 16),      # decode, per-channel scale
    (1, 256, 512, 128, 1),      # decode with a one-row tile
    (4, 192, 1024, 128, 4),
    (16, 256, 512, 128, 16),    # decode, per-group scale
    (64, 128, 384, -1, 32),     # prefill-like
    (100, 200, 256, 128, 32),   # ragged M and N
])
def test_dequant_gemm_matches_torch_on_dequantized_weights(M, N, K, group_size, block_M):
    kernel = dq.dequant_gemm(M, N, K, group_size, block_M=block_M)
    A = torch.randn(M, K)
    B, Scale = dq.random_packed(N, K, group_size)
    out = kernel(A, B, Scale)
    assert out.shape == (M, N)
    torch.testing.assert_close(out, A @ dq.dequantize(B, Scale).T, rtol=1e-4, atol=1e-3)


def test_every_byte_value_decodes_like_torch():
    N, K = 64, 512  # 64 rows of 256 bytes: each row holds every byte value once
    B = torch.stack([torch.randperm(256) for _ in range(N)]).to(torch.uint8)
    Scale = torch.rand(N, K // 128) + 0.5
    A = torch.randn(8, K)
    kernel = dq.dequant_gemm(8, N, K, 128, block_M=8)
    torch.testing.assert_close(kernel(A, B, Scale), dq.reference(A, B, Scale), rtol=1e-4, atol=1e-3)


def test_quantized_weights_approximate_the_float_matmul():
    M, N, K = 8, 128, 512
    W = torch.randn(N, K)
    A = torch.randn(M, K)
    B, Scale = dq.quantize(W, 128)
    out = dq.dequant_gemm(M, N, K, 128, block_M=8)(A, B, Scale)
    rel = (out - A @ W.T).norm() / (A @ W.T).norm()
    assert rel < 0.15  # int4 with 15 levels: a coarse but faithful approximation


def test_bad_group_size_is_a_clear_error():
    with pytest.raises(ValueError, match="multiple of group_size"):
        dq.dequant_gemm(1, 64, 200, 128)

"""Flash attention forward (examples/flash_attention.py) against torch's scaled_dot_product_attention on the CPU.

Shapes are [batch, seq, heads, dim] with dim 64 and 128, causal and not, block sizes that divide seq and ones
that do not (seq 200 with 64-row tiles: the last K/V tile is masked with -inf, the last query tile is partly
outside the tensor), and inputs scaled up so the running max changes between tiles and the online-softmax
rescaling is exercised.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flash_attention.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("tl_example_flash_attention", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fa = _load_example()


def qkv(batch: int, seq: int, heads: int, dim: int, spread: float = 1.0) -> list[torch.Tensor]:
    return [torch.randn(batch, seq, heads, dim) * spread for _ in range(3)]


@pytest.mark.parametrize("batch,heads,seq,dim,block_M,block_N", [
    (1, 2, 128, 64, 64, 64),
    (2, 2, 200, 64, 64, 64),     # ragged: 200 = 3 * 64 + 8
    (1, 3, 200, 128, 64, 64),    # dim 128, ragged
    (1, 2, 200, 64, 32, 64),     # block_M != block_N: causal loop bound ceildiv((bx + 1) * 32, 64)
    (1, 2, 136, 64, 64, 32),
])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_matches_sdpa(batch, heads, seq, dim, block_M, block_N, causal):
    kernel = fa.flash_attention(batch, heads, seq, dim, causal, block_M=block_M, block_N=block_N)
    q, k, v = qkv(batch, seq, heads, dim)
    out = kernel(q, k, v)
    assert out.shape == (batch, seq, heads, dim)
    torch.testing.assert_close(out, fa.reference(q, k, v, causal), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_large_scores_exercise_the_online_rescaling(causal):
    """Scores of magnitude ~100: without the rescaling by exp2(m_old - m_new) the result would be far off."""
    batch, heads, seq, dim = 1, 2, 200, 64
    kernel = fa.flash_attention(batch, heads, seq, dim, causal)
    q, k, v = qkv(batch, seq, heads, dim)
    q = q * 4.0
    k = k * 4.0
    k[:, 150:] *= 2.0  # the row max grows in the last tiles
    out = kernel(q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, fa.reference(q, k, v, causal), rtol=1e-3, atol=1e-3)


def test_causal_kernel_visits_only_the_tiles_below_the_diagonal():
    """The causal loop bound depends on the block index; the non-causal one is a constant."""
    causal = fa.flash_attention(1, 1, 256, 64, True).get_kernel_source("tir")
    full = fa.flash_attention(1, 1, 256, 64, False).get_kernel_source("tir")
    bound = re.search(r"loop_range: T\.int32 = (.*)", causal)
    assert bound is not None and "bx" in bound.group(1)
    assert re.search(r"loop_range: T\.int32 = 4\n", full)


def test_first_row_of_causal_attention_is_the_first_value_row():
    """Row 0 sees only key 0, so its output is exactly V[:, 0] (softmax of one element is 1)."""
    batch, heads, seq, dim = 2, 2, 200, 64
    kernel = fa.flash_attention(batch, heads, seq, dim, True)
    q, k, v = qkv(batch, seq, heads, dim)
    out = kernel(q, k, v)
    torch.testing.assert_close(out[:, 0], v[:, 0], rtol=1e-5, atol=1e-6)


def test_float64_program_matches_sdpa_in_float64():
    """The same program with another dtype: the language does not assume float32."""
    batch, heads, seq, dim = 1, 1, 96, 64
    kernel = fa.flash_attention(batch, heads, seq, dim, True, dtype="float64", accum_dtype="float64")
    q, k, v = (t.double() for t in qkv(batch, seq, heads, dim))
    torch.testing.assert_close(kernel(q, k, v), fa.reference(q, k, v, True), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_flash_attention_compiles_on_the_cpu_and_matches_sdpa(causal):
    """The example in bf16 (Q K^T is a bf16 gemm with a transposed B) used to fail LLVM codegen on the CPU."""
    batch, heads, seq, dim = 1, 2, 200, 64
    kernel = fa.flash_attention(batch, heads, seq, dim, causal, dtype="bfloat16")
    q, k, v = (x.bfloat16() for x in qkv(batch, seq, heads, dim))
    out = kernel(q, k, v)
    ref = fa.reference(q.float(), k.float(), v.float(), causal)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)

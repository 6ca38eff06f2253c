"""tl.SplitMaskedIterations: a mask affine in a serial loop's variable is tested per element only on the iterations
where it is not constant over the T.Parallel nest (the diagonal and ragged tiles of causal attention).

Checked: the causal, ragged flash attention (examples/) still matches SDPA on the CPU with the mask split; the CUDA
source of the causal program selects ``-inf`` only in the masked branch; a masked row-sum program (no gemm, so the
CUDA emulator can run it) through T.Pipelined on the CPU and emulated for CUDA, for a causal mask (upper bound of
k), a banded one (lower bound too) and the same causal mask written as an ``if``; and a mask that is not affine in
the loop variable keeps its per-element test, gives the same result and leaves a note saying why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402

from examples import flash_attention as fa  # noqa: E402

PASS = "tl.SplitMaskedIterations"


@tilelang.jit(out_idx=[1])
def masked_row_sums(N, mask="causal", block_M=16, block_N=16, window=32):
    """``Y[r] = sum of A[r, c] over the visible c``: causal (``c <= r``), banded (``r - window < c <= r``), causal
    and positive (``A[r, c] > 0`` too: data, read at an index in k), the causal mask as an ``if``, or the causal mask
    squared (``c*c <= r*r``: the same set, not affine in k)."""

    @T.prim_func
    def main(A: T.Tensor((N, N), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_M), threads=32) as bx:
            A_shared = T.alloc_shared((block_M, block_N), "float32")
            tile = T.alloc_fragment((block_M, block_N), "float32")
            part = T.alloc_fragment((block_M,), "float32")
            acc = T.alloc_fragment((block_M,), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.min(T.ceildiv(N, block_N), T.ceildiv((bx + 1) * block_M, block_N)),
                                 num_stages=2):
                T.copy(A[bx * block_M:(bx + 1) * block_M, k * block_N:(k + 1) * block_N], A_shared)
                for i, j in T.Parallel(block_M, block_N):
                    if mask == "causal":
                        tile[i, j] = T.if_then_else(
                            (bx * block_M + i >= k * block_N + j) and (k * block_N + j < N), A_shared[i, j], 0)
                    elif mask == "band":
                        tile[i, j] = T.if_then_else(
                            (bx * block_M + i >= k * block_N + j) and (bx * block_M + i - window < k * block_N + j)
                            and (k * block_N + j < N), A_shared[i, j], 0)
                    elif mask == "positive":  # a data-dependent atom (k only in a read's index) beside the affine ones
                        tile[i, j] = T.if_then_else(
                            (bx * block_M + i >= k * block_N + j) and (A[bx * block_M + i, k * block_N + j] > 0)
                            and (k * block_N + j < N), A_shared[i, j], 0)
                    elif mask == "causal_if":
                        tile[i, j] = 0
                        if (bx * block_M + i >= k * block_N + j) and (k * block_N + j < N):
                            tile[i, j] = A_shared[i, j]
                    else:  # "squared" (columns past N read as zeros from the copy)
                        tile[i, j] = T.if_then_else(
                            (k * block_N + j) * (k * block_N + j) <= (bx * block_M + i) * (bx * block_M + i),
                            A_shared[i, j], 0)
                T.reduce_sum(tile, part, dim=1)
                for i in T.Parallel(block_M):
                    acc[i] += part[i]
            T.copy(acc, Y[bx * block_M:(bx + 1) * block_M])

    return main


def row_sums_reference(a: torch.Tensor, mask: str, window: int = 32) -> torch.Tensor:
    n = a.shape[0]
    r, c = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = c <= r
    if mask == "band":
        visible &= c > r - window
    if mask == "positive":
        visible &= a > 0
    return (a * visible).sum(1)


def _split_stage(kernel) -> str:
    return kernel.trace.stage(PASS).text


def test_causal_ragged_flash_attention_tests_the_mask_only_on_diagonal_and_ragged_tiles_and_matches_sdpa():
    # block_M = 2 * block_N: two diagonal K/V tiles per query block; seq 200 = 6 * 32 + 8: a ragged last tile
    kernel = fa.flash_attention(1, 2, 200, 64, True, block_M=64, block_N=32)
    text = _split_stage(kernel)
    assert "if k < bx * 2:" in text, text  # tiles k < 2 bx lie wholly below the diagonal (and inside seq)
    assert kernel.notes == []
    q, k, v = (torch.randn(1, 200, 2, 64) * 3 for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v), fa.reference(q, k, v, True), rtol=1e-4, atol=1e-4)


def test_cuda_source_of_causal_attention_selects_minus_infinity_only_in_the_masked_branch(tmp_path):
    from tilelang_core.jit import _normalize_out_idx, _param_specs
    from tilelang_core.jit.cuda import build_artifact

    def source(out, pass_configs=None):
        out.mkdir()
        func = fa.flash_attention.get_program(1, 2, 250, 64, True, dtype="float16", num_stages=2)
        specs = _param_specs(func)
        build_artifact(func, out, {"kind": "cuda", "arch": "sm_90"}, specs,
                       _normalize_out_idx(fa.flash_attention.out_idx, len(specs)), compile_cubin=False,
                       pass_configs=pass_configs)
        return (out / "kernel.cu").read_text()

    src = source(tmp_path / "split")  # the default (on since the H200 run of 2026-12-02)
    head = "if (k < ((int)blockIdx.x)) {"
    assert src.count(head) == 1, src
    assert source(tmp_path / "on", {"tl.cuda.split_masked_iterations": True}) == src
    # switched off: the mask as written, tested on every tile
    whole = source(tmp_path / "whole", {"tl.cuda.split_masked_iterations": False})
    assert head not in whole and whole.count("-CUDART_INF_F") >= src.count("-CUDART_INF_F")
    unmasked, _, rest = src.split(head, 1)[1].partition("} else {")
    masked = rest[:rest.index("tl::gemm")] if "tl::gemm" in rest else rest
    assert "CUDART_INF_F" not in unmasked and "condval" not in unmasked and "acc_s" in unmasked
    assert "-CUDART_INF_F" in masked and "blockIdx.x" in masked  # the diagonal's compare-and-select


@pytest.mark.parametrize("mask,branch,emulated", [("causal", "if k < bx:", False),
                                                  ("band", "if bx - 1 <= k and k < bx:", True),
                                                  ("causal_if", "if k < bx:", True),
                                                  ("positive", "if k < bx:", False)])
def test_affine_masks_are_split_and_the_row_sums_match_torch_on_cpu_and_emulated_cuda(mask, branch, emulated):
    n = 40  # 3 row blocks; the last column tile is ragged
    a = torch.randn(n, n)
    kernel = masked_row_sums(n, mask)
    assert branch in _split_stage(kernel)
    assert kernel.notes == []
    want = row_sums_reference(a, mask)
    torch.testing.assert_close(kernel(a), want, rtol=1e-5, atol=1e-5)
    if emulated:  # the emulator is slow: the band's mask holds the causal one
        (got,) = emulate(masked_row_sums, (n, mask), {}, [a])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask,window,ref_mask,why", [
    ("squared", 32, "causal", "not affine in the loop variable"),
    ("band", 24, "band", "on no iteration does it hold for the whole nest"),  # a band narrower than a tile
])
def test_a_mask_it_cannot_split_keeps_its_test_and_leaves_a_note(mask, window, ref_mask, why):
    n = 40
    a = torch.randn(n, n)
    kernel = masked_row_sums(n, mask, window=window)
    notes = [x for x in kernel.notes if "tested per element on every iteration of loop `k`" in x]
    assert len(notes) == 1 and why in notes[0], kernel.notes
    assert notes[0].startswith("line ")
    text = _split_stage(kernel)
    assert "if k <" not in text and "<= k" not in text and text.count("T.if_then_else") == 1
    torch.testing.assert_close(kernel(a), row_sums_reference(a, ref_mask, window), rtol=1e-5, atol=1e-5)

"""TMA loads in the pipelined wgmma GEMM on the GPU (issue 15 part 2): ragged shapes whose rows stay 16-byte
multiples go through TMA (the boxes past the edge zero-filled by the hardware), against torch and against the same
kernel with ``tl.disable_tma_lower=True`` (cp.async); transposed operands; a tensor map re-encoded when the call's
tensors change; an input whose data is not 16-byte aligned is refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wgmma_kernels import gemm_t  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
CASES = [  # M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
    (1000, 1032, 1000, 128, 256, 64, False, False, 4, 256, "float16"),
    (777, 520, 328, 128, 128, 64, False, False, 3, 128, "bfloat16"),
    (512, 384, 200, 128, 128, 64, True, False, 4, 256, "float16"),
    (520, 256, 264, 128, 128, 32, False, True, 2, 128, "bfloat16"),
    (256, 256, 40, 128, 128, 64, False, False, 3, 128, "float16"),  # one k-step, K smaller than a box
]


def _kernel(case, pass_configs=None):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pass_configs)(gemm_t.factory)(*case)


@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:3])) + f"-s{c[8]}-{c[10]}" + ("-tA" if c[6] else "")
                                              + ("-tB" if c[7] else "") for c in CASES])
def test_tma_gemm_matches_torch_and_the_cp_async_kernel(case):
    M, N, K, ta, tb, dtype = case[0], case[1], case[2], case[6], case[7], case[10]
    kernel = _kernel(case)
    assert kernel.artifact.extra["cuda"]["tma"], kernel.notes
    plain = _kernel(case, {"tl.disable_tma_lower": True})
    assert not [m for m in plain.artifact.extra["cuda"]["tma"] if not m.get("store")]  # the loads: cp.async
    dt = DT[dtype]
    for _ in range(2):  # new tensors: the maps are encoded again
        a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
        b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
        c = poisoned((M, N), dt)
        kernel(a, b, c)
        ref = torch.relu((a.T if ta else a).float() @ (b.T if tb else b).float())
        tol = 2e-2 if dtype == "bfloat16" else 5e-3
        assert_written_and_close(c, ref.to(dt), rtol=tol, atol=tol * 4)
        torch.testing.assert_close(c, plain(a, b), rtol=0, atol=0)  # same products, same order of the k-steps


def test_a_misaligned_input_is_refused_by_name():
    case = (256, 256, 256, 128, 128, 64, False, False, 3, 128, "float16")
    kernel = _kernel(case)
    base = randn(256 * 256 + 4, dtype=torch.float16)
    a = base[4:].view(256, 256)  # 8 bytes past an aligned address: contiguous, but not 16-byte aligned
    b = randn(256, 256, dtype=torch.float16)
    with pytest.raises(Exception, match=r"'A'"):
        kernel(a, b)

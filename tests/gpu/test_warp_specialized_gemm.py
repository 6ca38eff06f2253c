"""The warp-specialised TMA + wgmma GEMM on the GPU (issue 15 parts 3 and 4): a producer warpgroup feeding the
program's warpgroups through full/empty mbarriers, ``setmaxnreg`` rebalancing, persistent blocks. Ragged and
transposed shapes against torch, and bit for bit against the same program with ``tl.disable_warp_specialized``
(the same products in the same order of k-steps), with ``tl.cuda.setmaxnreg=False`` and with 7 persistent blocks
or one block per tile (``tl.cuda.persistent``); an epilogue through shared memory (the consumers' named barrier);
repeated calls (the barriers' phases start afresh in every block)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_cuda_warp_specialize import gemm_via_shared  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
CASES = [  # M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
    (1000, 1032, 1000, 128, 256, 64, False, False, 4, 256, "float16"),
    (777, 520, 328, 128, 128, 64, False, False, 3, 128, "bfloat16"),
    (512, 384, 200, 128, 128, 64, True, False, 4, 256, "float16"),
    (520, 256, 264, 128, 128, 32, False, True, 2, 128, "bfloat16"),
    (256, 256, 40, 128, 128, 64, False, False, 3, 256, "float16"),  # one k-step
    (2048, 2048, 2048, 128, 128, 64, False, False, 5, 256, "bfloat16"),  # many k-steps around the ring
    (256, 256, 256, 64, 64, 32, False, False, 3, 128, "bfloat16"),  # lost its last k-step before the drain's fix
]


def _kernel(case, pass_configs=None):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs=pass_configs)(gemm_t.factory)(*case)


@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:3])) + f"-s{c[8]}-t{c[9]}-{c[10]}"
                                              + ("-tA" if c[6] else "") + ("-tB" if c[7] else "") for c in CASES])
def test_warp_specialised_gemm_matches_torch_and_the_unspecialised_kernel(case):
    M, N, K, ta, tb, threads, dtype = case[0], case[1], case[2], case[6], case[7], case[9], case[10]
    kernel = _kernel(case)
    assert "tl::setmaxnreg" in kernel.get_kernel_source() or threads == 128, kernel.notes
    assert f"__launch_bounds__({threads + 128})" in kernel.get_kernel_source(), kernel.notes
    plain = _kernel(case, {"tl.disable_warp_specialized": True})
    assert f"__launch_bounds__({threads})" in plain.get_kernel_source()
    flat = _kernel(case, {"tl.cuda.setmaxnreg": False})
    few = _kernel(case, {"tl.cuda.persistent": 7})  # 7 persistent blocks walk all the output tiles
    one_each = _kernel(case, {"tl.cuda.persistent": -1})
    dt = DT[dtype]
    for _ in range(2):
        a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
        b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
        c = poisoned((M, N), dt)
        kernel(a, b, c)
        ref = torch.relu((a.T if ta else a).float() @ (b.T if tb else b).float())
        tol = 2e-2 if dtype == "bfloat16" else 5e-3
        assert_written_and_close(c, ref.to(dt), rtol=tol, atol=tol * 4)
        torch.testing.assert_close(c, plain(a, b), rtol=0, atol=0)
        torch.testing.assert_close(c, flat(a, b), rtol=0, atol=0)
        torch.testing.assert_close(c, few(a, b), rtol=0, atol=0)
        torch.testing.assert_close(c, one_each(a, b), rtol=0, atol=0)


def test_an_epilogue_through_shared_memory_meets_at_the_consumers_barrier():
    M, N, K = 1000, 776, 520
    kernel = tilelang.jit(out_idx=[-1], target="cuda")(gemm_via_shared.factory)(M, N, K)
    assert "tl::named_barrier_sync<1, 256>" in kernel.get_kernel_source(), kernel.notes
    for _ in range(3):
        a, b = randn(M, K, dtype=torch.float16), randn(K, N, dtype=torch.float16)
        c = kernel(a, b)
        assert_written_and_close(c, (a.float() @ b.float()).half(), rtol=5e-3, atol=2e-2)


@pytest.mark.parametrize("persistent", [0, 5, -1])
def test_a_rastered_warp_specialised_gemm_matches_torch(persistent):
    from test_cuda_warp_specialize import gemm_rastered

    M, N, K = 1536, 1280, 640
    kernel = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.persistent": persistent})(
        gemm_rastered.factory)(M, N, K, 3)
    assert "__launch_bounds__(384)" in kernel.get_kernel_source(), kernel.notes
    a, b = randn(M, K, dtype=torch.float16), randn(K, N, dtype=torch.float16)
    assert_written_and_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=5e-3, atol=2e-2)

"""The wgmma GEMM epilogue through a swizzled shared ring and TMA stores on the GPU (issue 15 part 2,
``pass_configs={"tl.cuda.tma_store": True}``, ``transform/cuda/sm90/tma_store.py``): the quickstart GEMM (+ ReLU or
not) in fp16 and bf16, ragged M and N (the tensor map clips the boxes), one, two and three warpgroups along M and
two along N, warp-specialised and persistent (the ring reused across a block's tiles), not persistent, not
warp-specialised (the ring over the dead stages) and with cp.async loads. Each against torch in float64 into a
poisoned output, and bit for bit against the same program with the key off (the register epilogue rounds the same
way); an epilogue cast into a second fragment; a program that stages its epilogue in a shared tile itself (one
unswizzled box); a ragged tile writes nothing past the tensor; repeated calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang

from .conftest import assert_written_and_close, poisoned, randn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_cuda_tma_store import gemm_cast  # noqa: E402
from test_cuda_warp_specialize import gemm_via_shared  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ON = {"tl.cuda.tma_store": True}
OFF = {"tl.cuda.tma_store": False}
# split-K off everywhere: a small grid would otherwise split K, and a split-K epilogue (the last block of a tile,
# in a condition) keeps register stores (noted)
BASE = {"tl.cuda.split_k": 1}
CASES = [  # M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
    (1024, 1024, 1024, 128, 256, 64, False, False, 4, 256, "float16"),  # the H200 fp16 default tile
    (4096, 4096, 512, 256, 128, 64, False, False, 4, 256, "bfloat16"),  # the bf16 default tile, persistent
    (1000, 1000, 1000, 128, 256, 64, False, False, 4, 256, "bfloat16"),  # ragged M and N
    (1000, 1032, 520, 128, 128, 64, False, False, 3, 128, "float16"),  # one warpgroup, two m64 blocks
    (3072, 3000, 512, 192, 192, 64, False, False, 4, 384, "bfloat16"),  # three warpgroups, a one-slab ring
    (256, 520, 256, 64, 256, 64, False, False, 2, 256, "float16"),  # two warpgroups along N, ragged N
    (512, 384, 200, 128, 128, 64, True, False, 4, 256, "float16"),  # transposed A
]
VARIANTS = {
    "ws": {},  # warp-specialised; persistent where the grid has more tiles than SMs
    "one_block_per_tile": {"tl.cuda.persistent": -1},
    "seven_persistent_blocks": {"tl.cuda.persistent": 7},
    "not_ws": {"tl.disable_warp_specialized": True},
    "cp_async": {"tl.disable_tma_lower": True},
}


def _kernel(case, pass_configs=None, relu=True):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **(pass_configs or {})})(
        gemm_t.factory)(*case, relu)


def _operands(case):
    M, N, K, ta, tb, dtype = case[0], case[1], case[2], case[6], case[7], case[10]
    dt = DT[dtype]
    a = randn(K, M, dtype=dt) if ta else randn(M, K, dtype=dt)
    b = randn(N, K, dtype=dt) if tb else randn(K, N, dtype=dt)
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    return a, b, ref


def _needs_hopper(src):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA stores need an sm_90 GPU")
    assert "tl::tma_store_2d(" in src and "tl::wgmma_acc_to_slabs<" in src, "expected the TMA store epilogue"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", CASES, ids=["x".join(map(str, c[:6])) + f"-s{c[8]}-t{c[9]}-{c[10]}"
                                              + ("-tA" if c[6] else "") for c in CASES])
def test_tma_store_epilogue_matches_torch_and_the_register_epilogue(case, variant):
    M, N, dtype = case[0], case[1], case[10]
    on = _kernel(case, {**VARIANTS[variant], **ON})
    _needs_hopper(on.get_kernel_source("cuda"))
    off = _kernel(case, {**VARIANTS[variant], **OFF})
    a, b, ref = _operands(case)
    c = poisoned((M, N), DT[dtype])
    on(a, b, c)
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, torch.relu(ref).to(DT[dtype]), rtol=tol, atol=tol * 4)
    assert torch.equal(c, off(a, b)), "the TMA store epilogue differs from the register epilogue"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_without_relu_negative_values_go_out_too(dtype):
    case = (1000, 1000, 512, 128, 256, 64, False, False, 4, 256, dtype)
    on = _kernel(case, ON, relu=False)
    _needs_hopper(on.get_kernel_source("cuda"))
    a, b, ref = _operands(case)
    c = poisoned((1000, 1000), DT[dtype])
    on(a, b, c)
    assert (c < 0).any()
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, ref.to(DT[dtype]), rtol=tol, atol=tol * 4)
    assert torch.equal(c, _kernel(case, OFF, relu=False)(a, b))


def test_a_ragged_tile_writes_nothing_past_the_tensor():
    case = (1000, 1000, 256, 128, 256, 64, False, False, 4, 256, "float16")
    on = _kernel(case, ON, relu=False)
    _needs_hopper(on.get_kernel_source("cuda"))
    a, b, ref = _operands(case)
    guard = 64 * 1024  # elements after C in the same allocation: the last tile's boxes reach 24 rows past C
    flat = torch.full((1000 * 1000 + guard,), 7.0, dtype=torch.float16, device="cuda")
    c = flat[:1000 * 1000].view(1000, 1000)
    on(a, b, c)
    assert torch.all(flat[1000 * 1000:] == 7.0), "a TMA store box wrote past the end of C"
    torch.testing.assert_close(c.double(), ref.to(torch.float16).double(), rtol=5e-3, atol=2e-2)


def test_repeated_calls_of_a_persistent_kernel_give_the_same_result():
    case = (4096, 4096, 256, 128, 256, 64, False, False, 4, 256, "float16")
    on = _kernel(case, ON)
    src = on.get_kernel_source("cuda")
    _needs_hopper(src)
    assert "tile_iter" in src, "expected a persistent kernel (512 tiles)"
    a, b, ref = _operands(case)
    first = on(a, b)
    for _ in range(3):
        assert torch.equal(on(a, b), first)
    torch.testing.assert_close(first.double(), torch.relu(ref).to(torch.float16).double(), rtol=5e-3, atol=2e-2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_epilogue_cast_into_a_second_fragment_goes_out_through_tma_stores(dtype):
    args = (1000, 1000, 512, 128, 256, 64, 4, 256, dtype)
    on = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **ON})(gemm_cast.factory)(*args)
    _needs_hopper(on.get_kernel_source("cuda"))
    off = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **OFF})(gemm_cast.factory)(*args)
    dt = DT[dtype]
    a, b = randn(1000, 512, dtype=dt), randn(512, 1000, dtype=dt)
    c = poisoned((1000, 1000), dt)
    on(a, b, c)
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    assert_written_and_close(c, torch.relu(a.double() @ b.double()).to(dt), rtol=tol, atol=tol * 4)
    assert torch.equal(c, off(a, b))


@pytest.mark.parametrize("shape, bn, pcs", [
    ((4096, 4096, 512), 128, {}),  # persistent
    ((1000, 1000, 520), 128, {"tl.cuda.persistent": -1}),  # ragged
    ((1000, 1000, 520), 256, {}),  # a box of 256 columns
    ((1000, 1000, 520), 128, {"tl.disable_warp_specialized": True}),  # the tile over the dead stages
])
def test_a_program_staging_its_epilogue_in_shared_memory_stores_that_tile_through_tma(shape, bn, pcs):
    M, N, K = shape
    threads = 256
    on = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **pcs, **ON})(gemm_via_shared.factory)(
        M, N, K, 128, bn, 64, 3, threads)
    src = on.get_kernel_source("cuda")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA stores need an sm_90 GPU")
    assert "tl::tma_store_2d(" in src
    off = tilelang.jit(out_idx=[-1], target="cuda", pass_configs={**BASE, **pcs, **OFF})(gemm_via_shared.factory)(
        M, N, K, 128, bn, 64, 3, threads)
    a, b = randn(M, K, dtype=torch.float16), randn(K, N, dtype=torch.float16)
    c = poisoned((M, N), torch.float16)
    on(a, b, c)
    assert_written_and_close(c, (a.double() @ b.double()).to(torch.float16), rtol=5e-3, atol=2e-2)
    assert torch.equal(c, off(a, b))

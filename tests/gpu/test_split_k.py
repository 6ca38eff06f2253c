"""Split-K as a general transform (tl.SplitKCUDA) on the GPU: decode-shaped ``T.gemm`` kernels with an epilogue
(bias + ReLU + cast), the automatic choice and forced factors, ragged M and N, repeated launches, the
self-healing arrival words (one 64-bit word per tile in the module: the launch's epoch from ``%gridid`` above the
count of its arrivals; docs/cuda.md, "the self-healing arrival counter") read and overwritten through the loaded
module between launches, launches alternating between two streams, replays of a captured CUDA graph, and the
dequantised-GEMM variants of bench/gpu/dequant_variants.py that the W4A16 recogniser does not take (split, with
their nests lowered lane by lane from packed words: tests/test_cuda_packed_nests.py), ragged shapes included.

Written without a GPU and not yet run on one (the CUDA side is checked by tests/test_cuda_split_k.py: nvcc and the
CUDA emulator); run with ``bash bench/gpu/test_suite.sh -k split_k`` on the GPU host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.runtime.cuda_launcher import _check, _driver

from .conftest import assert_written_and_close, poisoned, randn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from test_cuda_split_k import gemm_bias_relu  # noqa: E402


def _kernel(args, kwargs, split):
    return tilelang.jit(out_idx=[-1], target="cuda", pass_configs={"tl.cuda.split_k": split})(
        gemm_bias_relu.factory)(*args, **kwargs)


@pytest.mark.parametrize("M,N,K", [(16, 1024, 4096), (5, 1000, 4096), (13, 200, 8192)])
@pytest.mark.parametrize("split", [0, 1, 2, 8])
def test_split_gemm_with_epilogue_matches_torch(M, N, K, split):
    kernel = _kernel((M, N, K, 16, 128, 64), dict(num_stages=3), split)
    grid = kernel.artifact.extra["cuda"]["grid"]
    if split:
        assert grid[2] == split
    A, B = randn(M, K, dtype=torch.float16), randn(N, K, dtype=torch.float16)
    bias = randn(N)
    ref = torch.relu(A.double() @ B.double().T + bias.double())
    for _ in range(3):  # nothing resets the arrival words: each launch's epoch tells its counts apart
        C = poisoned((M, N), torch.float16)
        kernel(A, B, bias, C)
        assert_written_and_close(C, ref, 1e-2, 5e-2)


def test_split_results_are_deterministic_across_launches():
    kernel = _kernel((16, 1024, 4096, 16, 128, 64), dict(num_stages=3), 4)
    A, B, bias = randn(16, 4096, dtype=torch.float16), randn(1024, 4096, dtype=torch.float16), randn(1024)
    first = kernel(A, B, bias)
    for _ in range(5):
        assert torch.equal(kernel(A, B, bias), first)  # partials summed in rank order, whoever arrives last


@pytest.mark.parametrize("M,N,K", [(7, 1024, 4096), (5, 1000, 2048)])
@pytest.mark.parametrize("v", dv.VARIANTS, ids=[v.name for v in dv.VARIANTS])
def test_dequant_variants_match_torch_at_a_decode_shape(v, M, N, K):
    kernel = dv.compile_variant(v, M, N, K)
    args = dv.inputs(v, M, N, K)
    got = kernel(*args)
    ref = dv.reference(v, args[0], *args[1:])
    assert ((got.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2


# -- the arrival words in the loaded module (include/tl/splitk.cuh) ------------------------------------------------
COUNT_BITS = 16  # SPLITK_COUNT_BITS


def _words_symbol(kernel):
    """(device address, tiles) of the kernel's ``tl::splitk_arrivals<0, TILES>`` array in its loaded module (the
    kernel must have been launched once on the current device, which loads the module)."""
    gx, gy, _ = kernel.artifact.extra["cuda"]["grid"]
    tiles = gx * gy
    loaded = kernel._callable._load(torch.cuda.current_device())
    name = f"_ZN2tl15splitk_arrivalsILi0ELi{tiles}EEE".encode()  # the variable template's mangled name
    dptr, size = _check(_driver().cuModuleGetGlobal(loaded.module, name), "cuModuleGetGlobal")
    assert size == 8 * tiles
    return int(dptr), tiles


def _copy(dst: int, src: int, nbytes: int) -> None:
    driver = _driver()
    torch.cuda.synchronize()
    _check(driver.cuMemcpyDtoD(driver.CUdeviceptr(dst), driver.CUdeviceptr(src), nbytes), "cuMemcpyDtoD")
    torch.cuda.synchronize()


def read_words(kernel) -> list[int]:
    dptr, tiles = _words_symbol(kernel)
    buf = torch.empty(tiles, dtype=torch.int64, device="cuda")
    _copy(buf.data_ptr(), dptr, 8 * tiles)
    return [int(w) & (2**64 - 1) for w in buf.cpu().tolist()]


def write_words(kernel, words: list[int]) -> None:
    dptr, tiles = _words_symbol(kernel)
    signed = [w - 2**64 if w >= 2**63 else w for w in words]
    buf = torch.tensor(signed, dtype=torch.int64, device="cuda")
    _copy(dptr, buf.data_ptr(), 8 * tiles)


def _decode_case(split=4, seed=0):
    kernel = _kernel((16, 1024, 4096, 16, 128, 64), dict(num_stages=3), split)
    g = torch.Generator(device="cuda").manual_seed(seed)

    def inputs():
        A = torch.randn(16, 4096, device="cuda", generator=g).half()
        B = torch.randn(1024, 4096, device="cuda", generator=g).half()
        bias = torch.randn(1024, device="cuda", generator=g)
        return A, B, bias, torch.relu(A.double() @ B.double().T + bias.double())

    return kernel, inputs


def test_every_launch_leaves_its_own_epoch_complete_in_every_tile_and_the_next_launch_a_new_one():
    kernel, inputs = _decode_case()
    A, B, bias, ref = inputs()
    C = poisoned((16, 1024), torch.float16)
    kernel(A, B, bias, C)
    assert_written_and_close(C, ref, 1e-2, 5e-2)
    first = read_words(kernel)
    assert len(first) == 8 and len({w >> COUNT_BITS for w in first}) == 1  # one epoch: %gridid is per launch
    assert all(w & (2**COUNT_BITS - 1) == 4 for w in first)  # every tile complete; nothing reset the count
    C = poisoned((16, 1024), torch.float16)
    kernel(A, B, bias, C)
    assert_written_and_close(C, ref, 1e-2, 5e-2)
    second = read_words(kernel)
    assert len({w >> COUNT_BITS for w in second}) == 1 and all(w & (2**COUNT_BITS - 1) == 4 for w in second)
    assert second[0] >> COUNT_BITS != first[0] >> COUNT_BITS  # the next launch has another epoch


@pytest.mark.parametrize("state", ["this kernel's last epoch", "random epochs"])
def test_counts_left_by_a_launch_that_died_half_way_do_not_fool_the_next_launch(state):
    kernel, inputs = _decode_case()
    A, B, bias, ref = inputs()
    kernel(A, B, bias)
    last = read_words(kernel)[0] >> COUNT_BITS
    gen = torch.Generator().manual_seed(5)
    counts = [k % 4 for k in range(8)]  # 0..3 of 4 arrivals per tile, 3 = one short of complete
    if state == "random epochs":
        epochs = [int(torch.randint(0, 2**47, (1,), generator=gen)) for _ in range(8)]
    else:  # what the previous launch itself would have left, had it died after these arrivals
        epochs = [last] * 8
    write_words(kernel, [e << COUNT_BITS | c for e, c in zip(epochs, counts)])
    for _ in range(2):
        A, B, bias, ref = inputs()
        C = poisoned((16, 1024), torch.float16)
        kernel(A, B, bias, C)
        assert_written_and_close(C, ref, 1e-2, 5e-2)
    assert all(w & (2**COUNT_BITS - 1) == 4 for w in read_words(kernel))


def test_back_to_back_launches_alternating_between_two_streams_are_all_correct():
    kernel, inputs = _decode_case(split=8)
    cases = [inputs() for _ in range(12)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    torch.cuda.synchronize()
    for i, (A, B, bias, _) in enumerate(cases):
        with torch.cuda.stream(streams[i % 2]):
            C = poisoned((16, 1024), torch.float16)  # allocated and poisoned on this stream
            kernel(A, B, bias, C)
            outs.append(C)
    torch.cuda.synchronize()
    for C, (_, _, _, ref) in zip(outs, cases):
        assert_written_and_close(C, ref, 1e-2, 5e-2)


def _captured(kernel, A, B, bias, C):
    """A CUDA graph of one launch of ``kernel`` on these tensors, captured on a stream of its own (warmed up there
    first, so the launcher's stream order has nothing to wait for during the capture)."""
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        kernel(A, B, bias, C)
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        kernel(A, B, bias, C)
    torch.cuda.synchronize()
    return graph


def _replay_on(graph, static, case):
    A, B, bias, C = static
    for dst, src in zip((A, B, bias), case[:3]):
        dst.copy_(src)
    C.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_written_and_close(C, case[3], 1e-2, 5e-2)


def test_replays_of_a_captured_cuda_graph_are_each_correct():
    kernel, inputs = _decode_case()
    A, B, bias, _ = inputs()
    static = (A, B, bias, poisoned((16, 1024), torch.float16))
    graph = _captured(kernel, *static)
    for _ in range(4):  # decode loops replay one graph: whatever %gridid a replay gets, the count starts over
        _replay_on(graph, static, inputs())
    assert all(w & (2**COUNT_BITS - 1) == 4 for w in read_words(kernel))


def test_a_graph_replay_after_a_dead_replays_counts_is_correct():
    """Fails if graph replays share one %gridid: then a dead replay's counts, which this test writes into the
    module with the last replay's epoch, would be taken for the next replay's."""
    kernel, inputs = _decode_case()
    A, B, bias, _ = inputs()
    static = (A, B, bias, poisoned((16, 1024), torch.float16))
    graph = _captured(kernel, *static)
    _replay_on(graph, static, inputs())
    last = read_words(kernel)[0] >> COUNT_BITS
    write_words(kernel, [last << COUNT_BITS | (k % 4) for k in range(8)])
    _replay_on(graph, static, inputs())

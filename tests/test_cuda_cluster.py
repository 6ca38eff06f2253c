"""Thread-block clusters with TMA multicast for the warp-specialised wgmma GEMM on sm_90a (pass_configs
``tl.cuda.cluster``, ``transform/cuda/sm90/cluster.py``), checked without a GPU: the option, the generated CUDA C
(``__cluster_dims__``, one multicast box per shared tile slice, the stage releases to every block, the cluster
barriers), ptxas for sm_90a and the SASS (``UTMALDG.2D.MULTICAST``), the notes where it does not apply, and the
CUDA emulator running the blocks of each cluster together against torch (and catching a release to the own block
only, and a full barrier that expects only the own slice). The GPU test is tests/gpu/test_cluster_gemm.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import PassConfigKey, resolve
from tilelang_core.quickstart import matmul_relu
from tilelang_core.transform.cuda.common import extern_name, is_sync

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulator import EmulationError, Emulator, is_close_fraction  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the sm_90a compile tests need it")
SM90A = {"kind": "cuda", "arch": "sm_90a"}
KEY = PassConfigKey.TL_CUDA_CLUSTER


def _notes(args: tuple, pass_configs: dict[str, Any] | None, arch: str = "sm_90a") -> list[str]:
    mod = cuda_codegen.lower(matmul_relu.get_program(*args), arch=arch, options=resolve(pass_configs))
    func = mod["main"]
    return [str(n) for n in func.attrs["tl.notes"]] if "tl.notes" in func.attrs else []


def _source(args: tuple, pass_configs: dict[str, Any] | None) -> str:
    mod = cuda_codegen.lower(matmul_relu.get_program(*args), arch="sm_90a", options=resolve(pass_configs))
    return cuda_codegen.generate(mod, arch="sm_90a", options=resolve(pass_configs)).source


# -- the option ------------------------------------------------------------------------------------------------

def test_the_cluster_shape_is_validated_kept_as_xyz_and_part_of_the_key():
    assert resolve({KEY: (2, 1)})[KEY] == (2, 1, 1)
    assert resolve({KEY: [1, 2]})[KEY] == (1, 2, 1)
    assert resolve({KEY: (1, 1)}).key() == resolve(None).key()  # (1, 1, 1) is the default: off
    assert resolve({KEY: (2, 1)}).key() != resolve({KEY: (1, 2)}).key() != resolve(None).key()
    for bad in [(3, 1), (2, 2, 2), (0, 2), (2.0, 1), (True, 2), (), (1, 1, 1, 1), "2x1", 2]:
        with pytest.raises(ValueError, match="product is 1, 2 or 4"):
            resolve({KEY: bad})


# -- the generated code ----------------------------------------------------------------------------------------

GEMM = (256, 256, 256, 128, 128, 64, 3, 128, "float16")  # a 2 x 2 grid of 128 x 128 tiles, 4 k-steps on 3 stages


@pytest.mark.parametrize("shape,shared", [((2, 1), "A"), ((1, 2), "B")])
def test_the_shared_operand_is_multicast_in_slices_and_stages_are_released_to_every_block(shape, shared):
    src = _source(GEMM, {KEY: shape})
    cx, cy = shape
    assert f"__global__ void __cluster_dims__({cx}, {cy}, 1) " in src
    loads = [ln for ln in src.splitlines() if "tl::tma_load_2d" in ln]
    multicast = [ln for ln in loads if "tl::tma_load_2d_multicast(" in ln]
    # A (128 x 64): one column block; B (64 x 128): two. The shared tile is loaded in halves of its rows.
    assert len(multicast) == (1 if shared == "A" else 2) and len(loads) == 3, loads
    assert src.count("tl::mbar_arrive_cluster<2>(") == 2  # in the loop (stage k-1) and after the drain
    assert "tl::mbar_arrive(" not in src
    assert src.count("tl::cluster_sync();") == 2  # after the barriers' initialisation, and at the end
    assert "(uint)8);" in src  # empty barriers: 4 consumer warps x 2 blocks
    assert "tile_iter" not in src


def test_the_key_off_leaves_the_kernel_byte_identical():
    assert _source(GEMM, {KEY: (1, 1, 1)}) == _source(GEMM, None)


@needs_nvcc
@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2)])
def test_ptxas_builds_it_for_sm_90a_and_the_sass_has_multicast_tma_loads(shape):
    k = tilelang.compile(matmul_relu.get_program(*GEMM), out_idx=[-1], target=SM90A,
                         pass_configs={KEY: shape, "tl.cuda.split_k": 1})
    res = k.resources()
    assert res is not None and res.spill_stores == 0 and res.spill_loads == 0
    assert res.registers <= 168, res.registers  # the unclustered build: 154 (measured for this file, ptxas 13.0)
    sass = k.get_kernel_source("sass")
    assert "UTMALDG.2D.MULTICAST" in sass
    assert "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass  # barrier.cluster
    assert "SYNCS.ARRIVE.TRANS64.RED" in sass  # the arrivals on the peers' empty barriers
    # of a k-step's three boxes (A: one, B: two) the shared ones are multicast (the producer loop may be unrolled)
    n_multicast, n_all = sass.count("UTMALDG.2D.MULTICAST"), sass.count("UTMALDG.2D")
    assert n_multicast * 3 == n_all * {(2, 1): 1, (1, 2): 2, (2, 2): 3}[shape], (n_multicast, n_all)


def test_a_clusters_producer_warpgroup_keeps_more_registers():
    from tilelang_core.transform.cuda.warp_specialize_cuda import register_split

    assert register_split(256, clustered=True) == (56, 224) and register_split(256) == (40, 232)
    assert register_split(384, clustered=True) == (56, 152) and register_split(384) == (24, 160)
    assert register_split(128, clustered=True) is None


@needs_nvcc
def test_a_persistent_clustered_kernel_builds_without_spills():
    # 512 tiles of 128 x 256: persistent, clusters of 4; at 40 producer registers ptxas spilled ~800 bytes
    k = tilelang.compile(matmul_relu.get_program(4096, 4096, 512, 128, 256, 64, 4, 256, "float16"), out_idx=[-1],
                         target=SM90A, pass_configs={KEY: (2, 2)})
    src = k.get_kernel_source("cuda")
    assert "tile_iter" in src and "tl::setmaxnreg_dec<56>" in src and "tl::setmaxnreg_inc<224>" in src
    res = k.resources()
    assert res is not None and res.spills == 0 and res.registers == 168, res


# -- where it does not apply --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,pass_configs,arch,why", [
    ((256, 256, 256, 128, 256, 64, 3, 256, "float16"), {KEY: (2, 1)}, "sm_90a",
     "blockIdx.x extent 1 is smaller than the cluster's 2"),
    ((256, 256, 256, 128, 128, 64, 3, 128, "float16"), {KEY: (1, 4)}, "sm_90a",
     "blockIdx.y extent 2 is smaller than the cluster's 4"),
    (GEMM, {KEY: (2, 1), "tl.disable_warp_specialized": True}, "sm_90a", "the loop is not warp-specialised"),
    (GEMM, {KEY: (2, 1), "tl.disable_tma_lower": True}, "sm_90a", "not TMA boxes"),
    (GEMM, {KEY: (2, 1)}, "sm_80", "not TMA boxes"),
    (GEMM, {KEY: (1, 1, 4)}, "sm_90a", "z must be 1"),
])
def test_a_cluster_that_does_not_apply_is_noted_and_the_launch_stays(args, pass_configs, arch, why):
    notes = _notes(args, {**pass_configs, "tl.cuda.split_k": 1}, arch)
    found = [n for n in notes if "tl.cuda.cluster" in n]
    assert found and why in found[0], notes
    mod = cuda_codegen.lower(matmul_relu.get_program(*args), arch=arch,
                             options=resolve({**pass_configs, "tl.cuda.split_k": 1}))
    assert "tl.cluster_dims" not in mod["main"].attrs


def test_a_grid_the_cluster_does_not_divide_is_rounded_up_and_the_extra_blocks_store_nothing():
    args = (256, 384, 256, 128, 128, 64, 3, 128, "float16")  # 3 x 2 tiles
    notes = _notes(args, {KEY: (2, 1), "tl.cuda.split_k": 1})
    assert any("blockIdx.x extent 3 is rounded up to 4" in n for n in notes), notes
    mod = cuda_codegen.lower(matmul_relu.get_program(*args), arch="sm_90a",
                             options=resolve({KEY: (2, 1), "tl.cuda.split_k": 1}))
    assert list(mod["main"].attrs["tl.cuda_launch"]["grid"])[:2] == [4, 2]
    src = _source(args, {KEY: (2, 1), "tl.cuda.split_k": 1})
    assert "if (((int)blockIdx.x) < 3) {" in src


@pytest.mark.parametrize("shape", [(2, 1), (1, 2), (2, 2)])
def test_a_persistent_kernel_launches_its_blocks_in_one_dimensional_clusters_that_walk_the_tiles_together(shape):
    args = (4096, 4096, 256, 128, 256, 64, 4, 256, "float16")  # 512 tiles: persistent by default
    size = shape[0] * shape[1]
    notes = _notes(args, {KEY: shape})
    assert any(f"persistent: 132 blocks in clusters of {size} walk the 512 output tiles" in n for n in notes), notes
    src = _source(args, {KEY: shape})
    assert f"__cluster_dims__({size}, 1, 1)" in src and "tile_iter" in src and "tl::tma_load_2d_multicast(" in src


def test_persistent_blocks_that_are_not_whole_clusters_keep_one_block_per_tile():
    notes = _notes((4096, 4096, 256, 128, 256, 64, 4, 256, "float16"), {KEY: (2, 1), "tl.cuda.persistent": 7})
    assert any("not persistent (7 blocks are not whole clusters of 2)" in n for n in notes), notes


# -- the emulator: the blocks of a cluster together --------------------------------------------------------------

def _emulate(args: tuple, shape: tuple[int, ...], edit: Any = None, schedule: str = "round_robin",
             extra: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    M, N, K = args[:3]
    g = torch.Generator().manual_seed(sum(shape) * 7 + M)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    emu = Emulator(matmul_relu.get_program(*args), "sm_90a", {KEY: shape, "tl.cuda.split_k": 1, **(extra or {})},
                   schedule)
    persistent = "tile_iter" in emu.func.script()
    assert emu.cluster == ((shape[0] * shape[1], 1, 1) if persistent else (*shape, 1))  # persistent: 1-D clusters
    if edit is not None:
        emu.func = edit(emu.func)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    emu.run([a, b, c])
    return c, torch.relu(a.double() @ b.double())


@pytest.mark.parametrize("shape", [(2, 1), (1, 2)])
def test_emulated_clusters_of_the_quickstart_gemm_match_torch(shape):
    c, ref = _emulate(GEMM, shape)
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


def test_an_emulated_two_by_two_cluster_multicasting_both_operands_matches_torch():
    c, ref = _emulate((256, 256, 64, 128, 128, 32, 2, 128, "float16"), (2, 2))
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


@pytest.mark.parametrize("args,shape", [((256, 128, 128, 128, 64, 32, 2, 128, "float16"), (2, 1)),
                                        ((256, 128, 128, 128, 64, 32, 2, 128, "float16"), (1, 2)),
                                        ((128, 192, 64, 128, 64, 32, 2, 128, "float16"), (2, 1))],
                         ids=["2x1", "1x2", "2x1-rounded"])
def test_an_emulated_persistent_cluster_walking_the_tiles_together_matches_torch(args, shape):
    # two persistent blocks, one cluster, walking two cluster tiles (the rounded grid's second holds the extra block)
    c, ref = _emulate(args, shape, extra={"tl.cuda.persistent": 2})
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


def test_an_emulated_rounded_grid_matches_torch_and_writes_nothing_outside_c():
    # 3 column blocks rounded up to 4: the fourth block's B boxes lie past N (zero-filled), its A slice is its
    # peer's; it stores nothing (its stores would land past C's rows or, past N, in the next row: reported, or wrong
    # numbers)
    c, ref = _emulate((128, 192, 64, 128, 64, 32, 2, 128, "float16"), (2, 1))
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


def _rewrite(fn: Any) -> Any:
    def edit(func: Any) -> Any:
        def visit(x: Any) -> Any:
            v = x.value
            return fn(v, extern_name(v)) or x if isinstance(v, tvm.ir.Call) else x

        return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))

    return edit


SMALL = (256, 128, 128, 128, 64, 32, 2, 128, "float16")  # 2 x 2 blocks, 4 k-steps on 2 stages


def test_the_emulator_catches_a_release_to_the_own_block_only():
    def own_only(v: Any, name: str | None) -> Any:
        if name == "tl::mbar_arrive_cluster<2>":
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_arrive", v.args[1]))
        if name == "tl::mbar_init" and int(v.args[2].value) == 8:  # the empty barriers: the own 4 warps
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_init", v.args[1], tirx.IntImm("uint32", 4)))
        return None

    with pytest.raises(EmulationError, match="shared-memory race.*TMA load of thread"):
        _emulate(SMALL, (2, 1), _rewrite(own_only))


def test_the_emulator_catches_a_full_barrier_that_expects_only_the_own_slice():
    def own_bytes(v: Any, name: str | None) -> Any:
        if name == "tl::mbar_expect_tx":
            half = tirx.IntImm("uint32", int(v.args[2].value) - 128 * 32 * 2 // 2)  # A's slice of the peer
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_expect_tx", v.args[1], half))
        return None

    # the own bytes complete the phase: the consumers' wgmma reads the half the peer's producer (thread 384: block
    # 1's thread 128) has not yet been ordered before them
    with pytest.raises(EmulationError, match="wgmma of threads 0..127 reads bytes written by thread 384"):
        _emulate(SMALL, (2, 1), _rewrite(own_bytes))


def test_an_emulated_cluster_whose_blocks_run_as_far_ahead_of_each_other_as_they_can_matches_torch():
    c, ref = _emulate(SMALL, (2, 1), schedule="rank_first")
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


@pytest.mark.parametrize("shape,persistent,schedule", [((1, 2), -1, "round_robin"), ((2, 1), 2, "rank_first")],
                         ids=["1x2", "2x1-persistent-rank_first"])
def test_an_emulated_cluster_with_a_tma_store_epilogue_matches_torch(shape, persistent, schedule):
    c, ref = _emulate(SMALL, shape, schedule=schedule,
                      extra={"tl.cuda.tma_store": True, "tl.cuda.persistent": persistent})
    assert is_close_fraction(c, ref, rtol=1e-2, atol=1e-2) == 0.0


def _without_cluster_sync(which: str) -> Any:
    """The kernel without its first cluster barrier (``"init"``: the one after the barriers' initialisation and
    ``__syncthreads``) or its last (``"exit"``)."""

    def is_cluster_sync(x: Any) -> bool:
        return isinstance(x, tirx.Evaluate) and isinstance(x.value, tvm.ir.Call) and \
            extern_name(x.value) == "tl::cluster_sync"

    def seq(x: Any) -> Any:
        items = list(x.seq)
        keep = [y for i, y in enumerate(items) if not (is_cluster_sync(y) and (which == "init") == (
            i > 0 and is_sync(items[i - 1])))]
        return tirx.SeqStmt(keep) if len(keep) != len(items) else x

    def edit(func: Any) -> Any:
        out = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, seq)]))
        assert out.script().count("tl::cluster_sync") == 1
        return out

    return edit


def test_the_emulator_catches_a_multicast_into_a_block_that_has_not_initialised_its_barriers():
    # without the cluster barrier after the initialisation, block 0 runs ahead and multicasts into block 1
    with pytest.raises(EmulationError, match="before tl::mbar_init"):
        _emulate(SMALL, (2, 1), _without_cluster_sync("init"), schedule="rank_first")


def test_the_emulator_catches_an_arrival_on_a_block_that_has_exited():
    # without the cluster barrier at the end, block 0 exits while block 1's consumers still release its stages
    with pytest.raises(EmulationError, match="which has exited"):
        _emulate(SMALL, (2, 1), _without_cluster_sync("exit"), schedule="rank_first")


def test_an_emulated_two_by_two_cluster_of_transposed_operands_matches_torch():
    # A stored K x M and B stored N x K: the shared tiles are MN-major (A^T: 32 x 128, B^T: 64 x 32), sliced by rows
    # of K and of N
    from wgmma_kernels import gemm_t

    M, N, K = 256, 128, 64
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(K, M, generator=g).half(), torch.randn(N, K, generator=g).half()
    emu = Emulator(gemm_t.get_program(M, N, K, 128, 64, 32, True, True, 2, 128, "float16"), "sm_90a",
                   {KEY: (2, 2), "tl.cuda.split_k": 1})
    assert emu.cluster == (2, 2, 1) and emu.func.script().count("tl::tma_load_2d_multicast") >= 2
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    emu.run([a, b, c])
    assert is_close_fraction(c, torch.relu(a.double().T @ b.double().T), rtol=1e-2, atol=1e-2) == 0.0

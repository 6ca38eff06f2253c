"""The CUDA emulator (``tests/cuda_emulator.py``) on the sm_90a kernels our pipeline emits by default, without a GPU.

* matches torch: the quickstart GEMM with TMA loads and a producer warpgroup (fp16; the bf16 run is
  test_cuda_wgmma_pipeline.py's), its persistent form (one block walks two output tiles, the barrier phases running
  on across them; with TMA stores), two consumer warpgroups (named barriers, setmaxnreg), and the TMA pipeline
  without a producer warpgroup (``tl.disable_warp_specialized``); the flash-attention forward with its 4-D K/V
  boxes, a producer warpgroup and two consumer warpgroups in ping-pong (the default TMA attention:
  test_cuda_wgmma_attention.py);
* catches: consumers that never release a stage or never flip their phase bit (deadlocks, reported with what
  every thread waits on), a producer waiting on the wrong phase of a release barrier or not waiting at all (its
  TMA load races with the wgmma reading the stage), consumers releasing a stage their wgmma group in flight still
  reads, a named barrier of one warpgroup where two wrote the tile, a staging slab rewritten before its TMA store
  has read it (races), consumers waiting on the inverted phase (they read a stage before its load lands), and a
  tensor map whose swizzle is not the one the wgmma descriptors read (wrong numbers).

The emulator is pure Python: one or two blocks of small problems per test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

from tilelang_core.quickstart import matmul_relu
from tilelang_core.transform.cuda.common import extern_name, substitute

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from cuda_emulator import EmulationError, Emulator, is_close_fraction  # noqa: E402

from examples import flash_attention  # noqa: E402


def _gemm(args: tuple, pass_configs: dict[str, Any] | None = None, edit: Any = None,
          seed: int = 0) -> tuple[str, torch.Tensor, torch.Tensor]:
    """(the emulated TIR, the emulator's C, torch's relu(A @ B)) of ``matmul_relu(*args)`` on sm_90a; ``edit``
    rewrites the device TIR before the run (the negative tests)."""
    M, N, K = args[:3]
    dt = getattr(torch, args[-1])
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=g).to(dt), torch.randn(K, N, generator=g).to(dt)
    emu = Emulator(matmul_relu.get_program(*args), "sm_90a", pass_configs)
    if edit is not None:
        emu.func = edit(emu.func)
    c = torch.full((M, N), float("nan"), dtype=dt)
    emu.run([a, b, c])
    return emu.func.script(), c, torch.relu(a.double() @ b.double())


def _waits(func: Any, barrier: str, new: Any) -> Any:
    """``func`` with each ``tl::mbar_wait`` on ``barrier`` replaced by ``new(call)`` (a statement)."""

    def visit(x: Any) -> Any:
        v = x.value
        if isinstance(v, tvm.ir.Call) and extern_name(v) == "tl::mbar_wait" and \
                v.args[1].args[0].source.name == barrier:
            return new(v)
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))


def _flip_parity(call: Any) -> Any:
    name, bar, parity = call.args
    return tirx.Evaluate(tirx.call_extern("int32", name.value, bar,
                                          tirx.BitwiseXor(parity, tirx.IntImm("uint32", 1))))


# -- matches torch ---------------------------------------------------------------------------------------------

def test_emulated_tma_gemm_with_a_producer_warpgroup_matches_torch():
    # 100 x 64: two row blocks, the second ragged (the TMA boxes zero-fill below row 100); 3 k-steps on 3 stages
    text, out, ref = _gemm((100, 64, 96, 64, 64, 32, 3, 128, "float16"))
    assert "tl::tma_load_2d<0>" in text and "tl::mbar_wait" in text and "cp_async" not in text
    assert '"threads": 256' in text  # the producer warpgroup beside the program's 128 threads
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_persistent_tma_gemm_walks_two_tiles_per_block_and_matches_torch():
    text, out, ref = _gemm((100, 64, 96, 64, 64, 32, 3, 128, "bfloat16"), {"tl.cuda.persistent": 1})
    assert '"grid": [1, 1, 1]' in text and "tile_iter" in text  # one block, two output tiles
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_tma_gemm_with_two_consumer_warpgroups_matches_torch():
    # block_M 128 over 256 threads: two consumer warpgroups meeting at named barrier 1, registers moved to them
    text, out, ref = _gemm((100, 64, 64, 128, 64, 32, 3, 256, "bfloat16"), seed=1)
    assert "tl::setmaxnreg_inc<232>" in text and "tl::setmaxnreg_dec<40>" in text
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_persistent_tma_gemm_with_tma_stores_matches_torch():
    # the epilogue through a swizzled staging slab and TMA stores (ragged rows clipped by the map), the slab reused
    # by the block's second tile once tl::tma_store_wait_read says the first tile's store has read it
    text, out, ref = _gemm((100, 64, 96, 64, 64, 32, 3, 128, "float16"),
                           {"tl.cuda.tma_store": True, "tl.cuda.persistent": 1}, seed=3)
    assert "tl::tma_store_2d<2>" in text and "tl::wgmma_acc_to_slabs" in text and "tile_iter" in text
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_tma_pipeline_without_a_producer_warpgroup_matches_torch():
    text, out, ref = _gemm((100, 64, 96, 64, 64, 32, 3, 128, "float16"), {"tl.disable_warp_specialized": True},
                           seed=2)
    assert "tl::tma_load_2d<0>" in text and "tl::fence_proxy_async" in text and '"threads": 128' in text
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())


def test_emulated_sm90a_flash_attention_with_a_producer_and_two_ping_pong_consumer_warpgroups_matches_torch():
    # causal, seq 100 in one block of 128 rows (ragged), two K/V tiles as (dim, heads, seq, batch) boxes (d = 16:
    # rows of 32 bytes, the 32-byte swizzle); the producer warpgroup forced (at small d the default keeps two
    # blocks per SM without one), the consumer warpgroups taking turns at S = Q K^T (bar.sync / bar.arrive on named
    # barriers 2 and 3), each warp releasing a stage after __syncwarp
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 100, 1, 16, generator=g).to(torch.float16) for _ in range(3))
    kwargs = {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 256, "dtype": "float16"}
    emu = Emulator(flash_attention.flash_attention.get_program(1, 1, 100, 16, True, **kwargs), "sm_90a",
                   {"tl.cuda.ws_keep_occupancy": False, "tl.cuda.pingpong": True})
    text = emu.func.script()
    assert '"threads": 384' in text and text.count("tl::tma_load_4d") == 2 and "tl::pingpong_pass" in text
    assert json.loads(str(emu.func.attrs["tl.tma_maps"]))[0]["swizzle"] == 32
    assert "tl::setmaxnreg_inc<240>" in text and "__syncwarp" in text
    out = torch.full((1, 100, 1, 16), float("nan"), dtype=torch.float16)
    emu.run([q, k, v, out])
    ref = flash_attention.reference(q.double(), k.double(), v.double(), True)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, float((out.double() - ref).abs().max())


# -- catches ---------------------------------------------------------------------------------------------------

SMALL = (64, 64, 160, 64, 64, 32, 3, 128, "float16")  # one block, 5 k-steps on 3 stages: every stage reused


def _no_release(func: Any) -> Any:
    def visit(x: Any) -> Any:
        v = x.value
        if isinstance(v, tvm.ir.Call) and extern_name(v) == "tl::mbar_arrive":
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))


def test_emulator_reports_a_deadlock_naming_what_each_thread_waits_on():
    # consumers that never release a stage: the producer waits for stage 0 to be free, the consumers for tile 3
    with pytest.raises(EmulationError, match=r"deadlock: no thread of the block can run \(127 of 256 exited\); "
                                             r"threads 0-127: wait on mbarrier tma_bar .*parity 1.*; "
                                             r"thread 128: wait on mbarrier tma_empty .*parity 0 \(0 phases"):
        _gemm(SMALL, edit=_no_release)


def test_emulator_reports_a_producer_waiting_on_the_wrong_release_phase():
    # parity 1 of a fresh release barrier is satisfied at once: tile 3 overwrites stage 0 before tile 0 is read
    with pytest.raises(EmulationError, match="race on smem: the wgmma of threads 0..127 reads bytes written by "
                                             "thread 128"):
        _gemm(SMALL, edit=lambda f: _waits(f, "tma_empty", _flip_parity))


def test_emulator_reports_consumers_waiting_on_the_wrong_phase_of_a_stage():
    # parity 1 of a fresh barrier is satisfied at once: the wgmma reads the stage before its TMA boxes land
    with pytest.raises(EmulationError, match="wgmma reads .* never written"):
        _gemm(SMALL, edit=lambda f: _waits(f, "tma_bar", _flip_parity))


def test_emulator_reports_a_deadlock_of_consumers_that_never_flip_their_phase_bit():
    # parity 0 at every step: right for the first use of each stage, wrong from step 3 on: stage 0 has completed
    # its second phase (tile 3), the consumers wait for a third that never comes; the producer has exited
    def parity_0(call: Any) -> Any:
        return tirx.Evaluate(tirx.call_extern("int32", call.args[0].value, call.args[1], tirx.IntImm("uint32", 0)))

    with pytest.raises(EmulationError, match=r"deadlock: .*\(128 of 256 exited\); threads 0-127: wait on mbarrier "
                                             r"tma_bar .* for parity 0 \(2 phases completed"):
        _gemm(SMALL, edit=lambda f: _waits(f, "tma_bar", parity_0))


def test_emulator_reports_a_tma_load_into_a_stage_not_yet_released():
    # without its wait on the release barrier the producer reloads stage 0 before (or while) the consumers read it
    with pytest.raises(EmulationError, match="race"):
        _gemm(SMALL, edit=lambda f: _waits(f, "tma_empty", lambda _call: tirx.Evaluate(tirx.IntImm("int32", 0))))


def _release_the_stage_in_flight(func: Any) -> Any:
    """The consumers' release at step k of stage k (its wgmma group still in flight) instead of stage k - 1 (the
    group step k's wait_group 1 has just retired)."""
    loops: list[Any] = []
    tvm_ffi.structural_map(func.body, [(tirx.For, lambda x: loops.append(x) or x)])
    k = next(x.loop_var for x in loops if x.loop_var.name == "k")

    def visit(x: Any) -> Any:
        then = x.then_case
        if isinstance(then, tirx.Evaluate) and isinstance(then.value, tvm.ir.Call) and \
                extern_name(then.value) == "tl::mbar_arrive" and isinstance(x.condition, tirx.And):
            return tirx.IfThenElse(x.condition.b, substitute(then, {k: k + 1}), None)  # k >= 1 dropped
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.IfThenElse, visit)]))


def test_emulator_reports_a_stage_released_while_its_wgmma_group_is_in_flight():
    # the producer's TMA load of tile 3 into stage 0 comes after step 0's release but before the wait_group of
    # step 1 retires the group reading stage 0
    text, _, _ = _gemm(SMALL)
    assert "tl::wgmma_gemm_ss<64, 64, 32, 1, 1, 64, 0, 0, 64, 128, 1>" in text  # one group left in flight
    with pytest.raises(EmulationError, match="the TMA load of thread 128 overwrites what an asynchronous read .* of "
                                             "warp 0 read"):
        _gemm(SMALL, edit=_release_the_stage_in_flight)


def test_emulator_reports_a_named_barrier_that_orders_only_one_warpgroup():
    # the attention's Q tile is stored by all 256 consumer threads, then bar.sync 1, 256; as bar.sync 1, 128 each
    # warpgroup meets only itself, and warpgroup 0's wgmma reads Q rows warpgroup 1 stored (at d = 32 each 16-byte
    # store of a thread is a quarter row: rows 0-63, warpgroup 0's m64 block, come from threads 0-255)
    def one_warpgroup(func: Any) -> Any:
        def visit(x: Any) -> Any:
            v = x.value
            if isinstance(v, tvm.ir.Call) and extern_name(v) == "tl::named_barrier_sync<1, 256>":
                return tirx.Evaluate(tirx.call_extern("int32", "tl::named_barrier_sync<1, 128>"))
            return x

        return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 100, 1, 32, generator=g).to(torch.float16) for _ in range(3))
    kwargs = {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 256, "dtype": "float16"}
    emu = Emulator(flash_attention.flash_attention.get_program(1, 1, 100, 32, True, **kwargs), "sm_90a",
                   {"tl.cuda.ws_keep_occupancy": False})
    emu.func = one_warpgroup(emu.func)
    with pytest.raises(EmulationError, match=r"race on smem: the wgmma of threads 0..127 reads bytes written by "
                                             r"thread (12[89]|1[3-9]\d|2[0-5]\d)\b"):
        emu.run([q, k, v, torch.empty(1, 100, 1, 32, dtype=torch.float16)])


def test_emulator_reports_a_staging_slab_rewritten_while_its_tma_store_reads_it():
    def no_wait_read(func: Any) -> Any:
        def visit(x: Any) -> Any:
            v = x.value
            if isinstance(v, tvm.ir.Call) and extern_name(v).startswith("tl::tma_store_wait_read"):
                return tirx.Evaluate(tirx.IntImm("int32", 0))
            return x

        return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))

    with pytest.raises(EmulationError, match=r"thread 0 overwrites what an asynchronous read \(a wgmma, a TMA store\) "
                                             r"of warp 0 read"):
        _gemm((100, 64, 64, 64, 64, 32, 3, 128, "float16"), {"tl.cuda.tma_store": True, "tl.cuda.persistent": 1},
              edit=no_wait_read)


def test_emulator_shows_a_tensor_map_swizzle_the_wgmma_reader_does_not_expect():
    def swizzle_128(func: Any) -> Any:
        maps = json.loads(str(func.attrs["tl.tma_maps"]))
        assert maps[0]["param"] == "A" and maps[0]["swizzle"] == 64  # A's 32-column tile: a 64-byte atom
        maps[0]["swizzle"] = 128
        return func.with_attr("tl.tma_maps", json.dumps(maps))

    _, out, ref = _gemm((64, 64, 64, 64, 64, 32, 3, 128, "float16"), edit=swizzle_128)
    assert is_close_fraction(out, ref, 2e-2, 1e-1) > 0.25

"""One wgmma group in flight across the k-steps of a ``T.Pipelined`` loop (issue 15; ``tl.PipelineCUDA``,
pass_configs ``tl.cuda.wgmma_pipeline``), checked without a GPU.

* an ordering model: the statements ``tl.PipelineCUDA`` emits (prologue, every iteration of the loop, epilogue)
  are replayed for one thread, with the rules of the hardware the block's threads share — a cp.async group lands
  at the ``cp_async_wait`` that retires it and is visible to the other threads after the next barrier; a wgmma
  group reads its stages until the ``wait_group`` that retires it, and another warpgroup may overwrite them only
  after a barrier that follows; the accumulator may not be touched while a group is in flight. The model reports
  a stage overwritten while a step that reads it may be in flight, a stage read before its tile landed, a step
  reading the wrong tile and an accumulator access during a group; it is shown to catch the schedule that keeps
  the full prefetch distance with a group in flight;
* emulated: the quickstart GEMM on that path (bf16, a ragged problem, cp.async or TMA loads, the group in flight, the
  bf16 pair-stored epilogue) run by the CUDA emulator (``tests/cuda_emulator.py``) matches torch;
* codegen: ``tl::wgmma_gemm_ss<..., 1>`` in the loop, ``tl::wgmma_drain`` before the epilogue, the reasons when a
  loop keeps ``wait_group 0``; nvcc for sm_90a and the SASS's ``WARPGROUP.DEPBAR.LE gsb0, 0x1``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tvm
import tvm_ffi
from tvm import tirx

from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.language._ir import Region
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.rewriter import tile_op_name
from tilelang_core.transform.cuda import pipeline_cuda
from tilelang_core.transform.cuda.common import extern_name, is_sync, loads_in, substitute

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulator import emulate, is_close_fraction  # noqa: E402
from test_cuda_wgmma import _cuobjdump  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")
ON, OFF = None, {"tl.cuda.wgmma_pipeline": False}
CP_ASYNC = {"tl.disable_tma_lower": True}  # loads by cp.async (TMA, the default, takes whole 16-byte-pitch tiles)


def _stage(args: tuple, pass_configs: Any = None, name: str = "tl.PipelineCUDA") -> Any:
    """The kernel after pass ``name``; these tests replay one thread's program, so the TMA loop stays on the
    program's threads (the warp-specialised form has its own model: tests/test_cuda_warp_specialize.py)."""
    seen = {}
    pass_configs = {"tl.disable_warp_specialized": True, **(pass_configs or {})}
    cuda_codegen.lower(gemm_t.get_program(*args), record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a",
                       options=resolve(pass_configs))
    return seen[name]


def _notes(func: Any) -> list[str]:
    return [str(n) for n in func.attrs["tl.wgmma_notes"]] if "tl.wgmma_notes" in func.attrs else []


# -- the ordering model ------------------------------------------------------------------------------------------

class HazardError(AssertionError):
    pass


class _Model:
    """Replays the pipelined program of one thread (all threads run the same sequence; barriers align them)."""

    def __init__(self, block_k: int) -> None:
        self.block_k = block_k
        self.env: dict[Any, Any] = {}
        self.acc: set[str] = set()
        self.tile_in: dict[int, int] = {}  # stage -> tile its last load brought
        self.cp_issued: list[int] = []  # stages of cp.asyncs since the last commit
        self.cp_groups: list[list[int]] = []  # committed, not yet waited for
        self.landed_unsynced: set[int] = set()  # landed for this thread, no barrier since (others can't see it)
        self.mma_groups: list[set[int]] = []  # wgmma groups issued, not retired (stages they read)
        self.retired_unsynced: set[int] = set()  # stages of groups retired since the last barrier
        self.steps: list[int] = []  # tile each wgmma step consumed
        self.tma_on: dict[int, list[int]] = {}  # barrier -> stages of TMA loads completing on it, not waited for
        self.tma_phases: dict[int, int] = {}  # barrier -> phases armed (expect_tx)
        self.tma_waits: dict[int, int] = {}  # barrier -> phases waited for
        self.released: dict[int, int] = {}  # stage -> releases (arrivals on its empty barrier)
        self.free_waits: dict[int, int] = {}  # stage -> waits for it to be free

    def value(self, e: Any) -> int:
        v = tvm.sym.Analyzer().simplify(substitute(e, self.env))
        if not isinstance(v, tirx.IntImm):
            raise AssertionError(f"model: {e} is not a constant in iteration {self.env}")
        return int(v)

    def busy(self) -> set[int]:
        return set().union(*self.mma_groups, self.retired_unsynced)

    def run(self, s: Any, pending: int = 0) -> None:  # noqa: C901 - one dispatch over the statement kinds
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.run(x, pending)
        elif isinstance(s, tirx.AttrStmt):
            self.run(s.body, int(s.value) if s.attr_key == pipeline_cuda.WGMMA_PENDING_ATTR else pending)
        elif isinstance(s, tirx.For) and s.kind == tirx.ForKind.THREAD_BINDING:
            self.env[s.loop_var] = tirx.IntImm("int32", 0)
            self.run(s.body)
        elif isinstance(s, tirx.For) and "tl.parallel" in s.annotations:
            self.touch(s)
        elif isinstance(s, tirx.For):
            for i in range(self.value(s.min), self.value(s.min) + self.value(s.extent)):
                self.env[s.loop_var] = tirx.IntImm("int32", i)
                self.run(s.body)
        elif isinstance(s, tirx.IfThenElse):
            if self.value(s.condition):
                self.run(s.then_case)
            elif s.else_case is not None:
                self.run(s.else_case)
        elif isinstance(s, tirx.Evaluate):
            self.evaluate(s, pending)
        elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            return
        else:
            raise AssertionError(f"model: unexpected statement {type(s).__name__}")

    def touch(self, s: Any) -> None:
        """Any access to the accumulator outside a wgmma is a hazard while a group is in flight."""
        names = {str(ld.source.name) for ld in loads_in(s)} | {str(st.buffer.name) for st in _stores(s)}
        if isinstance(s, tirx.Evaluate) and tile_op_name(s) is not None:
            names |= {str(Region.of(a).buffer.name) for a in s.value.args if isinstance(a, tvm.ir.TensorRegion)}
        if self.mma_groups and names & self.acc:
            raise HazardError(f"the accumulator is accessed while {len(self.mma_groups)} wgmma group(s) are in flight")

    def evaluate(self, s: Any, pending: int) -> None:
        op = tile_op_name(s)
        call = s.value
        if op == "tl.copy" and len(call.args) > 2 and self.value(call.args[2]):  # an asynchronous producer
            src, dst = Region.of(call.args[0]), Region.of(call.args[1])
            stage = self.value(dst.mins[0])
            if stage in self.busy():
                raise HazardError(f"a load overwrites stage {stage} while a wgmma step that reads it may be in flight")
            if dst.buffer.name == "A_s":
                self.tile_in[stage] = self.value(src.mins[1]) // self.block_k
            self.cp_issued.append(stage)
        elif op == "tl.gemm":
            a, b, c = (Region.of(x) for x in call.args[:3])
            stages = {self.value(a.mins[0]), self.value(b.mins[0])}
            unlanded = set(self.cp_issued).union(*self.cp_groups, self.landed_unsynced, *self.tma_on.values())
            if stages & unlanded:
                raise HazardError(f"a wgmma step reads stage(s) {sorted(stages & unlanded)} before their loads landed "
                             "for every thread")
            self.steps.append(self.tile_in[self.value(a.mins[0])])
            self.mma_groups.append(stages)
            while len(self.mma_groups) > pending:
                self.retired_unsynced |= self.mma_groups.pop(0)
        elif is_sync(s):
            self.landed_unsynced.clear()
            self.retired_unsynced.clear()
        elif op is None and isinstance(call, tvm.ir.Call) and extern_name(call) is not None:
            name = extern_name(call)
            if name == "tl::cp_async_commit":
                self.cp_groups.append(self.cp_issued)
                self.cp_issued = []
            elif m := re.fullmatch(r"tl::cp_async_wait<(\d+)>", name):
                while len(self.cp_groups) > int(m[1]):
                    self.landed_unsynced |= set(self.cp_groups.pop(0))
            elif name.startswith("tl::wgmma_drain<"):
                while self.mma_groups:
                    self.retired_unsynced |= self.mma_groups.pop(0)
            elif name.startswith("tl::tma_load_2d<"):  # lands, for every thread, at the wait on its barrier
                dst, bar = call.args[1].args[0], call.args[2].args[0]
                stage = self.value(dst.indices[0])
                if stage in self.busy():
                    raise HazardError(f"a load overwrites stage {stage} while a wgmma step that reads it may be in "
                                      "flight")
                if dst.source.name == "A_s":
                    self.tile_in[stage] = self.value(call.args[3]) // self.block_k
                self.tma_on.setdefault(self.value(bar.indices[0]), []).append(stage)
            elif name == "tl::mbar_expect_tx":
                b = self.value(call.args[1].args[0].indices[0])
                self.tma_phases[b] = self.tma_phases.get(b, 0) + 1
            elif name == "tl::mbar_arrive":  # every thread releases a stage once the group reading it retired
                b = self.value(call.args[1].args[0].indices[0])
                if any(b in g for g in self.mma_groups):
                    raise HazardError(f"stage {b} is released while a wgmma group that reads it is in flight")
                self.released[b] = self.released.get(b, 0) + 1
            elif name == "tl::mbar_wait" and call.args[1].args[0].source.name == "tma_empty":
                b = self.value(call.args[1].args[0].indices[0])
                done = self.free_waits.get(b, 0)
                if self.value(call.args[2]) != done % 2 or self.released.get(b, 0) <= done:
                    raise HazardError(f"a wait for stage {b} to be free (parity {self.value(call.args[2])}) does not "
                                      f"match its next release ({done} waited, {self.released.get(b, 0)} released)")
                self.free_waits[b] = done + 1
                self.retired_unsynced.discard(b)  # every thread has released it: the load may overwrite it
            elif name == "tl::mbar_wait":
                b = self.value(call.args[1].args[0].indices[0])
                done = self.tma_waits.get(b, 0)
                if self.value(call.args[2]) != done % 2 or self.tma_phases.get(b, 0) <= done:
                    raise HazardError(f"a wait on barrier {b} for parity {self.value(call.args[2])} does not match "
                                      f"its next phase ({done} waited, {self.tma_phases.get(b, 0)} armed)")
                self.tma_waits[b] = done + 1
                self.tma_on.pop(b, None)
            elif name in ("tl::mbar_init", "tl::mbar_fence_init", "tl::fence_proxy_async"):
                pass
            else:
                raise AssertionError(f"model: unknown device function {name}")
        else:
            self.touch(s)


def _stores(s: Any) -> list[Any]:
    out: list[Any] = []

    def rec(x: Any) -> Any:
        out.append(x)
        return x

    tvm_ffi.structural_map(s, [(tirx.BufferStore, rec)])
    return out


def _replay(args: tuple, pass_configs: Any = None) -> _Model:
    func = _stage(args, pass_configs)
    model = _Model(block_k=args[5])
    model.acc = {"C_f", *[str(v.name) for v in func.attrs["tl.fragment_locals"].values()]}
    model.run(func.body)
    return model


# M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
@pytest.mark.parametrize("stages,k_tiles", [(3, 7), (4, 7), (4, 2), (3, 1), (5, 9), (2, 5)])
@pytest.mark.parametrize("pass_configs", [ON, OFF], ids=["in_flight", "wait0"])
def test_pipelined_wgmma_never_overwrites_a_stage_a_step_in_flight_reads(stages, k_tiles, pass_configs):
    args = (256, 256, 64 * k_tiles - 13, 128, 128, 64, False, False, stages, 256, "float16")
    model = _replay(args, pass_configs)
    assert model.steps == list(range(k_tiles))  # every tile consumed once, in order, from the stage it was put in
    assert not model.mma_groups  # drained before the epilogue


RELEASE = {"tl.cuda.tma_release": True}  # empty barriers instead of a __syncthreads per k-step


@pytest.mark.parametrize("stages,k_tiles", [(3, 7), (4, 2), (5, 9), (2, 5)])
@pytest.mark.parametrize("pass_configs", [ON, OFF, RELEASE, {**OFF, **RELEASE}],
                         ids=["in_flight", "wait0", "in_flight-release", "wait0-release"])
def test_tma_pipeline_lands_every_tile_before_its_step_and_overwrites_no_stage_in_use(stages, k_tiles,
                                                                                     pass_configs):
    args = (256, 256, 64 * k_tiles, 128, 128, 64, False, False, stages, 256, "float16")
    func = _stage(args, pass_configs)
    assert "tl::tma_load_2d<0>" in func.script() and "cp_async" not in func.script()
    assert ("tma_empty" in func.script()) == ("tl.cuda.tma_release" in (pass_configs or {}))
    model = _replay(args, pass_configs)
    assert model.steps == list(range(k_tiles)) and not model.mma_groups and not model.tma_on


@pytest.mark.parametrize("loads", [CP_ASYNC, None, RELEASE], ids=["cp.async", "tma", "tma-release"])
def test_the_model_catches_the_full_prefetch_distance_with_a_group_in_flight(monkeypatch, loads):
    args = (256, 256, 64 * 6, 128, 128, 64, False, False, 3, 128, "float16")
    monkeypatch.setattr(pipeline_cuda, "prefetch_distance", lambda stages, in_flight: stages - 1)
    # with empty barriers the loading thread would wait for a release that only comes after it (a deadlock)
    with pytest.raises(HazardError, match="overwrites stage|does not match its next release"):
        _replay(args, loads)


def test_the_model_catches_a_tma_step_that_does_not_wait_for_its_tile():
    func = _stage((256, 256, 320, 128, 128, 64, False, False, 3, 128, "float16"))

    def no_wait(x: Any) -> Any:
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::mbar_wait":
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return x

    with pytest.raises(HazardError, match="before their loads landed"):
        _Model(block_k=64).run(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, no_wait)]))


def test_the_model_catches_a_load_that_does_not_wait_for_its_stage_to_be_released():
    func = _stage((256, 256, 64 * 8, 128, 128, 64, False, False, 3, 128, "float16"), RELEASE)

    def no_free_wait(x: Any) -> Any:
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::mbar_wait" and \
                x.value.args[1].args[0].source.name == "tma_empty":
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return x

    with pytest.raises(HazardError, match="overwrites stage"):
        _Model(block_k=64).run(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, no_free_wait)]))


def test_the_model_catches_a_stage_released_before_its_group_retired(monkeypatch):
    from tilelang_core.transform.cuda.sm90 import tma

    real = tma.tma_loop

    def early(*a, **kw):  # release the stage of step k itself while its group is still in flight
        if a[13] == "in_flight" if len(a) > 13 else kw.get("release") == "in_flight":
            a = (*a[:13], "wait0", *a[14:])
        return real(*a, **kw)

    monkeypatch.setattr(tma, "tma_loop", early)
    with pytest.raises(HazardError, match="released while a wgmma group that reads it is in flight"):
        _replay((256, 256, 64 * 6, 128, 128, 64, False, False, 3, 128, "float16"), RELEASE)


def test_the_model_catches_a_tma_wait_on_the_wrong_phase():
    func = _stage((256, 256, 64 * 8, 128, 128, 64, False, False, 3, 128, "float16"))

    def wrong_parity(x: Any) -> Any:
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::mbar_wait":
            a = x.value.args
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_wait", a[1], tirx.IntImm("uint32", 0)))
        return x

    with pytest.raises(HazardError, match="does not match its next phase"):
        _Model(block_k=64).run(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, wrong_parity)]))


def test_the_model_catches_a_step_that_does_not_wait_for_its_tile():
    func = _stage((256, 256, 320, 128, 128, 64, False, False, 3, 128, "float16"), CP_ASYNC)
    model = _Model(block_k=64)

    def wait_less(x: Any) -> Any:  # the loop's wait lets the group of tile k still be pending
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::cp_async_wait<0>":
            return tirx.Evaluate(tirx.call_extern("int32", "tl::cp_async_wait<1>"))
        return x

    with pytest.raises(HazardError, match="before their loads landed"):
        model.run(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, wait_less)]))


@pytest.mark.parametrize("loads", [CP_ASYNC, None], ids=["cp.async", "tma"])
def test_the_model_catches_an_accumulator_read_before_the_drain(loads):
    func = _stage((256, 256, 320, 128, 128, 64, False, False, 3, 128, "float16"), loads)
    model = _Model(block_k=64)
    model.acc = {"C_f", *[str(v.name) for v in func.attrs["tl.fragment_locals"].values()]}
    def drop_drain(x: Any) -> Any:
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::wgmma_drain<128>":
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return x

    no_drain = tvm_ffi.structural_map(func.body, [(tirx.Evaluate, drop_drain)])
    with pytest.raises(HazardError, match="accumulator"):
        model.run(no_drain)


# -- codegen -----------------------------------------------------------------------------------------------------

def test_pipelined_wgmma_loop_leaves_one_group_in_flight_and_drains_before_the_epilogue():
    args = (1000, 1030, 1000, 128, 128, 64, False, False, 3, 128, "float16")
    text = _stage(args, name="tl.LowerTileOpsCUDA").script()
    loop = text.index("for k in range(16)")
    call = text.index("tl::wgmma_gemm_ss<128, 128, 64, 1, 1, 128, 0, 0, 128, 128, 1>")
    drain = text.index("tl::wgmma_drain<128>")
    assert loop < call < drain < text.index("T.max(")  # the ReLU reads the accumulator after the drain
    assert text[loop:call].count("tl::cp_async_wait<0>") == 1  # 3 stages, one load ahead: tile k must be in
    assert "tl.wgmma_pending" not in text
    off = _stage(args, OFF, name="tl.LowerTileOpsCUDA").script()
    assert "tl::wgmma_gemm_ss<128, 128, 64, 1, 1, 128, 0, 0, 128, 128>" in off and "wgmma_drain" not in off
    assert "tl::cp_async_wait<1>" in off  # two loads ahead, as before


@pytest.mark.parametrize("args,pass_configs,why", [
    ((256, 256, 256, 128, 128, 64, False, False, 2, 128, "float16"), ON, "num_stages=2 leaves no shared stage"),
    ((256, 256, 256, 128, 128, 64, False, False, 3, 128, "float16"), OFF, "'tl.cuda.wgmma_pipeline' is False"),
    ((256, 256, 256, 128, 128, 64, False, False, 1, 128, "float16"), ON, "num_stages=1: the loop is not"),
])
def test_loops_that_keep_wait_group_0_say_why(args, pass_configs, why):
    func = _stage(args, pass_configs)
    notes = _notes(func)
    assert len(notes) == 1 and why in notes[0], notes
    assert re.match(r"line \d+: T.gemm keeps wgmma.wait_group 0", notes[0])
    assert "tl.wgmma_pending" not in func.script()


def test_the_wgmma_pipeline_switch_is_validated_and_in_the_cache_key():
    assert resolve(OFF).key() != resolve(None).key()
    with pytest.raises(ValueError, match=r"tl.cuda.wgmma_pipeline.*True or False"):
        resolve({"tl.cuda.wgmma_pipeline": 1.5})


@needs_nvcc
def test_in_flight_mainloop_compiles_to_hgmma_with_one_group_pending(tmp_path):
    args = (4096, 4096, 4096, 128, 128, 64, False, False, 3, 128, "float16")
    func = gemm_t.get_program(*args)
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([-1], 3), compile_cubin=True)
    info = art.extra["cuda"]["ptxas_info"]
    assert "0 bytes spill stores" in info and "C7515" not in info and "serializ" not in info.lower()
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout
    assert "HGMMA.64x128x16.F32" in sass and "HMMA" not in sass
    # the loop waits with one group pending, the drain once with none; ptxas did not serialise the wgmma (it would
    # add waits for zero pending groups after them)
    assert sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1") == 1 and sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 1
    assert sass.count("WARPGROUP.ARRIVE") == 1


@pytest.mark.parametrize("loads", [CP_ASYNC, None], ids=["cp.async", "tma"])
def test_emulated_quickstart_gemm_with_a_group_in_flight_matches_torch(loads):
    # tma (the default): the loads are TMA boxes issued by a producer warpgroup, handed over on mbarriers
    import torch

    from tilelang_core.quickstart import matmul_relu

    g = torch.Generator().manual_seed(5)
    a = torch.randn(100, 96, generator=g).to(torch.bfloat16)
    b = torch.randn(96, 72, generator=g).to(torch.bfloat16)
    args = (100, 72, 96, 64, 64, 32, 3, 128, "bfloat16")
    text = cuda_codegen.lower(matmul_relu.get_program(*args), arch="sm_90a", options=resolve(loads))["main"].script()
    assert "tl::wgmma_gemm_ss<64, 64, 32, 1, 1, 64, 0, 0, 64, 128, 1>" in text and "tl::wgmma_drain<32>" in text
    assert ("tl::tma_load_2d" in text) == (loads is None)
    out, = emulate(matmul_relu, args, {}, [a, b], arch="sm_90a", pass_configs=loads)
    ref = torch.relu(a.double() @ b.double())
    assert is_close_fraction(out, ref, 2e-2, 1e-1) == 0.0, float((out.double() - ref).abs().max())

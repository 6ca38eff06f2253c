"""Warp specialisation of the TMA-fed wgmma GEMM loop on sm_90 (issue 15 part 3; ``tl.PipelineCUDA`` emits it,
``tl.WarpSpecializeCUDA`` splits the block), checked without a GPU.

* a concurrency model: the producer part (one thread) and the consumer part (every consumer warp) that
  ``tl.PipelineCUDA`` emits run as separate processes, interleaved in many random orders and in the two extreme
  ones (the producer as far ahead as it can get, the consumers as far ahead as they can get), with the hardware's
  rules: an mbarrier phase completes when its arrivals and transaction bytes are in, a parity wait passes when
  the barrier's current phase has the other parity, a TMA box lands at the completion of its barrier's phase, a
  wgmma group reads its stages until a ``wait_group`` retires it. The model reports a load that overwrites a tile
  a warp has not consumed or a stage a group in flight reads, a step that reads a stage before its tile landed or
  the wrong tile, a release while the group reading the stage is in flight, an accumulator access with a group in
  flight, and a deadlock; it is shown to catch each of a missing wait, a wrong parity, an early release and a
  missing release; with ``tl.cuda.gemm_pingpong`` the two consumer warpgroups take alternate tiles and turns at the
  mainloop (named barriers 2 and 3 as bar.sync / bar.arrive of 4 warps each): the model also reports mainloops out
  of tile order and a turn passed twice, every turn must be taken by the end, and it is shown to catch missing turn
  barriers, a missing turn wait and the wrong first turn;
* the split itself: ``threads + 128`` threads, the producer branch on the first producer thread, ``setmaxnreg``,
  the consumers' barriers as named barriers, the notes when a loop is not specialised; nvcc for sm_90a and the
  SASS (UTMALDG in the producer, HGMMA, USETMAXREG).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.language._ir import Region
from tilelang_core.pass_config import resolve
from tilelang_core.transform.common.rewriter import tile_op_name
from tilelang_core.transform.cuda import warp_specialize_cuda as wsc
from tilelang_core.transform.cuda.common import extern_name, is_sync, loads_in, substitute
from tilelang_core.transform.cuda.sm90 import gemm_pingpong
from tilelang_core.transform.cuda.sm90 import warp_specialize as ws

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda_wgmma import _cuobjdump  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")
WAIT0 = {"tl.cuda.wgmma_pipeline": False}


def _lower(prog: Any, pass_configs: Any = None) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    cuda_codegen.lower(prog, record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a",
                       options=resolve(pass_configs))
    return seen


def _stage(args: tuple, pass_configs: Any = None, name: str = "tl.PipelineCUDA") -> Any:
    return _lower(gemm_t.get_program(*args), pass_configs)[name]


def _notes(func: Any) -> list[str]:
    return [str(n) for n in func.attrs["tl.notes"]] if "tl.notes" in func.attrs else []


# -- the concurrency model ---------------------------------------------------------------------------------------

class HazardError(AssertionError):
    pass


def _find_attr(node: Any, key: str) -> Any:
    found: list[Any] = []

    def visit(x: Any) -> Any:
        if str(x.attr_key) == key:
            found.append(x)
        return x

    tvm_ffi.structural_map(node, [(tirx.AttrStmt, visit)])
    return found[0] if found else None


def _value(e: Any, env: dict[Any, Any]) -> int:
    v = tvm.sym.Analyzer().simplify(substitute(e, env))
    if not isinstance(v, tirx.IntImm):
        raise AssertionError(f"model: {e} is not a constant in {env}")
    return int(v)


def _ops(s: Any, env: dict[Any, Any], out: list[tuple], pending: int = 0) -> None:  # noqa: C901 - one dispatch
    """The operations one process performs, in order (its loops and conditions depend on indices only)."""
    if isinstance(s, tirx.SeqStmt):
        for x in s.seq:
            _ops(x, env, out, pending)
    elif isinstance(s, tirx.AttrStmt):
        _ops(s.body, env, out, int(s.value) if str(s.attr_key) == "tl.wgmma_pending" else pending)
    elif isinstance(s, tirx.For) and "tl.parallel" in s.annotations:
        out.append(("touch", _names(s)))
    elif isinstance(s, tirx.For):
        for i in range(_value(s.min, env), _value(s.min, env) + _value(s.extent, env)):
            _ops(s.body, {**env, s.loop_var: tirx.IntImm("int32", i)}, out, pending)
    elif isinstance(s, tirx.IfThenElse):
        if _value(s.condition, env):
            _ops(s.then_case, env, out, pending)
        elif s.else_case is not None:
            _ops(s.else_case, env, out, pending)
    elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
        return
    elif isinstance(s, tirx.Bind):  # a let binding: the statements after it in its sequence see it
        env[s.var] = tirx.IntImm("int32", _value(s.value, env))
    elif isinstance(s, tirx.Evaluate):
        call = s.value
        op = tile_op_name(s)
        if op == "tl.gemm":
            a, b = Region.of(call.args[0]), Region.of(call.args[1])
            out.append(("gemm", {("A_s", _value(a.mins[0], env)), ("B_s", _value(b.mins[0], env))},
                        _step(env, "k"), pending))
        elif is_sync(s):
            out.append(("sync",))
        elif op is None and isinstance(call, tvm.ir.Call) and extern_name(call) is not None:
            name = extern_name(call)

            def bar(i: int) -> tuple[str, int]:
                ld = call.args[i].args[0]
                return str(ld.source.name), _value(ld.indices[0], env)

            if name == "tl::mbar_wait":
                out.append(("wait", bar(1), _value(call.args[2], env)))
            elif name == "tl::mbar_expect_tx":
                out.append(("expect", bar(1), _value(call.args[2], env)))
            elif name == "tl::mbar_arrive":
                out.append(("arrive", bar(1)))
            elif m := re.fullmatch(r"tl::tma_load_2d<(\d+)>", name):
                dst = call.args[1].args[0]
                tile = _step(env, "k_load")
                out.append(("tma", int(m[1]), (str(dst.source.name), _value(dst.indices[0], env)), bar(2), tile))
            elif name in ("tl::pingpong_wait", "tl::pingpong_pass"):  # bar.sync 2 + wg / bar.arrive 3 - wg
                wg = _value(call.args[1], env)
                out.append(("turn_wait", 2 + wg) if name == "tl::pingpong_wait" else ("turn_pass", 3 - wg))
            elif name.startswith("tl::wgmma_drain<"):
                out.append(("drain",))
            elif name in ("tl::mbar_init", "tl::mbar_fence_init", "tl::fence_proxy_async"):
                return
            else:
                raise AssertionError(f"model: unknown device function {name}")
        else:
            out.append(("touch", _names(s)))
    else:
        raise AssertionError(f"model: unexpected statement {type(s).__name__}")


def _step(env: dict[Any, Any], name: str) -> tuple[int, int]:
    """(output tile of a persistent block, k-step) of the iteration ``env`` is in."""
    val = {str(var.name): _value(v, {}) for var, v in env.items()}
    return val.get("tile_iter", 0), val[name]


def _names(s: Any) -> set[str]:
    names = {str(ld.source.name) for ld in loads_in(s)}

    def st(x: Any) -> Any:
        names.add(str(x.buffer.name))
        return x

    tvm_ffi.structural_map(s, [(tirx.BufferStore, st)])
    if isinstance(s, tirx.Evaluate) and tile_op_name(s) is not None:
        names |= {str(Region.of(a).buffer.name) for a in s.value.args if isinstance(a, tvm.ir.TensorRegion)}
    return names


class _Model:
    """The producer thread and the consumer warps of one block, as processes over their operation lists."""

    def __init__(self, func: Any, block_k: int, block: int = 0) -> None:
        split = _find_attr(func.body, ws.ATTR_SPLIT)
        assert split is not None, "no warp-specialised loop"
        self.threads = int(split.value)
        parts = {str(x.attr_key): x.body for x in split.body.seq}
        tid = next(iter(_thread_vars(func)))
        blocks = {v: tirx.IntImm("int32", block) for v in _thread_vars(func, "blockIdx.")}
        maps = json.loads(str(func.attrs["tl.tma_maps"]))
        self.box_bytes = [m["box"][0] * m["box"][1] * 2 for m in maps]
        self.block_k = block_k
        self.acc = {"C_f", *[str(v.name) for v in func.attrs["tl.fragment_locals"].values()]}
        self.procs: list[list[tuple]] = []
        prod: list[tuple] = []
        _ops(parts[ws.ATTR_PRODUCER], {**blocks, tid: tirx.IntImm("int32", self.threads)}, prod)
        self.procs.append(prod)
        self.warps = self.threads // 32
        for w in range(self.warps):
            ops: list[tuple] = []
            env = {**blocks, tid: tirx.IntImm("int32", 32 * w)}
            consumer = _find_attr(split, ws.ATTR_CONSUMER)
            if gemm_pingpong.is_pingpong(consumer):  # its warpgroup index, bound by tl.WarpSpecializeCUDA
                env[consumer.node] = tirx.IntImm("int32", 32 * w // 128)
            _ops(parts[ws.ATTR_CONSUMER], env, ops)
            self.procs.append(ops)
        init = _inits(func.body)
        self.count = dict(init)  # barrier -> arrivals still expected in the current phase
        self.need = dict(init)  # barrier -> arrivals per phase
        self.tx: dict[Any, int] = {b: 0 for b in init}  # barrier -> transaction bytes still expected
        self.phase: dict[Any, int] = {b: 0 for b in init}  # barrier -> completed phases
        self.in_transit: dict[Any, list[tuple]] = {b: [] for b in init}  # barrier -> (stage, tile) landing on it
        self.content: dict[tuple, tuple[int, bool]] = {}  # (tile buffer, stage) -> (tile, landed)
        self.groups: list[list[set]] = [[] for _ in range(self.warps)]  # per warp: stages of groups in flight
        self.steps: list[list[int]] = [[] for _ in range(self.warps)]  # per warp: tiles consumed, in order
        self.pc = [0] * len(self.procs)
        self.passed: dict[int, int] = {2: 0, 3: 0}  # turn barrier -> warps of the other warpgroup arrived
        self.pingpong = gemm_pingpong.is_pingpong(_find_attr(split, ws.ATTR_CONSUMER))  # tl.cuda.gemm_pingpong
        self.latest = 0  # the latest output tile a gemm was issued for

    def _group(self, p: int) -> list[int]:
        """The processes of consumer warp ``p - 1``'s warpgroup."""
        g = (p - 1) // 4
        return [1 + 4 * g + i for i in range(4)]

    def _complete(self, b: Any) -> None:
        if self.count[b] == 0 and self.tx[b] == 0:
            self.phase[b] += 1
            self.count[b] = self.need[b]
            for key, tile in self.in_transit[b]:
                self.content[key] = (tile, True)
            self.in_transit[b] = []

    def runnable(self, p: int) -> bool:
        if self.pc[p] >= len(self.procs[p]):
            return False
        op = self.procs[p][self.pc[p]]
        if op[0] == "wait":
            return self.phase[op[1]] % 2 != op[2]
        if op[0] == "turn_wait":  # bar.sync 2 + wg, 256: the 4 warps here and the other 4 arrived
            return self.passed[op[1]] >= 4 and all(self.pc[q] < len(self.procs[q]) and self.procs[q][self.pc[q]] == op
                                                   for q in self._group(p))
        if op[0] == "sync":  # a barrier of the consumer warps: every warp has reached it
            return all(self.pc[q] < len(self.procs[q]) and self.procs[q][self.pc[q]][0] == "sync"
                       for q in range(1, len(self.procs)))
        return True

    def step(self, p: int) -> None:  # noqa: C901 - one dispatch over the operations
        op = self.procs[p][self.pc[p]]
        w = p - 1
        kind = op[0]
        if kind == "sync":
            for q in range(1, len(self.procs)):
                self.pc[q] += 1
            return
        if kind == "turn_wait":
            for q in self._group(p):
                self.pc[q] += 1
            self.passed[op[1]] -= 4
            return
        self.pc[p] += 1
        if kind == "turn_pass":
            self.passed[op[1]] += 1
            if self.passed[op[1]] > 4:
                raise HazardError(f"the turn is passed on named barrier {op[1]} twice before it is taken")
        elif kind == "expect":
            self.count[op[1]] -= 1
            self.tx[op[1]] += op[2]
            self._complete(op[1])
        elif kind == "tma":
            _, index, key, b, tile = op
            for v in range(self.warps):
                if any(key in g for g in self.groups[v]):
                    raise HazardError(f"a load overwrites {key} while a wgmma group of warp {v} reads it")
                old = self.content.get(key)
                mine = not self.pingpong or v // 4 == old[0][0] % 2 if old is not None else True  # ping-pong: wg t % 2
                if old is not None and old[0] != tile and old[0] not in self.steps[v] and mine:  # (several boxes)
                    raise HazardError(f"a load overwrites {key} before warp {v} consumed tile {old[0]}")
            self.content[key] = (tile, False)
            self.in_transit[b].append((key, tile))
            self.tx[b] -= self.box_bytes[index]
            self._complete(b)
        elif kind == "gemm":
            _, stages, k, pending = op
            for key in stages:
                tile, landed = self.content.get(key, (None, False))
                if not landed:
                    raise HazardError(f"warp {w}'s step {k} reads {key} before its tile landed")
                if tile != k:
                    raise HazardError(f"warp {w}'s step {k} reads tile {tile} from {key}")  # (output tile, k-step)
            if self.pingpong and k[0] < self.latest:  # the warpgroups' mainloops must take turns, in tile order
                raise HazardError(f"warp {w} issues tile {k[0]}'s k-step {k[1]} after tile {self.latest}'s mainloop "
                                  "began (the mainloops overlap)")
            self.latest = max(self.latest, k[0])
            self.steps[w].append(k)
            self.groups[w].append(stages)
            while len(self.groups[w]) > pending:
                self.groups[w].pop(0)
        elif kind == "arrive":
            b = op[1]
            stage = b[1]
            if any(key[1] == stage for g in self.groups[w] for key in g):
                raise HazardError(f"warp {w} releases stage {stage} while a wgmma group that reads it is in flight")
            self.count[b] -= 1
            if self.count[b] < 0:
                raise HazardError(f"barrier {b} got more arrivals than its phase expects")
            self._complete(b)
        elif kind == "drain":
            self.groups[w] = []
        elif kind == "touch":
            if p and self.groups[w] and op[1] & self.acc:
                raise HazardError(f"warp {w} accesses the accumulator while a wgmma group is in flight")

    def run(self, order: str | int) -> None:
        rng = random.Random(order if isinstance(order, int) else 0)
        while True:
            ready = [p for p in range(len(self.procs)) if self.runnable(p)]
            if not ready:
                if all(self.pc[p] >= len(self.procs[p]) for p in range(len(self.procs))):
                    return
                raise HazardError("deadlock: every process waits ("
                                  + ", ".join(str(self.procs[p][self.pc[p]]) for p in range(len(self.procs))
                                              if self.pc[p] < len(self.procs[p])) + ")")
            if order == "producer_first":
                p = ready[0]
            elif order == "consumers_first":
                p = next((q for q in ready if q), ready[0])
            else:
                p = rng.choice(ready)
            self.step(p)


def _thread_vars(func: Any, tag: str = "threadIdx.x") -> list[Any]:
    found: list[Any] = []

    def visit(x: Any) -> Any:
        if x.kind == tirx.ForKind.THREAD_BINDING and str(x.thread_binding.thread_tag).startswith(tag):
            found.append(x.loop_var)
        return x

    tvm_ffi.structural_map(func.body, [(tirx.For, visit)])
    return found


def _inits(body: Any) -> dict[tuple, int]:
    found: dict[tuple, int] = {}

    def visit(x: Any) -> Any:
        if isinstance(x.value, tvm.ir.Call) and extern_name(x.value) == "tl::mbar_init":
            ld = x.value.args[1].args[0]
            found[(str(ld.source.name), int(ld.indices[0]))] = int(x.value.args[2])
        return x

    tvm_ffi.structural_map(body, [(tirx.Evaluate, visit)])
    return found


ORDERS = ["producer_first", "consumers_first", *range(12)]


def _check(func: Any, block_k: int, k_tiles: int, tiles: int = 1, block: int = 0) -> None:
    """Every interleaving consumes tile t's k-steps 0..k_tiles-1 in order, for each of the block's ``tiles``."""
    for order in ORDERS:
        model = _Model(func, block_k, block)
        model.run(order)
        want = [(t, k) for t in range(tiles) for k in range(k_tiles)]
        assert all(steps == want for steps in model.steps), (order, model.steps)
        assert not any(model.groups), "drained before the epilogue"


# M, N, K, block_M, block_N, block_K, trans_A, trans_B, stages, threads, dtype
@pytest.mark.parametrize("stages,k_tiles", [(3, 7), (4, 2), (4, 9), (5, 11), (2, 5), (3, 1)])
@pytest.mark.parametrize("threads", [128, 256])
@pytest.mark.parametrize("pass_configs", [None, WAIT0], ids=["in_flight", "wait0"])
def test_producer_and_consumer_warps_hand_every_stage_over_in_any_interleaving(stages, k_tiles, threads,
                                                                               pass_configs):
    func = _stage((256, 256, 64 * k_tiles, 128, 128, 64, False, False, stages, threads, "float16"), pass_configs)
    _check(func, 64, k_tiles)


PERSIST = {"tl.cuda.persistent": 3}  # 3 blocks over the grid's output tiles


@pytest.mark.parametrize("stages,k_tiles", [(3, 5), (4, 2), (4, 9), (2, 3), (3, 1)])
@pytest.mark.parametrize("pass_configs", [PERSIST, {**PERSIST, **WAIT0}], ids=["in_flight", "wait0"])
def test_a_persistent_block_runs_the_ring_on_across_its_output_tiles(stages, k_tiles, pass_configs):
    # 4 x 2 = 8 output tiles over 3 blocks: block 0 takes tiles 0, 3, 6; block 2 takes 2 and 5
    func = _stage((256, 512, 64 * k_tiles, 128, 128, 64, False, False, stages, 256, "float16"), pass_configs)
    assert func.attrs["tl.cuda_launch"]["grid"][0] == 3 and any("persistent: 3 blocks" in n for n in _notes(func))
    _check(func, 64, k_tiles, tiles=3, block=0)
    _check(func, 64, k_tiles, tiles=2, block=2)


def test_no_more_tiles_than_blocks_is_not_persistent():
    func = _stage((256, 256, 256, 128, 128, 64, False, False, 3, 256, "float16"))  # 4 tiles, 132 SMs
    assert tuple(func.attrs["tl.cuda_launch"]["grid"]) == (2, 2, 1)
    assert not any("persistent" in n for n in _notes(func))


def test_ragged_and_transposed_shapes_are_warp_specialised_and_hand_over_correctly():
    func = _stage((200, 328, 64 * 5 - 24, 128, 128, 64, True, True, 4, 256, "float16"))
    _check(func, 64, 5)


def _mutate(func: Any, fn: Any) -> Any:
    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, fn)]))


def _is(x: Any, name: str, bar: str | None = None) -> bool:
    call = x.value
    return isinstance(call, tvm.ir.Call) and extern_name(call) == name and \
        (bar is None or str(call.args[1].args[0].source.name) == bar)


def _catches(func: Any, match: str) -> None:
    caught = []
    for order in ORDERS:
        try:
            _Model(func, 64).run(order)
        except HazardError as e:
            caught.append(str(e))
    assert caught and all(re.search(match, c) for c in caught), caught


ARGS = (256, 256, 64 * 9, 128, 128, 64, False, False, 3, 256, "float16")


def test_the_model_catches_a_producer_that_does_not_wait_for_a_free_stage():
    func = _mutate(_stage(ARGS), lambda x: tirx.Evaluate(tirx.IntImm("int32", 0))
                   if _is(x, "tl::mbar_wait", "tma_empty") else x)
    _catches(func, "overwrites")


def test_the_model_catches_consumers_that_do_not_wait_for_their_tile():
    func = _mutate(_stage(ARGS), lambda x: tirx.Evaluate(tirx.IntImm("int32", 0))
                   if _is(x, "tl::mbar_wait", "tma_bar") else x)
    _catches(func, "before its tile landed|reads tile")


def test_the_model_catches_a_wait_on_the_wrong_parity():
    def flip(x: Any) -> Any:
        if _is(x, "tl::mbar_wait", "tma_bar"):
            a = x.value.args
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_wait", a[1], tirx.IntImm("uint32", 1) - a[2]))
        return x

    _catches(_mutate(_stage(ARGS), flip), "before its tile landed|reads tile|deadlock")


def test_the_model_catches_a_release_of_the_stage_still_in_flight():
    def early(x: Any) -> Any:  # release step k's own stage (its group is still in flight) instead of step k-1's
        if _is(x, "tl::mbar_arrive"):
            ld = x.value.args[1].args[0]
            idx = ld.indices[0]
            return tirx.Evaluate(tirx.call_extern("int32", "tl::mbar_arrive", tirx.address_of(
                tirx.BufferLoad(ld.source, [tirx.floormod(idx + 1, 3)]))))
        return x

    _catches(_mutate(_stage(ARGS), early), "releases stage")


def test_the_model_catches_a_missing_release_as_a_deadlock():
    func = _mutate(_stage(ARGS), lambda x: tirx.Evaluate(tirx.IntImm("int32", 0)) if _is(x, "tl::mbar_arrive")
                   else x)
    _catches(func, "deadlock")


# -- the gemm ping-pong (tl.cuda.gemm_pingpong): two consumer warpgroups on alternate tiles -----------------------

PINGPONG = {"tl.cuda.gemm_pingpong": True, **PERSIST}


def _check_pingpong(func: Any, k_tiles: int, tiles: int, block: int) -> None:
    """Every interleaving: warpgroup w's warps consume tiles w, w + 2, ... of the block's walk, each tile's k-steps
    in order, the mainloops in tile order (the model raises otherwise), and every turn passed is taken."""
    for order in ORDERS:
        model = _Model(func, 64, block)
        assert model.pingpong and model.threads == 256
        model.run(order)
        for w, steps in enumerate(model.steps):
            assert steps == [(t, k) for t in range(w // 4, tiles, 2) for k in range(k_tiles)], (order, w, steps)
        assert model.passed == {2: 0, 3: 0}, ("a turn passed and never taken", order, model.passed)
        assert not any(model.groups), "drained before the epilogue"


@pytest.mark.parametrize("stages,k_tiles", [(3, 5), (4, 2), (4, 9), (2, 3), (3, 1)])
@pytest.mark.parametrize("pass_configs", [PINGPONG, {**PINGPONG, **WAIT0}], ids=["in_flight", "wait0"])
def test_two_ping_pong_warpgroups_take_alternate_tiles_and_turns_in_any_interleaving(stages, k_tiles, pass_configs):
    # 8 output tiles of 128 x 128 over 3 blocks of one warpgroup's tile (threads=128): block 0 walks 3 tiles (an odd
    # count: warpgroup 1 takes the last turn passed), block 2 walks 2 (even: warpgroup 0 does)
    func = _stage((256, 512, 64 * k_tiles, 128, 128, 64, False, False, stages, 128, "float16"), pass_configs)
    assert func.attrs["tl.cuda_launch"]["grid"][0] == 3 and any("gemm ping-pong" in n for n in _notes(func))
    _check_pingpong(func, k_tiles, tiles=3, block=0)
    _check_pingpong(func, k_tiles, tiles=2, block=2)


def test_a_ping_pong_block_of_one_tile_leaves_warpgroup_1_only_the_turns():
    func = _stage((128, 512, 64 * 3, 128, 128, 64, False, False, 3, 128, "float16"), PINGPONG)  # 4 tiles, 3 blocks
    _check_pingpong(func, 3, tiles=1, block=1)


def _catches_pp(func: Any, match: str, block: int = 0) -> None:
    caught = []
    for order in ORDERS:
        try:
            model = _Model(func, 64, block)
            model.run(order)
            assert model.passed == {2: 0, 3: 0}, "unmatched"
        except HazardError as e:
            caught.append(str(e))
    assert len(caught) == len(ORDERS) and all(re.search(match, c) for c in caught), caught


PP_ARGS = (256, 512, 64 * 9, 128, 128, 64, False, False, 3, 128, "float16")


def test_the_model_catches_ping_pong_warpgroups_without_turn_barriers():
    func = _mutate(_stage(PP_ARGS, PINGPONG), lambda x: tirx.Evaluate(tirx.IntImm("int32", 0))
                   if _is(x, "tl::pingpong_wait") or _is(x, "tl::pingpong_pass") else x)
    _catches_pp(func, "mainloops overlap|reads tile|before its tile landed|deadlock")


def test_the_model_catches_a_missing_turn_wait():
    func = _mutate(_stage(PP_ARGS, PINGPONG), lambda x: tirx.Evaluate(tirx.IntImm("int32", 0))
                   if _is(x, "tl::pingpong_wait") else x)
    _catches_pp(func, "mainloops overlap|passed on named barrier .* twice|reads tile|before its tile landed")


def test_the_model_catches_the_wrong_turn_order():
    # warpgroup 0 passes the first turn (to warpgroup 1, whose tile 1 then goes before tile 0) instead of taking it
    def swap(x: Any) -> Any:
        if _is(x, "tl::pingpong_pass") and isinstance(x.value.args[1], tirx.IntImm):
            return tirx.Evaluate(tirx.call_extern("int32", "tl::pingpong_pass", tirx.IntImm("int32", 0)))
        return x

    def first(s: Any) -> Any:  # the condition of that first pass: warpgroup 0 instead of 1
        if isinstance(s.then_case, tirx.Evaluate) and _is(s.then_case, "tl::pingpong_pass") and \
                isinstance(s.then_case.value.args[1], tirx.IntImm):
            return tirx.IfThenElse(tirx.EQ(s.condition.a, tirx.IntImm("int32", 0)), swap(s.then_case), None)
        return s

    func = _stage(PP_ARGS, PINGPONG)
    func = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.IfThenElse, first)]))
    assert "pingpong_pass\", 0)" in func.script()
    _catches_pp(func, "mainloops overlap|reads tile|before its tile landed|deadlock")


# -- the split -----------------------------------------------------------------------------------------------------

def test_the_block_gets_a_producer_warpgroup_with_registers_moved_to_the_consumers():
    args = (1024, 1024, 1024, 128, 256, 64, False, False, 4, 256, "float16")
    seen = _lower(gemm_t.get_program(*args))
    func = seen["tl.WarpSpecializeCUDA"]
    assert func.attrs["tl.cuda_launch"]["threads"] == 384
    text = func.script()
    assert "T.thread_binding(384" in text
    assert re.search(r"if threadIdx_x >= 256:\s+T.call_extern\(\"int32\", \"tl::setmaxnreg_dec<40>\"\)\s+"
                     r"if threadIdx_x == 256:", text)
    assert 'tl::setmaxnreg_inc<232>' in text and "tl::tma_load_2d<0>" in text
    before = seen["tl.LowerSharedMemoryCUDA"].attrs["tl.cuda_launch"]["threads"]
    assert before == 256  # the passes before the split lower the consumers for the program's threads


def test_register_split_fills_the_register_file_and_skips_one_consumer_warpgroup():
    assert wsc.register_split(128) is None  # 256 threads: every thread may already have 255 registers
    assert wsc.register_split(256) == (40, 232)
    prod, cons = wsc.register_split(384)
    assert prod * 128 + cons * 384 <= 65536 and cons % 8 == 0 and cons > 65536 // 512
    # a consumer body of two gemms and the softmax (attention): the producer keeps the minimum, FA3's 24 / 240
    assert wsc.register_split(256, general=True) == (24, 240)
    assert wsc.register_split(128, general=True) is None


def test_setmaxnreg_can_be_switched_off():
    text = _stage((1024, 1024, 1024, 128, 256, 64, False, False, 4, 256, "float16"), {"tl.cuda.setmaxnreg": False},
                  "tl.WarpSpecializeCUDA").script()
    assert "setmaxnreg" not in text and "T.thread_binding(384" in text


@tilelang.jit(out_idx=[-1])
def gemm_via_shared(M: int, N: int, K: int, bM: int = 128, bN: int = 128, bK: int = 64, stages: int = 3,
                    threads: int = 256) -> Any:
    """The epilogue goes through a shared tile: the consumers need a barrier after the split."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_s = T.alloc_shared((bM, bN), "float16")
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * bM, bx * bN])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_rastered(M: int, N: int, K: int, panel: int = 4, stages: int = 4) -> Any:
    """``T.use_swizzle``: the block indices the loads use are computed in the kernel, before the loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.use_swizzle(panel)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=stages):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def test_rastered_block_indices_are_computed_by_both_warpgroups():
    seen = _lower(gemm_rastered.get_program(1024, 1024, 64 * 6))
    func = seen["tl.PipelineCUDA"]
    assert not any("warp-specialised" in n for n in _notes(func)), _notes(func)
    text = func.script()
    assert text.index("by = ") < text.index("tl.ws_split") if "by = " in text else True
    _check(func, 64, 6)
    assert seen["tl.WarpSpecializeCUDA"].attrs["tl.cuda_launch"]["threads"] == 384


def test_consumer_barriers_become_named_barriers_of_the_consumer_threads():
    seen = _lower(gemm_via_shared.get_program(512, 512, 512))
    after = seen["tl.WarpSpecializeCUDA"].script()
    assert "tvm_storage_sync" in seen["tl.LowerSharedMemoryCUDA"].script()
    consumer = after[after.index("tl::setmaxnreg_inc"):]
    assert "tl::named_barrier_sync<1, 256>" in consumer and "tvm_storage_sync" not in consumer
    assert after.count("tvm_storage_sync") == 1  # the one after the barriers' initialisation, for all 384


@pytest.mark.parametrize("pass_configs,why", [
    ({"tl.disable_warp_specialized": True}, None),
    ({"tl.disable_tma_lower": True}, None),
])
def test_switches_keep_the_programs_threads(pass_configs, why):
    func = _stage((1024, 1024, 1024, 128, 128, 64, False, False, 3, 256, "float16"), pass_configs,
                  "tl.WarpSpecializeCUDA")
    assert func.attrs["tl.cuda_launch"]["threads"] == 256 and "ws_split" not in func.script()
    assert not any("warp-specialised" in n for n in _notes(func))


@tilelang.jit(out_idx=[-1])
def two_gemms(M: int, N: int, K: int) -> Any:
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            A2 = T.alloc_shared((128, 64), "float16")
            B2 = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[by * 128, k * 64], A2)
                T.copy(B[k * 64, bx * 128], B2)
                T.gemm(A2, B2, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def test_a_loop_that_is_not_specialised_says_why():
    func = _lower(two_gemms.get_program(512, 512, 512))["tl.PipelineCUDA"]
    notes = [n for n in _notes(func) if "warp-specialised" in n]
    assert len(notes) == 2 and all("2 T.Pipelined loops" in n for n in notes), notes
    assert re.match(r"line \d+: T.Pipelined loop is not warp-specialised", notes[0])
    assert func.attrs["tl.cuda_launch"]["threads"] == 256


def test_the_warp_specialisation_switches_are_validated_and_in_the_cache_key():
    assert resolve({"tl.disable_warp_specialized": True}).key() != resolve(None).key()
    assert resolve({"tl.cuda.setmaxnreg": False}).key() != resolve(None).key()
    with pytest.raises(ValueError, match=r"tl.cuda.setmaxnreg.*True or False"):
        resolve({"tl.cuda.setmaxnreg": "yes"})


@needs_nvcc
def test_warp_specialised_gemm_compiles_to_tma_loads_hgmma_and_setmaxnreg(tmp_path):
    args = (4096, 4096, 4096, 128, 256, 64, False, False, 4, 256, "float16")
    func = gemm_t.get_program(*args)
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([-1], 3), compile_cubin=True)
    info = art.extra["cuda"]["ptxas_info"]
    assert "0 bytes spill stores" in info and "Used 168 registers" in info, info  # 65536 / 384, for setmaxnreg
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout
    assert "HGMMA.64x256x16.F32" in sass and "UTMALDG.2D" in sass
    assert "USETMAXREG.DEALLOC.CTAPOOL 0x28" in sass and "USETMAXREG.TRY_ALLOC.CTAPOOL" in sass
    # one block-wide barrier (after the mbarriers' initialisation), none per k-step; the consumers' named barrier
    # once per output tile of the persistent block (4096^2 / (128 x 256) = 512 tiles over 132 blocks)
    bars = re.findall(r"BAR\.SYNC(?:\.DEFER_BLOCKING)? (0x[0-9a-f]+)", sass)
    assert bars.count("0x0") == 1 and set(bars) <= {"0x0", "0x1"}, bars


@needs_nvcc
def test_the_epilogue_reads_the_accumulators_only_after_the_last_wgmma_group(tmp_path):
    """ptxas once scheduled the packed bf16 conversions of the accumulators above the drain's wait (the GEMM lost
    its last k-step on the H200); the drain now rewrites the accumulators with ordinary instructions after it."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_gemm import matmul

    func = matmul.get_program(256, 256, 256, 64, 64, 32, in_dtype="bfloat16", out_dtype="bfloat16")
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([-1], 3), compile_cubin=True)
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sass = subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout
    drain = sass.index("WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert "USETMAXREG" not in sass and "F2FP.BF16.F32.PACK_AB" in sass
    assert sass.index("F2FP.BF16.F32.PACK_AB") > drain


@tilelang.jit(out_idx=[2])
def lower_triangular_gemm(M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=256,
                          dtype="float16"):
    """C = tril(A) B with A lower triangular: the K loop of row block by stops at the diagonal."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv((by + 1) * block_M, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def test_a_loop_whose_trip_count_depends_on_the_tile_is_not_made_persistent():
    # 32 x 32 output tiles, more than the 132 SMs, but the tiles' k-step counts differ: a persistent block's ring
    # (stage and phase counted as t * n) would lose step with its producer's, so every tile keeps its own block
    func = _lower(lower_triangular_gemm.get_program(4096, 4096, 4096))["tl.WarpSpecializeCUDA"]
    assert tuple(func.attrs["tl.cuda_launch"]["grid"]) == (32, 32, 1)
    assert func.attrs["tl.cuda_launch"]["threads"] == 384  # still a producer warpgroup
    assert not any("persistent" in n for n in _notes(func))
    square = _stage((4096, 4096, 4096, 128, 128, 64, False, False, 3, 256, "float16"))
    assert square.attrs["tl.cuda_launch"]["grid"][0] == 132  # with a fixed trip count: persistent

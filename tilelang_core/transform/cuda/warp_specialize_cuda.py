"""Pass: give a warp-specialised pipelined loop its producer warpgroup (sm_90).

``tl.PipelineCUDA`` emits the loop of a TMA-fed wgmma GEMM as an attribute ``tl.ws_split`` over a producer part
(the loads, for one thread) and a consumer part (everything else the threads of the program do; see
``sm90/warp_specialize.py``). The passes between keep the program's thread count, so the consumer part lowers
exactly as the unspecialised kernel would. This pass runs after every barrier is in place and:

* launches ``threads + 128`` threads: the program's threads are the consumers, the last warpgroup the producer;
* turns the attribute into ``if (threadIdx.x >= threads) { producer } else { consumers }``, where the producer's
  loop runs on its first thread only;
* makes every ``__syncthreads`` of the consumer part a named barrier of the consumer threads (``bar.sync 1,
  threads``) — the producer warpgroup never arrives at barrier 0 after the split — and drops any barrier placed in
  the producer part (its thread hands data over through the mbarriers only);
* for the gemm ping-pong (``tl.cuda.gemm_pingpong``, ``sm90/gemm_pingpong.py``) the consumer part is two warpgroups
  of the program's threads: their code reads ``threadIdx.x % 128``, their barriers are each warpgroup's own;
* with two or more consumer warpgroups, moves registers from the producer to the consumers (``setmaxnreg``; a
  producer needs few, and the accumulators of ``threads / 128`` warpgroups need many) unless pass_configs
  ``tl.cuda.setmaxnreg`` is False.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.notes import add_notes
from ..common.rewriter import seq
from .common import ATTR_LAUNCH, extern, find_thread_var, is_sync, layouts_of
from .sm90 import gemm_pingpong, registers
from .sm90.warp_specialize import ATTR_CONSUMER, ATTR_PRODUCER, ATTR_SPLIT, PRODUCER_THREADS

REGISTER_FILE = registers.REGISTER_FILE

def register_split(consumers: int, general: bool = False, clustered: bool = False,
                   acc_regs: int = 0) -> tuple[int, int] | None:
    """(producer, consumer) registers per thread after ``setmaxnreg`` for ``consumers`` consumer threads and the
    producer warpgroup, or None when the launch already gives every thread what it may have (one consumer
    warpgroup: 255 registers). ``general``: the consumers run more than one gemm (attention), so the producer
    keeps the 24-register minimum (240 each for two consumer warpgroups, as FlashAttention-3 splits them).
    ``clustered``: a GEMM producer of a thread-block cluster (56 / 224 for two consumer warpgroups, 56 / 152 for
    three). ``acc_regs``: a consumer thread's accumulator registers; where the consumers' share would not hold
    them with room to work the producer gives more (``sm90/registers.py``: 32 / 160 for the clustered 192x256
    t384 GEMM)."""
    return registers.register_split(consumers, PRODUCER_THREADS, acc_regs, general, clustered)


def _accumulator_regs(func: tirx.PrimFunc) -> int:
    """Registers per thread of the kernel's largest wgmma accumulator fragment (0 when it has none)."""
    return max((lay.num_regs for lay in layouts_of(func).values() if lay.kind == "wgmma"), default=0)


def _retarget_syncs(node: Any, named: Any) -> Any:
    """Every ``__syncthreads`` in ``node`` replaced by ``named`` (a statement), or dropped when ``named`` is None."""

    def ev(e: Any) -> Any:
        if not is_sync(e):
            return e
        return named if named is not None else tirx.Evaluate(tirx.IntImm("int32", 0))

    return tvm_ffi.structural_map(node, [(tirx.Evaluate, ev)])


def warp_specialize_cuda(func: tirx.PrimFunc, options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    try:
        tid = find_thread_var(func)
    except ValueError:
        return func
    found: list[int] = []
    notes: list[str] = []
    acc = _accumulator_regs(func)

    def split(s: Any) -> Any:
        if str(s.attr_key) != ATTR_SPLIT:
            return s
        threads = int(s.value)
        found.append(threads)
        attrs = {str(x.attr_key): x for x in s.body.seq if isinstance(x, tirx.AttrStmt)}
        parts = {key: x.body for key, x in attrs.items()}
        mark = int(attrs[ATTR_PRODUCER].value)  # sm90/warp_specialize.ws_loop's: 1 general, 2 a cluster's GEMM
        general = mark == 1
        producer = _retarget_syncs(parts[ATTR_PRODUCER], None)
        if gemm_pingpong.is_pingpong(attrs[ATTR_CONSUMER]):  # two warpgroups, each the program's threads
            consumer = gemm_pingpong.finish(attrs[ATTR_CONSUMER], tid)
        else:
            consumer = _retarget_syncs(parts[ATTR_CONSUMER], extern(f"tl::named_barrier_sync<1, {threads}>"))
        regs = register_split(threads, general, mark == 2, acc) if options[PassConfigKey.TL_CUDA_SETMAXNREG] \
            else None
        total = threads + PRODUCER_THREADS
        if regs is not None and regs != register_split(threads, general, mark == 2):  # the accumulators moved it
            notes.append(f"warp specialisation: setmaxnreg {regs[0]} registers per producer thread, {regs[1]} per "
                         f"consumer thread ({threads // 128} consumer warpgroup(s) + the producer, "
                         f"{registers.entry_registers(total)} each at launch; accumulators: {acc} per consumer "
                         "thread, so the producer keeps less than its usual share)")
        prod = [tirx.IfThenElse(tirx.EQ(tid, tirx.IntImm("int32", threads)), producer, None)]
        cons = [consumer]
        if regs is not None:
            prod.insert(0, extern(f"tl::setmaxnreg_dec<{regs[0]}>"))
            cons.insert(0, extern(f"tl::setmaxnreg_inc<{regs[1]}>"))
        return tirx.IfThenElse(tirx.GE(tid, tirx.IntImm("int32", threads)), seq(prod), seq(cons), span=s.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, split)])
    if not found:
        return func
    total = found[0] + PRODUCER_THREADS

    def thread_loop(s: Any) -> Any:
        if not s.loop_var.same_as(tid):
            return s
        iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, total), s.loop_var, tirx.IterVar.ThreadIndex,
                          "threadIdx.x")
        return tirx.For(s.loop_var, s.min, tirx.IntImm("int32", total), s.kind, s.body, iv, s.annotations, s.step,
                        s.span)

    body = tvm_ffi.structural_map(body, [(tirx.For, thread_loop)])
    launch = func.attrs[ATTR_LAUNCH]
    out = func.with_body(body).with_attr(ATTR_LAUNCH, {"grid": list(launch["grid"]), "threads": total})
    return add_notes(out, notes)

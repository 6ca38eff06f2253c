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
from ..common.rewriter import seq
from .common import ATTR_LAUNCH, extern, find_thread_var, is_sync
from .sm90 import gemm_pingpong
from .sm90.warp_specialize import ATTR_CONSUMER, ATTR_PRODUCER, ATTR_SPLIT, PRODUCER_THREADS

REGISTER_FILE = 65536  # 32-bit registers of an SM, all of which one block of the split may hold
PRODUCER_REGS = 40
# a producer of a thread-block cluster (tl.cuda.cluster) computes its multicast slice, mask and, persistent, the
# cluster's tile too: ptxas spilled 32-800 bytes of its loop at 40 registers (two consumer warpgroups, 128x256
# tiles, 2x1 / 2x2) and 68-600 at 24 (three, 192x192), none at 56 (ptxas 13.0, persistent 4096^3 / 8192^3)
CLUSTER_PRODUCER_REGS = 56


def register_split(consumers: int, general: bool = False, clustered: bool = False) -> tuple[int, int] | None:
    """(producer, consumer) registers per thread after ``setmaxnreg`` for ``consumers`` consumer threads, or None
    when the launch already gives every thread what it may have (one consumer warpgroup: 255 registers).
    ``general``: the consumers run more than one gemm (attention: two accumulators and the softmax), so the
    producer, whose loop only computes coordinates, keeps the 24-register minimum and the consumers get the rest
    (240 each for two consumer warpgroups, as FlashAttention-3 splits them). ``clustered``: a GEMM producer of a
    thread-block cluster (``CLUSTER_PRODUCER_REGS``: 56 / 224 for two consumer warpgroups, 56 / 152 for three)."""
    total = consumers + PRODUCER_THREADS
    at_launch = min(255, REGISTER_FILE // total) // 8 * 8
    if consumers < 256:
        return None
    producer = PRODUCER_REGS if consumers <= 256 and not general else 24
    if clustered and not general:
        producer = CLUSTER_PRODUCER_REGS
    consumer = min(256, (at_launch * total - producer * PRODUCER_THREADS) // consumers // 8 * 8)
    return (producer, consumer) if consumer > at_launch else None


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
        regs = register_split(threads, general, mark == 2) if options[PassConfigKey.TL_CUDA_SETMAXNREG] else None
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
    return func.with_body(body).with_attr(ATTR_LAUNCH, {"grid": list(launch["grid"]), "threads": total})

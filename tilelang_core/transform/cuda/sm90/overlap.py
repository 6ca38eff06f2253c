"""The softmax of one K/V block under the previous block's ``P V`` (pass_configs ``tl.cuda.attention_overlap``,
sm_90a, a warp-specialised loop): FlashAttention-3's intra-warpgroup pipelining, as a rule over the loop body.

Why: in the attention step ``init S; S += Q K_k^T; softmax(S) -> P, scale; O *= scale; O += P V_k`` every gemm
waits for its own group, so the tensor cores idle during the softmax and the softmax units idle during the gemms.
Issuing the second gemm one iteration late keeps every operation and its order (so results are bit-identical)::

    for k:  wait stage k;  pre_k                       (the statements before the first gemm: S's initialisation)
            issue S += Q K_k^T                          (PENDING = 2: no wait)
            k > 0: issue O += P V_{k-1}                 (PENDING = 1: returns once S's group is done)
            k = 0: wait for S's group
            free_k                                      (the statements that touch neither P nor O: the row max,
                                                          exp2, the row sum; under P V_{k-1} on the tensor cores)
            keep free_k's registers before the wait     (tl::keep_before_wait, see below)
            wait for P V_{k-1}                          (every k: at k = 0 no group is in flight, it returns at once)
            k > 0: release stage k - 1
            late_k                                      (P = ..., O *= scale)
    n > 0:  O += P V_{n-1} (waits); release stage n - 1

What ptxas (CUDA 13.0, sm_90a) needs for this to overlap at all, found from its warnings and the SASS:

* The wait for ``P V`` is unconditional. Inside ``if k > 0`` (the first form) ptxas, which does not relate that
  branch to the one around the issue, saw a path on which ``late`` reads O and writes P with ``P V`` in flight and
  serialised every wgmma of the loop (C7514; causal: C7515 and injected waits, C7517).
* ``tl::keep_before_wait`` stores the registers of every fragment the free statements touch in a branch that never
  runs: without it ptxas scheduled the wait for ``P V`` (which depends on no softmax register) right after the
  scores' wait, above the whole softmax. It keeps memory operations and waits in order, so the stores' operands,
  and everything they depend on, stay above the wait.

It applies when the body is ``pre, gemm0, free, late, gemm1`` with exactly those two ``T.gemm``s, both wgmma,
gemm1's A a register fragment (P) and gemm1 the last statement, no statement of ``pre`` touching P or O, and every
statement before the first one that touches P or O (after gemm0) touching neither. Otherwise :func:`plan` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx

from ....language._ir import Region
from ...common.rewriter import seq, tile_op_name
from ..common import WGMMA_PENDING_ATTR, buffers_touched, extern, is_fragment
from ..layouts import dtype_bytes


@dataclass(frozen=True)
class Plan:
    pre: list[Any]
    gemm0: Any
    free: list[Any]
    late: list[Any]
    gemm1: Any
    S: Any  # gemm0's accumulator
    O: Any  # gemm1's accumulator
    held: list[Any]  # the fragments the free statements touch (kept before the wait for P V), first use first


def _is_gemm(x: Any) -> bool:
    return isinstance(x, tirx.Evaluate) and tile_op_name(x) == "tl.gemm"


def _touches(x: Any, bufs: list[Any]) -> bool:
    return any(b.same_as(t) for b in bufs for t in buffers_touched(x))


def plan(consumers: list[Any], is_wgmma: Any) -> Plan | str:
    """The parts of the loop body ``consumers`` (see the module docstring), or why the rule does not apply."""
    gemms = [i for i, x in enumerate(consumers) if _is_gemm(x)]
    if len(gemms) != 2:
        return f"the loop body has {len(gemms)} T.gemm statements, not two"
    i0, i1 = gemms
    g0, g1 = consumers[i0], consumers[i1]
    if not (is_wgmma(g0) and is_wgmma(g1)):
        return "a T.gemm of the loop keeps mma.sync"
    if i1 != len(consumers) - 1:
        return "the second T.gemm is not the last statement of the loop body"
    P, O = Region.of(g1.value.args[0]).buffer, Region.of(g1.value.args[2]).buffer
    S = Region.of(g0.value.args[2]).buffer
    if not str(P.scope()).startswith("local"):
        return "the second T.gemm's A is not a register fragment"
    if S.same_as(O) or _touches(g0, [P, O]):
        return "the first T.gemm reads or writes the second's operands"
    pre, middle = consumers[:i0], consumers[i0 + 1:i1]
    if any(_touches(x, [P, O]) for x in pre):
        return "a statement before the first T.gemm touches the second's A or accumulator"
    cut = next((j for j, x in enumerate(middle) if _touches(x, [P, O])), len(middle))
    if not cut:
        return "no statement between the two T.gemm statements can run under the second one"
    free = middle[:cut]
    held: list[Any] = []
    for x in free:
        for b in buffers_touched(x):
            if is_fragment(b) and not any(b.same_as(h) for h in held):
                held.append(b)
    return Plan(pre, g0, free, middle[cut:], g1, S, O, held)


def body(p: Plan, k0: Any, stage: Any, prev_stage: Any, staged: Any, s_acc: tuple[Any, int],
         o_acc: tuple[Any, int], release: Any, registers: Any = None) -> tuple[list[Any], Any]:
    """(the iteration's statements, what runs after the loop given its trip count ``n``: a function of n).

    ``staged(stmt, stage)``: ``stmt`` reading the ring at ``stage``; ``s_acc``/``o_acc``: (register array, register
    count) of S and O; ``release(stage)``: the statements that hand ``stage`` back to the producer;
    ``registers(fragment)``: (its register array, its layout) or Nones, for the fragments the free statements
    touch (without it nothing is kept before the wait: ptxas is then free to hoist it above the softmax)."""
    zero = tirx.IntImm("int32", 0)

    def pending(x: Any, groups: int) -> Any:
        return tirx.AttrStmt(zero, WGMMA_PENDING_ATTR, tirx.IntImm("int32", groups), x, span=x.span)

    def ready(acc: tuple[Any, int], wait: int) -> Any:
        loc, n = acc
        return extern(f"tl::wgmma_acc_ready<{wait}, {n}>", tirx.address_of(tirx.BufferLoad(loc, [zero])))

    first = tirx.EQ(k0, zero)
    stmts = [*(staged(x, stage) for x in p.pre), pending(staged(p.gemm0, stage), 2),
             tirx.IfThenElse(first, ready(s_acc, 0),
                             seq([pending(staged(p.gemm1, prev_stage), 1), ready(s_acc, -1)])),
             *(staged(x, stage) for x in p.free),
             *keep(p.held, k0, registers),
             ready(o_acc, 0),  # unconditional (see the module docstring); at k = 0 nothing is in flight
             tirx.IfThenElse(tirx.GT(k0, zero), seq(release(prev_stage)), None),
             *(staged(x, stage) for x in p.late)]

    def after(n: Any, last_stage: Any) -> Any:
        return tirx.IfThenElse(tirx.GT(n, zero), seq([staged(p.gemm1, last_stage), *release(last_stage)]), None)

    return stmts, after


def keep(held: list[Any], k0: Any, registers: Any) -> list[Any]:
    """``tl::keep_before_wait<N...>(k0, regs...)`` over the register arrays of ``held`` (2- and 4-byte ones; see the
    module docstring), or nothing when there are none."""
    if registers is None:
        return []
    arrays = []
    for b in held:
        loc, lay = registers(b)
        if loc is not None and lay is not None and dtype_bytes(str(loc.dtype)) in (2, 4):
            arrays.append((loc, int(lay.num_regs)))
    if not arrays:
        return []
    zero = tirx.IntImm("int32", 0)
    counts = ", ".join(str(n) for _, n in arrays)
    return [extern(f"tl::keep_before_wait<{counts}>", k0,
                   *(tirx.address_of(tirx.BufferLoad(loc, [zero])) for loc, _ in arrays))]

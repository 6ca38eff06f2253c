"""Shared-memory reuse by lifetime (tl.LowerSharedMemoryCUDA), on hand-built block bodies.

Why: the barrier a reuse needs is easy to check in generated code (tests/test_cuda_codegen.py), but the drain of
asynchronous copies (``tl::cp_async_wait<0>``) before a tile's bytes change hands only matters for shapes the
pipeline pass does not produce today — so it is pinned here, where the statements can be chosen.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from tilelang_core.transform.cuda.common import extern, is_sync, sync_stmt
from tilelang_core.transform.cuda.lower_shared_memory_cuda import _flatten, _insert_barriers, _plan_reuse

N = 1024


def _shared(name: str) -> object:
    return tirx.decl_buffer((N,), "float16", name, scope="shared")


def _use(name: str, *bufs: object) -> object:
    return extern(name, *[tirx.address_of(tirx.BufferLoad(b, [tirx.IntImm("int32", 0)])) for b in bufs])


def _block(stmts: list[object]) -> object:
    tx = tvm.ir.Var("tx", "int32")
    iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, 128), tx, tirx.IterVar.ThreadIndex, "threadIdx.x")
    return tirx.For(tx, tirx.IntImm("int32", 0), tirx.IntImm("int32", 128), tirx.ForKind.THREAD_BINDING,
                    tirx.SeqStmt(stmts), iv, None, None, None)


def _names(body: object) -> list[str]:
    out = []
    for st in _flatten(body.body):
        if is_sync(st):
            out.append("sync")
        else:
            out.append(str(st.value.args[0].value))
    return out


def test_reused_bytes_of_an_async_copy_target_are_drained_then_synchronised():
    a, b = _shared("a_s"), _shared("b_s")
    body = _block([_use("tl::cp_async_16", a), _use("tl::read", a), _use("tl::write", b)])
    offsets, barriers = _plan_reuse(body, [a, b], [2 * N, 2 * N])
    assert offsets == [0, 0]  # never alive together: one tile's bytes
    assert barriers == {(1, 2, True)}
    assert _names(_insert_barriers(body, barriers)) == ["tl::cp_async_16", "tl::read", "tl::cp_async_wait<0>",
                                                        "sync", "tl::write"]


def test_a_drain_already_in_place_leaves_only_the_barrier():
    a, b = _shared("a_s"), _shared("b_s")
    body = _block([_use("tl::cp_async_16", a), _use("tl::read", a), extern("tl::cp_async_wait<0>"),
                   _use("tl::write", b)])
    _, barriers = _plan_reuse(body, [a, b], [2 * N, 2 * N])
    assert barriers == {(1, 3, False)}


def test_a_drain_and_a_barrier_in_place_need_nothing_more():
    a, b = _shared("a_s"), _shared("b_s")
    body = _block([_use("tl::cp_async_16", a), _use("tl::read", a), extern("tl::cp_async_wait<0>"), sync_stmt(),
                   _use("tl::write", b)])
    offsets, barriers = _plan_reuse(body, [a, b], [2 * N, 2 * N])
    assert offsets == [0, 0] and barriers == set()


def test_tiles_alive_together_keep_their_own_bytes():
    a, b = _shared("a_s"), _shared("b_s")
    body = _block([_use("tl::write", a), _use("tl::write", b), _use("tl::read", a, b)])
    assert _plan_reuse(body, [a, b], [2 * N, 2 * N]) is None  # no saving: the plain layout is kept

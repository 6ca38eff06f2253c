"""Pass: place every shared tile in one dynamic shared-memory buffer, at fixed offsets, in its physical layout.

Tiles are laid out in a single ``extern __shared__`` byte array (128-byte aligned), so the kernel's dynamic shared
memory size is known exactly here — the launcher needs it, and sizes above 48 KiB need the function attribute
raised before launch. Tiles whose lifetimes do not overlap share bytes: a lifetime is the span of top-level
statements of the block's body that touch the tile (a whole loop counts as one statement, so everything a
pipelined loop uses lives through all of it), placement is first-fit, and a ``__syncthreads()`` is inserted
between the last use of one tile and the first use of a tile that reuses its bytes, unless one is already there.
That is what lets flash attention's output staging tile reuse the Q / K / V tiles (128×64 tiles with 128 threads:
128 → 96 KiB, two blocks per SM instead of one). In a warp-specialised kernel the consumers' statements of the split
are scanned as the block's (the producer's tiles live from the split to the consumers' last use of them; the
barriers it adds there become the consumers' named barrier). (TVM's own merging pass reuses memory by liveness
too, but it cannot see the pointers our gemm and copy templates take; here every template argument is an
``address_of`` a tile element, which the lifetime scan sees.) Each tile becomes a flat view of that array; accesses are
rewritten to the physical offset: leading (pipeline stage) dimensions select a slab, and inside a slab of a
swizzled tile the XOR swizzle of ``cuda.layouts.swizzle_expr`` applies — the same function the tensor-core
gemm template uses to find its operands; a tile in a wgmma layout (``cuda.layouts.wgmma_offset_expr``) is
placed on a 1024-byte boundary (its swizzle atoms must sit on the hardware's 1024-byte pattern), as is every tile
named in the ``tl.align_1024`` attribute (mma.sync tiles a TMA box fills, ``tl.cuda.tma_mma_tiles``), and the
``extern __shared__`` array is declared ``__align__(1024)`` by the CUDA codegen.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...errors import TileLangCompileError
from .common import ATTR_SMEM, calls_extern, extern, is_shared, is_sync, swizzles_of, sync_stmt
from .layouts import dtype_bytes, is_wgmma_swizzle, swizzle_expr, wgmma_offset_expr

ALIGN = 128
WGMMA_ALIGN = 1024
# opt-in maximum of dynamic shared memory per block, by compute capability
MAX_SMEM = {"sm_80": 166912, "sm_86": 101376, "sm_87": 166912, "sm_89": 101376, "sm_90": 232448,
            "sm_90a": 232448}


def _phys(buf: Any, idx: list[Any], shift: int) -> Any:
    """Flat physical element offset of logical ``idx`` (the last index may be a Ramp of a chunk)."""
    shape = [int(x) for x in buf.shape]
    lanes = None
    last = idx[-1]
    if isinstance(last, tirx.Ramp):
        lanes = int(last.lanes)
        idx = idx[:-1] + [last.base]
    if len(shape) >= 2:
        rows, cols = shape[-2], shape[-1]
        slab = rows * cols
        lead: Any = 0
        for i, s in zip(idx[:-2], shape[:-2]):
            lead = lead * s + i
        if is_wgmma_swizzle(shift):
            off = lead * slab + wgmma_offset_expr(idx[-2], idx[-1], rows, shift, str(buf.dtype))
        else:
            inner = idx[-2] * cols + idx[-1]
            off = lead * slab + swizzle_expr(inner, shift, str(buf.dtype)) if shift else lead * slab + inner
    else:
        off = idx[0]
    if lanes is not None:
        return tirx.Ramp(off, 1, lanes)
    return off


def lower_shared_memory_cuda(func: tirx.PrimFunc, arch: str = "sm_90") -> tirx.PrimFunc:
    shared: list[Any] = []

    def collect(s: Any) -> Any:
        if is_shared(s.buffer) and not any(s.buffer.same_as(b) for b in shared):
            shared.append(s.buffer)
        return s

    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, collect)])
    if not shared:
        return func.with_attr(ATTR_SMEM, 0)
    swz = swizzles_of(func)
    sizes = [_nbytes(b) for b in shared]
    forced = list(func.attrs["tl.align_1024"]) if func.attrs is not None and "tl.align_1024" in func.attrs else []
    aligns = [WGMMA_ALIGN if is_wgmma_swizzle(swz.get(b, 0)) or any(b.same_as(x) for x in forced) else ALIGN
              for b in shared]
    plan = _plan_reuse(func.body, shared, sizes, aligns)
    if plan is None:  # no single block body to scan: one tile after the other
        offsets, barriers = _stack(sizes, aligns), set()
    else:
        offsets, barriers = plan
    body = _insert_barriers(func.body, barriers) if barriers else func.body
    total = max(off + n for off, n in zip(offsets, sizes))
    total = -(-total // 16) * 16
    limit = MAX_SMEM.get(arch, 232448)
    if total > limit:
        names = ", ".join(f"{b.name}{[int(x) for x in b.shape]} {b.dtype}" for b in shared)
        raise TileLangCompileError(f"the kernel needs {total} bytes of shared memory, more than the {limit} an "
                                   f"{arch} block can have ({names}); use smaller tiles or fewer pipeline stages",
                                   stage="tl.LowerSharedMemoryCUDA")
    smem = tirx.decl_buffer((total,), "uint8", "smem", scope="shared.dyn")
    data = tirx.buffer_data(smem)
    views: dict[Any, Any] = {}
    for b, off in zip(shared, offsets):
        n = 1
        for x in b.shape:
            n *= int(x)
        es = dtype_bytes(str(b.dtype))
        views[b] = tirx.decl_buffer((n,), str(b.dtype), b.name, data=data, elem_offset=off // es,
                                    scope="shared.dyn")

    def alloc(s: Any) -> Any:
        v = views.get(s.buffer)
        return tirx.DeclBuffer(v, data=data) if v is not None else s

    def load(ld: Any) -> Any:
        v = views.get(ld.source)
        if v is None:
            return ld
        return tirx.BufferLoad(v, [_phys(ld.source, list(ld.indices), swz.get(ld.source, 0))])

    def store(st: Any) -> Any:
        v = views.get(st.buffer)
        if v is None:
            return st
        return tirx.BufferStore(v, st.value, [_phys(st.buffer, list(st.indices), swz.get(st.buffer, 0))],
                                span=st.span)

    body = tvm_ffi.structural_map(body, [(tirx.AllocBuffer, alloc), (tvm.ir.TensorLoad, load),
                                              (tirx.BufferStore, store)])

    def add_alloc(s: Any) -> Any:
        tb = s.thread_binding
        if tb is not None and str(tb.thread_tag) == "threadIdx.x":
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, tirx.SeqStmt([tirx.AllocBuffer(smem), s.body]),
                            s.thread_binding, s.annotations, s.step, s.span)
        return s

    body = tvm_ffi.structural_map(body, [(tirx.For, add_alloc)])
    return func.with_body(body).with_attr(ATTR_SMEM, total)


def _nbytes(buf: Any) -> int:
    n = 1
    for x in buf.shape:
        n *= int(x)
    return n * dtype_bytes(str(buf.dtype))


def _align(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def _stack(sizes: list[int], aligns: list[int] | None = None) -> list[int]:
    """Offsets of tiles laid one after the other (tile ``i`` on a multiple of ``aligns[i]``)."""
    offsets, total = [], 0
    for i, n in enumerate(sizes):
        total = _align(total, aligns[i] if aligns else ALIGN)
        offsets.append(total)
        total += n
    return offsets


def _block_body(body: Any) -> Any:
    """The body of the (single) ``threadIdx.x`` loop, or None."""
    found: list[Any] = []

    def visit(f: Any) -> Any:
        tb = f.thread_binding
        if tb is not None and str(tb.thread_tag) == "threadIdx.x":
            found.append(f)
        return f

    tvm_ffi.structural_map(body, [(tirx.For, visit)])
    return found[0].body if len(found) == 1 else None


WS_SPLIT = "tl.ws_split"  # sm90/warp_specialize's attribute: Seq[producer part, consumer part]


def _ws_split_at(stmts: list[Any]) -> int | None:
    return next((n for n, x in enumerate(stmts) if isinstance(x, tirx.AttrStmt) and str(x.attr_key) == WS_SPLIT),
                None)


def _scanned(blk: Any) -> tuple[list[Any], int | None, int, Any]:
    """The statements whose spans are lifetimes: the block body's top level, with a warp-specialised split (the
    producer warpgroup beside the consumers) replaced by the consumers' own statements, so the consumers' tiles
    can share bytes as the unspecialised kernel's do. Also: where the consumers' statements start (None without a
    split), how many there are, and the producer part (its tiles live from the split's start to the consumers'
    last use of them: its loads run alongside the consumers' loop)."""
    stmts = _flatten(blk)
    at = _ws_split_at(stmts)
    if at is None:
        return stmts, None, 0, None
    producer, consumer = stmts[at].body.seq
    inner = _flatten(consumer.body)
    return [*stmts[:at], *inner, *stmts[at + 1:]], at, len(inner), producer


def _flatten(s: Any) -> list[Any]:
    if isinstance(s, tirx.SeqStmt):
        out: list[Any] = []
        for x in s.seq:
            out.extend(_flatten(x))
        return out
    return [s]


def _touched(s: Any, shared: list[Any]) -> set[int]:
    """Indices (into ``shared``) of the tiles statement ``s`` reads, writes or takes the address of."""
    hit: set[int] = set()

    def mark(buf: Any) -> None:
        for i, b in enumerate(shared):
            if buf.same_as(b):
                hit.add(i)

    def load(ld: Any) -> Any:
        mark(ld.source)
        return ld

    def store(st: Any) -> Any:
        mark(st.buffer)
        return st

    tvm_ffi.structural_map(s, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    return hit


def _plan_reuse(body: Any, shared: list[Any], sizes: list[int],
                aligns: list[int] | None = None) -> tuple[list[int], set[tuple[int, int, bool]]] | None:
    """First-fit offsets over lifetimes (see the module doc) and the barriers they need: (after statement i, before
    statement j, whether cp.async copies into the old tile must be drained first) over the block body's top-level
    statements. None when there is no block body to scan or reuse would save nothing. ``aligns``: each tile's
    alignment (default ``ALIGN`` for all)."""
    aligns = aligns or [ALIGN] * len(shared)
    blk = _block_body(body)
    if blk is None:
        return None
    stmts, split_at, _, producer = _scanned(blk)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    syncs: list[int] = []
    drains: list[int] = []  # tl::cp_async_wait<0>: no asynchronous copy left in flight
    async_into: set[int] = set()  # tiles some cp.async writes
    for n, st in enumerate(stmts):
        if is_sync(st):
            syncs.append(n)
            continue
        if isinstance(st, tirx.AllocBuffer):
            continue
        if calls_extern(st, "tl::cp_async_wait<0>", exact=True):
            drains.append(n)
        touched = _touched(st, shared)
        if calls_extern(st, "tl::cp_async_16"):
            async_into |= touched
        for i in touched:
            first.setdefault(i, n)
            last[i] = n
    if producer is not None:  # the producer's TMA loads write its tiles from the split on (its loop: no cp.async)
        for i in _touched(producer, shared):
            first[i] = min(first.get(i, split_at), split_at)
            last[i] = max(last.get(i, split_at), split_at)
    span = {i: (first.get(i, 0), last.get(i, len(stmts))) for i in range(len(shared))}
    placed: list[int] = []
    offsets = [0] * len(shared)
    for i in sorted(range(len(shared)), key=lambda i: -sizes[i]):  # big tiles first: fewer holes
        live = [j for j in placed if not (span[j][1] < span[i][0] or span[i][1] < span[j][0])]
        off = 0
        for j in sorted(live, key=lambda j: offsets[j]):
            if off + sizes[i] <= offsets[j]:
                break
            off = max(off, _align(offsets[j] + sizes[j], aligns[i]))
        offsets[i] = off
        placed.append(i)
    if max(o + n for o, n in zip(offsets, sizes)) >= max(o + n for o, n in zip(_stack(sizes, aligns), sizes)):
        return None
    barriers: set[tuple[int, int, bool]] = set()
    for i in range(len(shared)):
        for j in range(len(shared)):
            if span[i][1] < span[j][0] and offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]:
                a, b = span[i][1], span[j][0]  # i's bytes are reused by j: all of i's uses end before j's start
                drained = i not in async_into or any(a < n < b for n in drains)
                if not drained:
                    barriers.add((a, b, True))
                elif not any(a < n < b for n in syncs):
                    barriers.add((a, b, False))
    return offsets, barriers


def _insert_barriers(body: Any, barriers: set[tuple[int, int, bool]]) -> Any:
    """A ``__syncthreads()`` before each statement ``b`` of the block body's top level (for the triples (a, b,
    drain)), preceded by ``tl::cp_async_wait<0>`` where asynchronous copies into the old tile may be in flight."""
    before = {b for _, b, _ in barriers}
    drain = {b for _, b, d in barriers if d}

    def visit(f: Any) -> Any:
        tb = f.thread_binding
        if tb is None or str(tb.thread_tag) != "threadIdx.x":
            return f
        stmts, split_at, count, _ = _scanned(f.body)
        parts: dict[str, list[Any]] = {"before": [], "consumers": [], "after": []}
        for n, st in enumerate(stmts):
            part = "before" if split_at is None or n < split_at else \
                "consumers" if n < split_at + count else "after"
            if n in drain:
                parts[part].append(extern("tl::cp_async_wait<0>"))
            if n in before:  # in the consumers' part: tl.WarpSpecializeCUDA makes it their named barrier
                parts[part].append(sync_stmt())
            parts[part].append(st)
        out = parts["before"]
        if split_at is not None:  # the consumers' statements back into their part of the split
            split = _flatten(f.body)[split_at]
            producer, consumer = split.body.seq
            inner = parts["consumers"]
            consumer = tirx.AttrStmt(consumer.node, str(consumer.attr_key), consumer.value,
                                     tirx.SeqStmt(inner) if len(inner) > 1 else inner[0])
            out = [*out, tirx.AttrStmt(split.node, WS_SPLIT, split.value, tirx.SeqStmt([producer, consumer]),
                                       span=split.span), *parts["after"]]
        return tirx.For(f.loop_var, f.min, f.extent, f.kind, tirx.SeqStmt(out), f.thread_binding, f.annotations,
                        f.step, f.span)

    return tvm_ffi.structural_map(body, [(tirx.For, visit)])

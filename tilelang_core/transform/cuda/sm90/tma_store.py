"""Pass ``tl.TmaStoreCUDA``: a wgmma GEMM's epilogue ``T.copy(C_frag, C[...])`` through shared memory and TMA stores
on sm_90a (pass_configs ``tl.cuda.tma_store``, on by default; ``False`` keeps the register stores).

Why: the register epilogue has every thread store its accumulator pairs straight to global memory — 4-byte stores,
each with its own address arithmetic and, on a ragged tile, a bounds test; a 128 x 256 tile is 64 of them per
thread, sixteen rows per warp instruction, each touching its own 32-byte sectors. Hopper's tensor memory
accelerator writes a whole 2-D box of a tensor from shared memory with one instruction of one thread, clipping
the parts of the box outside the tensor (ragged M and N stay correct with no test in the kernel) and running
asynchronously to the threads. CUTLASS's and TileLang's Hopper epilogues stage the accumulators through shared
memory this way.

What this pass builds, for the one qualifying ``T.copy`` of the kernel (a whole wgmma accumulator tile of
``Rows x N`` into a 2-D float16/bfloat16 tensor of constant shape whose rows are a multiple of 16 bytes, a
statement of the block's body, of the warp-specialised consumer part or of a persistent kernel's tile loop)::

    for j < steps (the column blocks of one warpgroup's column slice, each one swizzle atom W wide):
        nbuf == 1, j >= 1:  thread 0: wait_group.read 0;  barrier            # slab free again
        every thread: its registers of block j -> slab j % nbuf (tl::wgmma_acc_to_slabs, swizzled)
        every thread: fence.proxy.async.shared::cta        # generic-proxy writes before the async proxy reads
        nbuf == 2, j >= 1:  thread 0: wait_group.read 0    # store j-1 has read slab (j+1) % 2
        barrier
        thread 0: one TMA store box (W x Rows) per warpgroup column;  commit_group
    thread 0: wait_group.read 0                            # before the block exits or the next tile's epilogue

The staging buffer is a ring of ``nbuf`` (2 when it fits in shared memory beside the kernel's other tiles, else
1) slabs per warpgroup column, each ``Rows x W`` elements in the wgmma swizzled layout of
``layouts.wgmma_offset_expr`` with the widest swizzle (128/64/32 B) whose atom divides a warpgroup's column slice
— the same layout the TMA loads use, read by a tensor map with the same swizzle. With a 128 B swizzle the eight
rows a warp writes in one instruction fall into eight different 16-byte chunks of the bank space (unswizzled,
rows 128 bytes apart would hit the same four banks: an 8-way conflict), so the fragment writes are
conflict-free. Where the kernel is not warp-specialised its pipeline stages are dead after the loop and
``tl.LowerSharedMemoryCUDA`` places the ring over them (its lifetime planner); in a warp-specialised kernel the
ring is additional shared memory (a persistent kernel's producer is already loading the next tile into the
stages during this epilogue). In a persistent kernel the final wait and the consumers' barrier at the top of every
tile order the last store's reads before the next tile writes the ring. When a condition fails the kernel keeps
its register stores and carries a note saying why (only a wgmma GEMM's kernel is noted: other kernels, and every
kernel for an architecture without TMA, are left as they are, unnoted, since the key is on by default). With
``tl.cuda.gemm_pingpong`` on the pass yields (the two consumer warpgroups would share the staging ring).
``tl.disable_tma_lower`` is about the loads only: a kernel with cp.async loads still stores through TMA. The map is
recorded in ``tl.tma_maps`` after the loads' maps (``"store": true``; the launcher encodes it exactly as a load
map, ``runtime/exported.py``).
"""

from __future__ import annotations

import json
from typing import Any

from tvm import tirx

from ....errors import TileLangCompileError
from ....language._ir import Region
from ....pass_config import DEFAULT, PassConfig, PassConfigKey
from ...common.notes import add_notes, at_line
from ...common.regions import is_global
from ...common.rewriter import const_int, seq, tile_op_name, with_span
from ..common import (
    ATTR_SWIZZLE,
    extern,
    find_thread_var,
    is_fragment,
    is_shared,
    layouts_of,
    locals_of,
    swizzles_of,
    sync_stmt,
)
from ..layouts import WGMMA_SWIZZLE_BASE, dtype_bytes
from .tma import ATTR_TMA_MAPS, MAX_BOX

STORE_DTYPES = ("float16", "bfloat16")
TILE_LOOP = "tile_iter"  # the persistent kernel's loop over its output tiles (sm90/warp_specialize.persist)
_WHY = "keeps register stores, not TMA stores: "


def _copy_ends(s: Any) -> tuple[Region, Region] | None:
    """(source, destination) of a ``T.copy`` from a fragment or a shared tile to a global tensor, else None."""
    if not isinstance(s, tirx.Evaluate) or tile_op_name(s) != "tl.copy":
        return None
    src, dst = Region.of(s.value.args[0]), Region.of(s.value.args[1])
    ok = is_fragment(src.buffer) or is_shared(src.buffer)
    return (src, dst) if ok and is_global(dst.buffer) else None


def _swizzle_bytes(slice_cols: int, es: int) -> int:
    """The widest TMA swizzle (128, 64 or 32 bytes) whose atom (of at least 8 elements) divides a slice."""
    for b in (128, 64, 32):
        w = b // es
        if w >= 8 and slice_cols % w == 0:
            return b
    return 0


class _Plan:
    """What one qualifying copy becomes: its map, its staging ring and the statements that replace it."""

    def __init__(self, s: Any, src: Region, dst: Region, lay: Any, acc: Any, swz: int, nbuf: int, index: int,
                 tid: Any) -> None:
        self.s, self.src, self.dst, self.lay, self.acc, self.swz, self.index, self.tid = \
            s, src, dst, lay, acc, swz, index, tid
        rows, cols = lay.shape
        odt = str(dst.buffer.dtype)
        es = dtype_bytes(odt)
        self.rows, self.w, self.slice = rows, swz // es, cols // lay.warp_n
        self.steps = self.slice // self.w
        self.nbuf = nbuf
        self.ring = tirx.decl_buffer((nbuf, lay.warp_n, rows, self.w), odt, f"{dst.buffer.name}_tma_stage",
                                     scope="shared")
        gshape = [const_int(x) for x in dst.buffer.shape]
        self.spec = {"param": dst.buffer.name, "dtype": odt, "dims": [gshape[1], gshape[0]],
                     "box": [self.w, rows], "swizzle": swz, "store": True}

    def stmts(self, simplify: Any) -> Any:
        lay, zero = self.lay, tirx.IntImm("int32", 0)
        one = tirx.EQ(self.tid, zero)
        mi, nt = lay.wgmma_tiles
        acc = tirx.address_of(tirx.BufferLoad(self.acc, [zero]))
        row0, col0 = self.dst.mins

        def slab(b: int, gc: int) -> Any:
            return tirx.address_of(tirx.BufferLoad(self.ring, [tirx.IntImm("int32", b), tirx.IntImm("int32", gc),
                                                                zero, zero]))

        def wait_read() -> Any:
            return tirx.IfThenElse(one, extern("tl::tma_store_wait_read<0>"), None)

        out: list[Any] = []
        for j in range(self.steps):
            b = j % self.nbuf
            if self.nbuf == 1 and j:
                out += [wait_read(), sync_stmt()]
            out.append(extern(f"tl::wgmma_acc_to_slabs<{mi}, {nt}, {lay.warp_m}, {lay.warp_n}, {self.rows}, "
                              f"{self.w}, {self.swz}, {j}>", acc, slab(b, 0)))
            out.append(extern("tl::fence_proxy_async"))
            if self.nbuf == 2 and j:
                out.append(wait_read())
            out.append(sync_stmt())
            boxes = [extern(f"tl::tma_store_2d<{self.index}>", slab(b, gc),
                            simplify(col0 + gc * self.slice + j * self.w), simplify(row0))
                     for gc in range(lay.warp_n)]
            out.append(tirx.IfThenElse(one, seq([*boxes, extern("tl::tma_store_commit")]), None))
        out.append(wait_read())
        return with_span(seq(out), self.s.span)


def _why_not_global(dst: Region, shape: list[int]) -> str:
    """"" when ``dst`` (a ``shape`` tile of a global tensor) can be written by TMA store boxes, else why not."""
    g = dst.buffer
    odt = str(g.dtype)
    if odt not in STORE_DTYPES:
        return f"{g.name} is {odt}; TMA stores here write float16 or bfloat16 tensors"
    gshape = [const_int(x) for x in g.shape]
    if len(gshape) != 2 or None in gshape:
        return f"{g.name} is not a 2-D tensor of constant shape (TMA stores here use 2-D tensor maps)"
    if [const_int(e) for e in dst.extents] != list(shape):
        return f"the copy writes a region of {g.name} that is not the whole {shape[0]}x{shape[1]} tile"
    es = dtype_bytes(odt)
    if (gshape[1] * es) % 16:
        return f"rows of {g.name} are {gshape[1] * es} bytes, not a multiple of 16 (TMA's stride unit)"
    if shape[0] > MAX_BOX:
        return f"the tile has {shape[0]} rows; a TMA box has at most {MAX_BOX}"
    return ""


def _shared_store(s: Any, src: Region, dst: Region, code: int, index: int, tid: Any, simplify: Any) -> tuple[
        Any, dict[str, Any] | None, str]:
    """The program stages its epilogue itself (``T.copy(C_frag, C_shared); T.copy(C_shared, C[...])``, TileLang's
    spelling): the shared tile goes out as TMA boxes — one per column block of a wgmma-swizzled tile, or the whole
    tile in one box when it is unswizzled row-major (at most 256 columns). Every thread fences its writes of the
    tile for the async proxy, the block meets, thread 0 issues the boxes, commits and waits for them to have read
    the tile before it reaches any later barrier (the tile may be written again after one). Returns (statements,
    map, why not)."""
    t = src.buffer
    tshape = [const_int(x) for x in t.shape]
    if len(tshape) != 2 or any(const_int(m) != 0 for m in src.mins) or [const_int(e) for e in src.extents] != tshape:
        return None, None, f"the copy reads a part of {t.name}, not the whole 2-D tile"
    if str(t.dtype) != str(dst.buffer.dtype):
        return None, None, f"{t.name} is {t.dtype} and {dst.buffer.name} {dst.buffer.dtype} (a TMA store copies bytes)"
    why = _why_not_global(dst, tshape)
    if why:
        return None, None, why
    rows, cols = tshape
    es = dtype_bytes(str(t.dtype))
    if code > WGMMA_SWIZZLE_BASE:
        swz = code - WGMMA_SWIZZLE_BASE
        w = swz // es
    elif code == 0:
        swz, w = 0, cols
        if cols > MAX_BOX or (cols * es) % 16:
            return None, None, (f"a row of the unswizzled tile {t.name} ({cols} elements) is not one TMA box row "
                                f"(at most {MAX_BOX} elements, a multiple of 16 bytes)")
    else:
        return None, None, f"the shared tile {t.name} is in an XOR-swizzled layout a TMA box does not read"
    gshape = [const_int(x) for x in dst.buffer.shape]
    spec = {"param": dst.buffer.name, "dtype": str(t.dtype), "dims": [gshape[1], gshape[0]], "box": [w, rows],
            "swizzle": swz, "store": True}
    zero = tirx.IntImm("int32", 0)
    row0, col0 = dst.mins
    boxes = [extern(f"tl::tma_store_2d<{index}>", tirx.address_of(tirx.BufferLoad(t, [zero, tirx.IntImm("int32",
                                                                                                       cb * w)])),
                    simplify(col0 + cb * w), simplify(row0)) for cb in range(cols // w)]
    one = tirx.EQ(tid, zero)
    out = [extern("tl::fence_proxy_async"), sync_stmt(),
           tirx.IfThenElse(one, seq([*boxes, extern("tl::tma_store_commit"), extern("tl::tma_store_wait_read<0>")]),
                           None)]
    return with_span(seq(out), s.span), spec, ""


def _why_not(src: Region, dst: Region, lay: Any, acc: Any) -> str:
    """"" when the copy ``src -> dst`` can go out through TMA stores, else why not."""
    f, g = src.buffer, dst.buffer
    if lay is None or lay.kind != "wgmma":
        return f"{f.name} is not a wgmma accumulator (TMA stores here take the sm_90a wgmma fragment)"
    if acc is None:
        return f"{f.name} has no register array"
    if lay.warp_m * lay.warp_n * 128 != lay.threads:
        return (f"{f.name}'s {lay.warp_m}x{lay.warp_n} warpgroups are not the block's {lay.threads} threads (every "
                "thread writes the staging slabs)")
    if len(lay.shape) != 2 or any(const_int(m) != 0 for m in src.mins) or \
            [const_int(e) for e in src.extents] != list(lay.shape):
        return f"the copy reads a part of {f.name}, not the whole 2-D tile"
    why = _why_not_global(dst, list(lay.shape))
    if why:
        return why
    rows, cols = lay.shape
    if not _swizzle_bytes(cols // lay.warp_n, dtype_bytes(str(g.dtype))):
        return (f"a warpgroup's {cols // lay.warp_n} columns are not whole swizzle atoms of 32, 64 or 128 bytes "
                "(at least 8 elements)")
    return ""


def _fits(func: Any, arch: str) -> bool:
    """Whether ``func``'s shared tiles fit in a block (placed as tl.LowerSharedMemoryCUDA will place them)."""
    from ..lower_shared_memory_cuda import lower_shared_memory_cuda

    try:
        lower_shared_memory_cuda(func, arch)
    except TileLangCompileError:
        return False
    return True


def _rewrite(s: Any, fn: Any) -> Any:
    """``s`` with each statement ``x`` at the block's sequence level replaced by ``fn(x)``: through sequences,
    attributes (the warp-specialised parts), thread and block loops and a persistent kernel's tile loop, not into
    conditions or other loops."""
    if isinstance(s, tirx.SeqStmt):
        return seq([_rewrite(x, fn) for x in s.seq])
    if isinstance(s, tirx.AttrStmt):
        return tirx.AttrStmt(s.node, s.attr_key, s.value, _rewrite(s.body, fn), span=s.span)
    if isinstance(s, tirx.For) and (s.thread_binding is not None or s.loop_var.name == TILE_LOOP):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, _rewrite(s.body, fn), s.thread_binding,
                        s.annotations, s.step, s.span)
    return fn(s)


def _all_copies(body: Any) -> list[Any]:
    import tvm_ffi

    found: list[Any] = []

    def ev(x: Any) -> Any:
        if _copy_ends(x) is not None:
            found.append(x)
        return x

    tvm_ffi.structural_map(body, [(tirx.Evaluate, ev)])
    return found


def _add_alloc(func: Any, buf: Any) -> Any:
    """``func`` with ``buf`` allocated at the top of the ``threadIdx.x`` loop's body."""
    import tvm_ffi

    def visit(x: Any) -> Any:
        tb = x.thread_binding
        if tb is not None and str(tb.thread_tag) == "threadIdx.x":
            return tirx.For(x.loop_var, x.min, x.extent, x.kind, seq([tirx.AllocBuffer(buf), x.body]), tb,
                            x.annotations, x.step, x.span)
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, visit)]))


def tma_store_cuda(func: tirx.PrimFunc, options: PassConfig = DEFAULT, arch: str = "sm_90") -> tirx.PrimFunc:
    """sm_90a, tl.cuda.tma_store: the wgmma GEMM epilogue through a swizzled shared ring and TMA stores.

    With the key off the kernel is returned untouched; where the store does not apply to a wgmma GEMM, a note says
    why. Kernels that are not wgmma GEMMs (and every kernel of an architecture without TMA) are returned unnoted."""
    if not options[PassConfigKey.TL_CUDA_TMA_STORE] or not arch.startswith("sm_90"):
        return func  # off, or no TMA: the kernel is exactly what it was
    copies = _all_copies(func.body)
    layouts = layouts_of(func)
    if not copies or not any(lay.kind == "wgmma" for lay in layouts.values()):
        return func  # not a wgmma GEMM: nothing for the TMA store to serve, nothing to say
    lead = f"{at_line(copies[0])}T.copy into {_copy_ends(copies[0])[1].buffer.name} {_WHY}"
    if options[PassConfigKey.TL_CUDA_GEMM_PINGPONG]:
        return add_notes(func, [lead + "tl.cuda.gemm_pingpong is on (its two consumer warpgroups would share the "
                                       "staging ring)"])
    try:
        tid = find_thread_var(func)
    except ValueError:
        return add_notes(func, [lead + "the kernel has no threadIdx loop"])
    locals_ = locals_of(func)
    cands: list[Any] = []
    _rewrite(func.body, lambda x: (cands.append(x) if _copy_ends(x) is not None else None) or x)
    if len(copies) != 1 or len(cands) != 1:
        why = (f"the kernel has {len(copies)} T.copy from a fragment or shared tile to global memory (the TMA "
               "store serves one)" if len(copies) != 1 else "the copy is inside a condition or a loop (the TMA "
               "store is issued once per output tile, from the block's body)")
        return add_notes(func, [lead + why])
    s = cands[0]
    src, dst = _copy_ends(s)
    maps = json.loads(str(func.attrs[ATTR_TMA_MAPS])) if func.attrs is not None and ATTR_TMA_MAPS in func.attrs \
        else []
    import tvm

    ana = tvm.sym.Analyzer()
    if is_shared(src.buffer):
        stmts, spec, why = _shared_store(s, src, dst, swizzles_of(func).get(src.buffer, 0), len(maps), tid,
                                         ana.simplify)
        if why:
            return add_notes(func, [lead + why])
        out = func.with_body(_rewrite(func.body, lambda x: stmts if x.same_as(s) else x))
        return out.with_attr(ATTR_TMA_MAPS, json.dumps([*maps, spec]))
    lay, acc = layouts.get(src.buffer), locals_.get(src.buffer)
    why = _why_not(src, dst, lay, acc)
    if why:
        return add_notes(func, [lead + why])
    swz = _swizzle_bytes(lay.shape[1] // lay.warp_n, dtype_bytes(str(dst.buffer.dtype)))
    for nbuf in (2, 1):
        plan = _Plan(s, src, dst, lay, acc, swz, nbuf, len(maps), tid)
        body = _rewrite(func.body, lambda x, p=plan: p.stmts(ana.simplify) if x.same_as(s) else x)
        out = _add_alloc(func.with_body(body), plan.ring)
        out = out.with_attr(ATTR_SWIZZLE, {**swizzles_of(out), plan.ring: WGMMA_SWIZZLE_BASE + swz})
        if _fits(out, arch):
            return out.with_attr(ATTR_TMA_MAPS, json.dumps([*maps, plan.spec]))
    kb = plan.rows * plan.w * lay.warp_n * dtype_bytes(str(dst.buffer.dtype)) / 1024
    return add_notes(func, [lead + f"its staging slab ({kb:g} KiB) does not fit in shared memory beside the kernel's "
                                   "other tiles (fewer pipeline stages or smaller tiles leave room)"])

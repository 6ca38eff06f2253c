"""TMA loads for a software-pipelined loop on sm_90: which producer copies can be one, and the loop that issues them.

Why: in the pipelined wgmma GEMM every thread spends issue slots and registers on ``cp.async`` (16 bytes each,
with its own address arithmetic and zero-fill predicate) for every stage. Hopper's tensor memory accelerator moves
a whole box of a tensor into shared memory from one instruction of one thread, in the same 128/64/32-byte
swizzle that wgmma's shared-memory descriptors read (a wgmma-layout tile is stored as column blocks of one swizzle
atom width, each exactly one TMA box), zero-filling the parts of the box outside the tensor, and completes on a
shared-memory mbarrier that counts the bytes. So when every producer of a ``T.Pipelined`` loop copies a whole
global 2-D tile into a tile in a wgmma layout, :func:`tma_loop` replaces the ``cp.async`` schedule by::

    prologue:  thread 0: mbarrier.init(bar[j], 1) for j < s;  fence;  __syncthreads()
               thread 0: for j < d:  expect_tx(bar[j], bytes of a stage);  TMA boxes of step j -> stage j
    loop k:    mbarrier.wait(bar[k % s], parity (k / s) & 1)     # stage k % s has landed
               __syncthreads()                                     # stage (k + d) % s is no longer read
               thread 0 (when k + d < n):  fence.proxy.async;  expect_tx(bar[(k + d) % s]);  TMA boxes of k + d
               consumers(k) on stage k % s
    epilogue:  __syncthreads()

When the consumer part is one wgmma ``T.gemm`` (the GEMM mainloop) the per-step ``__syncthreads`` is replaced by
*empty* barriers when pass_configs ``tl.cuda.tma_release`` is True (off by default: measured 2-3% slower on the
H200, the loading thread's warp stalls on the release): every thread arrives on ``empty[stage]`` once the wgmma
group that read the stage has retired, and thread 0 waits for that phase before loading into the stage again, so the
warpgroups no longer meet at a block-wide barrier in every k-step. Both forms use the prefetch distance ``d`` of the
``cp.async`` pipeline (``s - 1``, or ``s - 2`` while a wgmma group stays in flight). The tensor maps are encoded by
the launcher for each call's tensors (``runtime/exported.py``: ``TensorMaps``) from the descriptions this module
records (``tl.tma_maps``); the code generator passes them to the kernel as one ``__grid_constant__`` parameter.
pass_configs ``tl.disable_tma_lower=True`` keeps ``cp.async``; when TMA does not apply, the reason is recorded as a
kernel note.

**Plain tiles** (pass_configs ``tl.cuda.tma_plain_tiles``, off by default): one load that cannot be a box keeps the
whole loop on ``cp.async``, and loops such as the attention backward (float32 ``LSE`` / ``Delta`` rows) or the
dequantised prefill (a uint8 packed-weight tile its ``T.Parallel`` nest reads) have such a load beside their wgmma
tiles. With the key, a load into a plain row-major shared tile (swizzle code 0: not a wgmma operand, not
XOR-swizzled, no user index map) becomes one box of the whole tile with ``SWIZZLE_NONE``, which writes the box
row-major, densely, exactly the tile's layout: :func:`plan_plain_copy` (1-D tiles are a box of one row; a 1-D
tensor is the 2-D map ``(n, 1)``: the driver refused rank-1 maps on the H200). The loop's schedule, barriers and
expected bytes are the same as for wgmma tiles.

Every map planned here is checked against ``cuTensorMapEncodeTiled``'s rules (``runtime/exported.py``:
``tensor_map_problems``, which the launcher runs again before the driver call): a map that breaks one keeps the loop
on ``cp.async`` with a note naming the rule, instead of failing at the first launch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import tvm_ffi
from tvm import tirx

from ....language._ir import Region
from ....runtime.exported import tensor_map_problems
from ...common.regions import is_global
from ...common.rewriter import const_int, seq, tile_op_name, with_span
from ..common import extern, is_shared, substitute, sync_stmt
from ..layouts import WGMMA_SWIZZLE_BASE, dtype_bytes, is_wgmma_swizzle

ATTR_TMA_MAPS = "tl.tma_maps"  # JSON list of TmaMap (as dicts), in tl_tmaps parameter order
MAX_BOX = 256  # a TMA box dimension holds at most 256 elements
# element types a tensor map is encoded for (float8 as bytes: a box of them is a plain copy; an out-of-bounds zero
# byte is +0.0 in both float8 formats); a 128 B swizzle atom is 64 of the 2-byte types and 128 of the 1-byte ones
TMA_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
# element types of a plain (SWIZZLE_NONE) box: the launcher's tensor-map types (runtime/exported.py; the 1-byte
# types travel as UINT8: a box is a copy, and the out-of-bounds fill is zero bytes)
PLAIN_DTYPES = ("float32", "int32", "int8", "uint8", *TMA_DTYPES)
SMEM_ALIGN = 128  # a TMA load's shared destination is 128-byte aligned (tiles are: tl.LowerSharedMemoryCUDA)


MAX_RANK = 5  # cp.async.bulk.tensor takes 1-D to 5-D tensor maps; the maps made here are 2-D and up


@dataclass(frozen=True)
class TmaMap:
    """One tensor map: a 1-D to 5-D global tensor parameter read in ``box``-sized element boxes. ``dims`` and
    ``box`` list the dimensions innermost first (the reverse of the tensor's shape): for a 2-D tensor (columns,
    rows); for a ``[batch, seq, heads, dim]`` tensor (dim, heads, seq, batch), with a box of (atom, 1, rows, 1); for
    a 1-D tensor of ``n`` elements (n, 1), a 2-D map (the map is at least 2-D: see ``tensor_map_problems``)."""

    param: str  # the tensor parameter's name
    dtype: str
    dims: tuple[int, ...]  # the global tensor's extents, innermost first
    box: tuple[int, ...]  # innermost: one swizzle atom's width; the tile's row dimension: its rows; the rest 1
    swizzle: int  # bytes: 128, 64 or 32; 0 for a plain tile (SWIZZLE_NONE: the box row-major, the tile's layout)

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(frozen=True)
class TmaCopy:
    """A producer copy done by TMA: the map it reads through and the tile it fills."""

    map_index: int
    rows: int
    cols: int
    atom: int  # elements per column block (a swizzle atom's width; a plain tile's whole row)
    nbytes: int
    rank: int = 2  # the map's rank (tl::tma_load_<rank>d)


def plan_copy(copy: Any, swizzle: dict[Any, int], plain: bool = False,
              index_layouts: frozenset[str] = frozenset(),
              written: frozenset[str] = frozenset()) -> tuple[TmaMap | None, str]:
    """The tensor map a producer ``T.copy`` needs to be one TMA box per column block, or (None, why not).
    ``plain`` (``tl.cuda.tma_plain_tiles``): a tile that is not a wgmma operand is planned by
    :func:`plan_plain_copy` (``index_layouts``: the tiles with a ``T.annotate_layout`` index map; ``written``: the
    tiles the loop body writes, :func:`written_tiles`)."""
    src, dst = Region.of(copy.value.args[0]), Region.of(copy.value.args[1])
    g, t = src.buffer, dst.buffer
    dt = str(t.dtype)
    if plain and not is_wgmma_swizzle(swizzle.get(t, 0)):
        return plan_plain_copy(copy, swizzle.get(t, 0), index_layouts, written)
    if not is_global(g) or str(g.dtype) != dt or dt not in TMA_DTYPES:
        return None, (f"TMA here copies float16/bfloat16/float8_e4m3fn/float8_e5m2 global tensors of the tile's "
                      f"dtype ({g.name} -> {t.name})")
    code = swizzle.get(t, 0)
    if not is_wgmma_swizzle(code):
        return None, f"the shared tile {t.name} is not in a wgmma swizzled layout (only those tiles take TMA here)"
    gshape = [const_int(x) for x in g.shape]
    if not 2 <= len(gshape) <= MAX_RANK or None in gshape:
        return None, f"{g.name} is not a 2-D to {MAX_RANK}-D tensor of constant shape (TMA's tensor maps)"
    tshape = [const_int(x) for x in t.shape]
    if len(tshape) != 2 or [const_int(x) for x in dst.extents] != tshape:
        return None, f"the copy into {t.name} is not of one whole 2-D tile"
    rows, cols = tshape
    ext = [const_int(x) for x in src.extents]
    outer = [d for d in range(len(ext) - 1) if ext[d] != 1]  # the source's dimensions other than its last, > 1
    if ext[-1] != cols or len(outer) > 1 or (outer and ext[outer[0]] != rows) or (not outer and rows != 1):
        return None, (f"the copy into {t.name} does not read a {rows}x{cols} tile of {g.name}'s last dimension and "
                      f"one other (read: {'x'.join(map(str, ext))})")
    row_dim = outer[0] if outer else len(ext) - 2
    es = dtype_bytes(dt)
    atom = (code - WGMMA_SWIZZLE_BASE) // es
    if rows > MAX_BOX or cols % atom:
        return None, f"the tile {t.name} ({rows}x{cols}) is not made of TMA boxes of {atom} x <= {MAX_BOX}"
    if (gshape[-1] * es) % 16:
        return None, f"rows of {g.name} are {gshape[-1] * es} bytes, not a multiple of 16 (TMA's stride unit)"
    box = [1] * len(gshape)
    box[0], box[len(gshape) - 1 - row_dim] = atom, rows
    return checked(TmaMap(g.name, dt, tuple(reversed(gshape)), tuple(box), code - WGMMA_SWIZZLE_BASE))


MMA_XOR_128B = 7  # our XOR swizzle's shift for 128-byte rows (layouts.swizzle_shift): chunk bits 4-6 ^ bits 7-9


def mma_tile_as_128b(tile: Any, code: int) -> bool:
    """``tile`` (a shared mma.sync operand tile, swizzle ``code``) is byte for byte a SWIZZLE_128B TMA box when its
    stages sit on 1024 bytes: 128-byte rows (one 128-byte swizzle atom wide) XOR-swizzled with shift 7, and a
    whole number of 1024-byte swizzle patterns per stage (rows a multiple of 8)."""
    shape = [const_int(x) for x in tile.shape]
    if code != MMA_XOR_128B or len(shape) != 2 or None in shape or str(tile.dtype) not in TMA_DTYPES:
        return False
    rows, cols = shape
    return cols * dtype_bytes(str(tile.dtype)) == 128 and rows % 8 == 0


def checked(m: TmaMap) -> tuple[TmaMap | None, str]:
    """(``m``, "") when ``cuTensorMapEncodeTiled`` takes the map (the launcher's rules, checked on the CPU), else
    (None, why not): the loop then keeps cp.async with the reason as its note rather than failing at launch."""
    problems = tensor_map_problems(asdict(m))
    if problems:
        return None, (f"the tensor map of {m.param} (dims {list(m.dims)}, box {list(m.box)}) breaks "
                      f"cuTensorMapEncodeTiled's rules: {'; '.join(problems)}")
    return m, ""


# the region arguments a tile op only reads (any other region argument may be written)
_READ_ARGS = {"tl.copy": (0,), "tl.gemm": (0, 1), "tl.reduce": (0,)}


def written_tiles(stmts: list[Any]) -> frozenset[str]:
    """The names of the shared tiles ``stmts`` (a loop's consumer part) may write: stored to, or a region argument
    of a tile op other than one it only reads. A TMA load into a stage the threads wrote would be an async-proxy
    write after generic-proxy writes of the same bytes, which a warp-specialised loop's release does not fence, so
    such plain tiles keep cp.async."""
    found: set[str] = set()

    def store(x: Any) -> Any:
        if is_shared(x.buffer):
            found.add(x.buffer.name)
        return x

    def call(e: Any) -> Any:
        name = tile_op_name(e)
        if name is None:
            return e
        for i, a in enumerate(e.value.args):
            if i in _READ_ARGS.get(name, ()):
                continue
            buf = getattr(a, "source", None) if hasattr(a, "region") else None  # a region argument's tile
            if buf is not None and is_shared(buf):
                found.add(buf.name)
        return e

    for x in stmts:
        tvm_ffi.structural_map(x, [(tirx.BufferStore, store), (tirx.Evaluate, call)])
    return frozenset(found)


def plan_plain_copy(copy: Any, code: int, index_layouts: frozenset[str] = frozenset(),
                    written: frozenset[str] = frozenset()) -> tuple[TmaMap | None, str]:
    """The tensor map of a producer ``T.copy`` into a plain row-major shared tile (swizzle ``code`` 0) as one
    ``SWIZZLE_NONE`` box of the whole tile, or (None, why not). A 1-D tile is a box of one row (``LSE[b, h, s0:s0 +
    64]``: box (64, 1, 1) on the map of ``LSE``; ``V[k0:k0 + 64]`` of a 1-D ``V`` of ``n`` elements: box (64, 1) on
    the 2-D map (n, 1), its coordinates (k0, 0)); a 2-D tile reads the tensor's last dimension and one other. The
    hardware's rules, checked: each box dimension at most 256 elements, the innermost box a multiple of 16 bytes,
    the tensor's rows (its byte strides) multiples of 16 bytes; and every stage of the tile starts 128-byte aligned
    (the tile's bytes a multiple of 128)."""
    src, dst = Region.of(copy.value.args[0]), Region.of(copy.value.args[1])
    g, t = src.buffer, dst.buffer
    dt = str(t.dtype)
    if not is_global(g) or str(g.dtype) != dt or dt not in PLAIN_DTYPES:
        return None, (f"TMA copies global tensors of the tile's dtype into plain tiles of {'/'.join(PLAIN_DTYPES)} "
                      f"({g.name} {g.dtype} -> {t.name} {t.dtype})")
    if code:
        return None, (f"the shared tile {t.name} has the mma.sync XOR swizzle that ldmatrix reads (shift {code}), "
                      "which a TMA box does not write (TMA's swizzles act on the shared address bits of 1024-byte "
                      "aligned tiles; this one on the tile's own offset, rows of any power-of-two width)")
    if t.name in index_layouts:
        return None, f"the shared tile {t.name} has a T.annotate_layout index map (a TMA box is written row-major)"
    if t.name in written:
        return None, (f"the loop body writes the shared tile {t.name} (a TMA load into a stage the threads wrote "
                      "needs a proxy fence the release does not make)")
    gshape = [const_int(x) for x in g.shape]
    if not 1 <= len(gshape) <= MAX_RANK or None in gshape:
        return None, f"{g.name} is not a 1-D to {MAX_RANK}-D tensor of constant shape (TMA's tensor maps)"
    tshape = [const_int(x) for x in t.shape]
    if len(tshape) not in (1, 2) or [const_int(x) for x in dst.extents] != tshape:
        return None, f"the copy into {t.name} is not of one whole 1-D or 2-D tile"
    rows, cols = (tshape if len(tshape) == 2 else [1, tshape[0]])
    ext = [const_int(x) for x in src.extents]
    outer = [d for d in range(len(ext) - 1) if ext[d] != 1]
    if ext[-1] != cols or len(outer) > 1 or (outer and ext[outer[0]] != rows) or (not outer and rows != 1):
        return None, (f"the copy into {t.name} does not read a {rows}x{cols} tile of {g.name}'s last dimension and "
                      f"one other (read: {'x'.join(map(str, ext))})")
    es = dtype_bytes(dt)
    if rows > MAX_BOX or cols > MAX_BOX:
        return None, f"the tile {t.name} ({rows}x{cols}) is larger than one TMA box ({MAX_BOX} elements a dimension)"
    if (cols * es) % 16:
        return None, (f"the tile {t.name}'s rows are {cols * es} bytes, not a multiple of 16 (a TMA box's innermost "
                      "dimension)")
    if len(gshape) > 1 and (gshape[-1] * es) % 16:
        return None, f"rows of {g.name} are {gshape[-1] * es} bytes, not a multiple of 16 (TMA's stride unit)"
    if (rows * cols * es) % SMEM_ALIGN:
        return None, (f"a stage of {t.name} is {rows * cols * es} bytes, not a multiple of {SMEM_ALIGN} (each "
                      "stage's TMA destination must be 128-byte aligned)")
    box = [1] * len(gshape)
    box[0] = cols
    if outer:
        box[len(gshape) - 1 - outer[0]] = rows
    dims = tuple(reversed(gshape))
    if len(dims) == 1:  # a 1-D tensor as the 2-D map (n, 1): the driver refused a rank-1 map (tensor_map_problems)
        dims, box = (*dims, 1), [*box, 1]
    return checked(TmaMap(g.name, dt, dims, tuple(box), 0))


def box_loads(copy: TmaCopy, rank: int, src_mins: list[Any], tile: Any, stage: Any, bar: Any, simplify: Any,
              span: Any) -> list[Any]:
    """The TMA loads that fill ``tile[stage]`` (its column blocks, one box each) from the source region starting at
    ``src_mins`` (the tensor's coordinates, outermost first) through map ``copy.map_index`` of rank ``rank``,
    completing on the mbarrier at ``bar``. A map of more dimensions than the tensor (the 2-D map of a 1-D tensor)
    gets coordinate 0 in the extra ones."""
    zero = tirx.IntImm("int32", 0)
    out = []
    for cb in range(copy.cols // copy.atom):
        lead = [zero] * (len(tile.shape) - 2)  # a staged 2-D tile's row; none for a staged 1-D (plain) tile
        ptr = tirx.address_of(tirx.BufferLoad(tile, [stage, *lead, tirx.IntImm("int32", cb * copy.atom)]))
        coords = [simplify(src_mins[-1] + cb * copy.atom), *(simplify(m) for m in reversed(src_mins[:-1]))]
        coords += [zero] * (rank - len(coords))
        out.append(with_span(extern(f"tl::tma_load_{rank}d<{copy.map_index}>", ptr, bar, *coords), span))
    return out


def tma_loop(s: Any, k: Any, k0: Any, n: Any, stages: int, dist: int, producers: list[Any],
             copies: list[TmaCopy], remap: dict[Any, Any], consumers: list[Any], tid: Any, prove: Any,
             simplify: Any, release: str | None = None,
             threads: int = 0) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(prologue, loop head, loop tail, epilogue) statements of the TMA pipeline (see the module docstring).

    ``release``: None keeps one ``__syncthreads`` per step (any consumer part); ``"in_flight"`` / ``"wait0"`` (the
    consumer part is one wgmma ``T.gemm`` that leaves one group in flight / waits for it) replaces it by *empty*
    barriers: every one of the ``threads`` threads arrives on ``empty[stage]`` once the wgmma group reading that
    stage has retired (the tail), and thread 0 waits for that phase before loading into the stage again."""
    bar = tirx.decl_buffer((stages,), "uint64", "tma_bar", scope="shared")
    empty = tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared") if release else None
    stage_bytes = sum(c.nbytes for c in copies)
    zero = tirx.IntImm("int32", 0)

    def bar_ptr(stage: Any) -> Any:
        return tirx.address_of(tirx.BufferLoad(bar, [stage]))

    def loads(at_iter: Any, stage: Any) -> Any:
        out = [extern("tl::mbar_expect_tx", bar_ptr(stage), tirx.IntImm("uint32", stage_bytes))]
        for p, c in zip(producers, copies):
            span = p.span  # the user's T.copy line, kept on its TMA loads (source-line builds)
            p = substitute(p, {k: at_iter})
            src, dst = Region.of(p.value.args[0]), Region.of(p.value.args[1])
            out += box_loads(c, c.rank, list(src.mins), remap[dst.buffer], stage, bar_ptr(stage), simplify, span)
        return seq(out)

    def empty_ptr(stage: Any) -> Any:
        return tirx.address_of(tirx.BufferLoad(empty, [stage]))

    one = tirx.EQ(tid, zero)
    init = [extern("tl::mbar_init", bar_ptr(tirx.IntImm("int32", j)), tirx.IntImm("uint32", 1))
            for j in range(stages)]
    if empty is not None:
        init += [extern("tl::mbar_init", empty_ptr(tirx.IntImm("int32", j)), tirx.IntImm("uint32", threads))
                 for j in range(stages)]
    allocs = [tirx.AllocBuffer(bar)] + ([tirx.AllocBuffer(empty)] if empty is not None else [])
    prologue = [*allocs, tirx.IfThenElse(one, seq([*init, extern("tl::mbar_fence_init")]), None), sync_stmt()]
    nc = const_int(n)
    for j in range(dist):
        if nc is not None and j >= nc:
            break
        cond = one if nc is not None else tirx.And(one, tirx.LT(tirx.IntImm("int32", j), n))
        prologue.append(tirx.IfThenElse(cond, loads(s.min + j, tirx.IntImm("int32", j)), None))
    ahead = k0 + dist
    cond = one if prove(tirx.LT(ahead, n)) else tirx.And(one, simplify(tirx.LT(ahead, n)))
    before_issue = [extern("tl::fence_proxy_async")]
    if empty is not None:  # the stage's previous tile (ahead - stages) has been released by every thread
        prev = ahead - stages
        parity = tirx.Cast("uint32", tirx.floormod(tirx.floordiv(prev, stages), 2))
        free = extern("tl::mbar_wait", empty_ptr(tirx.floormod(ahead, stages)), parity)
        before_issue = [tirx.IfThenElse(simplify(tirx.GE(prev, 0)), free, None), *before_issue]
    issue = tirx.IfThenElse(cond, seq([*before_issue, loads(k + dist, tirx.floormod(ahead, stages))]), None)
    wait = extern("tl::mbar_wait", bar_ptr(tirx.floormod(k0, stages)),
                  tirx.Cast("uint32", tirx.floormod(tirx.floordiv(k0, stages), 2)))
    if empty is None:
        return prologue, [wait, sync_stmt(), issue], [], [sync_stmt()]
    # the tail: release the stage whose group has just retired (step k's own with wait_group 0, step k-1's when
    # one group stays in flight)
    done = k0 if release == "wait0" else k0 - 1
    arrive = extern("tl::mbar_arrive", empty_ptr(tirx.floormod(done, stages)))
    tail = [arrive] if release == "wait0" else [tirx.IfThenElse(simplify(tirx.GE(done, 0)), arrive, None)]
    return prologue, [wait, issue], tail, [sync_stmt()]


def encode_maps(maps: list[TmaMap]) -> str:
    return json.dumps([asdict(m) for m in maps])


def decode_maps(text: str) -> list[dict[str, Any]]:
    return list(json.loads(text))

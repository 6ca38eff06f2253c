"""Thread/register layouts of fragments and physical layouts of shared tiles, for the CUDA backend.

A ``local.fragment`` tile is spread over the threads of a block: each element lives in one register of one thread
(or, for a *replicated* fragment, in every thread). The layout is the function ``(thread, register) -> element``;
the passes that lower ``T.gemm``, ``T.copy``, ``T.reduce_*`` and ``T.Parallel`` must all use the same one for a
given fragment, so it is chosen once (``tl.InferFragmentLayoutsCUDA``), recorded as a spec string on the
``PrimFunc`` and rebuilt from that string here by every later pass. Three kinds:

* ``blocked`` — the tile's elements in row-major order, cut into ``vec``-element chunks (16 bytes of the element
  size the layout pass picks — the narrowest global tensor the fragment meets — when the row allows), chunk ``c``
  held by thread ``c % threads``. Consecutive threads hold consecutive chunks of a row, so copies to and from
  global memory are coalesced, 16-byte vector accesses. A chunk may span more than 16 bytes of a wider type (an
  fp32 accumulator beside fp16 inputs: 8 floats): the lowering splits such a chunk into accesses of at most 16
  bytes.
* ``mma`` — the accumulator layout of ``mma.sync.m16n8k16`` for a ``warp_m x warp_n`` grid of warps (lane ``l``
  of a warp holds rows ``l/4`` and ``l/4 + 8`` and columns ``2(l%4)``, ``2(l%4)+1`` of every 16x8 atom). The gemm
  template ``tl::gemm_ss`` writes exactly this order: register ``((mi * NT) + ni) * 4 + k``.
* ``mma_row`` — a 1-D tile of one value per row of an ``mma`` accumulator (``M`` rows, same warp grid): each
  thread holds exactly the rows its accumulator registers touch (``2 * MT`` registers: rows ``l/4`` and
  ``l/4 + 8`` of each 16-row atom), so the four lanes of a quad (and the ``warp_n`` warps of a warp row) hold
  copies of the same rows. Row reductions of the accumulator are then quad shuffles, and ``acc[i, j] *
  row[i]`` is a register operation (flash attention's online softmax).
* ``wgmma`` — the accumulator layout of Hopper's ``wgmma.mma_async.m64nNk16`` (and of the float8 ``m64nNk32``,
  whose D fragment is the same) for ``warp_m x warp_n``
  *warpgroups* (4 warps each). Warpgroup ``g`` (row ``g // warp_n``, column ``g % warp_n``) computes m-blocks
  ``mi * warp_m + g // warp_n`` (64 rows each) of its column slice; inside an m64 block warp ``w`` of the group
  holds rows ``16 w .. 16 w + 15`` exactly as one mma.sync 16x8 atom per 8 columns (lane ``l``: rows ``l/4``,
  ``l/4 + 8``; columns ``2(l%4)``, ``2(l%4)+1``). Register ``((mi * NT) + ni) * 4 + k`` (``NT`` = 8-column atoms
  of the slice) — the order ``tl::wgmma_gemm_ss`` (``include/tl/wgmma.cuh``) writes.
* ``wgmma_row`` — the rows of a ``wgmma`` accumulator whose warpgroups split M only (``warp_n`` = 1), as
  ``mma_row`` is for ``mma``: each thread holds the two rows of each of its m64 blocks (``2 * MI`` registers: row
  ``mi * warp_m * 64 + 64 g + 16 (w % 4) + l/4`` and that + 8), the four lanes of a quad holding copies. Row
  reductions are quad shuffles; ``acc[i, j] * row[i]`` is a register operation.
* ``replicated`` — every thread holds the whole tile (reduction results, tiles used element-wise outside
  ``T.Parallel``).

Shared tiles read by the tensor-core gemm are *swizzled*: the 16-byte chunk index inside each 128-byte segment is
XOR-ed with the row (or 128-byte line) index, so the eight row addresses of an ``ldmatrix`` hit distinct banks.
The same function is implemented in ``include/tl/gemm.cuh`` (``tl::swizzle``); both sides must agree.

Shared tiles read by ``wgmma`` take the canonical swizzled layout of a wgmma shared-memory matrix descriptor
instead (swizzle code ``WGMMA_SWIZZLE_BASE + bytes``, bytes = 128, 64 or 32): the tile's rows are cut into atoms
of ``bytes`` along the contiguous (last) dimension, the column blocks stored one after the other
(``(c // W) * rows * W + r * W + c % W`` for ``W = bytes / element size``), and inside every 8-row atom the
16-byte chunk index is XOR-ed with the row (``Swizzle<3|2|1, 4, 3>``: byte-address bits 4.. ^= bits 7..). The
same physical formula serves a K-major operand (rows = M or N, columns = K) and an MN-major one (rows = K,
columns = M or N); the descriptor's strides say which (see ``include/tl/wgmma.cuh`` and docs/cuda.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tvm import tirx

WARP = 32
MMA_DTYPES = ("float16", "bfloat16")
WGMMA_FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")  # wgmma .e4m3 / .e5m2 operands (k32 steps, any mix of the two)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one scalar of ``dtype`` (at least 1; vector lanes are not counted)."""
    import tvm

    return max(tvm.DataType(dtype).bits // 8, 1)


def _prod(xs: Any) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _pow2_divisor(n: int, cap: int) -> int:
    v = 1
    while v * 2 <= cap and n % (v * 2) == 0:
        v *= 2
    return v


@dataclass(frozen=True)
class FragmentLayout:
    """Where each element of a fragment lives: ``(thread, register)``."""

    kind: str  # "blocked" | "mma" | "mma_row" | "wgmma" | "wgmma_row" | "replicated"
    shape: tuple[int, ...]
    threads: int
    vec: int = 1
    warp_m: int = 1
    warp_n: int = 1

    # -- construction / serialisation ----------------------------------------------------------------------
    @staticmethod
    def blocked(shape: Any, threads: int, elem_bytes: int) -> FragmentLayout:
        """Chunks of ``16 // elem_bytes`` elements, or the largest power of two dividing the last dimension below
        that. ``elem_bytes`` is the element size the chunks are sized for, not necessarily the fragment's own."""
        shape = tuple(int(s) for s in shape)
        vec = _pow2_divisor(shape[-1], max(16 // elem_bytes, 1)) if shape else 1
        return FragmentLayout("blocked", shape, threads, vec=vec)

    @staticmethod
    def mma(shape: Any, threads: int, warp_m: int, warp_n: int) -> FragmentLayout:
        return FragmentLayout("mma", tuple(int(s) for s in shape), threads, warp_m=warp_m, warp_n=warp_n)

    @staticmethod
    def wgmma(shape: Any, threads: int, wg_m: int, wg_n: int) -> FragmentLayout:
        return FragmentLayout("wgmma", tuple(int(s) for s in shape), threads, warp_m=wg_m, warp_n=wg_n)

    @staticmethod
    def mma_row(rows: int, threads: int, warp_m: int, warp_n: int) -> FragmentLayout:
        return FragmentLayout("mma_row", (int(rows),), threads, warp_m=warp_m, warp_n=warp_n)

    @staticmethod
    def wgmma_row(rows: int, threads: int, wg_m: int) -> FragmentLayout:
        return FragmentLayout("wgmma_row", (int(rows),), threads, warp_m=wg_m, warp_n=1)

    @staticmethod
    def replicated(shape: Any, threads: int) -> FragmentLayout:
        return FragmentLayout("replicated", tuple(int(s) for s in shape), threads)

    def spec(self) -> str:
        return (f"{self.kind};{','.join(map(str, self.shape))};{self.threads};{self.vec};{self.warp_m};"
                f"{self.warp_n}")

    @staticmethod
    def from_spec(spec: str) -> FragmentLayout:
        kind, shape, threads, vec, wm, wn = str(spec).split(";")
        return FragmentLayout(kind, tuple(int(s) for s in shape.split(",") if s), int(threads), int(vec), int(wm),
                              int(wn))

    # -- sizes ---------------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return _prod(self.shape)

    @property
    def distributed(self) -> bool:
        return self.kind != "replicated"

    @property
    def mma_tiles(self) -> tuple[int, int]:
        """(MT, NT): 16-row and 8-column atoms per warp."""
        M, N = self.shape
        return M // self.warp_m // 16, N // self.warp_n // 8

    @property
    def wgmma_tiles(self) -> tuple[int, int]:
        """(MI, NT) of a ``wgmma`` layout: m64 blocks per warpgroup and 8-column atoms of its column slice."""
        M, N = self.shape
        return M // self.warp_m // 64, N // self.warp_n // 8

    @property
    def const_regs(self) -> bool:
        """Registers must be enumerated with constant indices (their coordinates are not affine in them)."""
        return self.kind in ("mma", "mma_row", "wgmma", "wgmma_row")

    @property
    def row_kind(self) -> str | None:
        """The kind of this accumulator layout's rows (``mma_row`` / ``wgmma_row``), or None when its rows have no
        register layout of their own (not an accumulator, or wgmma warpgroups that also split N)."""
        if self.kind == "mma":
            return "mma_row"
        if self.kind == "wgmma" and self.warp_n == 1:
            return "wgmma_row"
        return None

    @property
    def row_tiles(self) -> int:
        """MT of an ``mma_row`` layout: 16-row atoms per warp."""
        return self.shape[0] // self.warp_m // 16

    @property
    def num_regs(self) -> int:
        if self.kind == "replicated":
            return self.size
        if self.kind == "mma":
            mt, nt = self.mma_tiles
            return mt * nt * 4
        if self.kind == "mma_row":
            return self.row_tiles * 2
        if self.kind == "wgmma_row":
            return self.shape[0] // self.warp_m // 64 * 2
        if self.kind == "wgmma":
            mi, nt = self.wgmma_tiles
            return mi * nt * 4
        chunks = -(-self.size // self.vec)
        return -(-chunks // self.threads) * self.vec

    @property
    def padded(self) -> bool:
        """True when some (thread, register) pairs hold no element (blocked layouts of ragged sizes)."""
        return self.kind == "blocked" and self.num_regs * self.threads != self.size

    # -- rows of mma accumulators ---------------------------------------------------------------------------
    def row_layout(self) -> FragmentLayout:
        """The ``mma_row`` (``wgmma_row``) layout of this ``mma`` (``wgmma``, ``warp_n`` = 1) accumulator's rows."""
        if self.kind == "wgmma":
            return FragmentLayout.wgmma_row(self.shape[0], self.threads, self.warp_m)
        return FragmentLayout.mma_row(self.shape[0], self.threads, self.warp_m, self.warp_n)

    def row_reg(self, reg: int) -> int:
        """The register of :meth:`row_layout` holding the row of accumulator register ``reg`` (same thread)."""
        nt = self.wgmma_tiles[1] if self.kind == "wgmma" else self.mma_tiles[1]
        return (reg // (nt * 4)) * 2 + (reg % 4) // 2

    def owner_cond(self, tid: Any) -> Any:
        """For layouts holding copies (``mma_row``): the condition selecting one holder of each element
        (lane % 4 == 0 of warp column 0), for side effects that must happen once (atomics); else None."""
        if self.kind == "wgmma_row":
            return tirx.EQ(tirx.floormod(tid, 4), 0)
        if self.kind != "mma_row":
            return None
        warp = tirx.floordiv(tid, WARP)
        cond = tirx.EQ(tirx.floormod(tid, 4), 0)
        if self.warp_n > 1:
            cond = tirx.And(cond, tirx.EQ(tirx.floormod(warp, self.warp_n), 0))
        return cond

    # -- Python-level mapping (tests, planning) -------------------------------------------------------------
    def element_of(self, thread: int, reg: int) -> tuple[int, ...] | None:
        """The coordinates held by ``(thread, reg)``, or None for padding."""
        if self.kind == "replicated":
            return tuple(_unravel(reg, self.shape))
        if self.kind == "mma":
            return tuple(self._mma_coords(thread // WARP, thread % WARP, reg))
        if self.kind == "wgmma":
            return tuple(self._wgmma_coords(thread // WARP, thread % WARP, reg, lambda a, b: a // b,
                                            lambda a, b: a % b))
        if self.kind == "mma_row":
            warp, lane = thread // WARP, thread % WARP
            wr = warp // self.warp_n
            return (wr * (self.shape[0] // self.warp_m) + (reg // 2) * 16 + 8 * (reg % 2) + lane // 4,)
        if self.kind == "wgmma_row":
            warp, lane = thread // WARP, thread % WARP
            return (self._wgmma_row_of(warp, lane, reg, lambda a, b: a // b, lambda a, b: a % b),)
        f = ((reg // self.vec) * self.threads + thread) * self.vec + reg % self.vec
        return tuple(_unravel(f, self.shape)) if f < self.size else None

    def _mma_coords(self, warp: Any, lane: Any, reg: int) -> list[Any]:
        M, N = self.shape
        mt, nt = self.mma_tiles
        wr, wc = warp // self.warp_n, warp % self.warp_n
        mi, ni, k = reg // (nt * 4), (reg // 4) % nt, reg % 4
        row = wr * (M // self.warp_m) + mi * 16 + lane // 4 + 8 * (k // 2)
        col = wc * (N // self.warp_n) + ni * 8 + (lane % 4) * 2 + k % 2
        return [row, col]

    # -- TIR-level mapping ---------------------------------------------------------------------------------
    def coords(self, tid: Any, reg: Any, ana: Any) -> tuple[list[Any], Any]:
        """TIR coordinates of register ``reg`` (an int or expr) of thread ``tid``, and a validity condition
        (None when every register holds an element). ``ana`` must know the range of ``tid``."""
        if self.kind == "replicated":
            return [ana.simplify(c) for c in _unravel_expr(reg, self.shape)], None
        if self.kind == "mma":
            warp = tirx.floordiv(tid, WARP)
            lane = tirx.floormod(tid, WARP)
            if isinstance(reg, int):
                return [ana.simplify(c) for c in self._mma_coords_expr(warp, lane, reg)], None
            raise ValueError("mma fragment registers must be enumerated with constant indices")
        if self.kind == "wgmma":
            if not isinstance(reg, int):
                raise ValueError("wgmma fragment registers must be enumerated with constant indices")
            coords = self._wgmma_coords(tirx.floordiv(tid, WARP), tirx.floormod(tid, WARP), reg, tirx.floordiv,
                                        tirx.floormod)
            return [ana.simplify(c) for c in coords], None
        if self.kind == "mma_row":
            if not isinstance(reg, int):
                raise ValueError("mma_row fragment registers must be enumerated with constant indices")
            wr = tirx.floordiv(tirx.floordiv(tid, WARP), self.warp_n)
            row = (wr * (self.shape[0] // self.warp_m) + ((reg // 2) * 16 + 8 * (reg % 2))
                   + tirx.floordiv(tirx.floormod(tid, WARP), 4))
            return [ana.simplify(row)], None
        if self.kind == "wgmma_row":
            if not isinstance(reg, int):
                raise ValueError("wgmma_row fragment registers must be enumerated with constant indices")
            row = self._wgmma_row_of(tirx.floordiv(tid, WARP), tirx.floormod(tid, WARP), reg, tirx.floordiv,
                                     tirx.floormod)
            return [ana.simplify(row)], None
        v = self.vec
        if isinstance(reg, int):
            f = ((reg // v) * self.threads + tid) * v + reg % v
        else:
            f = (tirx.floordiv(reg, v) * self.threads + tid) * v + tirx.floormod(reg, v)
        coords = [ana.simplify(c) for c in _unravel_expr(f, self.shape)]
        cond = None
        if self.padded:
            c = tirx.LT(f, self.size)
            if not ana.can_prove(c):
                cond = ana.simplify(c)
        return coords, cond

    def _wgmma_coords(self, warp: Any, lane: Any, reg: int, div: Any, mod: Any) -> list[Any]:
        """(row, col) of register ``reg`` of ``lane`` in ``warp`` (``div``/``mod``: Python's or TIR's)."""
        M, N = self.shape
        mi_n, nt = self.wgmma_tiles
        g = div(warp, 4)
        gr, gc = (div(g, self.warp_n), mod(g, self.warp_n)) if self.warp_n > 1 else (g, 0)
        mi, ni, k = reg // (nt * 4), (reg // 4) % nt, reg % 4
        row = (mi * self.warp_m * 64 + 8 * (k // 2)) + gr * 64 + mod(warp, 4) * 16 + div(lane, 4)
        col = (ni * 8 + k % 2) + gc * (N // self.warp_n) + mod(lane, 4) * 2
        return [row, col]

    def _wgmma_row_of(self, warp: Any, lane: Any, reg: int, div: Any, mod: Any) -> Any:
        """The row held by register ``reg`` of a ``wgmma_row`` layout (warpgroups split M only)."""
        return ((reg // 2) * self.warp_m * 64 + 8 * (reg % 2)) + div(warp, 4) * 64 + mod(warp, 4) * 16 + div(lane, 4)

    def _mma_coords_expr(self, warp: Any, lane: Any, reg: int) -> list[Any]:
        M, N = self.shape
        mt, nt = self.mma_tiles
        wr, wc = tirx.floordiv(warp, self.warp_n), tirx.floormod(warp, self.warp_n)
        mi, ni, k = reg // (nt * 4), (reg // 4) % nt, reg % 4
        row = wr * (M // self.warp_m) + (mi * 16 + 8 * (k // 2)) + tirx.floordiv(lane, 4)
        col = wc * (N // self.warp_n) + (ni * 8 + k % 2) + tirx.floormod(lane, 4) * 2
        return [row, col]


def _unravel(f: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for s in reversed(shape):
        out.append(f % s)
        f //= s
    return list(reversed(out))


def _unravel_expr(f: Any, shape: tuple[int, ...]) -> list[Any]:
    out = []
    stride = 1
    for s in reversed(shape):
        out.append(tirx.floormod(tirx.floordiv(f, stride), s) if stride > 1 else tirx.floormod(f, s))
        stride *= s
    out = list(reversed(out))
    if shape:
        # the leading coordinate needs no modulo (f < size)
        lead_stride = stride // shape[0]
        out[0] = tirx.floordiv(f, lead_stride) if lead_stride > 1 else f
    return out


def flat_index(indices: list[Any], shape: tuple[int, ...]) -> Any:
    """Row-major flat index of ``indices`` in ``shape``."""
    f: Any = 0
    for i, s in zip(indices, shape):
        f = f * s + i
    return f


# -- tensor-core gemm planning ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmPlan:
    """How one ``T.gemm`` is computed: ``mma`` (ldmatrix + mma.sync template) or ``fma`` (TIR loops)."""

    kind: str
    warp_m: int = 1
    warp_n: int = 1


def plan_gemm(M: int | None, N: int | None, K: int | None, in_dtype: str, b_dtype: str, acc_dtype: str,
              threads: int, policy: int, a_whole: bool, b_whole: bool) -> GemmPlan:
    """Pick mma.sync when the dtypes and tile shapes allow it, else the FMA fallback.

    ``policy`` is GemmWarpPolicy (0 Square, 1 FullRow, 2 FullCol). ``a_whole``/``b_whole``: the operands are whole
    shared tiles (or whole pipeline stages), which the template addresses from their base pointer.
    """
    if None in (M, N, K) or in_dtype != b_dtype or in_dtype not in MMA_DTYPES:
        return GemmPlan("fma")
    if acc_dtype not in ("float32", "float16") or not (a_whole and b_whole) or threads % WARP:
        return GemmPlan("fma")
    if K % 16:
        return GemmPlan("fma")
    warps = threads // WARP
    choices = []
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if M % (wm * 16) or N % (wn * 8):
            continue
        choices.append((wm, wn))
    if not choices:
        return GemmPlan("fma")
    if policy == 1:  # FullRow: warps split M
        choices.sort(key=lambda c: -c[0])
    elif policy == 2:  # FullCol: warps split N
        choices.sort(key=lambda c: -c[1])
    else:  # Square: warp tiles as square as possible, ties to more warps along M
        choices.sort(key=lambda c: (abs(math.log2((M / c[0]) / (N / c[1]))), -c[0]))
    wm, wn = choices[0]
    return GemmPlan("mma", wm, wn)


# -- shared-memory swizzle --------------------------------------------------------------------------------------
def swizzle_shift(row_elems: int, rows: int, dtype: str) -> int:
    """The byte-offset shift of the XOR swizzle for a row-major tile (0: leave it unswizzled).

    The 16-byte chunk index (offset bits 4..6) is XOR-ed with bits ``shift..shift+2``: the row index for rows of
    128 bytes or more, the 128-byte line index for shorter rows. Needs power-of-two rows of whole chunks and a
    tile of whole 128-byte lines (so every chunk stays inside the tile).
    """
    es = dtype_bytes(dtype)
    row_bytes = row_elems * es
    if row_bytes < 16 or row_bytes & (row_bytes - 1) or (row_bytes * rows) % 128:
        return 0
    return int(math.log2(max(row_bytes, 128)))


PACKED_SWIZZLE_BASE = 100  # code of a packed staging tile's swizzle: base + 10 * row shift + the chunk XOR (1 or 4)


def packed_swizzle_code(row_bytes: int, rows: int, run_bytes: int) -> int:
    """The swizzle of a shared tile whose rows a warp reads four lanes to a row, each lane ``run_bytes`` (16 or
    32) contiguous bytes in 16-byte loads (the fragment decode's packed weights), 0 where none is needed or none
    helps. A 16-byte load is served eight lanes at a time: two rows, whose chunks (16 bytes; eight to the 128
    bytes of the banks) are the same when rows of 128 bytes or more all start on bank 0. XOR-ing the chunk index
    of every odd row with 4 (runs of 16 bytes: a row's lanes read chunks c..c+3) or 1 (runs of 32: c, c+2, c+4,
    c+6) moves the odd row to the other chunks: no conflict. Rows shorter than 128 bytes (two rows already share
    the 128 bytes) or runs of other widths get 0."""
    if row_bytes < 128 or row_bytes & (row_bytes - 1) or rows % 2 or run_bytes not in (16, 32):
        return 0
    return PACKED_SWIZZLE_BASE + 10 * int(math.log2(row_bytes)) + (4 if run_bytes == 16 else 1)


def is_packed_swizzle(code: int) -> bool:
    return PACKED_SWIZZLE_BASE <= code < RUN_SWIZZLE_BASE


RUN_SWIZZLE_BASE = 200  # code of an mma A tile read in 64-byte lane runs: base + the XOR swizzle's row shift


def run_swizzle_code(shift: int) -> int:
    """The swizzle of an A tile that ``tl::gemm_rb_step`` reads in 16-byte loads of 64-byte lane runs (the fragment
    decode's k permutation with runs of 32 halves): lanes q and q + 2 of a row read 16-byte chunks 128 bytes apart,
    which the XOR swizzle of ``shift`` (chunk bits 4..6 ^ the row) puts on the same banks. This one also XORs chunk
    bit 5 with offset bit 7, so the eight lanes of a load phase (two rows, four runs) hit eight different chunks of
    the banks. Rows of 256 bytes or more (``shift`` >= 8); 0 otherwise."""
    return RUN_SWIZZLE_BASE + shift if 8 <= shift < 16 else 0


def is_run_swizzle(code: int) -> bool:
    return RUN_SWIZZLE_BASE <= code < WGMMA_SWIZZLE_BASE


def swizzle_expr(elem: Any, shift: int, dtype: str) -> Any:
    """Swizzled element offset of the logical element offset ``elem`` (TIR): the mma tiles' XOR swizzle (``shift``
    from :func:`swizzle_shift`), or a packed staging tile's (:func:`packed_swizzle_code`)."""
    if not shift:
        return elem
    lg = int(math.log2(dtype_bytes(dtype)))
    if is_packed_swizzle(shift):
        row_shift, x = divmod(shift - PACKED_SWIZZLE_BASE, 10)
        odd = tirx.bitwise_and(tirx.shift_right(elem, row_shift - lg), 1)
        return tirx.bitwise_xor(elem, tirx.shift_left(odd * x, 4 - lg))
    if is_run_swizzle(shift):
        row = tirx.bitwise_and(tirx.shift_right(elem, shift - RUN_SWIZZLE_BASE - lg), 7)
        half = tirx.shift_left(tirx.bitwise_and(tirx.shift_right(elem, 7 - lg), 1), 1)
        return tirx.bitwise_xor(elem, tirx.shift_left(tirx.bitwise_xor(row, half), 4 - lg))
    mask = tirx.bitwise_and(tirx.shift_right(elem, shift - lg), 7)
    return tirx.bitwise_xor(elem, tirx.shift_left(mask, 4 - lg))


def swizzle_py(elem: int, shift: int, dtype: str) -> int:
    """Python twin of :func:`swizzle_expr` (tests)."""
    if not shift:
        return elem
    lg = int(math.log2(dtype_bytes(dtype)))
    if is_packed_swizzle(shift):
        row_shift, x = divmod(shift - PACKED_SWIZZLE_BASE, 10)
        return elem ^ ((((elem >> (row_shift - lg)) & 1) * x) << (4 - lg))
    if is_run_swizzle(shift):
        row = (elem >> (shift - RUN_SWIZZLE_BASE - lg)) & 7
        return elem ^ ((row ^ (((elem >> (7 - lg)) & 1) << 1)) << (4 - lg))
    return elem ^ (((elem >> (shift - lg)) & 7) << (4 - lg))


# -- wgmma (sm_90a) -----------------------------------------------------------------------------------------------
WGMMA_SWIZZLE_BASE = 1000  # swizzle code of a wgmma shared layout: base + swizzle bytes (128, 64 or 32)
WGMMA_MAX_N = 256
WARPGROUP = 128


def wgmma_swizzle_bytes(rows: int, cols: int, dtype: str) -> int:
    """The widest wgmma swizzle (128, 64 or 32 bytes) whose atoms tile a ``rows x cols`` shared tile (0: none)."""
    row_bytes = cols * dtype_bytes(dtype)
    if rows % 8:
        return 0
    for b in (128, 64, 32):
        if row_bytes % b == 0:
            return b
    return 0


def wgmma_k_step(dtype: str) -> int:
    """K of one wgmma instruction: 32 bytes of the operand type (k16 for float16/bfloat16, k32 for float8)."""
    return 32 // dtype_bytes(dtype)


def is_wgmma_swizzle(code: int) -> bool:
    return code > WGMMA_SWIZZLE_BASE


def wgmma_offset_expr(r: Any, c: Any, rows: int, code: int, dtype: str) -> Any:
    """Physical element offset of element (r, c) of a tile in the wgmma layout ``code`` (TIR)."""
    es = dtype_bytes(dtype)
    w = (code - WGMMA_SWIZZLE_BASE) // es
    lg = int(math.log2(es))
    mask = (code - WGMMA_SWIZZLE_BASE) // 16 - 1
    p = tirx.floordiv(c, w) * (rows * w) + r * w + tirx.floormod(c, w)
    x = tirx.bitwise_and(tirx.shift_right(p, 7 - lg), mask)
    return tirx.bitwise_xor(p, tirx.shift_left(x, 4 - lg))


def wgmma_offset_py(r: int, c: int, rows: int, code: int, dtype: str) -> int:
    """Python twin of :func:`wgmma_offset_expr` (tests)."""
    es = dtype_bytes(dtype)
    w = (code - WGMMA_SWIZZLE_BASE) // es
    lg = int(math.log2(es))
    mask = (code - WGMMA_SWIZZLE_BASE) // 16 - 1
    p = (c // w) * (rows * w) + r * w + c % w
    return p ^ (((p >> (7 - lg)) & mask) << (4 - lg))


def wgmma_chunk_n(wn: int, w_b: int, max_n: int = WGMMA_MAX_N) -> int:
    """Columns per wgmma instruction for a warpgroup's column slice of ``wn``: the slice in equal chunks of at
    most ``max_n`` (256) columns, each a multiple of 8 and of ``w_b`` (the B atom width when B is MN-major; 1 if
    K-major). 0 when no such split exists."""
    step = max(8, w_b)
    for parts in range(1, wn // 8 + 1):
        if wn % parts:
            continue
        n = wn // parts
        if n <= min(max_n, WGMMA_MAX_N) and n % step == 0:
            return n
    return 0


def plan_wgmma(M: int | None, N: int | None, K: int | None, in_dtype: str, b_dtype: str, acc_dtype: str,
               threads: int, policy: int, a_shape: tuple[int, int] | None, b_shape: tuple[int, int] | None,
               ta: bool, tb: bool, a_regs: bool = False) -> tuple[GemmPlan | None, str]:
    """A ``wgmma`` plan (warpgroups ``warp_m x warp_n``) for a gemm of shared A and B, or (None, why not).

    ``a_shape``/``b_shape``: the stored (rows, cols) of the shared A / B tiles (None when not a whole shared tile).
    ``a_regs``: A is a fragment read from registers (register-A wgmma, fp16/bf16 only, not transposed); its
    warpgroups then split M only (each holds whole rows of A). Warpgroups go along M first (each takes whole m64
    blocks), the rest along N (GemmWarpPolicy FullCol: along N first).
    """
    if None in (M, N, K):
        return None, "tile extents are not constants"
    fp8 = in_dtype in WGMMA_FP8_DTYPES and b_dtype in WGMMA_FP8_DTYPES
    if not fp8 and (in_dtype not in MMA_DTYPES or b_dtype != in_dtype):
        return None, (f"wgmma here takes float16/bfloat16 A and B of one type, or float8_e4m3fn/float8_e5m2 A and "
                      f"B (got {in_dtype} x {b_dtype})")
    if acc_dtype != "float32":
        return None, f"wgmma here accumulates in float32 (the accumulator is {acc_dtype})"
    if fp8 and (ta or not tb):
        return None, ("fp8 wgmma reads both operands K-major from shared memory (A stored M x K, B stored N x K: "
                      f"transpose_B=True); this gemm has transpose_A={bool(ta)}, transpose_B={bool(tb)}")
    if a_regs and (fp8 or ta):
        return None, ("register-A wgmma takes float16/bfloat16 A, not transposed (transpose_A=False)" if not fp8
                      else "register-A wgmma is not implemented for float8 (A from a fragment)")
    if (a_shape is None and not a_regs) or b_shape is None:
        return None, "A and B must be whole shared tiles (or pipeline stages)"
    if threads % WARPGROUP:
        return None, f"threads={threads} is not a multiple of a warpgroup (128)"
    k_step = wgmma_k_step(in_dtype)
    if M % 64 or K % k_step or N % 8:
        return None, (f"the tile {M}x{N}x{K} is not made of m64nNk{k_step} steps (M % 64, N % 8, K % {k_step})")
    for name, shape, dt in (("A", a_shape, in_dtype), ("B", b_shape, b_dtype)):
        if shape is None:  # A in registers
            continue
        if not wgmma_swizzle_bytes(shape[0], shape[1], dt):
            return None, (f"the shared {name} tile {shape[0]}x{shape[1]} has no wgmma swizzle layout (rows % 8, "
                          "row bytes % 32)")
    groups = threads // WARPGROUP
    w_b = 1 if tb else wgmma_swizzle_bytes(b_shape[0], b_shape[1], b_dtype) // dtype_bytes(b_dtype)
    choices = []
    for gm in range(1, groups + 1):
        if groups % gm:
            continue
        gn = groups // gm
        if a_regs and gn != 1:
            continue
        if M % (64 * gm) or N % gn or (N // gn) % 8:
            continue
        if (N // gn) % w_b or not wgmma_chunk_n(N // gn, w_b):
            continue
        choices.append((gm, gn))
    if not choices:
        if a_regs:
            return None, (f"register-A wgmma needs the {groups} warpgroup(s) along M: {M} rows are not "
                          f"{groups} x m64 blocks")
        return None, f"no warpgroup grid of {groups} group(s) divides the {M}x{N} tile into m64 blocks"
    choices.sort(key=lambda c: -c[1] if policy == 2 else -c[0])
    gm, gn = choices[0]
    return GemmPlan("wgmma", gm, gn), ""

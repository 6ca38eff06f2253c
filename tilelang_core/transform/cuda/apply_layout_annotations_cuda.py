"""Pass: ``T.annotate_layout`` on CUDA — swizzled layouts set a shared tile's swizzle; conflicts are explained.

Runs right after ``tl.InferFragmentLayoutsCUDA`` has chosen each shared tile's swizzle code (``tl.shared_swizzle``:
0 row-major, the ``mma.sync`` XOR shift, or a wgmma layout), and overrides or keeps it as the program asks:

* a swizzled layout (``make_swizzled_layout``, ``make_full/half/quarter_bank_swizzled_layout``,
  ``make_wgmma_swizzled_layout``) on a row-major tile sets the XOR swizzle of ``cuda.layouts.swizzle_shift``
  (every access of the tile goes through ``tl.LowerSharedMemoryCUDA``'s physical offset, so any reader agrees); a
  tile that cannot be swizzled that way (rows not a power of two of 16-byte chunks) stays row-major, with a note.
  On a tile already swizzled the compiler's swizzle is kept (a wgmma tile keeps its descriptor layout; a note
  when the bank width asked for differs from the one wgmma needs).
* ``make_linear_layout`` clears the XOR swizzle of an ``mma.sync`` operand (the template takes any shift) and is
  refused for a wgmma operand with a note (the wgmma descriptor here is always a swizzled one).
* a user index map (``Layout``) on a ``T.gemm`` operand is an error at the annotation: the tensor-core templates
  address their operands in their own layout. Elsewhere it is applied by ``tl.ApplyIndexLayouts``.
* a ``Fragment`` is accepted and not honoured: fragment layouts are inferred (noted).
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from ...language._ir import Region
from ..common.layout_annotations import layout_error, user_layouts
from ..common.notes import add_notes
from ..common.rewriter import const_int, tile_op_name
from .common import ATTR_SWIZZLE, is_shared, swizzles_of
from .layouts import WGMMA_SWIZZLE_BASE, is_wgmma_swizzle, swizzle_shift

STAGE = "tl.ApplyLayoutAnnotationsCUDA"
BANK_BYTES = {"make_full_bank_swizzled_layout": 128, "make_half_bank_swizzled_layout": 64,
              "make_quarter_bank_swizzled_layout": 32}


def apply_layout_annotations_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    lays = user_layouts(func)
    if not lays:
        return func
    shared: dict[str, Any] = {}
    gemm_tiles: set[str] = set()

    def alloc(s: Any) -> Any:
        if is_shared(s.buffer):
            shared[str(s.buffer.name)] = s.buffer
        return s

    def ev(s: Any) -> Any:
        if tile_op_name(s) == "tl.gemm":
            gemm_tiles.update(str(Region.of(a).buffer.name) for a in s.value.args[:2])
        return s

    tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, alloc), (tirx.Evaluate, ev)])
    swz = dict(swizzles_of(func))
    notes: list[str] = []
    for name, u in lays.items():
        what = f"T.annotate_layout layout_map[{name}]"
        if u.kind == "fragment":
            notes.append(f"{u.where}{what}: a Fragment is not honoured on CUDA (fragment layouts are inferred)")
            continue
        if u.kind == "index":
            if name in gemm_tiles:
                raise layout_error(u, f"{what}: a Layout (index map) cannot be honoured on a T.gemm operand on "
                                      "CUDA: the tensor-core templates address it in their own layout; use "
                                      f"tilelang.layout.make_swizzled_layout({name}) or no annotation", STAGE)
            continue
        buf = shared.get(name)
        if buf is None:
            notes.append(f"{u.where}{what}: {u.ctor} applies to shared tiles; {name} is {u.scope}, kept as it is")
            continue
        code = swz.get(buf, 0)
        if u.ctor == "make_linear_layout":
            if is_wgmma_swizzle(code):
                notes.append(f"{u.where}{what}: make_linear_layout not honoured: {name} is a wgmma operand, whose "
                             "shared-memory descriptor here is always swizzled")
            elif code:
                swz[buf] = 0
            continue
        if is_wgmma_swizzle(code):
            want = BANK_BYTES.get(u.ctor)
            have = code - WGMMA_SWIZZLE_BASE
            if want is not None and want != have:
                notes.append(f"{u.where}{what}: {u.ctor} asks for {want}-byte swizzle atoms; the wgmma operand "
                             f"keeps the {have}-byte layout its descriptor needs")
            continue
        if code:
            continue  # already the mma.sync XOR swizzle
        shape = [const_int(x) for x in buf.shape]
        shift = swizzle_shift(shape[-1], shape[-2] if len(shape) > 1 else 1, str(buf.dtype)) \
            if None not in shape else 0
        if shift:
            swz[buf] = shift
        else:
            notes.append(f"{u.where}{what}: {name} {shape} {buf.dtype} cannot take the XOR swizzle (its rows are "
                         "not a power of two of 16-byte chunks filling 128-byte lines); kept row-major")
    out = func.with_attr(ATTR_SWIZZLE, swz) if swz != swizzles_of(func) else func
    return add_notes(out, notes)

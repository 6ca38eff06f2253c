"""``T.gemm``: a tile matrix multiply-accumulate ``C += op(A) @ op(B)``.

A and B may live in shared memory or in fragments, C in a fragment (or a local tile). ``policy`` says how a GPU
backend splits the tile over warps; the CPU backend ignores it.
"""

from __future__ import annotations

import enum
from typing import Any

from tvm import tirx

from ._ir import emit, to_region


class GemmWarpPolicy(enum.IntEnum):
    """How the warps of a block share the C tile (TileLang's names)."""

    Square = 0
    FullRow = 1
    FullCol = 2


def gemm(A: Any, B: Any, C: Any, transpose_A: bool = False, transpose_B: bool = False,  # noqa: N803
         policy: GemmWarpPolicy = GemmWarpPolicy.Square, clear_accum: bool = False, k_pack: int = 1,
         wg_wait: int = 0) -> None:
    """``C (+)= op(A) @ op(B)`` with op the optional transpose."""
    for name, v in (("transpose_A", transpose_A), ("transpose_B", transpose_B), ("clear_accum", clear_accum)):
        if not isinstance(v, (bool, int)):
            raise TypeError(f"T.gemm {name}: expected a Python bool, got {v!r}")
    emit("tl.gemm", [to_region(A, None, "T.gemm A"), to_region(B, None, "T.gemm B"), to_region(C, None, "T.gemm C"),
                     tirx.IntImm("bool", bool(transpose_A)), tirx.IntImm("bool", bool(transpose_B)),
                     tirx.IntImm("bool", bool(clear_accum)), tirx.IntImm("int32", int(policy))])

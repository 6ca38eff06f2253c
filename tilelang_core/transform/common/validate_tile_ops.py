"""Pass: check tile ops for errors a user can make, before any backend sees them.

Target-independent checks with the user's line in the message: copy extents that do not match, gemm operands
of incompatible shapes or in the wrong memory (a fragment where the hardware needs shared memory, an
accumulator outside registers), reductions whose destination has the wrong shape. Running them once, here,
keeps the CPU and CUDA backends agreeing on what a valid program is.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ...language._ir import Region
from ...language.alloc import SCOPE_FRAGMENT, SCOPE_LOCAL, SCOPE_SHARED
from .regions import fmt_extents, squeezed
from .rewriter import Rewriter, const_int, tile_op_name


class ValidateTileOps(Rewriter):
    pass_name = "tl.ValidateTileOps"

    def visit_Evaluate(self, s: Any) -> Any:  # noqa: N802
        name = tile_op_name(s)
        if name == "tl.copy":
            self._check_copy(s)
        elif name == "tl.gemm":
            self._check_gemm(s)
        elif name == "tl.reduce":
            self._check_reduce(s)
        return s

    def _same(self, a: list[Any], b: list[Any]) -> bool:
        return len(a) == len(b) and all(self.ana.can_prove_equal(x, y) for x, y in zip(a, b))

    def _check_copy(self, s: Any) -> None:
        src, dst = (Region.of(a) for a in s.value.args[:2])
        se = [src.extents[d] for d in squeezed(src, self.ana)]
        de = [dst.extents[d] for d in squeezed(dst, self.ana)]
        if not self._same(se, de):
            self.error(s.span, f"T.copy: the tile extents differ: src {src.buffer.name} has "
                               f"{fmt_extents(src.extents)}, dst {dst.buffer.name} has {fmt_extents(dst.extents)}")

    def _matrix(self, r: Region, what: str, span: Any) -> list[Any] | None:
        dims = squeezed(r, self.ana)
        ext = list(r.extents)
        if len(ext) >= 2 and len(dims) <= 2:
            if len(dims) < 2 or dims == [len(ext) - 2, len(ext) - 1]:
                return [ext[-2], ext[-1]]
            return [ext[d] for d in dims]
        self.error(span, f"T.gemm: operand {what} ({r.buffer.name}) must be a 2-D tile, got extents "
                         f"{fmt_extents(ext)}")
        return None

    def _check_gemm(self, s: Any) -> None:
        args = s.value.args
        a, b, c = (Region.of(x) for x in args[:3])
        ta, tb = bool(const_int(args[3])), bool(const_int(args[4]))
        if c.scope not in (SCOPE_FRAGMENT, SCOPE_LOCAL):
            self.error(s.span, f"T.gemm: the accumulator C ({c.buffer.name}) must be a fragment "
                               f"(T.alloc_fragment), got a buffer in scope '{c.scope}'")
            return
        if b.scope == SCOPE_FRAGMENT:
            self.error(s.span, f"T.gemm: operand B ({b.buffer.name}) is a fragment; B must be in shared memory "
                               "(T.alloc_shared) — only A may be a fragment")
            return
        for what, r in (("A", a), ("B", b)):
            if r.scope not in (SCOPE_SHARED, SCOPE_FRAGMENT, SCOPE_LOCAL):
                self.error(s.span, f"T.gemm: operand {what} ({r.buffer.name}) is in scope '{r.scope}'; copy it to "
                                   "shared memory (T.alloc_shared + T.copy) first")
                return
        am, bm, cm = self._matrix(a, "A", s.span), self._matrix(b, "B", s.span), self._matrix(c, "C", s.span)
        if am is None or bm is None or cm is None:
            return
        M, K = (am[1], am[0]) if ta else (am[0], am[1])
        K2, N = (bm[1], bm[0]) if tb else (bm[0], bm[1])
        ok = self._same([K], [K2]) and self._same([M, N], cm)
        if not ok:
            self.error(s.span, f"T.gemm: incompatible tile shapes: A {a.buffer.name}{fmt_extents(am)}"
                               f"{' (transposed)' if ta else ''} @ B {b.buffer.name}{fmt_extents(bm)}"
                               f"{' (transposed)' if tb else ''} -> C {c.buffer.name}{fmt_extents(cm)}; expected "
                               f"A (M, K), B (K, N), C (M, N) with M={M}, K={K}, N={N}")

    def _check_reduce(self, s: Any) -> None:
        args = s.value.args
        src, dst = Region.of(args[0]), Region.of(args[1])
        kind, dim = str(args[2].value), const_int(args[3])
        for what, r in (("src", src), ("dst", dst)):
            if r.scope in ("global", ""):
                self.error(s.span, f"T.reduce_{kind}: {what} ({r.buffer.name}) is a global tensor; reduce a "
                                   "fragment or shared tile (copy it in first)")
                return
        expected = [e for i, e in enumerate(src.extents) if i != dim]
        got = list(dst.extents)
        if not (self._same(expected, got) or self._same([e for e in expected if const_int(e) != 1],
                                                         [e for e in got if const_int(e) != 1])):
            self.error(s.span, f"T.reduce_{kind}: dst {dst.buffer.name} has shape {fmt_extents(got)}; reducing "
                               f"src {src.buffer.name}{fmt_extents(src.extents)} over dim {dim} gives "
                               f"{fmt_extents(expected)}")


def validate_tile_ops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return ValidateTileOps().run(func)

"""Fragment layouts and shared-memory swizzle of the CUDA backend, checked exhaustively in Python (no GPU).

Every element of a distributed fragment must be owned by exactly one (thread, register); the TIR expressions the
passes emit must agree with the Python mapping; the swizzle must be a bijection that keeps 16-byte chunks whole
and spreads the eight rows an ldmatrix reads over distinct bank groups; the gemm planner must pick tensor cores
only where the shapes allow."""

from __future__ import annotations

import itertools

import pytest
import tvm
import tvm.sym
from tvm import tirx

from tilelang_core.transform.cuda.layouts import (
    FragmentLayout,
    plan_gemm,
    swizzle_expr,
    swizzle_py,
    swizzle_shift,
)

MMA_CASES = [((128, 128), 128, 2, 2), ((128, 256), 256, 2, 4), ((64, 64), 128, 2, 2), ((16, 64), 128, 1, 4),
             ((256, 128), 256, 4, 2), ((32, 32), 32, 1, 1)]


@pytest.mark.parametrize("shape,threads,wm,wn", MMA_CASES)
def test_mma_accumulator_layout_owns_every_element_exactly_once(shape, threads, wm, wn):
    lay = FragmentLayout.mma(shape, threads, wm, wn)
    seen = {}
    for t, r in itertools.product(range(threads), range(lay.num_regs)):
        c = lay.element_of(t, r)
        assert c not in seen, f"{c} owned by {seen[c]} and {(t, r)}"
        seen[c] = (t, r)
    assert len(seen) == shape[0] * shape[1]


def test_mma_layout_matches_the_mma_m16n8_accumulator_of_lane_and_register():
    lay = FragmentLayout.mma((16, 8), 32, 1, 1)
    for lane in range(32):
        assert lay.element_of(lane, 0) == (lane // 4, 2 * (lane % 4))
        assert lay.element_of(lane, 1) == (lane // 4, 2 * (lane % 4) + 1)
        assert lay.element_of(lane, 2) == (lane // 4 + 8, 2 * (lane % 4))
        assert lay.element_of(lane, 3) == (lane // 4 + 8, 2 * (lane % 4) + 1)


@pytest.mark.parametrize("shape,threads,ebytes", [((4, 4096), 128, 4), ((1001,), 128, 4), ((8, 1030), 128, 4),
                                                  ((64, 64), 256, 2), ((3, 5), 128, 8)])
def test_blocked_layout_owns_every_element_once_and_pads_the_rest(shape, threads, ebytes):
    lay = FragmentLayout.blocked(shape, threads, ebytes)
    assert shape[-1] % lay.vec == 0 and lay.vec * ebytes <= 16
    owned = [lay.element_of(t, r) for t in range(threads) for r in range(lay.num_regs)]
    real = [c for c in owned if c is not None]
    size = 1
    for s in shape:
        size *= s
    assert len(real) == len(set(real)) == size
    assert lay.padded == (len(owned) != size)


def test_blocked_layout_gives_consecutive_threads_consecutive_16_byte_chunks():
    lay = FragmentLayout.blocked((8, 1024), 128, 4)
    assert lay.vec == 4
    for t in range(127):
        a, b = lay.element_of(t, 0), lay.element_of(t + 1, 0)
        assert (b[0], b[1]) == (a[0], a[1] + 4)


@pytest.mark.parametrize("lay", [FragmentLayout.mma((128, 128), 128, 2, 2), FragmentLayout.blocked((4, 333), 128, 4),
                                 FragmentLayout.blocked((1, 4096), 256, 4)])
def test_tir_coordinates_agree_with_the_python_layout(lay):
    tid = tvm.ir.Var("tid", "int32")
    ana = tvm.sym.Analyzer()
    ana.bind(tid, tvm.ir.Range.from_min_extent(0, lay.threads))
    for r in range(0, lay.num_regs, max(1, lay.num_regs // 7)):
        coords, valid = lay.coords(tid, r, ana)
        for t in (0, 1, 5, 31, 32, lay.threads - 1):
            sub = tvm.sym.Analyzer()
            want = lay.element_of(t, r)
            got = tuple(int(sub.simplify(tirx_substitute(c, tid, t))) for c in coords)
            ok = True if valid is None else bool(int(sub.simplify(tirx_substitute(valid, tid, t))))
            assert (got if ok else None) == want


def tirx_substitute(e, var, value):
    import tvm_ffi

    return tvm_ffi.structural_map(e, [(tvm.ir.Var, lambda v: tirx.IntImm("int32", value) if v.same_as(var) else v)])


def test_layout_spec_round_trips():
    for lay in (FragmentLayout.mma((128, 256), 256, 2, 4), FragmentLayout.blocked((7, 9), 64, 4),
                FragmentLayout.replicated((4,), 128)):
        assert FragmentLayout.from_spec(lay.spec()) == lay


# -- swizzle ----------------------------------------------------------------------------------------------------

SWIZZLE_TILES = [(128, 32, "float16"), (32, 128, "float16"), (32, 256, "float16"), (128, 64, "float16"),
                 (64, 16, "bfloat16"), (16, 128, "float16")]


@pytest.mark.parametrize("rows,cols,dtype", SWIZZLE_TILES)
def test_swizzle_is_a_bijection_that_keeps_16_byte_chunks_whole(rows, cols, dtype):
    shift = swizzle_shift(cols, rows, dtype)
    assert shift
    n = rows * cols
    phys = [swizzle_py(e, shift, dtype) for e in range(n)]
    assert sorted(phys) == list(range(n))
    per_chunk = 16 // 2
    for e in range(0, n, per_chunk):
        assert phys[e + per_chunk - 1] == phys[e] + per_chunk - 1 and phys[e] % per_chunk == 0


@pytest.mark.parametrize("rows,cols,dtype", SWIZZLE_TILES)
def test_swizzled_ldmatrix_rows_hit_distinct_bank_groups(rows, cols, dtype):
    shift = swizzle_shift(cols, rows, dtype)
    for r0 in range(0, rows - 7, 8):
        for c in range(0, cols, 8):
            groups = {(swizzle_py((r0 + i) * cols + c, shift, dtype) * 2 // 16) % 8 for i in range(8)}
            assert len(groups) == 8, (r0, c)


def test_tir_swizzle_matches_python():
    ana = tvm.sym.Analyzer()
    for e in (0, 7, 64, 515, 4095):
        assert int(ana.simplify(swizzle_expr(tirx.IntImm("int32", e), 7, "float16"))) == swizzle_py(e, 7, "float16")


def test_unswizzlable_tiles_are_left_alone():
    assert swizzle_shift(24, 64, "float16") == 0  # 48-byte rows
    assert swizzle_shift(4, 4, "float16") == 0  # smaller than a 128-byte line


# -- gemm planning ----------------------------------------------------------------------------------------------

def test_gemm_plan_picks_mma_for_half_precision_and_fma_otherwise():
    p = plan_gemm(128, 128, 32, "float16", "float16", "float32", 128, 0, True, True)
    assert (p.kind, p.warp_m, p.warp_n) == ("mma", 2, 2)
    assert plan_gemm(128, 128, 32, "float32", "float32", "float32", 128, 0, True, True).kind == "fma"
    assert plan_gemm(128, 128, 24, "float16", "float16", "float32", 128, 0, True, True).kind == "fma"  # K % 16
    assert plan_gemm(8, 128, 32, "float16", "float16", "float32", 128, 0, True, True).kind == "fma"  # M < 16
    assert plan_gemm(128, 128, 32, "float16", "float16", "float32", 128, 0, False, True).kind == "fma"


def test_gemm_warp_policies():
    full_row = plan_gemm(128, 128, 32, "float16", "float16", "float32", 128, 1, True, True)
    full_col = plan_gemm(128, 128, 32, "float16", "float16", "float32", 128, 2, True, True)
    assert (full_row.warp_m, full_row.warp_n) == (4, 1)
    assert (full_col.warp_m, full_col.warp_n) == (1, 4)


@pytest.mark.parametrize("shape,threads,wm,wn", MMA_CASES)
def test_mma_row_layout_holds_exactly_the_rows_of_each_threads_accumulator_registers(shape, threads, wm, wn):
    acc = FragmentLayout.mma(shape, threads, wm, wn)
    rows = acc.row_layout()
    assert rows.num_regs == 2 * (shape[0] // wm // 16)
    for t in range(threads):
        for r in range(acc.num_regs):
            assert rows.element_of(t, acc.row_reg(r)) == (acc.element_of(t, r)[0],)
    held = {rows.element_of(t, r) for t in range(threads) for r in range(rows.num_regs)}
    assert held == {(i,) for i in range(shape[0])}


def test_mma_row_tir_coordinates_agree_with_the_python_layout():
    lay = FragmentLayout.mma((128, 64), 256, 4, 2).row_layout()
    tid = tvm.ir.Var("tid", "int32")
    ana = tvm.sym.Analyzer()
    ana.bind(tid, tvm.ir.Range.from_min_extent(0, lay.threads))
    for r in range(lay.num_regs):
        coords, valid = lay.coords(tid, r, ana)
        assert valid is None
        for t in (0, 3, 4, 31, 32, 63, 100, 255):
            got = tuple(int(tvm.sym.Analyzer().simplify(tirx_substitute(c, tid, t))) for c in coords)
            assert got == lay.element_of(t, r)
    assert FragmentLayout.from_spec(lay.spec()) == lay

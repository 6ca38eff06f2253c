"""Issue 19 part 6: the rough edges a new user hit in the workbench, each fixed and pinned here.

Diff views keep the last changed lines apart; bad ``--shapes`` are usage errors naming the argument; a failed check
is not labelled "--no-bench"; the status line states the criterion applied and the worst element's share of it;
noisy timings are flagged; the tuning database's best is this kernel source's, ranked and shown by its median; the
sweep grid follows the sliders; the panel's layout settings; misspelt ``T.*`` names; argument errors of a kernel call.
"""

from __future__ import annotations

import re
import statistics
import time

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")
pytest.importorskip("plotly", reason="the tuning panel needs the notebook extras: pip install -e '.[notebook]'")

import torch  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from tilelang_core.autotune import Measurement, TuningDB  # noqa: E402
from tilelang_core.profiler import BenchResult  # noqa: E402
from workbench import ir  # noqa: E402
from workbench.check import Timing, compare  # noqa: E402
from workbench.errors import TileKernelCheckError, TileKernelCompileError  # noqa: E402
from workbench.explorer import Explorer  # noqa: E402
from workbench.panel import TuningPanel, known_text  # noqa: E402
from workbench.plots import log_range  # noqa: E402
from workbench.status import status_parts  # noqa: E402

FACTORY = '''\
def rmm(M, N, K, block_M=64, block_N=64, block_K=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''
LINE = "rmm --shapes M=64,N=64,K=64 -q"


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def wk(ip):
    ip.run_cell_magic("tilekernel", LINE + ' --ref "A @ B"', FACTORY)
    return ip.user_ns["rmm"]


def status(wk) -> str:
    return " | ".join(p.text for p in status_parts(wk))


# -- diffs ------------------------------------------------------------------------------------------------------
def test_diff_keeps_the_last_removed_and_added_lines_apart():
    a = ir.StageInfo(0, "a", "input", 0.0, True, "x = 1\ny = 2")  # no newline at the end, as TVMScript prints
    b = ir.StageInfo(1, "b", "tvm", 0.0, True, "x = 1\ny = 3")
    lines = ir.diff(a, b).splitlines()
    assert "-y = 2" in lines and "+y = 3" in lines, lines


# -- --shapes ---------------------------------------------------------------------------------------------------
def test_a_bare_word_for_a_size_is_a_usage_error_naming_it(ip):
    with pytest.raises(UsageError, match=r"--shapes: M=abc: expected a number .* got the bare word 'abc'"):
        ip.run_cell_magic("tilekernel", "rmm --shapes M=abc,N=64,K=64 -q", FACTORY)
    with pytest.raises(UsageError, match=r"block_M=big: expected a int like its default 64"):
        ip.run_cell_magic("tilekernel", "rmm --shapes M=64,N=64,K=64,block_M=big -q", FACTORY)


def test_pairs_separated_by_spaces_hint_at_commas(ip):
    with pytest.raises(UsageError, match=r"(?s)unrecognized arguments: N=128.*separated by commas"):
        ip.run_cell_magic("tilekernel", "rmm --shapes M=256 N=128 -q", FACTORY)


# -- the status line --------------------------------------------------------------------------------------------
def test_a_failed_check_is_not_called_no_bench(ip):
    with pytest.raises(TileKernelCheckError):
        ip.run_cell_magic("tilekernel", LINE + ' --ref "A @ B + 1"', FACTORY)
    text = status(ip.user_ns["rmm"])
    assert "not timed (the check failed)" in text and "--no-bench" not in text
    ip.run_cell_magic("tilekernel", LINE + ' --ref "A @ B" --no-bench', FACTORY)
    assert "not timed (--no-bench)" in status(ip.user_ns["rmm"])


def test_status_states_the_criterion_and_the_worst_elements_share(wk):
    text = status(wk)
    assert "|a-b| \u2264 atol + rtol\u00b7|b|" in text and "PASS" in text
    share = float(re.search(r"worst element at ([0-9.]+)x of its allowance", text)[1])
    assert 0 <= share <= 1


def test_margin_is_the_criterion_applied_elementwise():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=g) * 10
    out = ref + torch.randn(4096, generator=g) * 3e-4  # max abs error well above atol, yet within rtol*|ref|
    out[0] = ref[0] = 0.5
    rtol = atol = 1e-4
    e = compare("C", out, ref, rtol, atol)
    want = float(((out.double() - ref.double()).abs() / (atol + rtol * ref.double().abs())).max())
    assert e.margin == pytest.approx(want, rel=1e-12)
    assert (e.mismatched == 0) == (e.margin <= 1) and e.max_abs > atol


def test_noisy_timing_is_flagged(wk):
    saved = wk.timing
    try:
        wk.timing = Timing(BenchResult([1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98, 1.0, 1.01, 1.0]), None, 1.0, 1.0)
        assert "noisy" not in status(wk)
        wk.timing = Timing(BenchResult([1.0, 2.5, 0.6, 1.9, 1.0, 3.0, 0.7, 1.2, 2.2, 0.9]), None, 1.0, 1.0)
        assert re.search(r"noisy timing: p20-p80 spread \d+% of the median", status(wk))
    finally:
        wk.timing = saved


# -- the tuning database's best -----------------------------------------------------------------------------------
def _row(ex: Explorer, config: dict, ms: float, source_hash: str, stamp: float) -> Measurement:
    m = Measurement(kernel=ex.kernel_name, config=ex.full_config(config), source_hash=source_hash,
                    target=ex.target_kind, latency_ms=ms, passed=True, timestamp=stamp)
    from tilelang_core.autotune.measure import describe_problem

    describe_problem(m, ex.wk.kernel)
    m.config = ex.full_config(config)
    return m


def test_best_known_is_this_sources_ranked_and_shown_by_its_median(wk, tmp_path):
    db = TuningDB(tmp_path / "tuning.sqlite3")
    panel = TuningPanel(wk, db=db, start=False)
    ex = panel.explorer
    now = time.time()
    for i, ms in enumerate([1.0, 5.0, 6.0]):  # block_M=32: one lucky run, median 5.0
        db.record(_row(ex, {"block_M": 32}, ms, ex.source_hash, now + i))
    for i, ms in enumerate([2.0, 2.2]):  # block_M=16: median 2.1, newest run 2.2
        db.record(_row(ex, {"block_M": 16}, ms, ex.source_hash, now + 10 + i))
    db.record(_row(ex, {"block_M": 64}, 0.1, "another-factory-of-the-same-name", now + 20))
    known = ex.best_known()
    assert known.config["block_M"] == 16 and known.count == 2
    assert known.median_ms == pytest.approx(statistics.median([2.0, 2.2]))
    assert "2.100 ms" in known_text(known, ex.names) and "median of 2 measurements" in known_text(known, ex.names)


# -- the panel --------------------------------------------------------------------------------------------------
def test_sweep_grid_follows_the_sliders_until_typed_over(wk):
    panel = TuningPanel(wk, db=None, start=False)
    assert "block_M=32,64" in panel.sweep_spec.value  # 64 and its neighbour (M=64 bounds it)
    panel.controls["block_M"].value = 32
    assert panel.sweep_spec.value.startswith("block_M=16,32,64")
    panel.sweep_spec.value = "block_M=16"  # the user's own grid stays
    panel.controls["block_M"].value = 16
    assert panel.sweep_spec.value == "block_M=16"
    panel.runner.supersede()
    assert panel.wait(120)


def test_panel_layout_settings(wk):
    panel = TuningPanel(wk, db=None, start=False)
    knobs = next(c for c in panel.widget.children if "wb-knobs" in getattr(c, "_dom_classes", ()))
    assert "auto-fill" in knobs.layout.grid_template_columns  # columns wrap instead of clipping the third
    for fig in panel.plots.figures:
        assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1  # above the plot, clear of axes
    assert panel.plots.roofline.layout.xaxis.dtick == 1 and panel.plots.roofline.layout.yaxis.dtick == 1
    assert panel.plots.error.layout.yaxis.dtick == 1
    lo, hi = log_range([0.25, 1.0])  # a range inside one decade still shows two powers of ten (0.1 and 1)
    assert lo <= -1 and hi >= 0


# -- errors -----------------------------------------------------------------------------------------------------
def test_misspelt_language_name_in_a_cell_suggests_and_points_at_it(ip):
    with pytest.raises(TileKernelCompileError) as info:
        ip.run_cell_magic("tilekernel", LINE, FACTORY.replace("T.alloc_fragment", "T.alloc_fragmnt"))
    err = info.value
    assert "did you mean T.alloc_fragment?" in err.message
    line = err.where.cell.line(err.where.line)
    assert line[err.where.column - 1:].startswith("alloc_fragmnt")
    typo_outside = FACTORY.replace("    @T.prim_func", "    n = T.ceildivv(M, block_M)\n    @T.prim_func")
    with pytest.raises(TileKernelCompileError) as info:
        ip.run_cell_magic("tilekernel", LINE, typo_outside)
    err = info.value
    assert "did you mean T.ceildiv?" in err.message
    assert err.where.cell.line(err.where.line)[err.where.column - 1:].startswith("ceildivv")


def test_a_bad_kernel_call_shows_our_message_at_the_users_line(ip, wk):
    ip.user_ns["torch"] = torch
    with capture_output() as out:
        ip.run_cell("bad = rmm(torch.randn(3, 3), torch.randn(64, 64))")
    shown = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert "ValueError: rmm: argument 'A': expected shape [64, 64], got [3, 3]" in shown
    assert "bad = rmm(torch.randn(3, 3)" in shown
    assert "tilelang_core" not in shown and "workbench" not in shown  # no library frames
    with pytest.raises(TypeError, match="argument 'A': expected dtype float32"):
        wk(torch.randn(64, 64, dtype=torch.float64), torch.randn(64, 64))  # still the same exception type

"""The tuning panel, driven as a user drives it: by setting the sliders' ``.value`` (and clicking Sweep)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")
pytest.importorskip("plotly", reason="the tuning panel needs the notebook extras: pip install -e '.[notebook]'")

import ipywidgets as W  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from tilelang_core.autotune import TuningDB  # noqa: E402
from workbench.panel import TuningPanel  # noqa: E402
from workbench.tunables import parse_tune, tunables  # noqa: E402

# B's tile is capped at 64 rows: block_K=128 makes T.gemm's shapes disagree -- a config that does not compile.
FACTORY = '''\
def tmm(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((min(block_K, 64), block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''

SCALE = '''\
def scale(M, N, block_M=8):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 3.0
    return main
'''

TUNE = {"block_M": [32, 64], "block_N": [32, 64], "block_K": [32, 128], "num_stages": [1, 2, 3]}


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def wk(ip):
    ip.run_cell_magic("tilekernel", 'tmm --shapes M=128,N=128,K=128 --ref "torch.relu(A @ B)" -q', FACTORY)
    return ip.user_ns["tmm"]


@pytest.fixture
def db(tmp_path):
    return TuningDB(tmp_path / "tuning.sqlite3")


def status_text(panel: TuningPanel) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", panel.status.value))


# -- knobs ------------------------------------------------------------------------------------------------------
def test_knobs_from_the_signature_bounded_by_shapes(wk):
    knobs = {k.name: k for k in tunables(wk.program.function, {"M": 32, "N": 512, "K": 128})}
    assert list(knobs) == ["block_M", "block_N", "block_K", "num_stages", "threads"]
    assert knobs["block_M"].values == (16, 32, 64)  # 64 is the current value, kept although M=32
    assert knobs["block_N"].values == (16, 32, 64, 128, 256)
    assert knobs["num_stages"].values == (1, 2, 3, 4, 5) and knobs["num_stages"].contiguous
    assert knobs["threads"].values == (32, 64, 128, 256, 512) and not knobs["threads"].contiguous


def test_tune_overrides_and_errors(wk):
    axes = parse_tune(["block_M=32,64,128", "num_stages=1:4"])
    knobs = {k.name: k for k in tunables(wk.program.function, wk.kwargs, axes)}
    assert knobs["block_M"].values == (32, 64, 128) and knobs["num_stages"].values == (1, 2, 3, 4)
    with pytest.raises(UsageError, match="no parameter"):
        tunables(wk.program.function, wk.kwargs, {"block_Q": [1, 2]})
    with pytest.raises(UsageError, match="--tune"):
        parse_tune("block_M=")


def test_controls_are_never_continuous(wk, db):
    panel = TuningPanel(wk, TUNE, db=db, start=False)
    controls = panel.controls
    assert isinstance(controls["block_M"], W.SelectionSlider)
    assert isinstance(controls["num_stages"], W.IntSlider)
    assert all(c.continuous_update is False for c in controls.values())
    assert panel.config() == {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2, "threads": 128}
    assert panel.sweep_spec.continuous_update is False


# -- moving sliders ---------------------------------------------------------------------------------------------
def test_slider_moves_measure_show_and_cache(wk, db):
    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0)
    assert panel.wait(120)
    assert panel.plots.point_count() == 1 and "PASS" in status_text(panel)
    first = status_text(panel)

    panel.controls["block_M"].value = 32
    assert panel.wait(120)
    assert panel.plots.point_count() == 2
    text = status_text(panel)
    assert text != first and "block_M=32" in text and "PASS" in text
    m = panel.last_shown
    assert m.config["block_M"] == 32 and m.config["M"] == 128 and m.latency_ms > 0 and m.passed
    t = panel.plots.throughput
    assert t.data[3].x == ("32/64/32/2/128",)  # "current" highlights the new config
    assert "block_M=32" in t.data[1].hovertext[1] and "threads=128" in t.data[1].hovertext[1]
    assert len(t.data[2].x) == 1  # best marked
    assert t.layout.shapes[0].y0 > 0  # the reference's rate (timed by the magic)
    assert panel.plots.error.layout.yaxis.type == "log"
    assert panel.plots.error.layout.shapes[0].y0 == 1.0  # the criterion's limit: |a-b| <= atol + rtol*|b|
    assert all(0 < y <= 1 for y in panel.plots.error.data[1].y)  # both passed: inside their allowance
    assert "worst element at" in panel.plots.error.data[1].hovertext[0]

    # back to the first configuration: shown at once from the session's results, no job
    jobs_before = panel.runner.generation
    panel.controls["block_M"].value = 64
    assert status_text(panel).startswith("cached block_M=64")
    assert panel.plots.point_count() == 2 and not panel.runner.busy
    assert panel.runner.generation == jobs_before + 1  # superseded anything pending
    assert len(db.query("tmm", device=None)) == 2  # every measurement recorded

    # the roofline has the machine's ceilings once they are measured (in the background)
    roof = panel.plots.roofline
    assert len(roof.data[0].x) == 3 and max(roof.data[0].y) > 0
    assert len(roof.data[1].x) == 2 and roof.layout.xaxis.type == "log"


def test_a_config_that_fails_shows_its_error_inline_and_the_panel_goes_on(wk, db):
    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0)
    panel.wait(120)
    panel.controls["block_K"].value = 128
    assert panel.wait(120)
    assert "does not compile" in status_text(panel)
    assert "T.gemm" in panel.error.value and "cell line" in panel.error.value
    bad = db.query("tmm", device=None, status="compile_error")
    assert len(bad) == 1 and bad[0].config["block_K"] == 128
    panel.controls["block_K"].value = 32  # cached and fine again
    assert "PASS" in status_text(panel) and panel.error.value == ""
    panel.controls["num_stages"].value = 3  # and new configurations still work
    assert panel.wait(120) and "num_stages=3" in status_text(panel) and "PASS" in status_text(panel)


def test_debounce_in_the_panel_measures_only_the_last_value(wk, db):
    from test_workbench_jobs import ManualTimer

    ManualTimer.made = []
    panel = TuningPanel(wk, TUNE, db=db, timer=ManualTimer, start=False)
    for stages in (1, 3, 1):
        panel.controls["num_stages"].value = stages
    assert [t.cancelled for t in ManualTimer.made] == [True, True, False]
    assert status_text(panel).startswith("queued") and "num_stages=1" in status_text(panel)
    ManualTimer.made[-1].fire()
    assert panel.wait(120)
    assert list(panel.explorer.results) == ["64/64/32/1/128"]


def test_a_superseded_request_is_never_shown(wk, db):
    pool = ThreadPoolExecutor(max_workers=1)
    gate = threading.Event()
    pool.submit(gate.wait, 30)  # the background thread is busy
    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0, executor=pool, start=False)
    shown = []
    real_show = panel._show

    def spy(m, cached):
        shown.append(m.config["block_N"])
        real_show(m, cached)

    panel._show = spy
    panel.controls["block_N"].value = 32  # queued ...
    panel.controls["block_N"].value = 64  # ... and superseded before it ran
    gate.set()
    assert panel.wait(120)
    assert shown == [64] and list(panel.explorer.results) == ["64/64/32/2/128"]
    assert panel.runner.dropped == 1
    pool.shutdown()


def test_the_notebook_stays_responsive_while_a_config_compiles(wk, db):
    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0, start=False)
    panel.controls["block_N"].value = 32  # returns at once; the work runs on the background thread
    assert panel.runner.busy
    assert sum(range(1000)) == 499500  # "another cell"
    assert panel.wait(120) and "block_N=32" in status_text(panel)


# -- sweeps and history -----------------------------------------------------------------------------------------
def test_sweep_fills_the_plots_and_skips_measured_configs(wk, db):
    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0)
    panel.wait(120)
    assert panel.default_sweep() == "block_M=32,64 block_N=32,64 block_K=32,128"
    done = panel.sweep("block_M=32,64 block_N=64").result(timeout=300)
    assert done == 1  # 64/64 was measured already
    assert panel.plots.point_count() == 2 and panel.progress.value == 1
    assert "sweep done" in panel.sweep_status.value and not panel.sweep_button.disabled
    assert panel.config()["block_M"] == 64  # a sweep does not move the sliders

    f = panel.sweep("num_stages=1:3 block_N=32")
    panel.stop_sweep()
    assert f.result(timeout=300) < 3 and "stopped" in panel.sweep_status.value
    bad = panel.sweep("block_Q=1,2")
    assert bad.exception() is not None and "block_Q" in panel.sweep_status.value

    panel.sweep_spec.value = "block_K=32,128"
    panel.sweep_button.click()
    assert panel.sweep_future.result(timeout=300) == 1 and panel.wait(120)
    assert panel.explorer.results["64/64/128/2/128"].status == "compile_error"


def test_a_plot_view_opened_after_a_sweep_draws_its_points(wk, db):
    # a browser draws each figure from its one synchronised trait, whenever it creates the view: a slow browser (a
    # loaded CI machine) that opens the views after the sweep must still see every point
    import plotly.io as pio

    panel = TuningPanel(wk, TUNE, db=db, debounce_s=0)
    panel.wait(120)
    assert panel.sweep("block_M=32,64 block_N=64").result(timeout=300) == 1
    for fig in panel.plots.figures:  # what a view opened now would draw: the figure as it is
        assert fig.figure == json.loads(pio.to_json(fig.fig, validate=False)), fig.layout.title.text
    session = next(t for t in panel.plots.throughput.figure["data"] if t.get("name") == "this session")
    assert len(session["x"]) == 2


def test_history_from_earlier_sessions_is_plotted(wk, db):
    first = TuningPanel(wk, TUNE, db=db, debounce_s=0)
    first.wait(120)
    second = TuningPanel(wk, TUNE, db=db, debounce_s=0)  # a later session, same database
    second.wait(120)
    earlier = second.plots.throughput.data[0]
    assert len(earlier.x) == 1 and earlier.x[0] == "64/64/32/2/128"
    assert second.explorer.best_known() is not None


def test_memory_bound_kernel_plots_bandwidth(ip, db):
    ip.run_cell_magic("tilekernel", 'scale --shapes M=64,N=256 --ref "X * 3" -q', SCALE)
    panel = ip.user_ns["scale"].panel("block_M=8,16")
    panel.explorer.db = db
    assert panel.wait(120)
    assert panel.plots.unit == "GB/s" and "GB/s" in status_text(panel)
    assert panel.plots.roofline.layout.xaxis.type == "category"
    assert panel.plots.roofline.layout.shapes  # the bandwidth ceiling


# -- the magic --------------------------------------------------------------------------------------------------
def test_magic_panel_and_tune_options(ip):
    with capture_output() as cap:
        ip.run_cell_magic("tilekernel", 'tmm2 --shapes M=64,N=64,K=64 --ref "torch.relu(A @ B)" '
                          "--tune block_M=16,32 num_stages=1:2", FACTORY.replace("def tmm(", "def tmm2("))
    panel = ip.user_ns["tmm2"].last_panel
    assert panel is not None and panel.names == ["block_M", "block_N", "block_K", "num_stages", "threads"]
    knobs = {k.name: k for k in panel.knobs}
    assert knobs["block_M"].values == (16, 32) and knobs["num_stages"].values == (1, 2)
    assert any("tuning panel for tmm2" in str(o.data.get("text/plain", "")) for o in cap.outputs)
    assert panel.wait(120)
    with pytest.raises(UsageError, match="block_Q"):
        ip.run_cell_magic("tilekernel", "tmm3 --shapes M=64,N=64,K=64 --tune block_Q=1,2 --no-bench",
                          FACTORY.replace("def tmm(", "def tmm3("))

"""The workbench's machine-level views, driven as a user drives them (``.value``, clicks): resources in the summary
and the panel, SASS/PTX by source line, a diff of two configurations at any stage, the Profile button where ncu is
missing, and the HTML session report (parsed, and opened in the real browser where Chromium is installed).

CUDA kernels are compiled here without a GPU (NVRTC or nvcc); the CPU kernel's panel measures for real.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")
pytest.importorskip("plotly", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")

from tilelang_core import ncu  # noqa: E402
from tilelang_core.autotune import TuningDB  # noqa: E402
from tilelang_core.backend.cuda import find_nvcc  # noqa: E402
from tilelang_core.backend.cuda.nvcc import nvrtc_available  # noqa: E402
from tilelang_core.backend.cuda.resources import find_cuda_tool  # noqa: E402
from workbench.config_diff import ConfigDiffView, config_diff  # noqa: E402
from workbench.panel import TuningPanel  # noqa: E402
from workbench.profile_view import ProfileView  # noqa: E402
from workbench.report import export_report  # noqa: E402
from workbench.resources import table_html  # noqa: E402
from workbench.summary import SummaryView  # noqa: E402
from workbench.text_views import summary_text  # noqa: E402

needs_cuda = pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(), reason="no nvcc or NVRTC here")

FACTORY = '''\
def mm(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''
GEMM_CELL_LINE = 13  # the %%tilekernel line is cell line 1, the factory's def line 2, T.gemm line 13


def plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def cuda_wk(ip):
    if find_nvcc() is None and not nvrtc_available():
        pytest.skip("no nvcc or NVRTC here")
    ip.run_cell_magic("tilekernel", "mmc --shapes M=256,N=256,K=256 --target cuda -q",
                      FACTORY.replace("def mm(", "def mmc("))
    return ip.user_ns["mmc"]


@pytest.fixture(scope="module")
def cpu_wk(ip):
    ip.run_cell_magic("tilekernel", 'mmx --shapes M=128,N=128,K=64 --dtype float32 --target cpu '
                      '--ref "(A @ B)" -q', FACTORY.replace("def mm(", "def mmx("))
    return ip.user_ns["mmx"]


# -- resources ---------------------------------------------------------------------------------------------------
def test_the_summary_of_a_cuda_kernel_shows_its_resources(cuda_wk, cpu_wk):
    r = cuda_wk.kernel.resources()
    text = summary_text(cuda_wk)
    assert f"resources: {r.registers} regs" in text and "occupancy" in text
    head = plain(SummaryView(cuda_wk).header.value)
    assert f"{r.registers} regs" in head and f"limited by {r.occupancy.limiter}" in head
    assert "resources:" not in summary_text(cpu_wk)


def test_the_panel_records_resources_and_tables_them_per_configuration(cuda_wk, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    from tilelang_core.autotune import Measurement
    from tilelang_core.autotune.measure import describe_problem

    ms = []
    for bn in (64, 128):  # what the panel records per configuration (describe_problem fills resources)
        m = Measurement(kernel="mmc", config={**cuda_wk.config, "block_N": bn})
        describe_problem(m, cuda_wk.build_config(block_N=bn).kernel)
        db.record(m)
        ms.append(m)
    assert ms[0].resources["registers"] != ms[1].resources["registers"]
    back = db.query("mmc", device=None)
    table = table_html(back, ["block_M", "block_N"])
    rows = re.findall(r"<tr class='wb-res-row'", table)
    assert len(rows) == 2
    for m in ms:
        assert f">{m.resources['registers']}<" in table
    assert table_html([], ["block_M"]) == ""


@needs_cuda
def test_a_cuda_panel_without_a_gpu_tables_the_resources_of_each_configuration(cuda_wk, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(cuda_wk, {"block_N": [64, 128]}, db=db, debounce_s=0, start=False)
    assert panel.sweep("block_N=64,128").result(timeout=240) == 2
    assert panel.wait(240)
    ms = panel.explorer.measurements()
    assert all(m.status == "run_error" and "compiled only" in m.message for m in ms)  # no GPU: not run
    from workbench.panel import result_text

    text, color = result_text(ms[0], ["block_N"])  # built, not run: said as such, not as a failure in red
    assert "compiled, not run (no CUDA GPU here" in text and "registers" in text and "failed" not in text
    assert color != "#b00"
    assert panel.error.value == ""  # and no red message under it
    expected = {cuda_wk.build_config(block_N=bn).kernel.resources().registers for bn in (64, 128)}
    assert {m.resources["registers"] for m in ms} == expected
    assert len(re.findall(r"<tr class='wb-res-row'", panel.resources.value)) == 2
    assert all(r.resources.get("registers") for r in db.query("mmc", device=None))


@needs_cuda
def test_throughput_points_of_cuda_configurations_are_coloured_by_registers(cuda_wk):
    from tilelang_core.autotune import Measurement
    from tilelang_core.autotune.measure import describe_problem
    from workbench.plots import TuningPlots
    from workbench.resources import color_points

    ms = []
    for bn, ms_ in ((64, 0.020), (128, 0.030)):  # the latencies place the points; the colours are the subject
        m = Measurement(kernel="mmc", config={**cuda_wk.config, "block_N": bn}, latency_ms=ms_, passed=True)
        describe_problem(m, cuda_wk.build_config(block_N=bn).kernel)
        ms.append(m)
    plots = TuningPlots(["block_M", "block_N"], "GFLOP/s")
    plots.update(ms, [], ms[0], ms[0], None, None, None)
    trace = plots.throughput.data[1]
    assert color_points(trace, ms)
    assert list(trace.marker.color) == [m.resources["registers"] for m in ms]
    assert trace.marker.showscale and trace.marker.colorbar.title.text == "regs/thread"
    cpu_like = [Measurement(kernel="x", config={}, latency_ms=1.0, flops=1e9)]
    assert not color_points(trace, cpu_like)  # no resources: the panel's own colours stay


# -- SASS / PTX by line ------------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.skipif(find_cuda_tool("nvdisasm") is None, reason="no nvdisasm (pip install nvidia-cuda-nvdisasm)")
def test_picking_the_gemm_line_highlights_its_hgmma_instructions(cuda_wk):
    view = SummaryView(cuda_wk).select("SASS by line")
    assert view.wait()  # the source-line build and its SASS come from the background thread
    numbers = [v for _, v in view.lines.options]
    assert GEMM_CELL_LINE in numbers and GEMM_CELL_LINE - 2 in numbers  # T.gemm and the first T.copy
    view.lines.value = GEMM_CELL_LINE  # a click on the line
    hl = [plain(x) for x in re.findall(r'<span class="wb-hl"[^>]*>(.*?)</span>', view.pane.value)]
    assert hl and all(x.startswith(f"{GEMM_CELL_LINE:4d} |") for x in hl)
    assert any("HGMMA" in x for x in hl)
    row = view.selected()
    assert row.op == "T.gemm" and row.mix["HGMMA"] > 0
    assert "HGMMA" in plain(view.mix.value)
    view.lines.value = GEMM_CELL_LINE - 2  # the T.copy of A: cp.async (or a TMA load)
    assert view.selected().mix["LDGSTS"] + view.selected().mix["UTMALDG"] > 0
    assert not any("HGMMA" in plain(x) for x in re.findall(r'<span class="wb-hl"[^>]*>(.*?)</span>',
                                                              view.pane.value))
    view.kind.value = "ptx"
    assert view.wait()
    view.lines.value = GEMM_CELL_LINE
    assert any("wgmma" in plain(x) for x in re.findall(r'<span class="wb-hl"[^>]*>(.*?)</span>', view.pane.value))


def test_the_sass_view_of_a_cpu_kernel_says_it_is_for_cuda(cpu_wk):
    view = SummaryView(cpu_wk).select("SASS by line")
    assert "are for CUDA kernels" in plain(view.note.value) and view.lines.options == ()


# -- diff of two configurations ----------------------------------------------------------------------------------
@needs_cuda
def test_diffing_two_configurations_shows_each_stage_side_by_side(cuda_wk):
    view = SummaryView(cuda_wk).select("Diff")
    assert {"cuda", "ptx", "resources", "timings"} <= set(view.stage.options)
    assert any(s.startswith("ir:") for s in view.stage.options)
    other = view.add({"block_N": 128})
    view.right.value = other
    assert view.wait()
    view.stage.value = "cuda"
    assert view.wait()
    assert "diff_chg" in view.pane.value or "diff_add" in view.pane.value
    assert "line(s) differ" in plain(view.status.value)
    view.stage.value = "resources"
    assert view.wait()
    regs = (cuda_wk.kernel.resources().registers, cuda_wk.variant(block_N=128).kernel.resources().registers)
    text = plain(view.pane.value)
    assert f"registers: {regs[0]}" in text and f"registers: {regs[1]}" in text
    view.stage.value = "timings"
    assert view.wait()
    assert "not timed" in plain(view.pane.value)
    view.right.value = view.left.value
    assert view.wait()
    assert "identical" in plain(view.pane.value)
    diff = config_diff(cuda_wk, {}, {"block_N": 128}, stage="resources")
    minus = [ln for ln in diff.splitlines() if ln.startswith("-registers")]
    plus = [ln for ln in diff.splitlines() if ln.startswith("+registers")]
    assert minus == [f"-registers: {regs[0]}"] and plus == [f"+registers: {regs[1]}"]  # one line each, not joined
    with pytest.raises(ValueError, match="stage: expected one of"):
        config_diff(cuda_wk, {}, {"block_N": 128}, stage="nope")


def test_diff_sides_come_from_the_tuning_database_with_their_timings(cpu_wk, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(cpu_wk, {"block_M": [32, 64], "block_N": [64]}, db=db, debounce_s=0, start=False)
    assert panel.sweep("block_M=32,64").result(timeout=240) == 2
    assert panel.wait(240)
    cpu_wk.last_panel = None  # only the database offers them now
    view = ConfigDiffView(cpu_wk, db=db)
    view.activate()
    from_db = [(i, s) for i, s in enumerate(view._sides) if s.label.startswith("tuning db #")]
    assert len(from_db) >= 1
    i, side = next((i, s) for i, s in from_db if s.config["block_M"] == 32)
    view.right.value = i
    assert view.wait()
    view.stage.value = "timings"
    assert view.wait()
    text = plain(view.pane.value)
    assert f"median: {side.measurement.latency_ms:.4f} ms" in text and "p20 / p80" in text
    view.stage.value = "llvm"
    assert view.wait()
    assert "line(s) differ" in plain(view.status.value)


# -- profile -----------------------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.skipif(ncu.available()[0], reason="ncu and a GPU are here: tests/gpu/test_workbench_profile.py")
def test_the_profile_button_says_why_it_cannot_profile_here(cuda_wk, cpu_wk):
    view = ProfileView(cuda_wk)
    assert view.button.disabled
    assert "not available here" in plain(view.output.value)
    assert view.profile().result(timeout=5) is None
    with pytest.raises(ncu.NcuUnavailableError, match="ncu|GPU"):
        ncu.profile(cuda_wk.kernel)
    assert "profiles CUDA kernels" in plain(ProfileView(cpu_wk).output.value)
    with pytest.raises(ValueError, match="ncu profiles CUDA kernels"):
        ncu.profile(cpu_wk.kernel)


# -- report ------------------------------------------------------------------------------------------------------
class _Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.links: list[dict[str, str | None]] = []
        self.rows = 0
        self.best_rows = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
        if tag in ("link", "img", "iframe"):
            self.links.append(a)
        if tag == "tr" and "wb-report-row" in (a.get("class") or ""):
            self.rows += 1
            self.best_rows += "best" in (a.get("class") or "").split()


def test_the_session_report_is_one_self_contained_html_file(cpu_wk, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(cpu_wk, {"block_M": [32, 64], "block_N": [64]}, db=db, debounce_s=0, start=False)
    cpu_wk.last_panel = panel
    assert panel.sweep("block_M=32,64").result(timeout=240) == 2
    assert panel.wait(240)
    ms = panel.explorer.measurements()
    path = export_report(cpu_wk, tmp_path / "session")
    assert path.name == "session.html"
    text = path.read_text()
    parsed = _Parsed()
    parsed.feed(text)
    assert parsed.rows == len(ms) == 2 and parsed.best_rows == 1
    assert all(not s.get("src") for s in parsed.scripts) and not parsed.links  # nothing fetched from anywhere
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly's JS inlined
    best = min((m for m in ms if m.ok), key=lambda m: m.latency_ms)
    assert f"{best.latency_ms:.4f}" in text and "T.gemm(A_s, B_s, C_f)" in plain(text)
    assert "LLVM IR" in text
    with pytest.raises(ValueError, match="path must be a file name"):
        export_report(cpu_wk, "")

    from labdriver import browser_available, chromium_page

    if browser_available() is not None:
        return  # parsed above; the real-browser half needs chromium and playwright
    errors: list[str] = []
    with chromium_page() as page:
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        assert page.locator(".js-plotly-plot").count() == 2
        assert page.locator("tr.wb-report-row").count() == 2
        assert page.locator("#wb-report-plot-0 .point").count() >= 2  # the throughput points are drawn
    assert not errors


def test_a_prim_func_cell_gets_the_diff_tab_and_the_report_without_a_factory(ip, tmp_path):
    ip.run_cell_magic("tilekernel", "pfx --target cpu -q", '''@T.prim_func
def pfx(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
    with T.Kernel(1, threads=128) as bx:
        for i, j in T.Parallel(64, 64):
            B[i, j] = A[i, j] * 2.0
''')
    wk = ip.user_ns["pfx"]
    view = SummaryView(wk).select("Diff")
    view.stage.value = "llvm"
    assert view.wait()
    assert "Error" not in plain(view.status.value) and "identical" in plain(view.pane.value)
    text = export_report(wk, tmp_path / "pf.html").read_text()
    assert "B[i, j] = A[i, j] * 2.0" in plain(text)


def test_the_side_by_side_diff_sets_its_own_line_height():
    # inside a widget output the table would inherit ipywidgets' 28 px line height: one diff line per 28 px row
    from workbench.config_diff import side_by_side_html

    html = side_by_side_html("a\nb\n", "a\nc\n", "left", "right")
    style = html[:html.index("</style>")]
    assert re.search(r"\.wb-diff td \{[^}]*line-height:1\.35", style), style
    assert "<td" in html and ("diff_sub" in html or "diff_chg" in html)

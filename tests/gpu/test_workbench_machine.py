"""On the GPU host: the workbench's machine-level views with a real GPU — resources recorded by the tuning panel's
measurements and shown in its column and plot colours, SASS by line of a kernel that ran, and Nsight Compute's
counters through the Profile button (skipped, with the reason, where ncu is not installed or may not read the
counters).

Not yet run on a GPU when written (the CPU machine has none): run with ``python -m pytest -q tests/gpu/
test_workbench_machine.py`` on the H200 (bench/gpu/test_suite.sh runs the folder).
"""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras")
pytest.importorskip("plotly", reason="the workbench needs the notebook extras")

from tilelang_core import ncu  # noqa: E402
from tilelang_core.autotune import TuningDB  # noqa: E402
from tilelang_core.backend.cuda.resources import find_cuda_tool  # noqa: E402

FACTORY = '''\
def gmm(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''


@pytest.fixture(scope="module")
def wk():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    shell.run_cell_magic("tilekernel", 'gpu_gmm --shapes M=1024,N=1024,K=1024 --target cuda '
                         '--ref "(A.float() @ B.float()).half()" -q', FACTORY.replace("def gmm(", "def gpu_gmm("))
    return shell.user_ns["gpu_gmm"]


def test_the_panel_records_resources_and_shows_the_column_and_colours(wk, tmp_path):
    from workbench.panel import TuningPanel

    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(wk, {"block_N": [64, 128]}, db=db, debounce_s=0, start=False)
    assert panel.sweep("block_N=64,128").result(timeout=300) == 2
    assert panel.wait(300)
    ms = panel.explorer.measurements()
    assert all(m.ok and m.resources.get("registers", 0) > 0 for m in ms)
    assert len(re.findall(r"wb-res-row", panel.resources.value)) == 2
    assert list(panel.plots.throughput.data[1].marker.color) == [m.resources["registers"] for m in ms]
    assert all(r.resources for r in db.query("gpu_gmm", device=None))


@pytest.mark.skipif(find_cuda_tool("nvdisasm") is None, reason="no nvdisasm on this host")
def test_sass_by_line_of_a_kernel_that_runs(wk):
    from workbench.summary import SummaryView

    view = SummaryView(wk).select("SASS by line")
    assert view.wait(300)  # the tab builds on the workbench's background thread
    row = max(view.rows, key=lambda s: s.mix.get("HGMMA", 0))
    assert row.op == "T.gemm" and row.mix["HGMMA"] > 0
    lined = view.kernel
    a, b = (torch.randn(1024, 1024, device="cuda", dtype=torch.float16) for _ in range(2))
    torch.testing.assert_close(lined(a, b), (a.float() @ b.float()).half(), rtol=2e-2, atol=2e-2)


def test_profile_under_ncu_reports_throughput_stalls_and_occupancy(wk):
    ok, why = ncu.available()
    if not ok:
        pytest.skip(why)
    try:
        report = ncu.profile(wk.kernel)
    except ncu.NcuFailedError as e:
        if "ERR_NVGPUCTRPERM" in str(e):
            pytest.skip(str(e))
        raise
    assert {"SM", "DRAM", "L2"} <= set(report.throughput), report.metrics.keys()
    assert all(0 <= v <= 100 for v in report.throughput.values())
    assert report.stalls and report.occupancy.get("achieved", 0) > 0
    from workbench.profile_view import ProfileView

    view = ProfileView(wk)
    assert not view.button.disabled
    assert view.profile().result(timeout=600) is not None
    assert "throughput" in view.output.value and "stall" in view.output.value

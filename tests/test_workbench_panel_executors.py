"""The tuning panel's Sweep through the tuner's executors: a ``%%tilekernel`` cell swept by the local executor's
compile and timing processes (the cell as a module file they import, ``--ref`` evaluated there), a progress bar per
worker, results in the panel and in the tuning database under the cell's source; what cannot reach a worker is
refused by name."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")
pytest.importorskip("plotly", reason="the tuning panel needs the notebook extras: pip install -e '.[notebook]'")

import torch  # noqa: E402

from tilelang_core.autotune import TuningDB  # noqa: E402
from workbench.cell_sweep import ExpressionReference, expression_reference  # noqa: E402
from workbench.panel import TuningPanel  # noqa: E402

# reads THREADS from the notebook (a simple value: written into the module the workers import)
FACTORY = '''\
def pmm(M, N, K, block_M=32, block_N=32, block_K=32, threads=THREADS):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0) * SCALE
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''

HELPER = '''\
def hmm(M, N, block_M=pick_block()):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * 3.0
    return main
'''


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    shell.run_cell("import torch.nn.functional as F\nTHREADS = 128\nSCALE = 2.0\ndef pick_block():\n    return 16\n")
    return shell


@pytest.fixture(scope="module")
def wk(ip):
    ip.run_cell_magic("tilekernel", 'pmm --shapes M=64,N=64,K=64 --ref "F.relu(A @ B) * SCALE" -q', FACTORY)
    return ip.user_ns["pmm"]


@pytest.fixture(scope="module")
def local_ex():
    """What the "local" choice runs, with one compile process (a fast test); its processes start once for the
    file's sweeps (a few seconds each on a loaded machine) and are stopped at the end."""
    from tilelang_core.autotune import LocalExecutor

    ex = LocalExecutor(compile_workers=1)
    yield ex
    ex.shutdown()


def test_ref_expression_travels_with_the_modules_and_values_it_reads(wk):
    ref = expression_reference(wk)
    assert ref.modules == {"F": "torch.nn.functional"} and ref.values == {"SCALE": 2.0}
    again = pickle.loads(pickle.dumps(ref))  # what reaches the timing process
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    torch.testing.assert_close(again(a, b), torch.relu(a @ b) * 2.0)


def test_panel_sweep_through_the_local_executor_with_a_bar_per_worker(wk, local_ex, tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(wk, {"block_M": [16, 32], "block_N": [16, 32]}, db=db, start=False)
    assert panel.sweep_executor.value == "inline" and panel.sweep_executor.options == ("inline", "local", "ray")
    done = panel.sweep("block_M=16,32 block_N=16", executor=local_ex).result(timeout=400)
    assert done == 2, panel.sweep_status.value
    assert "sweep done: 2 measured" in panel.sweep_status.value
    bars = {b.description: b for b in panel.worker_bars.children}
    assert set(bars) == {"compile-0", "time-cpu"}
    assert bars["compile-0"].value == 2  # each config compiled once
    assert bars["time-cpu"].value >= 2 and panel.progress.value == 2
    for bm in (16, 32):
        m = panel.explorer.cached({**panel.config(), "block_M": bm, "block_N": 16})
        assert m is not None and m.ok and m.passed and m.max_abs is not None  # checked against --ref in the worker
        assert m.worker == "time-cpu" and m.latency_ms > 0
    rows = db.query("pmm", device=None)
    assert {r.source_hash for r in rows} == {panel.explorer.source_hash}  # the panel's history sees them
    assert panel.sweep_result.executor == "local" and not panel.sweep_result.cancelled
    assert panel.explorer.best() is not None and not panel.sweep_button.disabled


def test_a_cell_reading_a_notebook_function_is_refused_by_name(ip, tmp_path):
    ip.run_cell_magic("tilekernel", "hmm --shapes M=64,N=64 -q", HELPER)
    panel = TuningPanel(ip.user_ns["hmm"], {"block_M": [16, 32]}, db=TuningDB(tmp_path / "t.sqlite3"),
                        start=False)
    panel.sweep_executor.value = "local"  # refused before any process starts
    fut = panel.sweep("block_M=16,32")
    with pytest.raises(ValueError, match=r"the cell 'hmm' reads the notebook's 'pick_block' \(a function\).*"
                                         r"executor='inline'"):
        fut.result(timeout=30)
    assert "pick_block" in panel.sweep_status.value and not panel.sweep_button.disabled


def test_a_ref_reading_a_notebook_tensor_is_refused_by_name(ip):
    ip.run_cell("import torch\nW_NB = torch.ones(64, 64)")
    cell = HELPER.replace("hmm", "hmm2")
    ip.run_cell_magic("tilekernel", 'hmm2 --shapes M=64,N=64 --ref "X * 3.0 + 0 * W_NB" -q', cell)
    with pytest.raises(ValueError, match=r"--ref 'X \* 3.0 \+ 0 \* W_NB' reads the notebook's 'W_NB' \(a Tensor\)"):
        expression_reference(ip.user_ns["hmm2"])
    assert ExpressionReference("A + 1", ["A"])(torch.ones(2)).tolist() == [2.0, 2.0]


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, killed but not reaped, counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_stop_during_a_local_executor_sweep_cancels_it_and_leaves_no_worker_behind(wk, local_ex, tmp_path):
    import multiprocessing
    import time

    db = TuningDB(tmp_path / "t.sqlite3")
    panel = TuningPanel(wk, {"block_M": [16, 32, 64], "block_N": [32, 64]}, db=db, start=False)
    ex = local_ex  # one compile process: six configurations (none compiled before) take a while to compile
    seen: dict[str, int] = {}
    try:
        fut = panel.sweep("block_M=16,32,64 block_N=32,64", executor=ex)
        deadline = time.monotonic() + 300
        while panel.progress.value < 1 and not fut.done() and time.monotonic() < deadline:
            seen.update(ex.pids())
            time.sleep(0.05)
        assert panel.progress.value >= 1 and not fut.done(), panel.sweep_status.value
        seen.update(ex.pids())
        assert not panel.stop_button.disabled
        panel.stop_button.click()  # what the user's click runs (the button's on_click handlers)
        done = fut.result(timeout=120)
        assert 1 <= done < 6, (done, panel.sweep_status.value)
        assert panel.sweep_result.cancelled and panel.sweep_result.executor == "local"
        # the panel shows what finished: the status, the progress bar and one checked result per configuration
        assert f"sweep stopped after {done}" in panel.sweep_status.value, panel.sweep_status.value
        assert panel.progress.value == done
        measured = [m for m in panel.explorer.measurements() if m.worker == "time-cpu"]
        assert len(measured) == done and all(m.ok and m.passed for m in measured)
        assert len(db.query("pmm", device=None)) == done  # nothing in flight was recorded as a result
        assert not panel.sweep_button.disabled and panel.stop_button.disabled
        # a worker that had a task in flight was killed; the idle ones wait for the next sweep
        assert ex.pending() == 0
        kept = ex.pids()
        for name, pid in seen.items():
            assert kept.get(name) == pid or not _alive(pid), (name, pid)
    finally:
        ex.shutdown()  # the end of the session (the fixture's shutdown then finds nothing left)
    for name, pid in seen.items():
        assert not _alive(pid), (name, pid)  # no orphan: every worker process of the sweep is gone
    assert not {p.pid for p in multiprocessing.active_children()} & set(seen.values())

"""The workbench notebooks run headless with nbclient (``01_quickstart``: the tour; ``02_tuning``: panels, sweeps,
autotune), and a failing ``%%tilekernel`` stops "Run All"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the notebook extras: pip install -e '.[notebook]'")
nbclient = pytest.importorskip("nbclient", reason="needs the notebook extras: pip install -e '.[notebook]'")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK = NOTEBOOKS / "01_quickstart.ipynb"
TUNING = NOTEBOOKS / "02_tuning.ipynb"


def run(nb, cwd: Path, timeout: int = 600):
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    return client.execute()


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append(out["text"])
        parts.extend(str(v) for k, v in out.get("data", {}).items() if k == "text/plain")
        parts.extend(out.get("traceback", []))
    return "\n".join(parts)


@pytest.mark.parametrize("path", [NOTEBOOK, TUNING], ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs_or_widget_state(path):
    raw = json.loads(path.read_text())
    assert "widgets" not in raw["metadata"]
    for cell in raw["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_workbench_notebook_runs_headless(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells[1].source = 'size = 256\ntarget = "auto"'  # what papermill does with the parameters cell: smaller
    executed = run(nb, tmp_path)
    text = "\n".join(outputs_text(c) for c in executed.cells if c.cell_type == "code")
    assert "matmul_relu: cpu (" in text and "PASS" in text  # the summary's text/plain
    assert "check passed: True" in text
    assert "changed the IR" in text and "@@" in text
    assert "max abs error vs torch" in text and "tvm imported: False" in text
    assert (tmp_path / "my_kernels" / "matmul_relu_256.py").is_file()
    assert "plain API: check passed" in text
    summary_cell = next(c for c in executed.cells if c.source.startswith("%%tilekernel"))
    kinds = {k for out in summary_cell.outputs for k in out.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" in kinds  # widgets in a real kernel


def test_tuning_notebook_runs_headless(tmp_path):
    nb = nbformat.read(TUNING, as_version=4)
    nb.cells[1].source = ('size = 256\nrows, cols = 512, 256\nsweep_grid = "block_M=64,128 block_N=64,128"\n'
                          'target = "auto"')
    executed = run(nb, tmp_path)
    text = "\n".join(outputs_text(c) for c in executed.cells if c.cell_type == "code")
    assert "tuning panel for matmul_relu" in text and "tuning panel for softmax" in text
    assert "points on the throughput plot: 2" in text
    assert "sweep measured 2 configuration(s)" in text and "cached block_M=64" in text
    assert "GB/s" in text  # softmax: memory-bound
    assert "compiled in workers" in text and "best known for matmul_relu" in text
    assert "measurements in the tuning database" in text
    panels = [c for c in executed.cells if c.source.startswith("%%tilekernel")]
    for cell in panels:
        kinds = {k for out in cell.outputs for k in out.get("data", {})}
        assert "application/vnd.jupyter.widget-view+json" in kinds


def test_failing_cell_stops_run_all(tmp_path):
    v4 = nbformat.v4
    bad = ('%%tilekernel k --shapes N=128\n'
           'def k(N):\n'
           '    @T.prim_func\n'
           '    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):\n'
           '        with T.Kernel(1, threads=128) as bx:\n'
           '            T.copy(A, B_missing)\n'
           '    return main\n')
    nb = v4.new_notebook(cells=[v4.new_code_cell("%load_ext workbench"), v4.new_code_cell(bad),
                                v4.new_code_cell("print('not reached')")])
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        run(nb, tmp_path, timeout=300)
    err = info.value
    assert err.ename == "TileKernelCompileError"
    message = str(err)
    assert "cell line 6" in message and "B_missing" in message
    assert "not reached" not in "\n".join(outputs_text(c) for c in nb.cells)

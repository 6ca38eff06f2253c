"""Take the README's pictures from a real JupyterLab page: the ``%%tilekernel`` summary, the tuning panel and the
machine-level views of a CUDA kernel (resources, SASS by line, the Diff tab, the Profile button, the report).

Why this script exists: a static picture is what a reader of the README (or of GitHub) sees of the workbench, and it
should show the real thing, not a mock-up. It uses the browser test's machinery (``tests/labdriver.py``): JupyterLab
on 127.0.0.1 with a token, Debian's Chromium driven by Playwright, "Run All Cells" on a copy of the notebook, then a
screenshot of one cell's output area. Needs ``apt-get install chromium`` and ``pip install -e '.[browser]'``. The
CUDA pictures need no GPU (the kernel compiles with NVRTC or nvcc, SASS comes from nvdisasm): they show what a
machine without one shows, e.g. the Profile button's "not available here" and "no CUDA GPU here: compiled only".

    python scripts/readme_screenshot.py                 # writes every picture to docs/img/
    python scripts/readme_screenshot.py --only machine  # panel-resources.png, sass-by-line.png, config-diff.png,
                                                        # report.png
    python scripts/readme_screenshot.py --out /tmp/img  # elsewhere
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from labdriver import JupyterLab, chromium_page, open_notebook, run_all, set_parameters  # noqa: E402

MAX_BYTES = 300 * 1024
MARK_CELL = """(prefix) => {
  const w = window.jupyterapp.shell.currentWidget;
  const i = w.content.widgets.findIndex(c => c.model.sharedModel.getSource().startsWith(prefix));
  const cell = w.content.widgets[i];
  w.content.activeCellIndex = i;
  cell.node.scrollIntoView();
  cell.node.id = 'wb-shot';
  return i;
}"""


PLOTS_DRAWN = """() => [...document.querySelectorAll('#wb-shot .js-plotly-plot')]
  .every(g => g._fullLayout && g.data && g.data.length && g.querySelector('.scatterlayer .trace'))"""


def shoot(notebook: str, params: str, prefix: str, out: Path, width: int = 1250) -> Path:
    """Run ``notebook`` in JupyterLab and screenshot the output of the first cell starting with ``prefix``."""
    with tempfile.TemporaryDirectory(prefix="wb_shot_") as tmp:
        root = Path(tmp) / "notebooks"
        root.mkdir()
        shutil.copy(ROOT / "notebooks" / notebook, root / notebook)
        set_parameters(root / notebook, params)
        env = {"TILELANG_CORE_TUNING_DB": str(Path(tmp) / "tuning.sqlite3"), "PYTHONPATH": str(ROOT)}
        with JupyterLab(root, env=env) as lab, chromium_page(width=width, height=1100) as page:
            open_notebook(page, lab, notebook)
            page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
            run_all(page)
            page.evaluate(MARK_CELL, prefix)
            area = page.locator("#wb-shot .jp-Cell-outputWrapper")
            area.scroll_into_view_if_needed()
            # every plot drawn with its own layout (a busy machine can take seconds), then highlighting settles
            page.wait_for_function(PLOTS_DRAWN, timeout=120_000)
            page.wait_for_timeout(1500)
            area.screenshot(path=str(out))
    size = out.stat().st_size
    print(f"wrote {out} ({size // 1024} KiB)")
    if size > MAX_BYTES:
        raise SystemExit(f"{out} is {size // 1024} KiB; keep README pictures under {MAX_BYTES // 1024} KiB")
    return out


GEMM_CELL = '''%%tilekernel gmm --shapes M=256,N=256,K=256 --target cuda
def gmm(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float16", accum_dtype="float32"):
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
    return main'''
GEMM_LINE = 13  # T.gemm's line in the cell (the %%tilekernel line is 1)
# the panel's sweep (compile only without a GPU: each configuration's resources), then a summary made after it, so
# that its Diff tab offers the panel's configurations: the cell's against block_M=128 block_N=128, resources stage
# (set from code, as the tests drive it, so that the script can wait for the result); then the session report
MACHINE_CELLS = ["%load_ext workbench", GEMM_CELL,
                 "panel = gmm.panel(block_M=[64, 128], block_N=[64, 128])\npanel",
                 "panel.sweep(\"block_M=64,128 block_N=64,128\").result(timeout=600)",
                 "summary = gmm.summary()\nsummary",
                 "diff = summary.select(\"Diff\")\n"
                 "diff.wait()\n"
                 "diff.right.value = next(i for label, i in diff.right.options\n"
                 "                        if \"block_M=128\" in label and \"block_N=128\" in label)\n"
                 "diff.stage.value = \"resources\"\n"
                 "assert diff.wait(), \"the diff did not finish\"\n"
                 "summary.select(\"Source\")",
                 # the report of a CPU kernel's session (measured for real here): the same GEMM in float32
                 GEMM_CELL.replace("gmm --shapes", "gmm_cpu --shapes").replace("--target cuda",
                                   '--dtype float32 --ref "A @ B" --target cpu -q')
                 .replace("def gmm(", "def gmm_cpu("),
                 "cpu_panel = gmm_cpu.panel(block_M=[32, 64], block_N=[32, 64])\n"
                 "cpu_panel.wait()\n"
                 "cpu_panel.sweep(\"block_M=32,64 block_N=32,64\").result(timeout=600)\n"
                 "cpu_panel.wait()\n"
                 "print(gmm_cpu.summary(widgets=True).report())"]
NORM = "(t => t.replace(/\\u00a0/g, ' ').trim())"  # ipywidgets writes option labels with no-break spaces
CELL_OUTPUT = ".jp-CodeCell >> nth={} >> .jp-Cell-outputWrapper"
# scroll the SASS pane (its own scroll box) so that the picked line's first instruction sits near its top
SCROLL_TO_HIGHLIGHT = """() => {
  const hl = document.querySelector('.wb-sass .wb-hl');
  let box = hl.parentElement;
  while (box && box.scrollHeight <= box.clientHeight + 1) box = box.parentElement;
  if (box) box.scrollTop += hl.getBoundingClientRect().top - box.getBoundingClientRect().top - 60;
}"""


def _write_notebook(path: Path, cells: list[str]) -> None:
    import json

    code = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}
            for src in cells]
    path.write_text(json.dumps({"cells": code, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                            "display_name": "Python 3"}},
                                "nbformat": 4, "nbformat_minor": 5}))


def _check_size(out: Path) -> Path:
    size = out.stat().st_size
    print(f"wrote {out} ({size // 1024} KiB)")
    if size > MAX_BYTES:
        raise SystemExit(f"{out} is {size // 1024} KiB; keep README pictures under {MAX_BYTES // 1024} KiB")
    return out


def shoot_machine_views(out_dir: Path, width: int = 1250) -> list[Path]:
    """A CUDA GEMM compiled on this machine (no GPU needed): the tuning panel's resources table after a
    compile-only sweep of four configurations; the summary's SASS by line tab with the T.gemm line
    picked (the resources line and the Profile button's message above it), the Diff tab on the resources of the
    cell's and a panel configuration; and the top of the session report of the same GEMM on the CPU (timed)."""
    shots = []
    with tempfile.TemporaryDirectory(prefix="wb_shot_") as tmp:
        root = Path(tmp) / "notebooks"
        root.mkdir()
        _write_notebook(root / "machine_views.ipynb", MACHINE_CELLS)
        env = {"TILELANG_CORE_TUNING_DB": str(Path(tmp) / "tuning.sqlite3"), "PYTHONPATH": str(ROOT)}
        with JupyterLab(root, env=env) as lab, chromium_page(width=width, height=1100) as page:
            open_notebook(page, lab, "machine_views.ipynb")
            page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
            run_all(page, timeout_s=900)
            # the CUDA panel's resources table after its compile-only sweep: one row per configuration
            table = page.locator(CELL_OUTPUT.format(2)).locator(".wb-resources-table")
            page.wait_for_function("() => document.querySelectorAll('.wb-resources .wb-res-row').length >= 4",
                                   timeout=120_000)
            table.scroll_into_view_if_needed()
            shots.append(_check_size(_element_shot(table, out_dir / "panel-resources.png")))
            # the summary made after the sweep: SASS by line, the T.gemm line picked as a user would
            summary = page.locator(CELL_OUTPUT.format(4))
            summary.scroll_into_view_if_needed()
            summary.get_by_role("tab", name="SASS by line").click()
            select = summary.locator(".wb-sass-lines select")
            page.wait_for_function(f"() => [...document.querySelectorAll('.wb-sass-lines option')]"
                                   f".some(o => {NORM}(o.textContent).startsWith('{GEMM_LINE} |'))", timeout=300_000)
            texts = select.evaluate(f"s => [...s.options].map(o => {NORM}(o.textContent))")
            select.select_option(index=next(i for i, t in enumerate(texts) if t.startswith(f"{GEMM_LINE} |")))
            page.wait_for_function("() => document.querySelectorAll('.wb-sass .wb-hl').length > 0", timeout=60_000)
            page.wait_for_timeout(1000)  # the pane is redrawn once more with the line's mix
            summary.scroll_into_view_if_needed()
            page.evaluate(SCROLL_TO_HIGHLIGHT)
            page.wait_for_timeout(500)
            shots.append(_check_size(_element_shot(summary, out_dir / "sass-by-line.png")))
            # the Diff tab (set up by the next cell): the cell's configuration against a panel one, resources
            summary.get_by_role("tab", name="Diff").click()
            diff = summary.locator(".wb-config-diff")
            diff.wait_for(timeout=120_000)
            page.wait_for_timeout(1000)
            tabs = summary.locator(".widget-tab").first  # the tab bar and the Diff pane, not the header above
            tabs.scroll_into_view_if_needed()
            shots.append(_check_size(_element_shot(tabs, out_dir / "config-diff.png")))
            # the report the last cell wrote (the Report button's file) for the CPU kernel's session
            report = root / "my_kernels" / "gmm_cpu.report.html"
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(report.as_uri())
            page.wait_for_timeout(2500)  # plotly draws
            page.screenshot(path=str(out_dir / "report.png"))
            shots.append(_check_size(out_dir / "report.png"))
    return shots


def _element_shot(locator: object, out: Path) -> Path:
    locator.screenshot(path=str(out))  # type: ignore[attr-defined]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--only", choices=("summary", "panel", "machine"), default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TILELANG_CORE_CACHE_DIR", tempfile.mkdtemp(prefix="wb_shot_cache_"))
    if args.only in (None, "summary"):
        shoot("01_quickstart.ipynb", 'size = 512\ntarget = "auto"', "%%tilekernel", args.out / "workbench-summary.png")
    if args.only in (None, "panel"):
        shoot("02_tuning.ipynb", 'size = 512\nrows, cols = 2048, 1024\nsweep_grid = "block_M=64,128 block_N=64,128"'
              '\ntarget = "auto"',
              "%%tilekernel matmul_relu", args.out / "tuning-panel.png")
    if args.only in (None, "machine"):
        shoot_machine_views(args.out)


if __name__ == "__main__":
    main()

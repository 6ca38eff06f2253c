"""Take the README's pictures from a real JupyterLab page: the ``%%tilekernel`` summary and the tuning panel.

Why this script exists: a static picture is what a reader of the README (or of GitHub) sees of the workbench, and it
should show the real thing, not a mock-up. It uses the browser test's machinery (``tests/labdriver.py``): JupyterLab
on 127.0.0.1 with a token, Debian's Chromium driven by Playwright, "Run All Cells" on a copy of the notebook, then a
screenshot of one cell's output area. Needs ``apt-get install chromium`` and ``pip install -e '.[browser]'``.

    python scripts/readme_screenshot.py                 # writes docs/img/workbench-summary.png, tuning-panel.png
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--only", choices=("summary", "panel"), default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TILELANG_CORE_CACHE_DIR", tempfile.mkdtemp(prefix="wb_shot_cache_"))
    if args.only in (None, "summary"):
        shoot("01_quickstart.ipynb", 'size = 512\ntarget = "auto"', "%%tilekernel", args.out / "workbench-summary.png")
    if args.only in (None, "panel"):
        shoot("02_tuning.ipynb", 'size = 512\nrows, cols = 2048, 1024\nsweep_grid = "block_M=64,128 block_N=64,128"'
              '\ntarget = "auto"',
              "%%tilekernel matmul_relu", args.out / "tuning-panel.png")


if __name__ == "__main__":
    main()

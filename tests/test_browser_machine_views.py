"""The SASS by line tab in a real browser: JupyterLab + Debian's Chromium driven by Playwright.

A notebook compiles a CUDA GEMM with ``%%tilekernel --target cuda`` (no GPU needed to compile), the test clicks the
summary's "SASS by line" tab, picks the ``T.gemm`` line in the list as a user would, and checks that the pane
highlights that line's instructions and that they are HGMMA, that the instruction-mix table and the tuning panel's
resources table read fully (nothing clipped or scrolled at a 1400 px page with the file browser open); then opens
the Diff tab and reads a side-by-side table. A screenshot goes to ``.artifacts/browser/``. Needs ``apt-get install
chromium`` and ``pip install -e '.[browser]'``; skipped without them, except in CI (``CI`` set), where their absence
is a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from labdriver import browser_available, chromium_page, open_notebook, run_all

from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available
from tilelang_core.backend.cuda.resources import find_cuda_tool

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("WORKBENCH_ARTIFACTS", ROOT / ".artifacts" / "browser"))

missing = browser_available()
if missing and not os.environ.get("CI"):
    pytest.skip(f"real-browser test: {missing}", allow_module_level=True)
if (find_nvcc() is None and not nvrtc_available()) or find_cuda_tool("nvdisasm") is None:
    pytest.skip("needs a CUDA compiler (nvcc or NVRTC) and nvdisasm", allow_module_level=True)

CELL = '''%%tilekernel gmm --shapes M=256,N=256,K=256 --target cuda
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
GEMM_LINE = 13
NORM = "(t => t.replace(/\\u00a0/g, ' ').trim())"  # ipywidgets writes option labels with no-break spaces
HIGHLIGHTED = f"() => [...document.querySelectorAll('.wb-sass .wb-hl')].map(e => {NORM}(e.textContent))"
# each instruction-mix and resources table: its width, whether it ends inside its output area, and every element
# between them that is narrower than its content (a clipped or scrolled column)
TABLES_FIT = """() => [...document.querySelectorAll('.wb-mix, .wb-resources')].map(t => {
  const out = t.closest('.jp-OutputArea-output');
  const cut = [];
  for (let e = t.parentElement; e && e !== out; e = e.parentElement)
    if (e.scrollWidth > e.clientWidth + 1) cut.push(`${e.className}: ${e.scrollWidth} > ${e.clientWidth}`);
  return {table: t.className, width: t.getBoundingClientRect().width, right: t.getBoundingClientRect().right,
          area: out.getBoundingClientRect().right, cut};
})"""


def _notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}
             for src in ("%load_ext workbench", CELL, "gmm.panel()")]  # the panel: its resources table
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                             "display_name": "Python 3"}},
                                "nbformat": 4, "nbformat_minor": 5}))


def test_clicking_the_gemm_line_in_the_sass_tab_highlights_its_hgmma(jupyter_lab):
    # the session's JupyterLab (tests/conftest.py), a notebook and a kernel of this test's own
    assert missing is None, missing
    folder = jupyter_lab.root_dir / "machine_views"
    folder.mkdir()
    _notebook(folder / "sass.ipynb")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        try:
            open_notebook(page, jupyter_lab, "machine_views/sass.ipynb")
            run_all(page, lab=jupyter_lab)
            page.get_by_role("tab", name="SASS by line").first.click()
            select = page.locator(".wb-sass-lines select").first
            page.wait_for_function(f"() => [...document.querySelectorAll('.wb-sass-lines option')]"
                                   f".some(o => {NORM}(o.textContent).startsWith('{GEMM_LINE} |'))",
                                   timeout=120_000)
            texts = select.evaluate(f"s => [...s.options].map(o => {NORM}(o.textContent))")
            select.select_option(index=next(i for i, t in enumerate(texts) if t.startswith(f"{GEMM_LINE} |")))
            page.wait_for_function(f"() => ({HIGHLIGHTED})().length > 0 && ({HIGHLIGHTED})()"
                                   f".every(t => t.trim().startsWith('{GEMM_LINE} |'))", timeout=60_000)
            lines = page.evaluate(HIGHLIGHTED)
            assert any("HGMMA" in t for t in lines), lines[:5]
            assert "HGMMA" in page.locator(".wb-mix").first.inner_text()
            # both tables read fully at a 1400 px page with the file browser open: nothing clipped or scrolled
            page.wait_for_function("() => document.querySelectorAll('.wb-resources .wb-res-row').length > 0",
                                   timeout=60_000)
            tables = page.evaluate(TABLES_FIT)
            assert sorted(t["table"] for t in tables) == ["wb-mix", "wb-resources"], tables
            for t in tables:
                assert t["width"] > 300 and t["right"] <= t["area"] + 1 and not t["cut"], t
            page.locator(".wb-sass .wb-hl").first.scroll_into_view_if_needed()
            page.locator(".wb-sass").first.screenshot(path=str(ARTIFACTS / "sass_by_line.png"))
            page.get_by_role("tab", name="Diff").first.click()
            page.locator(".wb-config-diff").first.wait_for(timeout=60_000)
        finally:
            page.screenshot(path=str(ARTIFACTS / "sass_by_line_page.png"))
            jupyter_lab.shutdown_kernels()

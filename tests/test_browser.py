"""The tuning panel in a real browser: JupyterLab + Debian's Chromium driven by Playwright.

Runs ``notebooks/02_tuning.ipynb`` with "Run All Cells", moves the GEMM panel's ``block_M`` slider with the keyboard,
and checks that the throughput plot gained a point, the status line changed and the sweep grid followed; then reads
the laid-out page at 1400 px: slider readouts inside the cell and not cut, the sweep grid's text visible, legends clear
of the titles and axes, log axes without repeated labels. A screenshot of the panel goes to
``.artifacts/browser/`` (CI keeps it). Needs ``apt-get install chromium`` and ``pip install -e '.[browser]'``; skipped
without them, except in CI (``CI`` set), where their absence is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from labdriver import browser_available, chromium_page, open_notebook, run_all, set_parameters

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("WORKBENCH_ARTIFACTS", ROOT / ".artifacts" / "browser"))

missing = browser_available()
if missing and not os.environ.get("CI"):
    pytest.skip(f"real-browser test: {missing}", allow_module_level=True)

PANEL = ".wb-panel >> nth=0"
POINTS = """() => {
  const gd = document.querySelector('.wb-panel .wb-throughput');  // the plotly graph div itself
  const trace = gd && gd.data ? gd.data.find(t => t.name === 'this session') : null;
  return trace && trace.x ? trace.x.length : -1;
}"""
MARKERS = """() => {
  const gd = document.querySelector('.wb-panel .wb-throughput');
  return gd ? gd.querySelectorAll('.scatterlayer path.point').length : -1;
}"""
STATUS = "() => { const s = document.querySelector('.wb-panel .wb-status'); return s ? s.innerText.trim() : ''; }"
# what a failed wait reports: every panel's plots (trace name -> points) and status, the notebook's printed outputs
PAGE_STATE = """() => {
  const panels = [...document.querySelectorAll('.wb-panel')].map(p => ({
    status: (p.querySelector('.wb-status') || {}).innerText || '',
    plots: [...p.querySelectorAll('.js-plotly-plot')].map(gd => (gd.data || []).map(
      t => `${t.name}:${t.x ? t.x.length : -1}`).join(' ')),
  }));
  const w = window.jupyterapp.shell.currentWidget;
  const printed = w && w.content ? w.content.widgets.filter(c => c.model.type === 'code').map(
    c => c.model.outputs.toJSON().filter(o => o.output_type === 'stream').map(o => o.text).join('')) : [];
  return {panels, printed};
}"""


def wait_for(page, condition: str, timeout_ms: int) -> None:
    """``page.wait_for_function``, failing with what the page shows (plots, status lines, the cells' printed
    outputs, console errors) instead of a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, timeout=timeout_ms)
    except PlaywrightTimeout:
        state = page.evaluate(PAGE_STATE)
        errors = getattr(page, "console_errors", [])
        raise AssertionError(f"not reached in {timeout_ms / 1000:.0f} s: {condition}\nthe page: {state}\n"
                             f"console errors: {errors[-20:]}") from None


# Layout at the default 1400 px viewport, file browser open: every slider's readout inside the panel and not cut,
# the sweep grid's text fully visible, each plot's legend clear of its titles, log axes without repeated labels.
LAYOUT = """() => {
  const panel = document.querySelector('.wb-panel');
  const area = panel.closest('.jp-OutputArea-output') || panel.parentElement;
  const box = area.getBoundingClientRect();
  const readouts = [...panel.querySelectorAll('.wb-knob .widget-readout')].map(r => {
    const b = r.getBoundingClientRect();
    return {text: r.innerText.trim(), left: b.left, right: b.right, width: b.width,
            cut: r.scrollWidth > r.clientWidth + 1};
  });
  const grid = panel.querySelector('.wb-sweep-grid input');
  const overlaps = [];
  const ticks = {};
  for (const gd of panel.querySelectorAll('.js-plotly-plot')) {
    const name = [...gd.classList].find(c => c.startsWith('wb-')) || '?';
    const legend = gd.querySelector('.legend');
    const l = legend ? legend.getBoundingClientRect() : null;
    for (const sel of ['.g-xtitle', '.g-ytitle', '.g-gtitle', '.xaxislayer-above']) {
      const t = gd.querySelector(sel);
      if (!l || !t) continue;
      const b = t.getBoundingClientRect();
      if (b.width && l.width && l.left < b.right && b.left < l.right && l.top < b.bottom && b.top < l.bottom)
        overlaps.push(name + ' legend over ' + sel);
    }
    if (name === 'wb-roofline') {
      ticks.x = [...gd.querySelectorAll('.xaxislayer-above .xtick text')].map(t => t.textContent);
      ticks.y = [...gd.querySelectorAll('.yaxislayer-above .ytick text')].map(t => t.textContent);
    }
  }
  return {area: {left: box.left, right: box.right}, readouts, overlaps, ticks,
          grid: grid ? {scroll: grid.scrollWidth, client: grid.clientWidth} : null};
}"""


@pytest.fixture(scope="module")
def tuning_page(jupyter_lab):
    """02_tuning.ipynb run to the end in Chromium on the session's JupyterLab (tests/conftest.py; one notebook and
    browser for this file's tests, its kernel shut down after them)."""
    assert missing is None, missing
    folder = jupyter_lab.root_dir / "tuning"
    folder.mkdir()
    nb = folder / "02_tuning.ipynb"
    shutil.copy(ROOT / "notebooks" / "02_tuning.ipynb", nb)
    set_parameters(nb, 'size = 256\nrows, cols = 512, 256\nsweep_grid = "block_M=64,128 block_N=64,128"\n'
                       'target = "auto"')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with chromium_page() as page:
            try:
                open_notebook(page, jupyter_lab, "tuning/02_tuning.ipynb")
                run_all(page, lab=jupyter_lab)
                yield page
            finally:
                page.screenshot(path=str(ARTIFACTS / "02_tuning_page.png"))
                if page.locator(".wb-panel").count():
                    page.locator(PANEL).screenshot(path=str(ARTIFACTS / "02_tuning_panel.png"))
    finally:
        jupyter_lab.shutdown_kernels()


def test_panel_slider_moved_with_the_keyboard_updates_the_plot(tuning_page):
    page = tuning_page
    panel = page.locator(PANEL)
    panel.scroll_into_view_if_needed()
    wait_for(page, f"() => ({POINTS})() >= 4", 180_000)  # initial, block_M=128, sweep x2
    # the status line is redrawn just after the plots: wait for it rather than race it
    wait_for(page, f"() => ({STATUS})().includes('block_M=64')", 180_000)
    before_points = page.evaluate(POINTS)
    before_markers = page.evaluate(MARKERS)
    before_status = page.evaluate(STATUS)
    assert "block_M=64" in before_status, before_status

    handle = page.locator(".wb-panel .wb-knob-block_M .noUi-handle >> nth=0")
    handle.focus()
    page.keyboard.press("ArrowLeft")  # 64 -> 32: a configuration not measured yet
    wait_for(page, f"() => ({POINTS})() > {before_points} && ({STATUS})().includes('block_M=32') && "
                   f"({STATUS})().includes('PASS')", 120_000)
    after_status = page.evaluate(STATUS)
    assert after_status != before_status
    assert page.evaluate(POINTS) == before_points + 1
    assert page.evaluate(MARKERS) > before_markers  # drawn, not only received
    # the sweep grid follows the slider: centred on block_M=64 before the move (32,64,128), on 32 after it
    grid = page.locator(".wb-panel .wb-sweep-grid input >> nth=0").input_value()
    assert grid.startswith("block_M=32,64 "), grid


def test_panel_layout_fits_a_1400_px_page(tuning_page):
    page = tuning_page
    page.locator(PANEL).scroll_into_view_if_needed()
    page.wait_for_timeout(500)  # plotly finishes laying out
    got = page.evaluate(LAYOUT)
    assert len(got["readouts"]) >= 5, got
    for r in got["readouts"]:
        assert r["width"] > 0 and not r["cut"], r
        assert r["right"] <= got["area"]["right"] + 1, (r, got["area"])  # not pushed out of the cell and clipped
    assert got["grid"] and got["grid"]["scroll"] <= got["grid"]["client"] + 1, got["grid"]
    assert not got["overlaps"], got["overlaps"]
    for axis, labels in got["ticks"].items():
        shown = [t for t in labels if t.strip()]
        assert shown and len(shown) == len(set(shown)), (axis, labels)  # powers of ten, each once
    page.locator(PANEL).screenshot(path=str(ARTIFACTS / "02_tuning_panel.png"))
    assert (ARTIFACTS / "02_tuning_panel.png").stat().st_size > 10_000

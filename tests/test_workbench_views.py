"""The summary widgets, driven the way a user drives them: by setting ``.value`` (and clicking)."""

from __future__ import annotations

import html
import re

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")

from IPython.utils.capture import capture_output  # noqa: E402

from workbench.highlight import clip, code_html  # noqa: E402
from workbench.summary import SummaryView  # noqa: E402

FACTORY = '''\
def mm(M, N, K, block_M=64, block_N=64, block_K=32):
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
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''


def plain(html_text: str) -> str:
    """The visible text of highlighted HTML (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def wk(ip):
    ip.run_cell_magic("tilekernel", 'vmm --shapes M=128,N=128,K=128 --ref "torch.relu(A @ B)" -q', FACTORY)
    return ip.user_ns["vmm"]


def test_header_and_source(wk):
    view = SummaryView(wk)
    assert view.tabs.titles == ("Source", "IR", "Code", "Compare", "SASS by line", "Diff")
    assert "PASS" in view.header.value and "vmm" in view.header.value
    assert "T.gemm(A_s, B_s, C_f)" in plain(view.source.pane.value) and "block_M=64" in view.source.config.value
    assert 'class="' not in view.source.pane.value  # inline styles (noclasses=True): no stylesheet needed


def test_ir_stage_pickers_diff_and_unchanged_filter(wk):
    view = SummaryView(wk)
    ir = view.select("IR")
    stages = wk.trace.stages
    assert ir.left.value == 0 and ir.right.value == max(s.index for s in stages if s.changed)  # the final IR
    assert ir.body.children == (ir.side_by_side,)
    shown = [index for _, index in ir.left.options]
    assert all(stages[i].changed or i == 0 for i in shown)  # unchanged stages hidden by default
    assert len(shown) < len(stages)

    ir.show_unchanged.value = True
    assert len(ir.left.options) == len(stages)
    unchanged = next(s for s in stages if not s.changed)
    ir.left.value = unchanged.index
    assert unchanged.name in ir.left_title.value

    ir.show_unchanged.value = False  # the hidden stage falls back to the nearest earlier one shown
    assert stages[ir.left.value].changed or ir.left.value == 0
    assert ir.left.value <= unchanged.index

    lowered = next(s for s in stages[1:] if s.changed)
    ir.left.value = 0
    ir.right.value = lowered.index
    assert lowered.name in ir.right_title.value
    ir.diff.value = True
    assert ir.body.children == (ir.diff_pane,)
    assert "@@" in plain(ir.diff_pane.value) and lowered.name in plain(ir.diff_pane.value)
    ir.right.value = 0
    assert "identical" in ir.diff_pane.value
    ir.diff.value = False
    assert ir.body.children == (ir.side_by_side,)


def test_code_tab_shows_each_kind_with_its_command(wk):
    view = SummaryView(wk)
    code = view.select("Code")
    kinds = [k for _, k in code.kind.options]
    assert kinds[:2] == ["llvm", "asm"] and code.kind.value == "llvm"
    assert "mcpu=" in code.command.value and "link:" in code.command.value
    assert "define" in plain(code.pane.value) and "overflow:auto" in code.pane.value
    llvm_html = code.pane.value
    code.kind.value = "asm"
    assert code.pane.value != llvm_html and "ret" in plain(code.pane.value)


def test_compare_variant_and_previous_run(ip, wk):
    view = SummaryView(wk)
    cmp_ = view.select("Compare")
    assert cmp_.stage.value == "input"
    variant = cmp_.request("block_M=32").result(timeout=120)
    assert variant is not None and variant.config["block_M"] == 32
    assert cmp_.other.value == "variant block_M=32"
    assert cmp_.body.children == (cmp_.diff_pane,) and "@@" in plain(cmp_.diff_pane.value)
    cmp_.diff.value = False
    assert cmp_.body.children == (cmp_.side_by_side,) and "block_M=64" in cmp_.left_title.value
    cmp_.stage.value = wk.trace.stages[-1].name
    assert wk.trace.stages[-1].name in cmp_.right_title.value

    assert cmp_.request("block_Q=1").result(timeout=60) is None
    assert "block_Q" in cmp_.status.value and cmp_.other.value == "variant block_M=32"

    cmp_.overrides.value = "block_N=32"  # what pressing Enter in the text box does
    cmp_._pending.result(timeout=120)
    assert cmp_.other.value == "variant block_N=32"

    ip.run_cell_magic("tilekernel", "vmm --shapes M=128,N=128,K=128 --no-bench -q",
                      FACTORY.replace("block_K=32", "block_K=16"))
    newer = ip.user_ns["vmm"]
    cmp2 = SummaryView(newer).select("Compare")
    assert cmp2.other.value.startswith("previous run (block_K=32)")
    assert "@@" in plain(cmp2.diff_pane.value)


def test_export_from_the_summary(wk, tmp_path):
    view = SummaryView(wk)
    view.export_path.value = str(tmp_path / "exported" / "vmm_128.py")
    view.export_button.click()
    assert (tmp_path / "exported" / "vmm_128.py").is_file()
    assert "wrote" in view.export_status.value
    view.export_path.value = str(tmp_path / "bad-name.py")
    view.export_button.click()
    assert "ValueError" in view.export_status.value


def test_widget_display_carries_a_text_fallback(wk, monkeypatch):
    from workbench.display import show

    monkeypatch.setenv("WORKBENCH_WIDGETS", "1")
    with capture_output() as cap:
        show(wk)
    data = cap.outputs[0].data
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "IR stages" in data["text/plain"]
    monkeypatch.setenv("WORKBENCH_WIDGETS", "0")
    assert isinstance(wk.summary(), str)


def test_highlight_clips_huge_text_and_scrolls():
    text = "\n".join(f"x{i} = {i}" for i in range(50))
    body, cut = clip(text, 10)
    assert cut == 40 and body.count("\n") == 10
    html = code_html(text, "python", max_lines=10)
    assert "40 more lines" in html and "overflow:auto" in html and "white-space:pre" in html

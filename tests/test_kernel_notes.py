"""Fast paths say when they do not apply (issue 14 part 6): ``kernel.notes``, the trace, the workbench summary;
plus the workbench showing ``pass_configs`` and ``python -m tilelang_core.trace --pipeline``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen
from tilelang_core.quickstart import matmul_relu
from tilelang_core.transform.common.notes import read_notes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import dequant_gemm  # noqa: E402

W4 = {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}


def _lowered_notes(func, **options):
    return read_notes(codegen.lower(func, arch="sm_80", options=options or None))


def test_w4a16_with_groups_of_16_notes_why_the_fusion_is_skipped():
    notes = _lowered_notes(dequant_gemm.dequant_gemm.factory(16, 1024, 1024, 16, **W4))
    fused = [n for n in notes if "not fused with the dequantisation" in n]
    assert len(fused) == 1 and fused[0].startswith("line ") and "32-wide k chunk" in fused[0]


def test_w4a16_that_fuses_has_no_note_and_a_refused_forced_split_k_says_why():
    assert _lowered_notes(dequant_gemm.dequant_gemm.factory(16, 1024, 1024, 128, **W4)) == []
    notes = _lowered_notes(dequant_gemm.dequant_gemm.factory(16, 1024, 1024, 128, **W4), **{"tl.cuda.split_k": 8})
    assert len(notes) == 1 and "split-K not applied" in notes[0] and "'tl.cuda.split_k'=8" in notes[0]


def test_quickstart_gemm_takes_the_fused_mainloop_without_notes():
    mod = codegen.lower(matmul_relu.factory(256, 256, 256, 64, 64, 32, dtype="float16"), arch="sm_80")
    assert "tl::pipe_gemm_step<" in mod.script() and read_notes(mod) == []


def test_fp16_accumulator_gemm_notes_why_the_fused_mainloop_is_skipped():
    func = matmul_relu.factory(256, 256, 256, 64, 64, 32, dtype="float16", accum_dtype="float16")
    mod = codegen.lower(func, arch="sm_80")
    assert "tl::pipe_gemm_step<" not in mod.script()
    notes = read_notes(mod)
    assert len(notes) == 1 and "fused pipelined mainloop" in notes[0] and "C_f is float16" in notes[0]
    assert notes[0].startswith("line ")


def test_notes_survive_a_disk_cache_hit_and_show_in_repr_trace_and_workbench(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    func = dequant_gemm.dequant_gemm.factory(16, 256, 256, 16, **W4)
    k1 = tilelang.compile(func, out_idx=[-1], target="cuda -arch=sm_80")
    assert k1.cache_status == "compiled" and any("not fused with the dequantisation" in n for n in k1.notes)
    assert "notes=" in repr(k1) and any(n in repr(k1.trace) for n in k1.notes)
    k2 = tilelang.compile(func, out_idx=[-1], target="cuda -arch=sm_80")
    assert k2.cache_status == "disk" and k2.notes == k1.notes
    pytest.importorskip("ipywidgets")
    from workbench.text_views import kernel_facts

    facts = kernel_facts(k2)
    assert facts[0] == "fast paths not taken (kernel.notes):" and k1.notes[0] in facts[1]


CELL = '''\
@tilelang.jit(out_idx=[-1], pass_configs={"tl.disable_vectorize_256": True})
def add1(N, block=64):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + 1.0
    return main
'''


def test_workbench_summary_shows_the_pass_configs_given(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    from IPython.testing.globalipapp import get_ipython

    from workbench.summary import status_html
    from workbench.text_views import summary_text

    ip = get_ipython()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_cell("import tilelang_core as tilelang\nimport tilelang_core.language as T")
    ip.run_cell_magic("tilekernel", 'nadd --shapes N=200 --ref "A + 1" --no-bench -q', CELL)
    wk = ip.user_ns["nadd"]
    assert wk.passed
    assert "pass_configs: {'tl.disable_vectorize_256': True}" in summary_text(wk)
    assert "tl.disable_vectorize_256" in status_html(wk)


def test_trace_cli_pipeline_lists_passes_with_purpose_and_options(capsys):
    out = subprocess.run([sys.executable, "-m", "tilelang_core.trace", "--pipeline", "--target", "cuda",
                          "--pass-config", "tl.cuda.split_k=4"], capture_output=True, text=True, cwd=str(ROOT),
                         check=True).stdout  # python -m, once; the CPU list and the refusal through main() below
    lines = out.splitlines()
    names = [ln.split()[1] for ln in lines if ln[:5].strip().rstrip(".").isdigit()]
    from tilelang_core.transform import cuda_passes

    assert names == [n for n, _ in cuda_passes("sm_90a")]
    fuse = next(ln for ln in lines if "tl.FuseDequantGemmCUDA" in ln)
    assert "int4 unpacking" in fuse
    assert "  * tl.cuda.split_k = 4" in lines and "    tl.cuda.fuse_dequant = True" in lines
    from tilelang_core.trace.cli import main

    assert main(["--pipeline", "--target", "cpu"]) == 0
    cpu = capsys.readouterr().out
    assert "tl.LowerKernelGridCPU" in cpu and "tl.cuda." not in cpu
    assert main(["--pipeline", "--pass-config", "tl.cuda.split_k=3"]) == 2
    assert "tl.cuda.split_k" in capsys.readouterr().err

"""The workbench's GPU paths, checked where no GPU is: which timer a kernel gets, which code kinds the views offer,
which roofline ceiling a kernel is read against, and that the notebooks pick their target instead of assuming the
CPU. A CUDA kernel compiles here (nvcc, no GPU) but does not run; bench/gpu/notebooks.py runs the rest on the GPU."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")

from tilelang_core.machine import Ceilings  # noqa: E402
from tilelang_core.profiler import bench, bench_cuda, timer_for  # noqa: E402
from workbench import ir  # noqa: E402
from workbench.text_views import summary_text  # noqa: E402
from workbench.views import CodeView  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))

FACTORY = '''\
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
    return main
'''


def plain(html_text: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


@pytest.fixture(scope="module")
def cpu_wk(ip):
    ip.run_cell_magic("tilekernel", "gmm_cpu --shapes M=128,N=128,K=64 --dtype float32 --target cpu --no-bench -q",
                      FACTORY.replace("def gmm(", "def gmm_cpu("))
    return ip.user_ns["gmm_cpu"]


@pytest.fixture(scope="module")
def cuda_wk(ip):
    from tilelang_core.backend.cuda import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found: the CUDA kernel cannot be compiled here")
    ip.run_cell_magic("tilekernel", "gmm_cuda --shapes M=128,N=128,K=64 --target cuda -q",
                      FACTORY.replace("def gmm(", "def gmm_cuda("))
    return ip.user_ns["gmm_cuda"]


# -- timers ------------------------------------------------------------------------------------------------------
def test_timer_for_picks_cuda_events_for_the_gpu():
    assert timer_for("cuda") is bench_cuda and timer_for("cuda:0") is bench_cuda
    assert timer_for("cpu") is bench and timer_for("llvm") is bench


def test_a_cuda_kernel_and_its_reference_are_timed_with_cuda_events(cuda_wk):
    prof = cuda_wk.kernel.get_profiler()
    assert prof.device == "cuda" and prof.timer is bench_cuda  # do_bench (kernel and --ref) goes through it


def test_a_cpu_kernel_is_timed_with_the_wall_clock(cpu_wk):
    assert cpu_wk.kernel.get_profiler().timer is bench


# -- the Code view -------------------------------------------------------------------------------------------------
def test_code_view_lists_every_source_kind_of_a_cuda_kernel(cuda_wk):
    kernel = cuda_wk.kernel
    view = CodeView(kernel)
    view.activate()
    kinds = [k for _, k in view.kind.options]
    assert set(kinds) == set(kernel.sources) | set(kernel.source_kinds)  # "cuda", "tir", and PTX/SASS when stored
    assert kinds[0] == "cuda" and view.kind.value == "cuda"
    assert "__global__" in plain(view.pane.value) and ("nvcc" in view.command.value or "nvrtc" in view.command.value)
    view.kind.value = "tir"
    assert "T.prim_func" in plain(view.pane.value) or "def " in plain(view.pane.value)
    assert "(command not recorded)" in view.command.value


def test_text_summary_lists_every_kind_too(cuda_wk):
    text = summary_text(cuda_wk)
    for kind in ir.source_kinds(cuda_wk.kernel):
        assert f"    {kind}: " in text
    assert "gmm_cuda: cuda (sm_" in text and "not run (no CUDA GPU here" in text


def test_code_view_of_a_cpu_kernel_starts_with_llvm_and_asm(cpu_wk):
    kinds = [c.kind for c in ir.generated_code(cpu_wk.kernel)]
    assert kinds[:2] == ["llvm", "asm"] and set(kinds) == set(cpu_wk.kernel.sources) | set(cpu_wk.kernel.source_kinds)


# -- the roofline --------------------------------------------------------------------------------------------------
def test_half_precision_kernels_are_read_against_the_tensor_core_peak():
    gpu = Ceilings(device="GPU", kind="cuda", peak_gflops=60e3, bandwidth_gbs=4000.0, method="m", measured_at=0.0,
                   tensor_gflops=780e3)
    assert gpu.for_dtypes(["float16", "float16", "float16"]).peak_gflops == 780e3
    assert gpu.for_dtypes(["bfloat16", "float32"]).ridge == pytest.approx(780e3 / 4000.0)
    assert gpu.for_dtypes(["float32"]) is gpu
    cpu = Ceilings(device="CPU", kind="cpu", peak_gflops=300.0, bandwidth_gbs=12.0, method="m", measured_at=0.0)
    assert cpu.for_dtypes(["float16"]) is cpu  # no tensor-core figure measured: the float32 peak


def test_explorer_asks_for_the_ceiling_of_the_kernels_dtypes(cuda_wk):
    from workbench.explorer import Explorer
    from workbench.tunables import tunables

    ex = Explorer(cuda_wk, tunables(cuda_wk.program.function, cuda_wk.kwargs), db=None)
    assert ex.target_kind == "cuda" and set(ex.dtypes) == {"float16"}
    if not __import__("torch").cuda.is_available():
        assert ex.ceilings() is None  # no GPU here: no roofline, never the CPU's drawn for a GPU kernel


# -- the notebooks ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_pick_their_target(path):
    cells = [("".join(c["source"]), c["cell_type"]) for c in json.loads(path.read_text())["cells"]]
    params = cells[1][0]
    assert params.startswith("# parameters") and re.search(r'(?m)^target = "auto"', params)
    magics = [src for src, kind in cells if kind == "code" and src.startswith("%%tilekernel")]
    code = "\n".join(src for src, kind in cells if kind == "code")
    # the notebook's target, or (notebook 04's variant section: CUDA wherever it compiles) one derived from it
    derived = re.search(r'(?m)^variant_target = .*\btarget in \(', code) is not None
    assert magics and all("--target {target}" in m.splitlines()[0]
                          or (derived and "--target {variant_target}" in m.splitlines()[0]) for m in magics)
    assert "resolve_target(target)" in code
    assert "from tilelang_core.profiler import bench\n" not in code  # a wall clock around GPU work times launches


# -- bench/gpu/notebooks.py's pieces -------------------------------------------------------------------------------
def test_gpu_notebook_runner_helpers(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_notebooks_runner", ROOT / "bench" / "gpu" / "notebooks.py")
    runner = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, runner)  # its dataclasses look their module up there
    spec.loader.exec_module(runner)
    for on_gpu in (True, False):
        start, moves, _ = runner.walk(on_gpu)
        states = [start]
        for name, value in moves:
            states.append({**states[-1], name: value})
        assert len({tuple(s.values()) for s in states}) == len(states)  # every move is a new configuration
        state = states[-1]
        for name, value in runner.backwards(start, moves):
            state = {**state, name: value}
            assert state in states
        assert state == start
    own = '# parameters\nsize = 512\ntarget = "auto"  # comment'
    assert runner.parameters("01_quickstart", own, small=False, target="cuda") == \
        "# parameters\nsize = 512\ntarget = 'cuda'"
    assert runner.parameters("01_quickstart", own, small=True, target="auto").endswith("target = 'auto'")
    for key in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR",
                "PYTHONPATH"):
        monkeypatch.setenv(key, "")
    runner.jupyter_env(tmp_path)
    spec = json.loads((tmp_path / "jupyter" / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert str(ROOT) in spec["env"]["PYTHONPATH"].split(":")

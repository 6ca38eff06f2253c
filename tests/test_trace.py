"""Compile traces, generated code, failure reports and reproducers (issue 3: compile trace).

Kernel factories live at module level in this file: TVMScript reads their source, and reproducers reach them
by name.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.errors import TileLangCheckError, TileLangCompileError
from tilelang_core.trace import GeneratedCode, Stage, Trace, diff_kernels

HERE = Path(__file__).resolve()


@tilelang.jit(out_idx=[-1])
def gemm_relu(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, num_stages: int = 2,
              threads: int = 128, dtype: str = "float32", accum_dtype: str = "float32"):
    """The quickstart GEMM + ReLU."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)  # the gemm line
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def broken_gemm(M: int, N: int, K: int, block_M: int = 64, block_N: int = 64, block_K: int = 32):
    """B's tile is (block_M, block_N) instead of (block_K, block_N): T.gemm's shapes do not line up."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_M, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.gemm(A_s, B_s, C_f)  # the broken gemm line
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def undefined_name_kernel(N: int):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            C[bx] = no_such_function(A[bx])  # noqa: F821 - the deliberate parse error

    return main


@tilelang.jit(out_idx=[-1])
def add_two(N: int, block: int = 64):
    """Adds 2 — checked against plus_one below, so the check fails."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + T.float32(2)

    return main


def plus_one(a: torch.Tensor) -> torch.Tensor:
    return a + 1


SHAPE = {"M": 128, "N": 128, "K": 128, "block_M": 64, "block_N": 64, "block_K": 32}


def _line_of(marker: str) -> int:
    return next(i for i, ln in enumerate(HERE.read_text().splitlines(), 1) if marker in ln and "T." in ln)


@pytest.fixture(scope="module")
def kernel():
    return gemm_relu(**SHAPE)


# -- the trace ---------------------------------------------------------------------------------------------------
def test_trace_has_named_stages_from_tile_ops_to_codegen(kernel):
    tr = kernel.trace
    assert isinstance(tr, Trace)
    names = tr.names()
    assert len(names) >= 10
    assert len(set(names)) == len(names), "stage names are unique"
    assert all(isinstance(s, Stage) and s.name and s.seconds >= 0 for s in tr.stages)
    assert [s.index for s in tr.stages] == list(range(len(tr.stages)))
    assert tr.stages[0].name == "input" and tr.stages[0].origin == "input"
    assert tr.stages[-1].origin == "codegen"
    origins = [s.origin for s in tr.stages]
    # input, then our passes, then TVM's, then codegen
    assert origins == sorted(origins, key=["input", "tilelang", "tvm", "codegen"].index)
    assert {"tilelang", "tvm"} <= set(origins)
    assert "tl.LowerTileOpsCPU" in names and "tirx.VectorizeLoop" in names
    # tile ops in the program as written, none in what codegen receives
    for op in ("T.tl.gemm", "T.tl.copy", "T.tl.fill"):
        assert op in tr.stages[0].text
    assert "T.tl." not in tr.stages[-1].text
    assert tr.total_seconds > 0
    assert "tl.LowerTileOpsCPU" in repr(tr)


def test_trace_is_lazy_and_cached():
    k = gemm_relu(128, 128, 64, 64, 64, 32)
    assert k._trace is None, "compiling must not capture a trace"
    tr = k.trace
    assert k.trace is tr
    assert tilelang.trace(k) is tr


def test_repeated_passes_get_unique_names_and_lookup_works(kernel):
    tr = kernel.trace
    repeats = [s for s in tr.stages if "#" in s.name]
    assert repeats, "TVM runs some passes twice (StmtSimplify, RemoveNoOp ...)"
    r = repeats[0]
    assert r.name == f"{r.pass_name}#{r.name.rsplit('#', 1)[1]}"
    assert tr.stage(r.name) is r
    assert tr.stage(r.pass_name).name == r.pass_name  # the bare name is the first run
    assert tr.stage(0) is tr.stages[0] and tr.stage(-1) is tr.stages[-1]
    assert tr.stage("VectorizeLoop").name == "tirx.VectorizeLoop"  # a unique suffix
    with pytest.raises(KeyError, match="did you mean"):
        tr.stage("tl.LowerTileOpsCPUU")


def test_stage_diffs_are_nonempty_exactly_where_a_pass_changed_the_ir(kernel):
    tr = kernel.trace
    changed = tr.changed_stages()
    assert tr.stages[0] in changed
    assert 3 <= len(changed) < len(tr.stages)
    for prev, cur in zip(tr.stages, tr.stages[1:]):
        d = tr.diff(prev.index, cur.index)
        assert bool(d) == cur.changed, cur.name
        assert cur.changed == (cur.text != prev.text)
    d = tr.diff("tl.LowerKernelGridCPU", "tl.LowerTileOpsCPU")
    assert d.startswith("--- ") and "-" in d and "T.tl.gemm" in d and "T.vectorized" in d
    assert tr.stage("tl.LowerTileOpsCPU").changed
    assert len(tr.diff(0, -1, context=0)) < len(tr.diff(0, -1, context=10))


def test_two_configurations_diff_shows_the_block_size(kernel):
    other = gemm_relu(**{**SHAPE, "block_M": 32})
    d = diff_kernels(kernel, other, stage="input")
    assert "block_M=64" in d.splitlines()[0] and "block_M=32" in d.splitlines()[1]
    minus = [ln for ln in d.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln for ln in d.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert any("T.alloc_shared((64, 32))" in ln for ln in minus)
    assert any("T.alloc_shared((32, 32))" in ln for ln in plus)
    assert diff_kernels(kernel, other, stage="tl.LowerTileOpsCPU")  # later stages differ too
    assert diff_kernels(kernel, kernel) == ""


def test_source_map_points_at_the_users_lines(kernel):
    tr = kernel.trace
    smap = tr.source_map(0)
    assert smap
    gemm_line = _line_of("# the gemm line")
    hits = [loc for summary, loc in smap if summary.startswith("T.tl.gemm")]
    assert hits and hits[0].file == str(HERE) and hits[0].line == gemm_line
    # our passes keep the user's spans on the code they generate
    lowered = tr.source_map("tl.LowerTileOpsCPU")
    assert any(loc.line == gemm_line for _, loc in lowered)


def test_trace_serialises(kernel):
    d = kernel.trace.to_dict()
    assert len(d["stages"]) == len(kernel.trace) and d["stages"][0]["name"] == "input"
    assert kernel.trace.to_json()


# -- generated code ----------------------------------------------------------------------------------------------
def test_sources_are_labelled_with_their_commands(kernel):
    src = kernel.sources
    assert set(src) >= {"llvm", "asm"}
    assert all(isinstance(g, GeneratedCode) and g.kind == k for k, g in src.items())
    assert src["llvm"].label == "LLVM IR" and "define" in src["llvm"].text
    assert src["asm"].label.endswith("assembly")
    tgt = kernel.target
    for g in src.values():
        assert f"mtriple={tgt['mtriple']}" in g.command and f"mcpu={tgt['mcpu']}" in g.command
        assert "-O3" in g.command and "link: " in g.command and "-shared" in g.command


def _host_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


@pytest.mark.skipif("fma" not in _host_flags() or "avx2" not in _host_flags(), reason="host CPU has no AVX2+FMA")
def test_cpu_assembly_has_vector_fma_for_the_gemm(kernel):
    asm = kernel.sources["asm"].text
    fmas = re.findall(r"vfmadd\w*ps\s+[^\n]*%(?:zmm|ymm)", asm)
    assert len(fmas) >= 8, "the gemm micro-kernel should be vector FMAs on ymm/zmm registers"


# -- failure reports and reproducers ----------------------------------------------------------------------------
def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, **kw)


def test_pass_error_carries_a_report_and_a_partial_trace():
    with pytest.raises(TileLangCompileError) as ei:
        broken_gemm(128, 128, 128)
    err = ei.value
    rep = err.report
    assert rep is not None
    assert rep.stage == "tl.ValidateTileOps" == err.stage
    assert rep.last_good_stage == "input" and "T.tl.gemm" in rep.last_good_ir
    assert rep.factory == "broken_gemm" and rep.source_file == str(HERE)
    assert "def broken_gemm" in rep.source
    assert rep.args == {"M": "128", "N": "128", "K": "128", "block_M": "64", "block_N": "64", "block_K": "32"}
    assert rep.resolved_target["kind"] == "llvm" and rep.params[0] == "A: float32[128, 128]"
    assert rep.versions.get("tvm")
    assert err.trace is not None and err.trace.failed_stage == "tl.ValidateTileOps"
    assert "tl.ValidateTileOps failed" in rep.render()
    assert err.location is not None and err.location.line == _line_of("# the broken gemm line")


def test_saved_reproducer_reraises_the_same_error_in_a_fresh_process(tmp_path):
    with pytest.raises(TileLangCompileError) as ei:
        broken_gemm(128, 128, 128, block_K=16)
    path = ei.value.save_repro(tmp_path / "repro_broken_gemm.py")
    text = path.read_text()
    assert "'block_K': '16'" in text and "def broken_gemm" in text
    res = _run([str(path)], cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "reproduced the same error" in res.stderr
    assert "TileLangCompileError" in res.stderr
    assert str(ei.value).splitlines()[0] in res.stderr


def test_parse_error_reproducer(tmp_path):
    with pytest.raises(TileLangCompileError) as ei:
        undefined_name_kernel(16)
    err = ei.value
    assert err.stage == "parse" and err.report.stage == "parse" and err.report.factory == "undefined_name_kernel"
    res = _run([str(err.save_repro(tmp_path / "repro_parse.py"))], cwd=tmp_path)
    assert res.returncode == 1 and "reproduced the same error" in res.stderr, res.stderr


def test_link_failure_records_the_command_line(monkeypatch):
    monkeypatch.setenv("CXX", "/bin/false")
    with pytest.raises(TileLangCompileError) as ei:
        gemm_relu(64, 64, 96, 32, 32, 32)  # a configuration no other test compiles
    rep = ei.value.report
    assert rep.stage == "link" and rep.command.startswith("/bin/false -shared -fPIC -o ")
    assert rep.environment.get("CXX") == "/bin/false"
    assert rep.last_good_stage == "codegen" and rep.last_good_ir


def test_failed_check_is_an_assertion_with_a_reproducer(tmp_path):
    k = add_two(256)
    with pytest.raises(AssertionError) as ei:
        k.get_profiler().assert_allclose(plus_one)
    err = ei.value
    assert isinstance(err, TileLangCheckError)
    assert err.report.kind == "check" and err.report.check["reference"] == "plus_one"
    assert err.report.args == {"N": "256", "block": "64"}
    res = _run([str(err.save_repro(tmp_path / "repro_check.py"))], cwd=tmp_path)
    assert res.returncode == 1 and "reproduced the same failed check" in res.stderr, res.stderr


# -- the command line --------------------------------------------------------------------------------------------
KERNEL_ARGS = ["--args", *(f"{k}={v}" for k, v in SHAPE.items())]


def _cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    from tilelang_core.trace.cli import main

    rc = main([f"{HERE}:gemm_relu", *KERNEL_ARGS, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_lists_stages_and_diffs(capsys):
    rc, out, err = _cli(capsys, "--list")
    assert rc == 0, err
    names = out.split()
    assert names[0] == "input" and names[-1] == "codegen" and "tl.LowerTileOpsCPU" in names
    rc, out, err = _cli(capsys, "--diff", "tl.LowerKernelGridCPU", "tl.LowerTileOpsCPU")
    assert rc == 0 and out.startswith("--- ") and "T.tl.gemm" in out, err
    rc, out, err = _cli(capsys, "--vs", "block_N=32")
    assert rc == 0 and "block_N=32" in out and "T.alloc_shared((32, 32))" in out, err
    rc, out, err = _cli(capsys, "--code", "asm", "--commands")
    assert rc == 0 and "mcpu=" in out and "link:" in out, err
    rc, out, err = _cli(capsys, "--stage", "last")
    assert rc == 0 and "T.tl." not in out and "def main" in out, err
    rc, out, err = _cli(capsys)
    assert rc == 0 and out.startswith("<Trace gemm_relu(") and "codegen" in out, err
    rc, out, err = _cli(capsys, "--stage", "NoSuchPass")
    assert rc == 2 and "no stage" in err


def test_cli_saves_a_reproducer_for_a_broken_kernel(tmp_path, capsys):
    from tilelang_core.trace.cli import main

    out = tmp_path / "bug.py"
    rc = main([f"{HERE}:broken_gemm", "--args", "M=128", "N=128", "K=128", "--save-repro", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "T.gemm: incompatible tile shapes" in err and "reproducer written" in err
    res = _run([str(out)], cwd=tmp_path)  # the reproducer stands alone: a fresh interpreter runs it
    assert res.returncode == 1 and "reproduced the same error" in res.stderr, res.stderr


def test_cuda_trace_when_the_cuda_backend_is_present():
    """No GPU needed: the CUDA lowering and TVM's CUDA codegen run anywhere."""
    pytest.importorskip("tilelang_core.backend.cuda")
    from tilelang_core.trace import capture

    tr = capture(gemm_relu.get_program(**SHAPE), target="cuda")
    assert tr.stages[0].origin == "input" and tr.stages[-1].origin == "codegen"
    assert any(s.origin == "tilelang" and "CUDA" in s.name for s in tr.stages)
    assert "T.tl." in tr.first.text and "T.tl." not in tr.last.text
    assert tr.target["kind"] == "cuda"

"""The ``%%tilekernel`` magic through IPython's test shell: success, usage errors, diagnostics, cache, recovery."""

from __future__ import annotations

import re
import sys

import pytest

pytest.importorskip("IPython", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")

import torch  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from workbench.errors import TileKernelCheckError, TileKernelCompileError  # noqa: E402
from workbench.kernel import WorkbenchKernel  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")

FACTORY = '''\
def mm(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float32")
            B_s = T.alloc_shared((block_K, block_N), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''
GEMM_LINE = 12  # line of `T.gemm(...)` in FACTORY (cell line 13: the %%tilekernel line is line 1)
SHAPES = "--shapes M=128,N=128,K=128"
REF = '--ref "torch.relu(A @ B)"'


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


def tilekernel(ip, line: str, cell: str = FACTORY):
    ip.run_cell_magic("tilekernel", line, cell)
    name = line.split()[0]
    return ip.user_ns[name]


def rendered(err: BaseException) -> str:
    return ANSI.sub("", "\n".join(err._render_traceback_()))


def test_compiles_checks_times_and_binds(ip):
    wk = tilekernel(ip, f"mm {SHAPES} {REF} --target cpu -q")
    assert isinstance(wk, WorkbenchKernel)
    assert wk.status in ("compiled", "disk")
    assert wk.passed is True and wk.check.max_abs < 1e-3
    assert wk.config["M"] == 128 and wk.config["block_M"] == 64  # shapes plus the factory's defaults
    assert wk.timing is not None and float(wk.timing.kernel_ms) > 0 and float(wk.timing.ref_ms) > 0
    assert wk.timing.flops == 2 * 128**3  # M, N, K known: GFLOP/s
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    torch.testing.assert_close(wk(a, b), torch.relu(a @ b), rtol=1e-4, atol=1e-4)
    line = repr(wk)
    for piece in ("cpu (", "PASS", "kernel", "reference", "GFLOP/s", "the reference's speed"):
        assert piece in line


def test_terminal_display_is_plain_text(ip):
    with capture_output() as cap:
        ip.run_cell_magic("tilekernel", f"mm {SHAPES} {REF} --no-bench", FACTORY)
    text = cap.stdout + "".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert "mm: cpu (" in text and "PASS" in text
    assert "IR stages" in text and "generated code" in text and "LLVM IR" in text


def test_rerun_unchanged_cell_is_cached(ip):
    first = tilekernel(ip, f"mm {SHAPES} {REF} -q")
    again = tilekernel(ip, f"mm {SHAPES} {REF} -q")
    assert again.status == "cached"
    assert again.kernel is first.kernel
    assert again.timing is first.timing  # nothing changed: the timings are reused too
    assert "cached (" in repr(again)
    assert again.build.seconds < 0.5


def test_changed_cell_arguments_or_force_recompile(ip):
    base = tilekernel(ip, f"mm {SHAPES} --no-bench -q")
    changed = tilekernel(ip, f"mm {SHAPES} --no-bench -q", FACTORY.replace("block_K=32", "block_K=16"))
    assert changed.status != "cached" and changed.config["block_K"] == 16
    assert changed.previous is base  # the Compare view offers the previous run
    other_shape = tilekernel(ip, "mm --shapes M=64,N=128,K=128 --no-bench -q")
    assert other_shape.status != "cached" and other_shape.params[0].shape == (64, 128)
    forced = tilekernel(ip, "mm --shapes M=64,N=128,K=128 --no-bench -q -f")
    assert forced.status == "compiled"


def test_library_version_change_recompiles(ip, monkeypatch):
    import workbench.build as build

    tilekernel(ip, f"mm {SHAPES} --no-bench -q")
    assert tilekernel(ip, f"mm {SHAPES} --no-bench -q").status == "cached"
    real = build.library_versions
    monkeypatch.setattr(build, "library_versions", lambda: {**real(), "tilelang_core": "99.0"})
    assert tilekernel(ip, f"mm {SHAPES} --no-bench -q").status != "cached"


def test_changed_user_variable_recompiles(ip):
    cell = FACTORY.replace("block_K=32", "block_K=BK")
    ip.user_ns["BK"] = 32
    assert tilekernel(ip, f"mm {SHAPES} --no-bench -q", cell).config["block_K"] == 32
    assert tilekernel(ip, f"mm {SHAPES} --no-bench -q", cell).status == "cached"
    ip.user_ns["BK"] = 16
    wk = tilekernel(ip, f"mm {SHAPES} --no-bench -q", cell)
    assert wk.status != "cached" and wk.config["block_K"] == 16


def test_cell_compiles_when_main_has_no_source_file(ip, monkeypatch):
    import types

    main = types.ModuleType("__main__")
    main.__file__ = "<stdin>"  # as under `python -`: inspect cannot read the module's source
    monkeypatch.setitem(sys.modules, "__main__", main)
    wk = tilekernel(ip, f"mm {SHAPES} {REF} --no-bench -q -f")
    assert wk.passed


def test_var_expansion_in_the_magic_line(ip):
    ip.user_ns["size"] = 64
    result = ip.run_cell("%%tilekernel mm --shapes M={size},N={size},K={size} --no-bench -q\n" + FACTORY)
    assert result.success, result.error_in_exec
    assert ip.user_ns["mm"].config["M"] == 64


@pytest.mark.parametrize(("line", "reason"), [
    ("mm --bogus", "unrecognized arguments: --bogus"),
    ("", "name"),
    ("mm --shapes M512", "NAME=VALUE"),
    ("mm --shapes M=128,N=128", "give K=..."),
    ("mm --shapes M=128,N=128,K=128,Q=1", "no parameter(s) Q"),
    ("mm --shapes M=128,N=128,K=128 --dtype float16", "no 'dtype' parameter"),
    ("mm --shapes M=128,N=128,K=128 --target tpu", "--target"),
    ("mm --shapes M=128,N=128,K=128 --ref 'torch.relu(A @'", "--ref: not a Python expression"),
    ("mm --shapes M=128,N=128,K=128 --rtol -1", "--rtol"),
    ("mm --shapes M=128,N=128,K=128 --out-idx x", "--out-idx"),
    ("mm --shapes M=128,N=128,K=128 --out-idx 7", "out of range"),
    ("2mm --shapes M=128,N=128,K=128", "identifier"),
])
def test_bad_arguments_raise_usage_error(ip, line, reason):
    with pytest.raises(UsageError, match=re.escape(reason)):
        ip.run_cell_magic("tilekernel", line, FACTORY)


def test_usage_error_stops_run_cell(ip):
    result = ip.run_cell("%%tilekernel mm --bogus\n" + FACTORY)
    assert isinstance(result.error_in_exec, UsageError)


def test_help_lists_every_option(ip):
    with capture_output() as cap:
        ip.run_cell("%tilekernel?")
    text = cap.stdout + "".join(str(o.data) for o in cap.outputs)
    for flag in ("name", "--shapes", "--dtype", "--ref", "--target", "--rtol", "--atol", "--no-bench", "-f, --force",
                 "--quiet", "Example"):
        assert flag in text


def test_compile_error_points_at_the_cell_line(ip):
    bad = FACTORY.replace("T.gemm(A_s, B_s, C_f)", "T.gemm(A_s, C_f, B_s)")
    result = ip.run_cell(f"%%tilekernel mm {SHAPES}\n" + bad)
    err = result.error_in_exec
    assert isinstance(err, TileKernelCompileError)
    assert err.cell_line == GEMM_LINE + 1
    text = rendered(err)
    assert f"cell line {GEMM_LINE + 1}, column 17" in text
    assert "T.gemm(A_s, C_f, B_s)" in text and "must be a fragment" in text
    assert re.search(r"^\s+\^$", text, re.M)  # a caret under the column
    assert "Traceback" not in text and "site-packages" not in text and len(text.splitlines()) < 15


def test_parse_error_and_python_errors_point_at_the_cell_line(ip):
    undefined = FACTORY.replace("T.clear(C_f)", "T.clear(C_missing)")
    with pytest.raises(TileKernelCompileError) as info:
        ip.run_cell_magic("tilekernel", f"mm {SHAPES}", undefined)
    assert info.value.cell_line == 9 and "C_missing" in rendered(info.value)

    python_error = FACTORY.replace("    @T.prim_func", "    x = undefined_name + 1\n    @T.prim_func")
    with pytest.raises(TileKernelCompileError) as info:
        ip.run_cell_magic("tilekernel", f"mm {SHAPES}", python_error)
    assert info.value.cell_line == 3 and "NameError" in rendered(info.value)

    with pytest.raises(TileKernelCompileError) as info:
        ip.run_cell_magic("tilekernel", f"mm {SHAPES}", "def mm(M:\n    pass\n")
    assert info.value.cell_line == 2 and "SyntaxError" in rendered(info.value)

    with pytest.raises(TileKernelCompileError, match="must define the kernel factory 'mm'"):
        ip.run_cell_magic("tilekernel", f"mm {SHAPES}", "def a():\n    pass\ndef b():\n    pass\n")


def test_check_failure_raises_but_keeps_the_kernel(ip):
    result = ip.run_cell(f'%%tilekernel mm {SHAPES} --ref "torch.relu(A @ B) + 1" -q\n' + FACTORY)
    err = result.error_in_exec
    assert isinstance(err, TileKernelCheckError)
    text = rendered(err)
    assert "output C" in text and "out of tolerance" in text and "hint:" in text
    assert ip.user_ns["mm"].passed is False


def test_reference_errors_are_check_errors(ip):
    with pytest.raises(TileKernelCheckError, match="NameError") as info:
        ip.run_cell_magic("tilekernel", f'mm {SHAPES} --ref "torch.relu(X @ B)" -q', FACTORY)
    assert "inputs are bound by parameter name: A, B" in rendered(info.value)
    with pytest.raises(TileKernelCheckError, match="gave 2"):
        ip.run_cell_magic("tilekernel", f'mm {SHAPES} --ref "(A, B)" -q', FACTORY)
    with pytest.raises(TileKernelCheckError, match=r"shape \[128, 128\], the reference \[128\]"):
        ip.run_cell_magic("tilekernel", f'mm {SHAPES} --ref "A[0]" -q', FACTORY)


def test_a_kernel_that_fails_to_run_is_reported(ip, monkeypatch):
    import workbench.magic

    def boom(*_args, **_kwargs):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(workbench.magic, "check", boom)
    with pytest.raises(TileKernelCheckError) as info:
        ip.run_cell_magic("tilekernel", f"mm {SHAPES} {REF} -q", FACTORY)
    assert "the kernel failed to run" in rendered(info.value) and "RuntimeError: launch failed" in rendered(info.value)


def test_the_shell_survives_failures(ip):
    ip.run_cell(f"%%tilekernel mm {SHAPES}\n" + FACTORY.replace("T.gemm(A_s, B_s, C_f)", "T.gemm(A_s)"))
    ip.run_cell(f'%%tilekernel mm {SHAPES} --ref "A @ B" -q\n' + FACTORY)  # fails its check (no ReLU)
    assert ip.run_cell("1 + 1").success
    result = ip.run_cell(f"%%tilekernel mm {SHAPES} {REF} -q --no-bench\n" + FACTORY)
    assert result.success and ip.user_ns["mm"].passed


def test_prim_func_and_jit_factory_cells(ip):
    prim = '''\
@T.prim_func
def add(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32"), C: T.Tensor((256,), "float32")):
    with T.Kernel(2, threads=128) as bx:
        for i in T.Parallel(128):
            C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]
'''
    wk = tilekernel(ip, 'add --ref "A + B" -q', prim)
    assert wk.passed and wk.timing.flops is None  # no M, N, K: the rate is in GB/s
    assert "GB/s" in repr(wk)
    with pytest.raises(UsageError, match="fixed shapes"):
        ip.run_cell_magic("tilekernel", "add --shapes N=3", prim)

    jitted = "@tilelang.jit(out_idx=[-1])\n" + FACTORY
    wk = tilekernel(ip, f"mm {SHAPES} {REF} -q --no-bench", jitted)
    assert wk.passed and wk.out_idx == [-1]


def test_cuda_target_without_a_gpu_compiles_only(ip):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the kernel would run")
    try:
        wk = tilekernel(ip, f"mm {SHAPES} {REF} --target cuda -q")
    except (UsageError, TileKernelCompileError) as e:
        pytest.skip(f"the CUDA backend cannot compile here: {str(e).splitlines()[0]}")
    assert wk.target["kind"] == "cuda" and wk.check is None and wk.timing is None
    assert "not run (no CUDA GPU here" in repr(wk)


def test_line_magic_form_explains_itself(ip):
    with pytest.raises(UsageError, match="cell magic"):
        ip.run_line_magic("tilekernel", "mm")


def test_variant_and_compare(ip):
    wk = tilekernel(ip, f"mm {SHAPES} --no-bench -q")
    wide = wk.variant(block_N=128)
    assert wide.config["block_N"] == 128 and wk.variant(block_N=128) is wide
    diff = wk.compare(wide, stage="input")
    assert diff.startswith("---") and "128" in diff
    with pytest.raises(ValueError, match="no parameter"):
        wk.variant(block_Q=1)


def test_workbench_export_records_the_cell(ip, tmp_path):
    wk = tilekernel(ip, f"mm {SHAPES} {REF} -q --no-bench")
    path = wk.export(tmp_path / "mm_128.py")
    text = path.read_text()
    assert "T.gemm(A_s, B_s, C_f)" in text  # the kernel source as written
    assert "'reference': 'torch.relu(A @ B)'" in text

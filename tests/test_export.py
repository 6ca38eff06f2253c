"""``tilelang_core.export``: a compiled kernel as one standalone module that runs without TVM or tilelang_core."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.export import export_kernel
from tilelang_core.runtime import exported as loader


@tilelang.jit(out_idx=[-1])
def matmul_relu(M, N, K, block_M=64, block_N=64, block_K=32):
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


@tilelang.jit(out_idx=[1, 2])
def scale_shift(N, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * T.cast(2, dtype)
                Z[bx * 64 + i] = X[bx * 64 + i] + T.cast(1, dtype)

    return main


# Runs in a fresh interpreter (MODULE: the exported module's name); TVM, tilelang_core and the workbench cannot
# be imported there at all.
FRESH = textwrap.dedent('''\
    import importlib.abc, json, sys
    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tvm", "tilelang_core", "workbench"):
                raise ImportError(f"{name} is not installed here")
    sys.meta_path.insert(0, Blocked())
    sys.path.insert(0, sys.argv[1])
    import torch
    import MODULE as m
    torch.manual_seed(0)
    a, b = torch.randn(128, 64), torch.randn(64, 96)
    c = m.kernel(a, b)
    out = {"err": float((c - torch.relu(a @ b)).abs().max()), "shape": list(c.shape),
           "loaded": sorted({k.split(".")[0] for k in sys.modules} & {"tvm", "tilelang_core", "tvm_ffi"})}
    c2 = torch.empty(128, 96)
    m.kernel(a, b, c2)
    out["prealloc_equal"] = bool(torch.equal(c, c2))
    errors = {}
    for label, args in [("dtype", (a.half(), b)), ("shape", (a[:, :32].contiguous(), b)), ("rank", (a[0], b)),
                        ("contiguous", (torch.randn(64, 128).t(), b)), ("kind", ([1.0], b)), ("count", (a,))]:
        try:
            m.kernel(*args)
        except (TypeError, ValueError) as e:
            errors[label] = [type(e).__name__, str(e)]
    out["errors"] = errors
    a_view = torch.randn(128 * 64 + 1)[1:].view(128, 64)  # contiguous, 4 bytes past any vector alignment
    out["view_err"] = float((m.kernel(a_view, b) - torch.relu(a_view @ b)).abs().max())
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def kernel():
    return matmul_relu(128, 96, 64)


@pytest.fixture
def export_cache(tmp_path, monkeypatch):
    cache = tmp_path / "export-cache"
    monkeypatch.setenv("TILELANG_EXPORT_CACHE_DIR", str(cache))
    return cache


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_export_writes_one_self_describing_module(kernel, tmp_path):
    path = export_kernel(kernel, tmp_path / "my_kernels" / "mm_128.py", reference="torch.relu(A @ B)")
    assert path == (tmp_path / "my_kernels" / "mm_128.py").resolve() and path.is_file()
    text = path.read_text()
    for piece in ("LIBRARY_BASE64", "KERNEL_SOURCE", "'block_M': 64", "'shape': [128, 64]", "'dtype': 'float32'",
                  "'out_idx': [2]", "'mcpu':", "import mm_128", "def materialize"):
        assert piece in text
    assert "import tvm\n" not in text and "tilelang_core import" not in text
    compile(text, str(path), "exec")  # valid Python
    assert export_kernel(kernel, f"{tmp_path}/folder/").name == "matmul_relu.py"  # a folder: <name>.py inside


def test_exported_module_runs_in_a_fresh_process_without_tvm(kernel, tmp_path):
    path = kernel.export(tmp_path / "mm_fresh.py")
    env = {**os.environ, "TILELANG_EXPORT_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-c", FRESH.replace("MODULE", path.stem), str(path.parent)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["err"] < 1e-3 and out["shape"] == [128, 96] and out["prealloc_equal"]
    assert out["loaded"] == ["tvm_ffi"]  # neither tvm nor tilelang_core was imported
    errors = out["errors"]
    assert errors["dtype"] == ["TypeError", "argument 'A': expected dtype float32, got float16"]
    assert errors["shape"] == ["ValueError", "argument 'A': expected shape [128, 64], got [128, 32]"]
    assert errors["rank"][0] == "ValueError" and "rank-2" in errors["rank"][1]
    assert errors["contiguous"][0] == "ValueError" and "contiguous" in errors["contiguous"][1]
    assert errors["kind"][0] == "TypeError" and "got list" in errors["kind"][1]
    assert errors["count"][0] == "TypeError" and "expected 2 input tensor(s) (A, B)" in errors["count"][1]
    assert out["view_err"] < 1e-3  # a view at an odd offset is computed correctly, not refused or crashed
    assert len(list((tmp_path / "cache").glob("*.so"))) == 1  # content-addressed


def test_validation_errors_match_the_core(kernel, tmp_path, export_cache):
    module = load_module(kernel.export(tmp_path / "mm_same.py"))
    a, b = torch.randn(128, 64), torch.randn(64, 96)
    bad_calls = [(a.double(), b), (a[:, :32].contiguous(), b), (a[0], b), (torch.randn(64, 128).t(), b),
                 ("x", b), (a,), (a, b, torch.empty(128, 96, dtype=torch.float16))]
    storage = torch.randn(128 * 64 + 128 * 96)
    a_shared = storage[:128 * 64].view(128, 64)
    bad_calls += [(a_shared, b, storage[128 * 64 - 16:-16].view(128, 96)),  # output overlapping an input
                  (torch._neg_view(a), b)]  # a lazily negated view
    for args in bad_calls:
        with pytest.raises((TypeError, ValueError)) as core_err:
            kernel(*args)
        with pytest.raises((TypeError, ValueError)) as exported_err:
            module.kernel(*args)
        assert type(exported_err.value) is type(core_err.value)
        assert str(exported_err.value) == str(core_err.value)


def test_multiple_outputs_and_half_precision(tmp_path, export_cache):
    k = scale_shift(256)
    module = load_module(export_kernel(k, tmp_path / "scale_shift_256.py"))
    x = torch.randn(256).half()
    y, z = module.kernel(x)
    assert torch.equal(y, x * 2) and torch.equal(z, x + 1)
    assert module.kernel.config == {"N": 256, "dtype": "float16"}
    assert [p.name for p in module.kernel.params] == ["X", "Y", "Z"] and module.kernel.out_idx == [1, 2]


def test_self_test_runs_the_recorded_reference(kernel, tmp_path):
    path = export_kernel(kernel, tmp_path / "mm_selftest.py", reference="torch.relu(A @ B)")
    env = {**os.environ, "TILELANG_EXPORT_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "PASS" in res.stdout and "ms per call" in res.stdout


def test_corrupted_library_is_refused(kernel, tmp_path, export_cache):
    path = kernel.export(tmp_path / "mm_corrupt.py")
    text = path.read_text()
    start = text.index("LIBRARY_BASE64 = (\n") + len("LIBRARY_BASE64 = (\n") + 40
    flipped = "A" if text[start] != "A" else "B"
    path.write_text(text[:start] + flipped + text[start + 1:])
    module = load_module(path)
    with pytest.raises(RuntimeError, match="does not match its recorded SHA-256"):
        module.kernel(torch.randn(128, 64), torch.randn(64, 96))


def test_cpu_feature_and_architecture_checks(monkeypatch):
    meta = {"name": "k", "target": {"mtriple": "x86_64-unknown-linux-gnu", "mcpu": "future"},
            "cpu_flags": ["avx9000"]}
    monkeypatch.setattr(loader.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(loader, "isa_flags", lambda: ["avx2", "sse2"])
    with pytest.raises(RuntimeError, match="avx9000"):
        loader.check_host(meta)
    monkeypatch.setenv("TILELANG_EXPORT_SKIP_CPU_CHECK", "1")
    loader.check_host(meta)
    monkeypatch.setattr(loader.platform, "machine", lambda: "aarch64")
    with pytest.raises(RuntimeError, match="compiled for x86_64"):
        loader.check_host(meta)


@pytest.mark.parametrize("bad", ["my-kernel.py", "1st.py", "kernel.txt"])
def test_export_path_must_be_an_importable_module_name(kernel, tmp_path, bad):
    with pytest.raises(ValueError, match="export path"):
        export_kernel(kernel, tmp_path / bad)


def test_kernel_source_round_trips(kernel, tmp_path, export_cache):
    source = "def f():\n    return r'\\d' + '''x'''\n"  # backslashes and triple quotes survive
    module = load_module(export_kernel(kernel, tmp_path / "mm_src.py", source=source))
    assert module.KERNEL_SOURCE == source
    default = load_module(export_kernel(kernel, tmp_path / "mm_default_src.py"))
    assert "T.prim_func" in default.KERNEL_SOURCE  # without a source: the program as parsed (TVMScript)

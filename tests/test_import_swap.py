"""The import swap: programs written for TileLang (``import tilelang``, ``import tilelang.language as T``), in
both spellings, run with ``tilelang_core`` installed under the name ``tilelang`` and match torch on the CPU.

The programs are ``tests/import_swap/programs/*.py`` (GEMM classic and eager, transposed operands, split-K,
softmax, RMSNorm, LayerNorm, GEMV, element-wise, flash attention); each has ``run(device)`` that checks its
kernels against torch. They run in one child interpreter (``run_programs.py``) where ``tilelang_alias.install()``
makes ``tilelang`` mean ``tilelang_core``, so this process's modules are untouched. ``tests/test_import_swap_cuda.py``
compiles their kernels for CUDA with nvcc; ``tests/gpu/test_import_swap.py`` runs the programs on a GPU.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent / "import_swap"
sys.path.insert(0, str(HERE))
import run_programs  # noqa: E402

PROGRAMS = run_programs.program_names()


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible, so target='auto' means CUDA: tests/gpu/test_import_swap.py runs these there")
    return run_programs.run_in_child("cpu", str(tmp_path_factory.mktemp("import_swap_cache")))


def test_the_suite_has_both_spellings_and_every_workload():
    assert {"gemm_classic", "gemm_eager", "gemm_transposes", "gemm_splitk", "softmax", "rmsnorm", "layernorm",
            "gemv", "elementwise", "flash_attention"} <= set(PROGRAMS)
    spellings = {name: "prim_func" in (HERE / "programs" / f"{name}.py").read_text() for name in PROGRAMS}
    assert any(spellings.values()) and not all(spellings.values())


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_imports_tilelang_and_never_tilelang_core(name):
    tree = ast.parse((HERE / "programs" / f"{name}.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {"tilelang", "tilelang.language"} & imported
    assert not any(m.split(".")[0] == "tilelang_core" for m in imported)


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_under_the_name_tilelang_and_matches_torch(cpu_results, name):
    results, child = cpu_results
    assert name in results, f"the runner stopped before {name}: {child}"
    assert results[name]["ok"], results[name]["error"]


def test_the_alias_gives_tilelang_cores_own_module_objects(cpu_results):
    results, child = cpu_results  # checked in the runner's interpreter, before the programs (run_programs.py)
    assert "__alias__" in results, child
    assert results["__alias__"]["ok"], results["__alias__"]["error"]

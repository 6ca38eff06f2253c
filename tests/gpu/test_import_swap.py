"""The import-swap programs (tests/import_swap/programs, see tests/test_import_swap.py) on a GPU: the same files,
unchanged, with ``tilelang_core`` installed as ``tilelang``; ``target="auto"`` resolves to CUDA where a GPU is
visible, and each program's ``run("cuda")`` checks its kernels against torch on the device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "import_swap"
sys.path.insert(0, str(HERE))
import run_programs  # noqa: E402

PROGRAMS = run_programs.program_names()


@pytest.fixture(scope="module")
def cuda_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    return run_programs.run_in_child("cuda", str(tmp_path_factory.mktemp("import_swap_cuda_cache")))


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_on_the_gpu_under_the_name_tilelang_and_matches_torch(cuda_results, name):
    results, child = cuda_results
    assert name in results, f"the runner stopped before {name}: {child}"
    assert results[name]["ok"], results[name]["error"]

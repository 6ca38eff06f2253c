"""The import-swap programs (tests/import_swap/programs) through the CUDA code generator and nvcc, without a GPU:
one kernel of each program, in a child interpreter with ``tilelang_core`` installed as ``tilelang``
(``compile_for_cuda.py``). Running them is tests/gpu/test_import_swap.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilelang_core.backend.cuda import find_nvcc

HERE = Path(__file__).resolve().parent / "import_swap"
PROGRAMS = sorted(p.stem for p in (HERE / "programs").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA toolkit")
def test_every_program_kernel_compiles_for_cuda_with_nvcc(tmp_path):
    env = {**os.environ, "TILELANG_CORE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(HERE / "compile_for_cuda.py")], capture_output=True, text=True,
                          timeout=900, env=env, cwd=str(HERE.parents[1]))
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert {r["name"].split(".")[0] for r in results} == set(PROGRAMS), proc.stderr[-3000:]
    failed = [f"{r['name']}: {r['error']}" for r in results if not r["ok"]]
    assert not failed, "\n".join(failed)

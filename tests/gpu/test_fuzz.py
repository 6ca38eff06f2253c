"""The differential fuzzer's programs on a real GPU: each seed compiled through ``tilelang.compile(target="cuda")``,
run on random inputs and compared with the float64 torch reference (tests/program_fuzzer.py; outputs start as NaN,
so an element never written fails). CI only compiles these programs for CUDA (tests/test_differential_fuzz.py);
this runs them. A failure saves a reproducer under ``.artifacts/fuzz/`` and names
``python -m tests.program_fuzzer --seed N --target cuda``. Run with ``pytest tests/gpu/test_fuzz.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import program_fuzzer as pf  # noqa: E402

SEEDS = range(0, 300)


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_program_matches_torch_on_the_gpu(seed: int) -> None:
    program = pf.generate(seed)
    try:
        message = pf.check_on(program, "cuda")
    except Exception as e:  # noqa: BLE001 - a valid program must compile and run: any error is a finding
        message = f"{type(e).__name__}: {e}"
    if message is not None:
        path = pf.save_reproducer(program, message, "cuda")
        pytest.fail(f"seed {seed} ({program.family}: {program.summary}) on the GPU: {message}\nreproducer: {path}\n"
                    f"rerun: python -m tests.program_fuzzer --seed {seed} --target cuda", pytrace=False)

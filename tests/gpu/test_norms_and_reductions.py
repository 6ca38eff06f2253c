"""LayerNorm, RMSNorm, softmax and the reductions feeding per-row scalars, on the GPU (docs/cuda.md, "LayerNorm:
the wrong Y on the H200").

Each case draws its inputs on the CPU (one seeded generator, so both builds see the same numbers), runs the CUDA
build with every output poisoned first, and compares every output with a torch reference in float64 and with the
CPU build of the same program (differential: the two lowerings must agree to the rounding of the output dtype; a
disagreement is a failure, never a reason to widen a tolerance). The cases are the reported LayerNorm (D 1024,
4096, 8192 in fp16 and bf16, the output through the input's shared tile and through its own) and its family from
``tests/norm_family.py``: sum + max and sum + sum of squares in one block, reductions along dim 0 and dim 1 of one
tile, ``(1,)`` / ``(block_M,)`` scalars from reductions used in a vectorised epilogue through scalar temporaries,
RMSNorm and softmax, aligned and ragged (M = 1001, D = 333).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import assert_written_and_close, cpu, cuda, poisoned

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import norm_family as nf  # noqa: E402

LAYER_NORMS = [nf.layer_norm_case(1024, D, dtype, via) for D in (1024, 4096, 8192)
               for dtype in ("float16", "bfloat16") for via in ("input", "own")]
LAYER_NORMS += [
    nf.layer_norm_case(1001, 333, "float16", "input"),  # ragged D: the element-wise path
    nf.layer_norm_case(1001, 333, "bfloat16", "own", blk_m=4),  # four rows per block, a ragged last block
    nf.layer_norm_case(1001, 4096, "bfloat16", "own", blk_m=2),
]

FAMILY = [
    nf.sum_and_max_case(4096, 4096, "bfloat16"),
    nf.sum_and_max_case(1024, 1024, "float16"),
    nf.sum_and_max_case(1001, 333, "float16", block_M=4, threads=128),
    nf.both_dims_case(1024, 1024),
    nf.both_dims_case(1001, 333),
    nf.standardize_rows_case(1024, 1024),
    nf.standardize_rows_case(1001, 333),
    nf.rms_norm_case(4096, 4096, "float16"),
    nf.rms_norm_case(1001, 4096, "bfloat16", block_M=2),
    nf.rms_norm_case(1001, 333, "float16"),
    nf.rms_norm_case(4096, 4096, "float32", staged=False, block_M=8),
    nf.rms_norm_case(1001, 333, "float32", staged=False),
    nf.softmax_case(4096, 4096, "float16"),
    nf.softmax_case(1001, 333, "bfloat16"),
    nf.softmax_case(4096, 4096, "float32", staged=False),
    nf.softmax_case(1001, 333, "float32", staged=False, block_M=4),
]


def run_with_poisoned_outputs(kernel: Any, inputs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    """Call ``kernel`` with its inputs on ``device`` and preallocated, poisoned outputs; returns the outputs on
    the CPU (an element the kernel never writes stays NaN / the dtype's minimum)."""
    it = iter([t.to(device) for t in inputs])
    outs, args = [], []
    for i, p in enumerate(kernel.params):
        if i in kernel.out_idx:
            t = poisoned(tuple(p.shape), getattr(torch, str(p.dtype)), device=device)
            outs.append(t)
            args.append(t)
        else:
            args.append(next(it))
    kernel(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    return [t.cpu() for t in outs]


def check_case(case: nf.Case, build: Any = cuda, device: str = "cuda") -> None:
    """``case`` built by ``build`` (the CUDA twin) on ``device`` against torch in float64 and the CPU build."""
    inputs = case.inputs(torch.Generator().manual_seed(0), "cpu")
    got = run_with_poisoned_outputs(build(case.factory)(*case.args, **case.kwargs), inputs, device)
    on_cpu = run_with_poisoned_outputs(cpu(case.factory)(*case.args, **case.kwargs), inputs, "cpu")
    refs = case.reference(*inputs)
    assert len(got) == len(refs) == len(on_cpu)
    for n, (g, r, c) in enumerate(zip(got, refs, on_cpu)):
        rtol, atol = nf.tolerance(case, g)
        try:
            assert_written_and_close(g, r, rtol=rtol, atol=atol)
        except AssertionError as e:
            raise AssertionError(f"{case.name}: output {n} against torch (float64): {e}") from None
        try:
            assert_written_and_close(g, c, rtol=rtol, atol=atol)
        except AssertionError as e:
            raise AssertionError(f"{case.name}: output {n} against the CPU build: {e}") from None


@pytest.mark.parametrize("case", LAYER_NORMS, ids=[c.name for c in LAYER_NORMS])
def test_layer_norm_matches_torch_and_the_cpu_build(case: nf.Case) -> None:
    check_case(case)


@pytest.mark.parametrize("case", FAMILY, ids=[c.name for c in FAMILY])
def test_norms_and_reductions_match_torch_and_the_cpu_build(case: nf.Case) -> None:
    check_case(case)

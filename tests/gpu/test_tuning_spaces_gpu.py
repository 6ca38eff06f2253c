"""The sm_90a tuning space and the shipped defaults on the GPU: one configuration of every form of the quick space
(thread count x ``pass_configs``: 1-3 consumer warpgroups, with and without the producer warpgroup, persistent on
and off, split-K 0/1/2/4) at a ragged square, a skinny and a decode problem, fp16 and bf16, against torch; and every
shipped row for this GPU compiled through ``compile_default`` at its own problem, against torch."""

from __future__ import annotations

import json

import pytest
import torch

from tilelang_core.autotune import compile_default, gemm_space
from tilelang_core.autotune.defaults import load_defaults
from tilelang_core.autotune.workers import compile_config, jitted
from tilelang_core.quickstart import matmul_relu, reference

DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}
PROBLEMS = [(1000, 1032, 1024), (128, 2048, 8192), (16, 2048, 4096)]  # square (ragged), skinny, decode


def _forms(configs: list[dict]) -> list[dict]:
    forms: dict[str, dict] = {}
    for c in configs:
        forms.setdefault(f"{c['threads']} {json.dumps(c.get('pass_configs', {}), sort_keys=True)}", c)
    return list(forms.values())


def _inputs(M: int, N: int, K: int, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(DT[dtype])
    b = torch.randn(K, N, device="cuda", generator=g).to(DT[dtype])
    return a, b


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", PROBLEMS, ids=["x".join(map(str, s)) for s in PROBLEMS])
def test_every_form_of_the_quick_space_matches_torch(shape, dtype):
    M, N, K = shape
    jf = jitted(matmul_relu, [-1], "cuda")
    a, b = _inputs(M, N, K, dtype)
    ref = reference(a, b).float()
    forms = _forms(gemm_space("cuda", M=M, N=N, K=K, dtype=dtype, level="quick"))
    assert len(forms) >= 3
    for c in forms:
        kernel = compile_config(jf, {"M": M, "N": N, "K": K, "dtype": dtype, "accum_dtype": "float32", **c})
        out = kernel(a, b).float()
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-1, msg=lambda m, c=c: f"{c}: {m}")


def test_every_shipped_row_for_this_gpu_compiles_and_matches_torch():
    device = torch.cuda.get_device_name()
    rows = [r for r in load_defaults() if r.measurement.device == device and r.measurement.target == "cuda"]
    if not rows:
        pytest.skip(f"the shipped defaults hold no row for {device} (bench/gpu/h200_defaults_sweep.py writes them)")
    for r in rows:
        p = r.problem
        kernel = compile_default(matmul_relu, p, target="cuda", db=False)
        assert (kernel.tuning_default.source, kernel.tuning_default.match) == ("shipped", "exact")
        assert {k: kernel.config[k] for k in r.tuned if k != "pass_configs"} == \
            {k: v for k, v in r.tuned.items() if k != "pass_configs"}
        a, b = _inputs(p["M"], p["N"], p["K"], p["dtype"])
        torch.testing.assert_close(kernel(a, b).float(), reference(a, b).float(), rtol=2e-2, atol=2e-1)

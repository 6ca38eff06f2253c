"""The flash-attention tuning space (``tilelang_core.autotune.attention_space``): the configurations measured best
on the H200 are in it, what it keeps compiles for sm_90a and gets the producer warpgroup exactly where the space
predicts (the compiler's occupancy rule), what it drops for shared memory the compiler refuses too, and bad
arguments are named. Lowering only (no nvcc): a few seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tilelang_core.autotune import attention_space
from tilelang_core.autotune.attention_space import attention_candidates
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.errors import TileLangCompileError
from tilelang_core.pass_config import resolve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples import flash_attention  # noqa: E402


def _launch_threads(cfg: dict, dim: int) -> int:
    cfg = dict(cfg)
    pc = cfg.pop("pass_configs", None)
    func = flash_attention.flash_attention.get_program(1, 2, 512, dim, False, dtype="float16", **cfg)
    seen: dict = {}
    cuda_codegen.lower(func, record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a", options=resolve(pc))
    return int(seen["tl.WarpSpecializeCUDA"].attrs["tl.cuda_launch"]["threads"])


def test_the_configs_measured_best_on_the_h200_are_in_the_space():
    d128 = attention_space("sm_90a", seq_len=4096, dim=128)
    d64 = attention_space("sm_90a", seq_len=2048, dim=64)
    best = {"block_M": 128, "block_N": 128, "num_stages": 2, "threads": 256}  # BENCHMARKS.md, 76b5217
    assert best in d128 and best in d64
    assert {"block_M": 64, "block_N": 128, "num_stages": 2, "threads": 128} in d64
    assert best in attention_space("sm_90a", seq_len=4096, dim=128, level="quick")


def test_kept_configs_compile_and_take_the_producer_warpgroup_where_the_space_says():
    quick = attention_space("sm_90a", seq_len=4096, dim=128, level="quick")
    forced = [c for c in attention_space("sm_90a", seq_len=4096, dim=128) if "pass_configs" in c][:1]
    assert quick and forced
    for cfg in quick + forced:
        by_smem = next(c for c in attention_candidates("sm_90a", seq_len=4096, dim=128) if c.config == cfg)
        assert by_smem.kept
        threads = _launch_threads(cfg, 128)
        smem = 128 * 128 * 2 + cfg["num_stages"] * 2 * cfg["block_N"] * 128 * 2
        specialised = "pass_configs" in cfg or 233472 // (smem + 1024) < 2
        assert threads == cfg["threads"] + 128 * specialised, (cfg, threads)


def test_a_config_dropped_for_shared_memory_is_one_the_compiler_refuses():
    dropped = [c for c in attention_candidates("sm_90a", seq_len=4096, dim=128)
               if c.reason.startswith("shared memory")]
    assert dropped
    cfg = dropped[0].config
    with pytest.raises(TileLangCompileError, match="shared memory"):
        _launch_threads(cfg, 128)


@pytest.mark.parametrize("kwargs, named", [
    ({"seq_len": 0, "dim": 128}, "seq_len"), ({"seq_len": 512, "dim": 100}, "dim"),
    ({"seq_len": 512, "dim": 128, "dtype": "float32"}, "dtype"), ({"seq_len": 512, "dim": 128, "level": "fast"},
                                                                   "level"),
])
def test_bad_arguments_are_named(kwargs, named):
    with pytest.raises(ValueError, match=named):
        attention_space("sm_90a", **kwargs)
    with pytest.raises(ValueError, match="attention_space: target must be a CUDA target"):
        attention_space("cpu", seq_len=512, dim=128)

"""The tensor maps of ``tl.cuda.tma_plain_tiles`` against ``cuTensorMapEncodeTiled``'s rules, without a GPU.

Why: on the H200 (2026-12-02, c2c478e) the GPU test ``test_tma_1d_and_uint8_boxes_match_torch`` failed at launch with
``cuTensorMapEncodeTiled for argument 'Vv' (dims [1008], box [64], swizzle 0 B) failed: CUDA_ERROR_INVALID_VALUE``:
``Vv`` (a fresh, contiguous float32 tensor of 1008 elements, 16-byte aligned) had a rank-1 map, which met every
documented rule; the launcher passed an empty ``globalStrides`` list, which cuda.bindings hands to the driver as a
NULL pointer. Now a 1-D tensor is the 2-D map ``(n, 1)`` (its stride rounded up to 16 bytes: never stepped), and
every map is checked on the CPU by the rules the launcher checks again before the driver call
(``runtime/exported.py``: ``tensor_map_problems``; the compiler keeps cp.async with a note for a map that breaks
one; the CUDA emulator reports one). The GPU twin is ``tests/gpu/test_tma_plain_tiles.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.pass_config import resolve
from tilelang_core.runtime.exported import encode_tensor_map, tensor_map_problems, tensor_map_strides
from tilelang_core.transform.cuda.sm90.tma import TmaMap, checked

sys.path.insert(0, str(Path(__file__).parent))

from cuda_emulator import EmulationError, Emulator  # noqa: E402
from test_cuda_tma_plain_tiles import emulate_plain_loads_against_torch, gemm_with_plain_loads  # noqa: E402

PLAIN = {"tl.cuda.tma_plain_tiles": True}
SM90 = {"kind": "cuda", "arch": "sm_90a"}


def _lowered(func: Any) -> Any:
    return cuda_codegen.lower(func, arch="sm_90a", options=resolve(PLAIN))["main"]


def _maps(func: Any) -> dict[str, dict[str, Any]]:
    return {m["param"]: m for m in json.loads(str(func.attrs["tl.tma_maps"]))}


def _spec(dtype: str, dims: list[int], box: list[int], swizzle: int = 0) -> dict[str, Any]:
    return {"param": "X", "dtype": dtype, "dims": dims, "box": box, "swizzle": swizzle}


# -- the case the H200 refused -----------------------------------------------------------------------------------

def test_the_h200_failure_shape_plans_only_maps_the_driver_rules_accept():
    # the GPU test's program (M, N, K = 300, 128, 1008; Vv of 1008 float32): the old code planned Vv as the rank-1
    # map (dims [1008], box [64]) the driver refused
    func = _lowered(gemm_with_plain_loads(300, 128, 1008, ku=1008, nv=1008))
    maps = _maps(func)
    assert set(maps) == {"A", "B", "Vv", "U"}, maps
    for m in maps.values():
        assert tensor_map_problems(m) == [], m
        assert len(m["dims"]) >= 2, m
    assert maps["Vv"] == {"param": "Vv", "dtype": "float32", "dims": [1008, 1], "box": [64, 1], "swizzle": 0}
    text = func.script()
    assert "tl::tma_load_1d" not in text and "tl::cp_async" not in text
    # Vv's box is loaded through the 2-D map at (k * 64, 0)
    assert any("tl::tma_load_2d<2>" in ln and ", 0)" in ln for ln in text.splitlines()), text


def test_a_rank_1_map_is_refused_on_the_cpu_naming_the_rule():
    problems = tensor_map_problems(_spec("float32", [1008], [64]))
    assert len(problems) == 1 and "rank 1" in problems[0] and "NULL" in problems[0], problems


def test_the_launcher_refuses_a_rank_1_map_before_calling_the_driver():
    # no GPU and no driver library here: the refusal comes from the launcher's own check, before cuda.bindings
    spec = {"param": "Vv", "dtype": "float32", "dims": [1008], "box": [64], "swizzle": 0}
    with pytest.raises(RuntimeError, match=r"argument 'Vv'.*breaks cuTensorMapEncodeTiled's rules: rank 1"):
        encode_tensor_map(spec, 1 << 20)


# -- the rules, one at a time --------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,words", [
    (_spec("float32", [64, 2, 2, 2, 2, 2], [64, 1, 1, 1, 1, 1]), "rank 6"),
    (_spec("float32", [0, 4], [64, 1]), "globalDim [0, 4]"),
    (_spec("uint8", [1 << 33, 2], [64, 1]), "each must be 1 .. 2^32"),
    (_spec("uint8", [200, 300], [64, 64]), "globalStrides [200] bytes"),
    (_spec("float16", [1 << 31, 1 << 9, 2], [64, 1, 1]), "globalStrides [4294967296, 2199023255552]"),
    (_spec("float32", [256, 4], [257, 1]), "boxDim [257, 1]"),
    (_spec("float32", [256, 4], [64, 0]), "boxDim [64, 0]"),
    (_spec("float32", [256, 4], [6, 4]), "24 bytes: must be a multiple of 16"),
    (_spec("float16", [256, 4], [128, 4], 128), "256 bytes, more than the 128-byte swizzle"),
    (_spec("float16", [256, 4], [16, 4], 16), "swizzle 16 bytes"),
    (_spec("float64", [256, 4], [64, 4]), "element type float64"),
    (_spec("float32", [256, 4], [64, 4, 1]), "box [64, 4, 1] has 3 dimensions, the map 2"),
])
def test_each_documented_rule_is_named(spec, words):
    problems = tensor_map_problems(spec)
    assert any(words in p for p in problems), problems


@pytest.mark.parametrize("spec", [
    _spec("float16", [1008, 300], [64, 64], 128),  # A of the H200 test: 128 B boxes
    _spec("uint8", [1008, 300], [64, 64]),  # U: a plain uint8 tile
    _spec("float32", [4096, 16, 8], [64, 1, 1]),  # the backward's LSE row
    _spec("float32", [1001, 1], [64, 1]),  # a 1-D tensor of 4004 bytes: its never-stepped stride padded to 4016
    _spec("bfloat16", [1000, 1000], [64, 128], 128),  # a TMA store's map
])
def test_the_maps_this_compiler_makes_pass(spec):
    assert tensor_map_problems(spec) == []


def test_only_strides_of_trailing_extent_1_dimensions_are_padded():
    assert tensor_map_strides([1001, 1], 4) == [4016]
    assert tensor_map_strides([1001, 1, 1], 4) == [4016, 4016]
    assert tensor_map_strides([100, 3, 1], 4) == [400, 1200]  # 1200 = 75 x 16, as it is
    assert tensor_map_strides([50, 3, 1], 4) == [200, 608]  # 600 -> 608; 200 stays (and breaks the rule)
    assert tensor_map_strides([64, 4], 2) == [128]


def test_a_map_that_breaks_a_rule_is_no_plan_and_says_which_rule():
    m, why = checked(TmaMap("V", "float32", (1008,), (64,), 0))
    assert m is None and "the tensor map of V (dims [1008], box [64]) breaks cuTensorMapEncodeTiled's rules: rank 1" \
        in why, why
    m, why = checked(TmaMap("V", "float32", (1008, 1), (64, 1), 0))
    assert m is not None and why == ""


# -- the emulator --------------------------------------------------------------------------------------------------

def test_emulated_ragged_1d_tensor_whose_bytes_are_no_multiple_of_16_matches_torch():
    # Vv of 150 float32 (600 bytes): the map (150, 1) with its stride padded to 608; the third k-step's box (128 ..
    # 191) crosses the tensor's end and is zero-filled
    M, N, K, nv = 64, 64, 160, 150
    func = gemm_with_plain_loads(M, N, K, ku=K, nv=nv)
    lowered = _lowered(func)
    assert _maps(lowered)["Vv"]["dims"] == [nv, 1] and "tl::cp_async" not in lowered.script()
    assert not any("keep cp.async" in n for n in tilelang.compile(func, out_idx=[4, 5, 6], target=SM90,
                                                            pass_configs=PLAIN).notes)
    emulate_plain_loads_against_torch(func, M, N, K, nv, seed=7)


def test_the_emulator_reports_a_map_the_driver_would_refuse():
    # the kernel's maps rewritten to the old rank-1 map of Vv (and its loads to tl::tma_load_1d): the emulator
    # refuses it as the launcher would
    M, N, K = 64, 64, 128
    emu = Emulator(gemm_with_plain_loads(M, N, K), "sm_90a", PLAIN)
    maps = json.loads(str(emu.func.attrs["tl.tma_maps"]))
    i = next(j for j, m in enumerate(maps) if m["param"] == "Vv")
    maps[i] = {**maps[i], "dims": maps[i]["dims"][:1], "box": maps[i]["box"][:1]}
    emu.func = _rank_1_loads(emu.func.with_attr("tl.tma_maps", json.dumps(maps)), i)
    outs = [torch.zeros(M, N), torch.zeros(64), torch.zeros(M, 64)]
    with pytest.raises(EmulationError, match=r"tensor map \d \(Vv\): cuTensorMapEncodeTiled would refuse it: rank 1"):
        emu.run([torch.zeros(M, K).half(), torch.zeros(K, N).half(), torch.zeros(2 * 64),
                 torch.zeros(M, 2 * 64, dtype=torch.uint8), *outs])


def _rank_1_loads(func: Any, index: int) -> Any:
    """``func`` with its ``tl::tma_load_2d<index>(dst, bar, c0, 0)`` calls made ``tl::tma_load_1d<index>(dst, bar,
    c0)`` (the code the old compiler generated for a 1-D tensor)."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    from tilelang_core.transform.cuda.common import extern_name

    def visit(x: Any) -> Any:
        v = x.value
        if isinstance(v, tvm.ir.Call) and extern_name(v) == f"tl::tma_load_2d<{index}>":
            return tirx.Evaluate(tirx.call_extern("int32", f"tl::tma_load_1d<{index}>", *v.args[1:-1]))
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))

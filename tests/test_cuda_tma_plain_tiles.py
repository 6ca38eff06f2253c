"""``pass_configs={"tl.cuda.tma_plain_tiles": True}``: a TMA loop's loads into plain row-major shared tiles (not a
wgmma operand, no swizzle) become TMA boxes with ``SWIZZLE_NONE`` too, instead of one such load keeping the whole
loop on cp.async (``transform/cuda/sm90/tma.py``: ``plan_plain_copy``).

Checked here without a GPU: the default keeps cp.async and its note names the key; with the key the attention
backward (float32 ``LSE`` / ``Delta`` rows: 1-D tiles, boxes of one row on 3-D maps) and the dequantised prefill
(``tl.cuda.wgmma_written_tiles`` too: the uint8 packed-weight tile its ``T.Parallel`` nest reads) load every tile by
TMA, the full barrier expecting the bytes of every box; each rule of the hardware that a plain box breaks is a note;
ptxas builds them for sm_90a without spills; and the CUDA emulator (``tests/cuda_emulator.py``, TMA boxes of
swizzle 0 written row-major) runs them against torch at ragged shapes, plus a GEMM that also loads a 1-D float32
vector of a 1-D tensor (the 2-D map ``(n, 1)``, ``tl::tma_load_2d``) and a uint8 tile. The maps against the driver's
rules: ``tests/test_cuda_tma_plain_tiles_maps.py``. The GPU twin is ``tests/gpu/test_tma_plain_tiles.py``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import resolve
from tilelang_core.runtime.exported import TMA_ELEMENT_BYTES
from tilelang_core.transform.cuda.common import extern_name
from tilelang_core.transform.cuda.sm90.tma import PLAIN_DTYPES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).parent))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import EmulationError, Emulator, is_close_fraction  # noqa: E402
from flash_attention_bwd import attention_bwd, reference_grads  # noqa: E402

PLAIN = {"tl.cuda.tma_plain_tiles": True}
BOTH = {**PLAIN, "tl.cuda.wgmma_written_tiles": True}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
VARIANTS = {v.name: v for v in dv.VARIANTS}


def emulate_plain_loads_against_torch(func: Any, M: int, N: int, K: int, nv: int, seed: int) -> None:
    """Run ``gemm_with_plain_loads(M, N, K, ku=K, nv=nv)`` in the emulator on random inputs (three k-steps of 64; the
    last boxes zero-filled past the ends) and check C, the Vv row sums and the U sums against torch."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    vv = torch.randn(nv, generator=g)
    u = torch.randint(0, 256, (M, K), generator=g, dtype=torch.uint8)
    c, vs, us = torch.full((M, N), float("nan")), torch.full((64,), float("nan")), torch.full((M, 64), float("nan"))
    Emulator(func, "sm_90a", PLAIN).run([a, b, vv, u, c, vs, us])
    torch.testing.assert_close(vs, torch.cat([vv, torch.zeros(3 * 64 - nv)]).view(3, 64).sum(0))
    torch.testing.assert_close(us, torch.cat([u.float(), torch.zeros(M, 3 * 64 - K)], 1).view(M, 3, 64).sum(1))
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def gemm_with_plain_loads(M: int, N: int, K: int, vl: int = 64, vdt: str = "float32", uk: int = 64,
                          udt: str = "uint8", ku: int | None = None, layout: str = "", nv: int | None = None,
                          in_place: bool = False) -> Any:
    """A wgmma GEMM (64 x 64 x 64 tiles, 2 stages) whose loop also loads, per k-step, ``vl`` elements of a 1-D
    tensor ``Vv`` (``nv`` long) into a 1-D tile and a ``64 x uk`` tile of a 2-D tensor ``U`` (``M x ku``) into a
    2-D tile, and sums them: ``Vs = sum_k Vv[k vl : (k+1) vl]``, ``Us[i, :] = sum_k U[i, k uk : (k+1) uk]`` (``C =
    A @ B``; parts past a tensor's end count as zeros). ``layout``: "swizzled" / "index" annotates the uint8 tile
    with ``make_swizzled_layout`` / an index map; ``in_place``: the loop doubles the 1-D tile in place first."""
    bm = bn = bk = 64
    steps = -(-K // bk)
    ku = ku if ku is not None else steps * uk
    nv = nv if nv is not None else steps * vl

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Vv: T.Tensor((nv,), vdt),
             U: T.Tensor((M, ku), udt), C: T.Tensor((M, N), "float32"), Vs: T.Tensor((vl,), "float32"),
             Us: T.Tensor((M, uk), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            v_s = T.alloc_shared((vl,), vdt)
            u_s = T.alloc_shared((bm, uk), udt)
            C_f = T.alloc_fragment((bm, bn), "float32")
            v_f = T.alloc_fragment((vl,), "float32")
            u_f = T.alloc_fragment((bm, uk), "float32")
            if layout == "swizzled":
                T.annotate_layout({u_s: tilelang.layout.make_swizzled_layout(u_s)})
            elif layout == "index":
                T.annotate_layout({u_s: lambda i, j: (i, (j + 16) % uk)})
            T.clear(C_f)
            T.clear(v_f)
            T.clear(u_f)
            for k in T.Pipelined(steps, num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.copy(Vv[k * vl:(k + 1) * vl], v_s)
                T.copy(U[by * bm, k * uk], u_s)
                T.gemm(A_s, B_s, C_f)
                if in_place:
                    for i in T.Parallel(vl):
                        v_s[i] = v_s[i] * T.cast(2, vdt)
                for i in T.Parallel(vl):
                    v_f[i] += T.cast(v_s[i], "float32")
                for i, j in T.Parallel(bm, uk):
                    u_f[i, j] += T.cast(u_s[i, j], "float32")
            T.copy(C_f, C[by * bm, bx * bn])
            if bx == 0 and by == 0:
                T.copy(v_f, Vs)
            if bx == 0:
                T.copy(u_f, Us[by * bm, 0])

    return main


def _bwd(seq: int = 4096, dim: int = 128, causal: bool = False, batch: int = 8, heads: int = 16) -> Any:
    return attention_bwd.get_program(batch, heads, seq, dim, causal, 64, 64, 2, 128, "float16")


def _prefill(name: str, M: int = 128, N: int = 128, K: int = 512) -> tuple[Any, Any]:
    v = VARIANTS[name]
    return v, dv.program(v, M, N, K, **dv.tiles(128, v))  # the prefill tiles: 128 x 64, 256 threads


def _lowered(func: Any, pass_configs: dict | None) -> Any:
    return cuda_codegen.lower(func, arch="sm_90a", options=resolve(pass_configs))["main"]


def _maps(func: Any) -> list[dict[str, Any]]:
    return json.loads(str(func.attrs["tl.tma_maps"]))


def _expected_bytes(text: str) -> set[int]:
    return {int(x) for x in re.findall(r'"tl::mbar_expect_tx", .*?, T\.uint32\((\d+)\)', text)}


def _notes(func: Any, pass_configs: dict | None, out_idx: list[int]) -> list[str]:
    return list(tilelang.compile(func, out_idx=out_idx, target=SM90, pass_configs=pass_configs).notes)


# -- the default and the generated code ----------------------------------------------------------------------------

def test_by_default_one_plain_load_keeps_the_loop_on_cp_async_and_the_note_names_the_key():
    text = _lowered(_bwd(), None).script()
    assert "tl::cp_async_16" in text and "tl::tma_load" not in text
    notes = _notes(_bwd(), None, [7, 8])
    assert any("keep cp.async, not TMA" in n and "LSE -> lse" in n and "tl.cuda.tma_plain_tiles=True" in n
               for n in notes), notes


def test_with_the_key_the_backward_loads_lse_and_delta_as_one_row_boxes_and_nothing_by_cp_async():
    func = _lowered(_bwd(), PLAIN)
    text = func.script()
    assert "tl::cp_async" not in text
    maps = _maps(func)
    plain = {m["param"]: m for m in maps if m["swizzle"] == 0}
    assert set(plain) == {"LSE", "Delta"}, maps
    for m in plain.values():  # LSE[b, h, q0:q0 + 64]: dims (seq, heads, batch), a box of one 64-element row
        assert m["dims"] == [4096, 16, 8] and m["box"] == [64, 1, 1] and m["dtype"] == "float32", m
    assert {m["param"] for m in maps if m["swizzle"] == 128} == {"Q", "dO"}  # the wgmma tiles keep their swizzle
    # LSE and Delta (3-D maps), in the prologue's one prefetched stage (2 stages) and the loop's issue; Q and dO
    # (4-D maps) in two 64-column boxes each, the same two places
    assert text.count("tl::tma_load_3d<") == 2 * 2 and text.count("tl::tma_load_4d<") == 2 * 2 * 2
    # the full barrier expects every box of the stage: Q and dO (64 x 128 halves each) and two rows of 64 floats
    assert _expected_bytes(text) == {2 * 64 * 128 * 2 + 2 * 64 * 4}


def test_with_both_keys_the_dequant_prefill_loads_the_packed_uint8_tile_by_tma_and_gets_a_producer_warpgroup():
    for name in ("hi_first", "int8"):
        v, prog = _prefill(name)
        func = _lowered(prog, BOTH)
        text = func.script()
        assert "tl::cp_async" not in text and "tl::wgmma_gemm_ss<" in text, name
        maps = _maps(func)
        packed = [m for m in maps if m["param"] == "B"]
        cols = 64 if v.fmt == "int4" else 128  # the uint8 tile of two nibbles a byte, the int8 tile one a byte
        assert packed == [{"param": "B", "dtype": "uint8" if v.fmt == "int4" else "int8", "dims": [512 // 128 * cols,
                                                                                                     128],
                           "box": [cols, 64], "swizzle": 0}], maps
        # one block per SM by shared memory: a producer warpgroup (its own loop over k, k_load) feeds the consumers
        assert "k_load" in text and "tl::setmaxnreg_inc" in text, name
        assert _expected_bytes(text) == {128 * 128 * 2 + 64 * cols}, name
        assert not any("not TMA" in n for n in _notes(prog, BOTH, [-1])), name


def test_the_launcher_encodes_every_plain_dtype():
    assert set(PLAIN_DTYPES) <= set(TMA_ELEMENT_BYTES)


@pytest.mark.parametrize("kw,words", [
    ({"vl": 8}, "a stage of v_s is 32 bytes, not a multiple of 128"),
    ({"vl": 64, "vdt": "float64"}, "(Vv float64 -> v_s float64)"),
    ({"vl": 512}, "v_s (1x512) is larger than one TMA box (256 elements"),
    ({"uk": 8}, "the tile u_s's rows are 8 bytes, not a multiple of 16"),
    ({"ku": 200}, "rows of U are 200 bytes, not a multiple of 16"),
    ({"layout": "swizzled"}, "u_s has the mma.sync XOR swizzle"),
    ({"layout": "index"}, "u_s has a T.annotate_layout index map"),
    ({"in_place": True}, "the loop body writes the shared tile v_s"),
])
def test_a_plain_load_that_cannot_be_a_box_keeps_cp_async_with_a_note_naming_the_rule(kw, words):
    notes = _notes(gemm_with_plain_loads(128, 64, 256, **kw), PLAIN, [4, 5, 6])
    assert any("keep cp.async, not TMA" in n and words in n for n in notes), notes


# -- ptxas -----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc/ptxas")
def test_ptxas_builds_the_tma_backward_and_prefill_without_spills():
    # the cp.async builds have none either: the backward 250 registers at 128 threads, the prefill 80 at 256
    bwd = tilelang.compile(_bwd(), out_idx=[7, 8], target=SM90, pass_configs=PLAIN).resources()
    assert bwd is not None and bwd.spills == 0 and not bwd.warnings, bwd
    for name in ("hi_first", "int8"):
        res = tilelang.compile(_prefill(name)[1], out_idx=[-1], target=SM90, pass_configs=BOTH).resources()
        assert res is not None and res.spills == 0, res
        # the producer warpgroup's register split is ignored by ptxas at these few registers (64: C7508,
        # 'setmaxnreg' ignored), which changes no value; any other warning is not expected
        assert all("C7508" in w for w in res.warnings), res.warnings


# -- the CUDA emulator against torch -------------------------------------------------------------------------------

def test_emulated_1d_and_uint8_boxes_match_torch():
    # K = 160: the third k-step's boxes cross the ends of A, B, Vv and U (zero-filled); M = 100: a ragged row block
    M, N, K = 100, 64, 160
    func = gemm_with_plain_loads(M, N, K, ku=K, nv=K)
    text = _lowered(func, PLAIN).script()
    # Vv is a 1-D tensor: the 2-D map (K, 1), no rank-1 map (the H200's driver refused one)
    assert "tl::tma_load_1d" not in text and "tl::cp_async" not in text
    assert [m for m in _maps(_lowered(func, PLAIN)) if m["param"] == "Vv"] == [
        {"param": "Vv", "dtype": "float32", "dims": [K, 1], "box": [64, 1], "swizzle": 0}]
    emulate_plain_loads_against_torch(func, M, N, K, K, seed=5)


def _expecting(func: Any, less: int) -> Any:
    """``func`` with every full barrier's ``tl::mbar_expect_tx`` announcing ``less`` bytes fewer."""

    def visit(x: Any) -> Any:
        v = x.value
        if isinstance(v, tvm.ir.Call) and extern_name(v) == "tl::mbar_expect_tx":
            name, bar, nbytes = v.args
            return tirx.Evaluate(tirx.call_extern("int32", name.value, bar,
                                                  tirx.IntImm("uint32", int(nbytes.value) - less)))
        return x

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, visit)]))


def test_emulated_stage_whose_barrier_leaves_out_the_plain_boxes_is_caught():
    # the barrier must expect the bytes of every box of the stage: without the 1-D row (256 B) and the uint8 tile
    # (4 KiB) its phase completes before those boxes land, and the next one never does
    M, N, K = 64, 64, 128
    func = gemm_with_plain_loads(M, N, K)
    emu = Emulator(func, "sm_90a", PLAIN)
    emu.func = _expecting(emu.func, 64 * 4 + 64 * 64)
    outs = [torch.zeros(M, N), torch.zeros(64), torch.zeros(M, 64)]
    with pytest.raises(EmulationError, match="beyond what its phases expected"):
        emu.run([torch.zeros(M, K).half(), torch.zeros(K, N).half(), torch.zeros(2 * 64),
                 torch.zeros(M, 2 * 64, dtype=torch.uint8), *outs])


def _lse_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
               causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's base-2 log-sum-exp of the scaled scores and ``Delta = rowsum(O dO)``, as [batch, heads, seq]."""
    qt, kt, vt = (x.float().transpose(1, 2) for x in (q, k, v))
    s = qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    lse = (torch.logsumexp(s, -1) * math.log2(math.e)).contiguous()
    o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    return lse, (o.half().float() * do.float()).sum(-1).transpose(1, 2).contiguous()


@pytest.mark.parametrize("causal,ws", [(False, False), (True, False), (False, True)])
def test_emulated_tma_backward_matches_torch_autograd(causal, ws):
    # seq 100: two key blocks and two query tiles, the second ragged (LSE's box zero-filled past 100); d = 16 keeps
    # the emulation short. ws: a producer warpgroup forced (tl.cuda.ws_keep_occupancy=False; by the occupancy rule
    # the backward keeps the TMA loop without one)
    cfg = {**PLAIN, "tl.cuda.ws_keep_occupancy": False} if ws else PLAIN
    b, h, s, d = 1, 1, 100, 16
    g = torch.Generator().manual_seed(11)
    q, k, v, do = (torch.randn(b, s, h, d, generator=g).half() for _ in range(4))
    lse, delta = _lse_delta(q, k, v, do, causal)
    dq = torch.zeros(b, s, h, d)
    dk, dv_ = torch.full((b, s, h, d), float("nan")).half(), torch.full((b, s, h, d), float("nan")).half()
    func = _bwd(s, d, causal, b, h)
    text = _lowered(func, cfg).script()
    assert "tl::cp_async" not in text and ("kk_load" in text) == ws
    Emulator(func, "sm_90a", cfg).run([q, k, v, do, lse, delta, dq, dk, dv_])
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv_), reference_grads(q.float(), k.float(), v.float(),
                                                                                do.float(), causal)):
        assert is_close_fraction(got.float(), want, 2e-2, 2e-2) == 0.0, (name, (got.float() - want).abs().max())


@pytest.mark.parametrize("name,M,N", [("hi_first", 128, 64), ("int8", 128, 64), ("hi_first", 100, 96)])
def test_emulated_tma_dequant_prefill_matches_torch(name, M, N):
    K = 256
    v, func = _prefill(name, M, N, K)
    assert "tl::cp_async" not in _lowered(func, BOTH).script()
    ins = dv.inputs(v, M, N, K, device="cpu", seed=3)
    out = torch.full((M, N), float("nan"), dtype=getattr(torch, v.dtype))
    Emulator(func, "sm_90a", BOTH).run([*ins, out])
    ref = dv.reference(v, *ins)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, (out.double() - ref).abs().max()

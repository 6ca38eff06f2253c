"""``tl.cuda.attention_overlap`` (``transform/cuda/sm90/overlap.py``): the attention loop's second gemm issued one
iteration late, so the softmax runs under the previous block's ``P V``. Checked without a GPU: the body's parts and
the order of issues, waits and releases in the lowered kernel, the notes where the rule does not apply, that ptxas
(sm_90a) builds it without serialising the wgmma and with the softmax's exp2 between the scores' wait and the wait
for ``P V`` in the SASS, and the CUDA emulator (which models a wgmma group in flight reading its stage until a wait
retires it) running the warp-specialised kernel against torch. Its speed is for the H200
(``bench/gpu/attention_fwd.py --variants``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.pass_config import resolve
from tilelang_core.trace.model import find_disassembler

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cuda_emulator import emulate, is_close_fraction  # noqa: E402

from examples import flash_attention  # noqa: E402

ON = {"tl.cuda.attention_overlap": True, "tl.cuda.ws_keep_occupancy": False}


def _lowered(pass_configs: dict, dim: int = 64, causal: bool = True) -> dict:
    func = flash_attention.flash_attention.get_program(1, 2, 200, dim, causal, block_M=128, block_N=64,
                                                       num_stages=2, threads=256, dtype="float16")
    seen: dict = {}
    cuda_codegen.lower(func, record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a",
                       options=resolve(pass_configs))
    return seen


def _notes(seen: dict) -> list[str]:
    return [str(n) for f in seen.values() if "tl.notes" in f.attrs for n in f.attrs["tl.notes"]]


def test_the_scores_gemm_issues_first_and_the_previous_blocks_pv_runs_under_the_softmax():
    text = str(_lowered(ON)["tl.WarpSpecializeCUDA"])
    loop = text[text.index("for k in"):]
    s_gemm = loop.index("tl::wgmma_gemm_ss<128, 64, 64, 2, 1, 64, 0, 1, 128, 128, 2>")  # no wait
    pv = loop.index("tl::wgmma_gemm_rs<128, 64, 64, 2, 64, 0, 128, 1>")  # returns once S is done
    s_ready = loop.index("tl::wgmma_acc_ready<-1, 32>")
    first = loop.index("tl::wgmma_acc_ready<0, 32>")  # k = 0: nothing to overlap, wait for S
    exp2 = loop.index("exp2")
    # every fragment the softmax touches (max, previous max, S, scale, sum, log-sum) kept before the wait
    keep = loop.index("tl::keep_before_wait<2, 2, 32, 2, 2, 2>\"", exp2)
    o_ready = loop.index("tl::wgmma_acc_ready<0, 32>", s_ready)  # P V done before P and O change
    release = loop.index("tl::mbar_arrive", o_ready)
    p_write = loop.index("acc_s_cast", release)
    assert s_gemm < first < pv < s_ready < exp2 < keep < o_ready < release < p_write
    # the wait for P V is a statement of the loop body itself, not under `if k > 0` (ptxas serialised that form)
    lines = loop.splitlines()
    depth = {name: next(len(x) - len(x.lstrip()) for x in lines if name in x)
             for name in ("tl::wgmma_gemm_ss", 'tl::wgmma_acc_ready<0, 32>", T.address_of(acc_o')}
    assert len(set(depth.values())) == 1, depth
    # after the loop, the last block's P V (waiting for itself) and its stage's release
    tail = loop[loop.index("tl::wgmma_gemm_rs", pv + 1):]
    assert re.match(r"tl::wgmma_gemm_rs<128, 64, 64, 2, 64, 0, 128>", tail) and "tl::mbar_arrive" in tail


def _overlap_kernel(dim: int, causal: bool) -> object:
    prog = flash_attention.flash_attention.get_program(8, 16, 4096, dim, causal, block_M=128, block_N=128,
                                                       num_stages=2, threads=256, dtype="float16")
    return tilelang.compile(prog, target={"kind": "cuda", "arch": "sm_90a"}, pass_configs=ON)


SHAPES = [(128, False), (128, True), (64, False)]  # issue 16's shapes at 128 x 128 tiles


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc/ptxas")
@pytest.mark.parametrize("dim,causal", SHAPES)
def test_ptxas_builds_the_overlap_without_serialising_the_wgmma(dim, causal):
    # the first form (the wait for P V under `if k > 0`) printed C7514 here (causal: C7515 and C7517 too)
    res = _overlap_kernel(dim, causal).resources()
    assert res is not None and res.spills == 0, res
    assert not [w for w in res.warnings if re.search(r"C75\d\d|serializ|injected", w)], res.warnings


def _sass_window(sass: str) -> tuple[int, int]:
    """(MUFU.EX2 between the scores' wait (WARPGROUP.DEPBAR.LE gsb0, 0x1, after the P V issue) and the wait for P V
    (the last DEPBAR.LE gsb0, 0x0 before the stage's release), MUFU.EX2 from that wait to the next HGMMA)."""
    ins = [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", sass)]
    s_wait = next(i for i, x in enumerate(ins) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in x)
    release = next(i for i in range(s_wait, len(ins)) if "SYNCS.ARRIVE" in ins[i])
    pv_wait = max(i for i in range(s_wait, release) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in ins[i])
    nxt = next(i for i in range(pv_wait, len(ins)) if "HGMMA" in ins[i])
    return (sum("MUFU.EX2" in x for x in ins[s_wait:pv_wait]), sum("MUFU.EX2" in x for x in ins[pv_wait:nxt]))


@pytest.mark.skipif(find_nvcc() is None or find_disassembler() is None, reason="needs nvcc/ptxas and cuobjdump")
@pytest.mark.parametrize("dim,causal", SHAPES)
def test_the_softmax_exp2_sits_between_the_scores_wait_and_the_wait_for_pv_in_the_sass(dim, causal):
    # without tl::keep_before_wait ptxas put the wait for P V right after the scores' wait: (0, 66)
    under, after = _sass_window(_overlap_kernel(dim, causal).get_kernel_source("sass"))
    # per thread: 64 scores of its 64 x 128 slice and the 2 rows' rescale factors
    assert (under, after) == (66, 0)


def test_where_the_rule_does_not_apply_the_kernel_says_why():
    notes = _notes(_lowered({**ON, "tl.cuda.pingpong": True}))
    assert any("no attention overlap" in n and "ping-pong is on" in n for n in notes), notes
    assert not any("attention overlap" in n for n in _notes(_lowered({})))  # off: nothing to say


@pytest.mark.parametrize("seq,block_N,causal", [
    (70, 64, True),  # two K/V tiles: the first waits for its scores, the second overlaps the first tile's P V
    (120, 32, False),  # four: the steady state twice, a ragged last tile (24 of 32 rows)
])
def test_emulated_overlapped_attention_matches_torch(seq, block_N, causal):
    # one 128-row query block; the last P V runs after the loop
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, seq, 1, 32, generator=g).to(torch.float16) for _ in range(3))
    kwargs = {"block_M": 128, "block_N": block_N, "num_stages": 2, "threads": 256, "dtype": "float16"}
    out, = emulate(flash_attention.flash_attention, (1, 1, seq, 32, causal), kwargs, [q, k, v], arch="sm_90a",
                   pass_configs=ON)
    ref = flash_attention.reference(q.double(), k.double(), v.double(), causal)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, float((out.double() - ref).abs().max())

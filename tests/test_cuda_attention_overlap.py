"""``tl.cuda.attention_overlap`` (``transform/cuda/sm90/overlap.py``): the attention loop's second gemm issued one
iteration late, so the softmax runs under the previous block's ``P V``. Checked without a GPU: the body's parts and
the order of issues, waits and releases in the lowered kernel, the notes where the rule does not apply, and the
CUDA emulator (which models a wgmma group in flight reading its stage until a wait retires it) running the
warp-specialised kernel against torch. Its speed is for the H200 (``bench/gpu/attention_fwd.py --variants``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.pass_config import resolve

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
    o_ready = loop.index("tl::wgmma_acc_ready<0, 32>", s_ready)  # P V done before P and O change
    release = loop.index("tl::mbar_arrive", o_ready)
    p_write = loop.index("acc_s_cast", release)
    assert s_gemm < first < pv < s_ready < exp2 < o_ready < release < p_write
    # after the loop, the last block's P V (waiting for itself) and its stage's release
    tail = loop[loop.index("tl::wgmma_gemm_rs", pv + 1):]
    assert re.match(r"tl::wgmma_gemm_rs<128, 64, 64, 2, 64, 0, 128>", tail) and "tl::mbar_arrive" in tail


def test_where_the_rule_does_not_apply_the_kernel_says_why():
    notes = _notes(_lowered({**ON, "tl.cuda.pingpong": True}))
    assert any("no attention overlap" in n and "ping-pong is on" in n for n in notes), notes
    assert not any("attention overlap" in n for n in _notes(_lowered({})))  # off: nothing to say


def test_emulated_overlapped_attention_matches_torch():
    # one 128-row query block over two K/V tiles (causal, ragged 70): the first iteration waits for its scores,
    # the second overlaps the first tile's P V, the last P V runs after the loop
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 70, 1, 32, generator=g).to(torch.float16) for _ in range(3))
    kwargs = {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 256, "dtype": "float16"}
    out, = emulate(flash_attention.flash_attention, (1, 1, 70, 32, True), kwargs, [q, k, v], arch="sm_90a",
                   pass_configs=ON)
    ref = flash_attention.reference(q.double(), k.double(), v.double(), True)
    assert is_close_fraction(out, ref, 2e-2, 2e-2) == 0.0, float((out.double() - ref).abs().max())

"""``tl.cuda.vector_atomics``: adjacent float32 element atomics as one ``red.global.add.v2/v4.f32``, without a GPU.

* emulated (``tests/cuda_emulator.py`` replays ``tl::atomic_add_v2/v4`` element by element and checks their
  alignment): the flash-attention backward's ``dQ`` (examples/flash_attention_bwd.py, sm_90a: wgmma accumulators,
  the atomics under row guards) matches ``torch.autograd`` of SDPA on ragged and causal problems with the key on;
  a fragment's tile ``T.atomic_add`` into a ragged global tensor and ``T.atomic_addx4`` / ``x2`` match torch;
* generated code: the backward's 64 element atomics per thread and query tile become 32 ``tl::atomic_add_v2``
  (SASS: 32 ``REDG.E.ADD.F32x2``, no scalar ``REDG.E.ADD.F32``, registers and spills unchanged); ``T.atomic_addx4``
  at a 4-aligned column becomes ``tl::atomic_add_v4``; an offset the analyzer cannot prove aligned (an odd column
  base), a float16 destination and sm_80 keep their element atomics; off (the key False) changes nothing.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulator import emulate, is_close_fraction  # noqa: E402

from examples import flash_attention_bwd as fb  # noqa: E402

KEY = "tl.cuda.vector_atomics"
ON = {KEY: True}
OFF = {KEY: False}
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC)")


@tilelang_core.jit(out_idx=[])
def tile_atomic(M, N, col0, block_M=16, block_N=32, dtype="float32"):
    """``Out[rows, col0 + cols] += X_tile @ I`` (a gemm accumulator, so the fragment has the mma/wgmma layout)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Eye: T.Tensor((block_N, block_N), "float16"),  # noqa: N803
             Out: T.Tensor((M, N + col0), dtype)):  # noqa: N803
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            xs = T.alloc_shared((block_M, block_N), "float16")
            es = T.alloc_shared((block_N, block_N), "float16")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(X[by * block_M, bx * block_N], xs)
            T.copy(Eye, es)
            T.clear(acc)
            T.gemm(xs, es, acc)
            T.atomic_add(Out[by * block_M, col0 + bx * block_N], acc)

    return main


@tilelang_core.jit(out_idx=[])
def addx(n, width):
    """Each of 32 threads adds ``width`` consecutive values of ``X`` into ``Out`` with ``T.atomic_addx{width}``
    (``n`` a multiple of ``32 * width``: the accesses need no guard)."""

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):  # noqa: N803
        with T.Kernel(n // (32 * width), threads=32) as bx:
            for t in T.Parallel(32):
                if width == 4:
                    T.atomic_addx4(Out[(bx * 32 + t) * 4], X[(bx * 32 + t) * 4])
                else:
                    T.atomic_addx2(Out[(bx * 32 + t) * 2], X[(bx * 32 + t) * 2])

    return main


def _source(factory: object, args: tuple, arch: str = "sm_90a", cfg: dict | None = None) -> tuple[str, object]:
    k = tilelang_core.compile(factory.get_program(*args), out_idx=factory.out_idx,
                              target={"kind": "cuda", "arch": arch}, pass_configs=cfg or {})
    return k.get_kernel_source(), k


def _sass_ops(k: object) -> list[str]:
    return re.findall(r"\b(REDG\.E\.ADD\.F32\S*)", k.get_kernel_source("sass"))


# -- emulated ---------------------------------------------------------------------------------------------

def _lse_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
               causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """LSE (base 2 of the scaled scores, [b, h, s]) and Delta = rowsum(O * dO), as the forward and preprocess
    kernels give them."""
    d = q.shape[-1]
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(d)
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1) * fb.LOG2E
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v.double())
    delta = (o * do.double()).sum(-1).transpose(1, 2)
    return lse.float().contiguous(), delta.float().contiguous()


@pytest.mark.parametrize("seq,dim,causal", [(100, 64, True), (128, 32, False)])
def test_backward_with_vector_atomics_matches_autograd_of_sdpa_in_the_emulator(seq, dim, causal):
    g = torch.Generator().manual_seed(seq + dim)
    q, k, v, do = (torch.randn(1, seq, 1, dim, generator=g).half() for _ in range(4))
    lse, delta = _lse_delta(q, k, v, do, causal)
    dq = torch.zeros(q.shape, dtype=torch.float32)
    dk, dv = emulate(fb.attention_bwd, (1, 1, seq, dim, causal, 64, 64, 2, 128, "float16"), {},
                     [q, k, v, do, lse, delta, dq], arch="sm_90a", pass_configs=ON)
    want = fb.reference_grads(q.float(), k.float(), v.float(), do.float(), causal)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        assert is_close_fraction(got.float(), ref, rtol=2e-2, atol=2e-2) == 0.0, name


@pytest.mark.parametrize("M,N,col0", [(40, 96, 0), (32, 50, 2), (16, 64, 1)])
def test_tile_atomic_add_of_a_fragment_matches_torch_in_the_emulator(M, N, col0):
    g = torch.Generator().manual_seed(M * N + col0)
    x = torch.randn(M, N, generator=g).half()
    eye = torch.eye(32).half()
    out = torch.randn(M, N + col0, generator=g)
    want = out.clone()
    want[:, col0:] += x.float()
    emulate(tile_atomic, (M, N, col0), {}, [x, eye, out], arch="sm_90a", pass_configs=ON)
    assert is_close_fraction(out, want, rtol=1e-3, atol=1e-3) == 0.0


@pytest.mark.parametrize("n,width", [(256, 4), (128, 2)])
def test_atomic_addx_matches_torch_in_the_emulator(n, width):
    g = torch.Generator().manual_seed(n)
    x, out = torch.randn(n, generator=g), torch.randn(n, generator=g)
    want = out + x
    emulate(addx, (n, width), {}, [x, out], arch="sm_90a", pass_configs=ON)
    assert is_close_fraction(out, want, rtol=1e-6, atol=1e-6) == 0.0


# -- generated code ---------------------------------------------------------------------------------------

@needs_nvcc
def test_backward_dq_atomics_become_pairs_in_cuda_c_and_sass():
    args = (8, 16, 4096, 128, False, 64, 64, 2, 128, "float16")
    src_off, k_off = _source(fb.attention_bwd, args, cfg=OFF)
    src_on, k_on = _source(fb.attention_bwd, args, cfg=ON)
    assert "tl::atomic_add_v" not in src_off and src_off.count("atomicAdd(") > 0
    assert "atomicAdd(" not in src_on and src_on.count("tl::atomic_add_v2(") == src_off.count("atomicAdd(") // 2
    off, on = _sass_ops(k_off), _sass_ops(k_on)
    assert len(off) == 64 and all(o.startswith("REDG.E.ADD.F32.") for o in off), off
    assert len(on) == 32 and all(o.startswith("REDG.E.ADD.F32x2.") for o in on), on
    r_off, r_on = k_off.resources(), k_on.resources()
    assert r_on.spill_stores == r_on.spill_loads == 0 and r_on.registers <= r_off.registers
    notes = k_on.notes
    assert any("tl.cuda.vector_atomics: 128 float32 element atomics" in n for n in notes), notes


@needs_nvcc
def test_addx4_becomes_one_v4_and_unaligned_or_half_or_sm80_keep_element_atomics():
    src, k = _source(addx, (256, 4), cfg=ON)
    assert src.count("tl::atomic_add_v4(") == 4 and "atomicAdd(" not in src  # 16 elements a thread, in 4 runs
    assert {o.split(".")[3] for o in _sass_ops(k)} == {"F32x4"} and len(_sass_ops(k)) == 4
    src, _ = _source(tile_atomic, (16, 64, 1), cfg=ON)  # odd column base: 8-byte alignment not provable
    assert "tl::atomic_add_v" not in src and "atomicAdd(" in src
    src, _ = _source(tile_atomic, (32, 64, 2), cfg=ON)
    assert "tl::atomic_add_v2(" in src and "atomicAdd(" not in src
    src, _ = _source(tile_atomic, (32, 64, 0, 16, 32, "float16"), cfg=ON)
    assert "tl::atomic_add_v" not in src
    src, _ = _source(tile_atomic, (32, 64, 0), arch="sm_80", cfg=ON)
    assert "tl::atomic_add_v" not in src and "atomicAdd(" in src

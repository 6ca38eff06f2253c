"""T.Parallel nests over packed data on CUDA (tl.LowerParallelCUDA's lane-by-lane chunks), without a GPU.

A dequantising nest ``W[i, j] = cast(((P[i, j // 2] >> 4 * (j % 2)) & 0xF) - 8) * S[i]`` reads its packed tile at
``j // 2`` and its scale once per row: not contiguous in ``j``, so it used to fall back to element-wise code (every
byte loaded twice, 2-byte stores into the swizzled fp16 tile, ~15 SASS instructions per weight). Now each thread's
chunk of 8 consecutive ``j`` stages the packed bytes with one 32-bit load, computes the 8 lanes from them and
stores the 8 results with one 16-byte store (docs/cuda.md, "Producer fusion"). Checked here: the generated CUDA
C, and the lowered TIR in tests/cuda_emulator.py against torch — the nest alone in fp16 (either nibble order), and
the whole generic dequant GEMM in fp32 (T.gemm on the FMA path, which the emulator runs)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_emulator import emulate  # noqa: E402
from test_compat_language_ops_cuda import cuda_source  # noqa: E402

from examples import dequant_gemm as dq  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


@tilelang.jit(out_idx=[-1])
def unpack_int4(N, K, hi_first=0, block_N=16, dtype="float16"):
    """W = (nibble - 8) * S[n] through a shared tile, nibble order low-first (``hi_first=0``) or high-first."""

    @T.prim_func
    def main(P: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N, 1), dtype), W: T.Tensor((N, K), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            P_s = T.alloc_shared((block_N, K // 2), "uint8")
            W_s = T.alloc_shared((block_N, K), dtype)
            T.copy(P[bx * block_N, 0], P_s)
            for i, j in T.Parallel(block_N, K):
                q = (P_s[i, j // 2] >> (4 * ((j + hi_first) % 2))) & 0xF
                W_s[i, j] = T.cast(T.cast(q, "int32") - 8, dtype) * S[bx * block_N + i, 0]
            T.copy(W_s, W[bx * block_N, 0])

    return main


@tilelang.jit(out_idx=[-1])
def unpack_fp4(N, K, block_N=16):
    """W = e2m1(nibble) * S[n]: a decode with selects (``T.if_then_else``) and shifts, lane by lane as well."""

    @T.prim_func
    def main(P: T.Tensor((N, K // 2), "uint8"), S: T.Tensor((N, 1), "float16"), W: T.Tensor((N, K), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
            P_s = T.alloc_shared((block_N, K // 2), "uint8")
            W_s = T.alloc_shared((block_N, K), "float16")
            T.copy(P[bx * block_N, 0], P_s)
            for i, j in T.Parallel(block_N, K):
                q = T.cast((P_s[i, j // 2] >> (4 * (j % 2))) & 0xF, "int32")  # s e e m
                e = (q >> 1) & 3
                mag = T.if_then_else(e == 0, T.cast(q & 1, "float32") * 0.5,
                                     (1.0 + T.cast(q & 1, "float32") * 0.5) * T.cast(1 << (T.max(e, 1) - 1), "float32"))
                W_s[i, j] = T.cast(T.if_then_else(q >= 8, -mag, mag), "float16") * S[bx * block_N + i, 0]
            T.copy(W_s, W[bx * block_N, 0])

    return main


FP4_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def test_fp4_decode_nest_is_lowered_lane_by_lane_and_matches_torch_in_the_emulator(tmp_path):
    src = cuda_source(tmp_path, unpack_fp4, 32, 64, cubin=False)
    assert "uchar P_s_vec_ptr[4];" in src
    g = torch.Generator().manual_seed(7)
    P = torch.randint(0, 256, (32, 32), generator=g, dtype=torch.uint8)
    S = (torch.rand(32, 1, generator=g) * 0.1 + 0.01).half()
    (W,) = emulate(unpack_fp4, (32, 64), {}, [P, S])
    q = torch.stack([P & 0xF, P >> 4], dim=-1).reshape(32, 64).long()
    assert torch.equal(W, torch.tensor(FP4_E2M1)[q].half() * S)


def _unpacked(P: torch.Tensor, S: torch.Tensor, hi_first: int) -> torch.Tensor:
    lo, hi = (P & 0xF).to(torch.int32), (P >> 4).to(torch.int32)
    q = torch.stack([hi, lo] if hi_first else [lo, hi], dim=-1).reshape(P.shape[0], -1)
    return (q - 8).to(S.dtype) * S


@needs_nvcc
def test_packed_nest_loads_a_word_per_eight_nibbles_and_stores_sixteen_bytes(tmp_path):
    src = cuda_source(tmp_path, unpack_int4, 32, 64)
    # one 32-bit shared load of 4 packed bytes per chunk, the 8 lanes from it, one 16-byte store of 8 halves
    assert re.search(r"\*\(uint\*\)\(P_s_vec_ptr \+ 0\) = \*\(uint\*\)\(", src)
    assert re.search(r"\*\(uint4\*\)\(\(\(half\*\)smem_ptr\) \+ .*\) = \*\(uint4\*\)\(W_s_vec_ptr \+ 0\);", src)
    assert "uchar P_s_vec_ptr[4];" in src and "P_s_vec_ptr[3]" in src


@pytest.mark.parametrize("hi_first", [0, 1])
def test_packed_nest_matches_torch_in_the_emulator(hi_first):
    g = torch.Generator().manual_seed(hi_first)
    P = torch.randint(0, 256, (32, 32), generator=g, dtype=torch.uint8)
    S = (torch.rand(32, 1, generator=g) * 0.1 + 0.01).half()
    (W,) = emulate(unpack_int4, (32, 64, hi_first), {}, [P, S])
    assert torch.equal(W, _unpacked(P, S, hi_first))  # bit for bit: (q - 8) * s rounded once in fp16


def test_generic_dequant_gemm_with_packed_nest_matches_torch_in_the_emulator(tmp_path):
    # fp32: the recogniser does not take it, T.gemm runs on the FMA path; 2 K steps of a pipelined loop
    M, N, K = 4, 8, 64
    kw = dict(block_M=4, block_N=8, block_K=32, num_stages=2, threads=32)
    src = cuda_source(tmp_path, _with_kwargs(kw), M, N, K, 32, cubin=False)
    assert "uchar B_packed_vec_ptr[2];" in src  # fp32 chunks of 4 lanes: 2 packed bytes each
    g = torch.Generator().manual_seed(3)
    A = torch.randn(M, K, generator=g)
    B, Scale = dq.random_packed(N, K, 32, generator=g)
    (C,) = emulate(dq.dequant_gemm, (M, N, K, 32), kw, [A, B, Scale])
    torch.testing.assert_close(C, dq.reference(A, B, Scale), rtol=1e-4, atol=1e-4)


def _with_kwargs(kw):
    """``dq.dequant_gemm`` with ``kw`` bound, for ``cuda_source`` (which passes positional arguments only)."""

    class Bound:
        out_idx = dq.dequant_gemm.out_idx

        @staticmethod
        def get_program(*args):
            return dq.dequant_gemm.get_program(*args, **kw)

    return Bound

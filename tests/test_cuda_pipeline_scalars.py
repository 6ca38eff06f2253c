"""A scalar the pipelined loop body computes (``kv0 = first + k * block``) and its loads use: emulated on the CPU.

``T.Pipelined`` issues each iteration's ``T.copy`` loads ahead (and the first ones before the loop), where a
per-iteration scalar of the body is not defined: code generation failed with "Buffer kv0 is used before its
definition" (the flash-decoding example). tl.PipelineCUDA now reads the scalar's expression for the iteration it
issues the load for. The lowered CUDA program runs in tests/cuda_emulator.py against torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402


@tilelang.jit(out_idx=[-1])
def split_column_sums(M, N, splits, block=16, stages=2):
    """Y[s, :] = column sums of rows [s * M / splits, (s + 1) * M / splits) of X, one block per split."""
    per = M // splits

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((splits, N), "float32")):
        with T.Kernel(splits, threads=32) as sx:
            tile = T.alloc_shared((block, N), "float32")
            part = T.alloc_fragment((N,), "float32")
            acc = T.alloc_fragment((N,), "float32")
            T.clear(acc)
            first = sx * per
            for k in T.Pipelined(T.ceildiv(per, block), num_stages=stages):
                row0 = first + k * block
                T.copy(X[row0:row0 + block, 0:N], tile)
                T.reduce_sum(tile, part, dim=0)
                for j in T.Parallel(N):
                    acc[j] += part[j]
            T.copy(acc, Y[sx, 0:N])

    return main


def test_loads_of_a_pipelined_loop_use_the_body_scalar_of_their_own_iteration():
    x = torch.randn(96, 32)
    for stages in (2, 3):
        (y,) = emulate(split_column_sums, (96, 32, 2), dict(stages=stages), [x])
        torch.testing.assert_close(y, x.view(2, 48, 32).sum(1), rtol=1e-5, atol=1e-5)

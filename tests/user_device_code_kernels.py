"""Kernels that call a user's own CUDA device function (``T.import_source`` + ``T.call_extern``): a lop3 decoder
of eight unsigned int4 values packed in one uint32 into eight float16 (TileLang's dequantising kernels' kind of
helper). Shared by the compile tests (tests/test_user_device_code.py) and the GPU twin (tests/gpu/)."""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T

# out[2 i] = nibble i, out[2 i + 1] = nibble i + 4 of the word: (w >> 4 i) & 0x000f000f | 0x6400_6400 is the half2
# (1024 + n_lo, 1024 + n_hi) in one lop3; subtracting 1024 leaves the nibbles as float16
DECODE_U4X8 = r"""
__device__ __forceinline__ void decode_u4x8_to_f16(const unsigned int* src, half* dst) {
  const unsigned int w = *src;
  unsigned int* out = reinterpret_cast<unsigned int*>(dst);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned int h;
    asm volatile("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(h) : "r"(w >> (4 * i)), "r"(0x000f000fu),
                 "r"(0x64006400u));
    half2 v = __hsub2(*reinterpret_cast<half2*>(&h), __float2half2_rn(1024.0f));
    out[i] = *reinterpret_cast<unsigned int*>(&v);
  }
}
"""


@tilelang.jit(out_idx=[-1])
def decode_u4(N, threads=128):
    """Out[r, :] = the eight uint4 of W[r] as float16, through the imported decoder (one word per thread)."""

    @T.prim_func
    def main(W: T.Tensor((N,), "uint32"), Out: T.Tensor((N, 8), "float16")):
        with T.Kernel(T.ceildiv(N, threads), threads=threads) as bx:
            T.import_source(DECODE_U4X8)
            tx = T.get_thread_binding()
            w = T.alloc_local((1,), "uint32")
            h = T.alloc_local((8,), "float16")
            r = bx * threads + tx
            if r < N:
                w[0] = W[r]
                T.call_extern("handle", "decode_u4x8_to_f16", T.address_of(w[0]), T.address_of(h[0]))
                for j in T.serial(8):
                    Out[r, j] = h[j]

    return main


def decode_u4_reference(w: torch.Tensor) -> torch.Tensor:
    """What :data:`DECODE_U4X8` computes, in torch (``w`` int32 holding the uint32 words)."""
    order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    nib = (w.to(torch.int64)[:, None] >> (4 * order)[None, :]) & 0xF
    return nib.to(torch.float16)

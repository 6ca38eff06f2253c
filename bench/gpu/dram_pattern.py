"""How fast can the W4A16 decode kernel's weight reads be? A read-only probe of access patterns on the GPU.

Why this script exists: the fused W4A16 decode kernel (``tl::gemm_dq4g``) reads 32 MB of int4 weights laid out as
the program declares them, ``(N, K / 2)`` bytes, row-major. The mma.sync fragment fixes which rows a lane needs
(lane g of a quad group owns column n = g), so a warp's 16-byte loads cover 8 rows x 64 bytes per instruction. This
probe times that pattern against a contiguous one (each warp instruction reads 512 consecutive bytes of one row)
at the same bytes in flight per warp, with 1-4 tiles of loads in flight (register prefetch depth), so the kernel's
memory floor is measured, not guessed. CuPy only (no TVM): run on the GPU host.

    python bench/gpu/dram_pattern.py
"""

from __future__ import annotations

import cupy as cp

SRC = r"""
extern "C" __global__ void __launch_bounds__(128) probe(const unsigned char* __restrict__ W, unsigned* out,
                                                        int row_bytes, int k_share) {
  // block (bx, bz): rows bx*64 .. +64, bytes bz*k_share .. +k_share; 4 warps x 16 rows. PATTERN 0: a tile is
  // 16 rows x 128 B per warp, loaded as 8 rows x 64 B per instruction (the mma fragment's pattern); PATTERN 1: the
  // same bytes per tile as 4 rows x 512 B, one row per instruction.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int iters = k_share / TILE;
  const unsigned char* base = W + (long long)(blockIdx.x * 64 + warp * 16) * row_bytes + blockIdx.z * k_share;
  unsigned acc = 0;
  uint4 buf[DEPTH][4];
#define ADDR(it, j) (PATTERN == 0                                                        \
    ? base + ((j / 2) * 8 + g) * row_bytes + (it) * TILE + (j % 2) * 64 + q * 16          \
    : base + (((it) % 4) * 4 + j) * row_bytes + ((it) / 4) * 512 + lane * 16)
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
#pragma unroll
    for (int j = 0; j < 4; ++j) buf[d][j] = (d < iters) ? *(const uint4*)ADDR(d, j) : make_uint4(0, 0, 0, 0);
  for (int it0 = 0; it0 < iters; it0 += DEPTH) {  // unrolled by DEPTH: every slot index is a constant
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int it = it0 + d;
      uint4 cur[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) cur[j] = buf[d][j];
      if (it + DEPTH < iters) {
#pragma unroll
        for (int j = 0; j < 4; ++j) buf[d][j] = *(const uint4*)ADDR(it + DEPTH, j);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) acc ^= cur[j].x ^ cur[j].y ^ cur[j].z ^ cur[j].w;
      if (SYNC) __syncthreads();
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}
"""


def main() -> None:
    N, RB = 8192, 4096  # 8192 rows of 4096 bytes: the 16 x 8192 x 8192 W4A16 weights
    W = cp.random.randint(0, 255, size=(N * RB,), dtype=cp.uint8)
    out = cp.zeros(4, dtype=cp.uint32)
    flush = cp.empty(256 << 20, dtype=cp.uint8)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for pattern in (0, 1):
        for depth in (1, 2, 4):
            for split in (4, 8):
                for sync in (1, 0):
                    opts = ("-DTILE=128", f"-DDEPTH={depth}", f"-DPATTERN={pattern}", f"-DSYNC={sync}")
                    k = cp.RawKernel(SRC, "probe", options=opts)
                    k_share = RB // split
                    grid = (N // 64, 1, split)
                    times = []
                    for _ in range(30):
                        flush.fill(1)  # evict the weights from the 50 MB L2, as the benchmark's do_bench does
                        start.record()
                        k(grid, (128,), (W, out, cp.int32(RB), cp.int32(k_share)))
                        stop.record()
                        stop.synchronize()
                        times.append(cp.cuda.get_elapsed_time(start, stop))
                    times.sort()
                    ms = times[len(times) // 2]
                    print(f"pattern={'8rows x 64B' if pattern == 0 else '512B rows  '} depth={depth} split={split} "
                          f"sync={sync}: {ms * 1e3:6.1f} us  {N * RB / ms / 1e6:6.0f} GB/s")


if __name__ == "__main__":
    main()

"""How fast can the W4A16 decode kernel's weight reads be? A read-only probe of access patterns on the GPU.

Why this script exists: the fused W4A16 decode kernel (``tl::gemm_dq4g``) reads 32 MB of int4 weights laid out as
the program declares them, ``(N, K / 2)`` bytes, row-major. The mma.sync fragment fixes which rows a lane needs
(lane g of a quad group owns column n = g), so a warp's 16-byte loads cover 8 rows x 64 bytes per instruction. This
probe times that pattern against a contiguous one (each warp instruction reads 512 consecutive bytes of one row)
at the same bytes in flight per warp, with 1-4 tiles of loads in flight (register prefetch depth), and a plain
streaming read of the same bytes at several sizes (the floor, and the fixed cost of a short kernel), so the
kernel's memory floor is measured, not guessed. Each is timed after a *read* flush of the L2 (clean lines, as
``run.py``'s ``bench_ms_clean``) and after a *write* flush (as ``triton.testing.do_bench``). CuPy only (no TVM).

    python bench/gpu/dram_pattern.py [--flush read write]
"""

from __future__ import annotations

import argparse

import cupy as cp

SRC = r"""
#ifndef TILE
#define TILE 128
#define DEPTH 1
#define PATTERN 0
#define SYNC 1
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef WITH_A
#define WITH_A 0
#define CLUSTER 0
#endif
#if CLUSTER
#define CLUSTER_ATTR __cluster_dims__(1, 1, CLUSTER)
#else
#define CLUSTER_ATTR
#endif
__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
extern "C" __global__ void CLUSTER_ATTR __launch_bounds__(128) probe(const unsigned char* __restrict__ W,
                                                                     unsigned* out, int row_bytes, int k_share,
                                                                     const uint4* __restrict__ A) {
  // WITH_A: as the W4A16 kernel, each iteration also copies a 16 x 256 fp16 tile of A (8 KB, L2-resident) into a
  // 4-stage shared-memory ring with cp.async; CLUSTER: launched as clusters of CLUSTER blocks along z, ending with
  // two cluster barriers (the split-K reduction's synchronisation).
  __shared__ uint4 a_s[WITH_A ? 4 * 512 : 1];
#define A_AT(it, c) ((c) / 32 * 1024 + blockIdx.z * iters * 32 + (it) * 32 + (c) % 32)
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
  if (WITH_A) {
    for (int st = 0; st < 3; ++st) {
      for (int c = threadIdx.x; c < 512; c += 128) cp16(&a_s[st * 512 + c], A + A_AT(st, c));
      asm volatile("cp.async.commit_group;\n");
    }
  }
  for (int it0 = 0; it0 < iters; it0 += DEPTH) {  // unrolled by DEPTH: every slot index is a constant
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int it = it0 + d;
      if (WITH_A) {
        asm volatile("cp.async.wait_group 2;\n");
        __syncthreads();
        acc ^= a_s[(it % 4) * 512 + threadIdx.x].x;
        if (it + 3 < iters)
          for (int c = threadIdx.x; c < 512; c += 128)
            cp16(&a_s[((it + 3) % 4) * 512 + c], A + A_AT(it + 3, c));
        asm volatile("cp.async.commit_group;\n");
      }
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
#if CLUSTER
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
  if (acc == 0x12345678u) out[0] = acc;
}

// A plain streaming read: grid-stride over n16 16-byte words, UNROLL independent loads in flight per thread.
extern "C" __global__ void __launch_bounds__(256) stream(const uint4* __restrict__ W, unsigned* out, long long n16) {
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * UNROLL) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = i + u * stride < n16 ? W[i + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}

extern "C" __global__ void empty(unsigned* out) { if (threadIdx.x == 1023) out[0] = 1; }
"""


def timer(flush_kind: str):
    flush = cp.ones(256 << 20, dtype=cp.uint8)
    flush64 = flush.view(cp.int64)
    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def run(kern, grid, block, kargs, reps: int = 40) -> float:
        times = []
        for _ in range(reps):
            if flush_kind == "write":
                flush.fill(1)  # as do_bench: the L2 is left full of dirty lines
            else:
                flush64.sum()  # clean lines: nothing to write back
            start.record()
            kern(grid, block, kargs)
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop))
        times.sort()
        return times[len(times) // 2]

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flush", nargs="*", default=["read", "write"], choices=["read", "write"])
    ap.add_argument("--quick", action="store_true", help="the mma pattern at split 4 only")
    args = ap.parse_args()
    N, RB = 8192, 4096  # 8192 rows of 4096 bytes: the 16 x 8192 x 8192 W4A16 weights
    W = cp.random.randint(0, 255, size=(4 * N * RB,), dtype=cp.uint8)
    A = cp.random.randint(0, 255, size=(16 * 8192 * 2,), dtype=cp.uint8)  # the 16 x 8192 fp16 activations
    out = cp.zeros(4, dtype=cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for fk in args.flush:
        run = timer(fk)
        print(f"--- L2 emptied by a {fk} flush before each call ---")
        e = cp.RawKernel(SRC, "empty")
        print(f"empty kernel: {run(e, (1,), (32,), (out,)) * 1e3:6.1f} us")
        for unroll in (4, 8):
            k = cp.RawKernel(SRC, "stream", options=(f"-DUNROLL={unroll}",))
            for mb in (8, 16, 32, 64, 128):
                n16 = (mb << 20) // 16
                for bps in (4, 8):
                    ms = run(k, (sms * bps,), (256,), (W, out, cp.int64(n16)))
                    print(
                        f"stream {mb:4d} MB unroll={unroll} blocks={bps}/SM: {ms * 1e3:6.1f} us "
                        f"{(mb << 20) / ms / 1e6:6.0f} GB/s"
                    )
        variants = [(p, d, sp, 0, 0) for p in (0, 1) for d in (1, 2, 4) for sp in ((4,) if args.quick else (2, 4, 8))]
        # the W4A16 decode kernel's other work, one piece at a time: the A pipeline, the cluster launch
        variants += [(0, d, 4, wa, cl) for d in (1, 2) for wa, cl in ((1, 0), (0, 4), (1, 4))]
        for pattern, depth, split, with_a, cluster in variants:
            opts = (
                "-DTILE=128",
                f"-DDEPTH={depth}",
                f"-DPATTERN={pattern}",
                "-DSYNC=1",
                f"-DWITH_A={with_a}",
                f"-DCLUSTER={cluster}",
            )
            k = cp.RawKernel(SRC, "probe", options=opts)
            k_share = RB // split
            ms = run(k, (N // 64, 1, split), (128,), (W, out, cp.int32(RB), cp.int32(k_share), A))
            print(
                f"pattern={'8rows x 64B' if pattern == 0 else '512B rows  '} depth={depth} split={split}"
                f"{' +A pipeline' if with_a else ''}{f' +cluster {cluster}' if cluster else ''}: "
                f"{ms * 1e3:6.1f} us  {N * RB / ms / 1e6:6.0f} GB/s"
            )


if __name__ == "__main__":
    main()

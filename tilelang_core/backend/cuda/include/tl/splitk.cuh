// Split-K through a workspace in global memory: exact reduction of the partial accumulators of the S blocks of
// an output tile (tl.SplitKCUDA for any T.gemm kernel, tl.FuseDequantGemmCUDA for the fused W4A16 gemm).
//
// Why here and not in dequant.cuh: the reduction knows nothing of the operands; any kernel whose grid cannot fill
// the GPU splits its K loop over a new blockIdx.z and meets the shares here.
#pragma once
#include "tl/common.cuh"

namespace tl {

// -- split-K through global memory (any arch; the default) ------------------------------------------------------
// The S blocks blockIdx.z = 0..S-1 of output tile t = blockIdx.x + blockIdx.y * gridDim.x each accumulated one
// share of K into acc (R registers per thread, same layout in every block). Each block stores its partials to a
// workspace slot of the kernel's own module (splitk_ws: a __device__ array, so no allocation at launch), then
// arrives at the tile's arrival word; the block whose arrival completes the tile for this launch sums the S slots
// in rank order (deterministic: the same sum whichever block is last) and returns true — it alone runs the
// epilogue. No cluster: a cluster launch left some SMs without any block (ncu: sm__ctas_launched.min = 0) while
// others ran five, which cost a fifth of the W4A16 decode kernel's time. The workspace makes launches of one
// loaded kernel stream-ordered: the launcher synchronises when the stream changes (meta "serial_streams").
//
// The arrival word heals itself (docs/cuda.md, "the self-healing arrival counter"): it holds the launch's epoch
// (the low 48 bits of %gridid, the context's launch number of this grid, the same in every block of a launch and
// different in every launch) above a 16-bit count of the blocks of that launch that arrived. Nothing resets it: a
// word whose epoch is another launch's — the previous launch's complete count, or the count a launch that died
// half-way left behind — or whose count is already S counts as 0 for this launch.
constexpr int SPLITK_COUNT_BITS = 16;
constexpr unsigned long long SPLITK_COUNT_MASK = (1ull << SPLITK_COUNT_BITS) - 1;

template <int KEY, int N>
__device__ float splitk_ws[N];
template <int KEY, int N>
__device__ unsigned long long splitk_arrivals[N] = {};  // per tile: epoch << SPLITK_COUNT_BITS | count

// This launch's epoch: the grid's launch number in its context, cut to the bits above the count.
__device__ __forceinline__ unsigned long long splitk_epoch() {
  unsigned long long g;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(g));
  return g & (~0ull >> SPLITK_COUNT_BITS);
}

// Whether a word counts arrivals of this launch's tile: this epoch, and not yet complete.
template <int S>
__device__ __forceinline__ bool splitk_current(unsigned long long word, unsigned long long epoch) {
  return (word >> SPLITK_COUNT_BITS) == epoch && (word & SPLITK_COUNT_MASK) < S;
}

// One block's arrival (thread 0, after the block's partials are stored and a barrier): the number of blocks of
// this launch that have arrived at the tile, this one included (S: this block is the last). Fast path, the
// arrivals after a tile's first: one acquire-release add that finds this epoch's count. The first arrival of a
// launch finds another epoch: its add went into a stale word, which it replaces with "this epoch, 1" by an
// acquire-release CAS (or, if another block of this launch replaced it first, counts itself onto that). A stale
// word only ever gains adds from blocks that then repair it, so every block is counted once, in this epoch.
template <int S>
__device__ __forceinline__ unsigned splitk_arrive(unsigned long long* word) {
  const unsigned long long epoch = splitk_epoch();
  unsigned long long old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;\n" : "=l"(old) : "l"(word) : "memory");
  if (splitk_current<S>(old, epoch)) return static_cast<unsigned>(old & SPLITK_COUNT_MASK) + 1;
  unsigned long long expect = old + 1;  // the stale word as our add left it
  for (;;) {
    const unsigned long long next =
        splitk_current<S>(expect, epoch) ? expect + 1 : (epoch << SPLITK_COUNT_BITS) | 1ull;
    unsigned long long seen;
    asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, %3;\n"
                 : "=l"(seen) : "l"(word), "l"(expect), "l"(next) : "memory");
    if (seen == expect) return static_cast<unsigned>(next & SPLITK_COUNT_MASK);
    expect = seen;  // another block's add or CAS came first: decide again on what it left
  }
}

template <int R, int S, int THREADS, int TILES>
__device__ __forceinline__ bool splitk_global_reduce(float* acc) {
  __shared__ unsigned s_last;
  float* ws = splitk_ws<0, S * TILES * R * THREADS>;  // [tile][rank][r][thread]
  const int tid = threadIdx.x;
  const int tile = blockIdx.x + blockIdx.y * gridDim.x;
  float* base = ws + static_cast<long long>(tile) * S * R * THREADS;
  float* mine = base + static_cast<long long>(blockIdx.z) * R * THREADS;
#pragma unroll
  for (int r = 0; r < R; ++r) __stcg(mine + r * THREADS + tid, acc[r]);
  // the block's stores, then thread 0's acquire-release arrival (bar.sync makes them the atomic's: CUTLASS's
  // semaphore pattern; a __threadfence per thread cost ~1 us here)
  __syncthreads();
  if (tid == 0) s_last = splitk_arrive<S>(&splitk_arrivals<0, TILES>[tile]) == S;
  __syncthreads();
  if (!s_last) return false;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < S; ++s) v += __ldcg(base + (s * R + r) * THREADS + tid);
    acc[r] = v;
  }
  return true;  // the word stays "this epoch, S": the next launch's first arrival replaces it
}

// The same, the "last block" answer written to *last (1: this block holds the full sum and runs the epilogue, 0:
// it does not), so the call is a statement of its own and the epilogue an ordinary `if` (tl.SplitKCUDA).
template <int R, int S, int THREADS, int TILES>
__device__ __forceinline__ void splitk_global_reduce(float* acc, int* last) {
  *last = splitk_global_reduce<R, S, THREADS, TILES>(acc) ? 1 : 0;
}

}  // namespace tl

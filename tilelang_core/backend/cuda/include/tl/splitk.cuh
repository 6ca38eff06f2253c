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
// workspace slot of the kernel's own module (splitk_ws: a __device__ array, so no allocation at launch), then bumps
// the tile's counter; the block that arrives last sums the S slots in rank order (deterministic: the same sum
// whichever block is last), resets the counter for the next launch, and returns true — it alone runs the
// epilogue. No cluster: a cluster launch left some SMs without any block (ncu: sm__ctas_launched.min = 0) while
// others ran five, which cost a fifth of the W4A16 decode kernel's time. The workspace makes launches of one
// loaded kernel stream-ordered: the launcher synchronises when the stream changes (meta "serial_streams").
template <int KEY, int N>
__device__ float splitk_ws[N];
template <int KEY, int N>
__device__ unsigned splitk_sem[N] = {};

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
  // the block's stores, then one acquire-release atomic (bar.sync makes them the atomic's: CUTLASS's semaphore
  // pattern; a __threadfence per thread cost ~1 us here)
  __syncthreads();
  if (tid == 0) {
    unsigned prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
                 : "=r"(prev) : "l"(&splitk_sem<0, TILES>[tile]) : "memory");
    s_last = prev == S - 1;
  }
  __syncthreads();
  if (!s_last) return false;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = 0.f;
#pragma unroll
    for (int s = 0; s < S; ++s) v += __ldcg(base + (s * R + r) * THREADS + tid);
    acc[r] = v;
  }
  if (tid == 0) atomicExch(&splitk_sem<0, TILES>[tile], 0u);
  return true;
}

// The same, the "last block" answer written to *last (1: this block holds the full sum and runs the epilogue, 0:
// it does not), so the call is a statement of its own and the epilogue an ordinary `if` (tl.SplitKCUDA).
template <int R, int S, int THREADS, int TILES>
__device__ __forceinline__ void splitk_global_reduce(float* acc, int* last) {
  *last = splitk_global_reduce<R, S, THREADS, TILES>(acc) ? 1 : 0;
}

}  // namespace tl

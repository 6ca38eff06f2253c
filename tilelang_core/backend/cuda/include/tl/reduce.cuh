// Block-wide all-reduce for T.reduce_*: warp shuffles, then shared memory across warps.
#pragma once
#include "tl/common.cuh"

namespace tl {

struct SumOp {
  template <typename T>
  static __device__ __forceinline__ T apply(T a, T b) { return a + b; }
};
struct MaxOp {
  template <typename T>
  static __device__ __forceinline__ T apply(T a, T b) { return a > b ? a : b; }
};
struct MinOp {
  template <typename T>
  static __device__ __forceinline__ T apply(T a, T b) { return a < b ? a : b; }
};
// nan_propagate=True: a NaN on either side wins (a + b is NaN then), as torch.amax / amin
struct MaxNanOp {
  template <typename T>
  static __device__ __forceinline__ T apply(T a, T b) { return (a != a || b != b) ? T(a + b) : (a > b ? a : b); }
};
struct MinNanOp {
  template <typename T>
  static __device__ __forceinline__ T apply(T a, T b) { return (a != a || b != b) ? T(a + b) : (a < b ? a : b); }
};

// vals[0..D) hold each thread's partial results; on return every thread of the block holds the combination of
// all threads' partials. scratch: shared memory of at least (THREADS / 32) * D elements, private to this call
// site (it is reused only by later executions of the same call, which the leading barrier protects).
// Blocks of fewer than 32 threads (threads=1 ...): one partial warp; combined through scratch of THREADS * D
// elements instead of shuffles (a full-mask shuffle would name lanes that do not exist).
template <class Op, int THREADS, int D, typename T>
__device__ __forceinline__ void block_allreduce(T* vals, T* scratch) {
  static_assert(THREADS < 32 || THREADS % 32 == 0, "block_allreduce: threads must be under 32 or a multiple of 32");
  if constexpr (THREADS < 32) {
    if constexpr (THREADS > 1) {
      __syncthreads();  // an earlier execution of this call may still be reading scratch
#pragma unroll
      for (int d = 0; d < D; ++d) scratch[threadIdx.x * D + d] = vals[d];
      __syncthreads();
#pragma unroll
      for (int d = 0; d < D; ++d) {
        T v = scratch[d];
        for (int t = 1; t < THREADS; ++t) v = Op::apply(v, scratch[t * D + d]);
        vals[d] = v;
      }
    }
    return;
  }
#pragma unroll
  for (int d = 0; d < D; ++d) {
    T v = vals[d];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, off));
    vals[d] = v;
  }
  if constexpr (THREADS > 32) {
    constexpr int W = THREADS / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) {
#pragma unroll
      for (int d = 0; d < D; ++d) scratch[warp * D + d] = vals[d];
    }
    __syncthreads();
#pragma unroll
    for (int d = 0; d < D; ++d) {
      T v = scratch[d];
#pragma unroll
      for (int w = 1; w < W; ++w) v = Op::apply(v, scratch[w * D + d]);
      vals[d] = v;
    }
  }
}

// Row reduction of an mma.sync accumulator (the `mma_row` layout): vals[0..R) are this thread's partials for the
// R rows it holds (rows lane/4 and lane/4 + 8 of each 16-row atom of its warp row). The four lanes of a quad hold
// the same rows, so two xor-shuffles combine them; when the warp grid splits N (WARP_N > 1), the WARP_N warps of
// a warp row combine through shared memory (scratch: (THREADS / 32) * 8 * R elements; unused when WARP_N == 1).
// Every holder ends with the same value (same combination order).
template <class Op, int WARP_N, int R, typename T>
__device__ __forceinline__ void row_allreduce(T* vals, T* scratch) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    T v = vals[r];
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, 2));
    vals[r] = v;
  }
  if constexpr (WARP_N > 1) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wr = warp / WARP_N;
    __syncthreads();  // an earlier execution of this call may still be reading scratch
    if (lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) scratch[(warp * 8 + lane / 4) * R + r] = vals[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      T v = scratch[((wr * WARP_N) * 8 + lane / 4) * R + r];
#pragma unroll
      for (int c = 1; c < WARP_N; ++c) v = Op::apply(v, scratch[((wr * WARP_N + c) * 8 + lane / 4) * R + r]);
      vals[r] = v;
    }
  }
}

}  // namespace tl

// Asynchronous global->shared copies (cp.async, sm_80+) for tilelang_core's software pipelines.
#pragma once
#include "tl/common.cuh"

namespace tl {

// 16-byte copy, bypassing L1 (.cg), fetching whole 128-byte L2 lines: both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

// Same, but when `pred` is false nothing is read and the 16 shared bytes are zero-filled (ragged tile edges).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool pred) {
  int src_size = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_size));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace tl

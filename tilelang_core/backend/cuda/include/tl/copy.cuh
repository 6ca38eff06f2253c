// Asynchronous global->shared copies (cp.async, sm_80+) for tilelang_core's software pipelines.
#pragma once
#include "tl/common.cuh"

// The L2 prefetch of every cp.async read (pass_configs "tl.cuda.l2_prefetch": 0, 64, 128 or 256 bytes; the backend
// defines TL_L2_PREFETCH before this header when the key is not its default, 128).
#ifndef TL_L2_PREFETCH
#define TL_L2_PREFETCH 128
#endif
#if TL_L2_PREFETCH == 256
#define TL_CP_ASYNC_PREFETCH ".L2::256B"
#elif TL_L2_PREFETCH == 64
#define TL_CP_ASYNC_PREFETCH ".L2::64B"
#elif TL_L2_PREFETCH == 0
#define TL_CP_ASYNC_PREFETCH ""
#else
#define TL_CP_ASYNC_PREFETCH ".L2::128B"
#endif

namespace tl {

// 16-byte copy, bypassing L1 (.cg), prefetching TL_L2_PREFETCH bytes into L2: both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global" TL_CP_ASYNC_PREFETCH " [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

// Same, but when `pred` is false nothing is read and the 16 shared bytes are zero-filled (ragged tile edges).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool pred) {
  int src_size = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global" TL_CP_ASYNC_PREFETCH " [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_size));
}

// L2 eviction priorities of T.copy(..., eviction_policy=): 1 evict_first, 2 evict_last (createpolicy, sm_80+).
template <int POLICY>
__device__ __forceinline__ uint64_t l2_policy() {
  static_assert(POLICY == 1 || POLICY == 2, "eviction policy: 1 (evict_first) or 2 (evict_last)");
  uint64_t p;
  if constexpr (POLICY == 1) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  } else {
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  }
  return p;
}

// cp_async_16 / cp_async_16_zfill whose global read carries the L2 cache policy POLICY (.L2::cache_hint).
template <int POLICY>
__device__ __forceinline__ void cp_async_16_hint(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint" TL_CP_ASYNC_PREFETCH " [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "l"(l2_policy<POLICY>()));
}

template <int POLICY>
__device__ __forceinline__ void cp_async_16_zfill_hint(void* smem, const void* gmem, bool pred) {
  int src_size = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint" TL_CP_ASYNC_PREFETCH " [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(src_size), "l"(l2_policy<POLICY>()));
}

// A synchronous 16-byte copy from global memory whose load carries the L2 cache policy POLICY (evict_first also
// skips L1: the data is read once); `dst` is a 16-byte aligned shared or global address.
template <int POLICY>
__device__ __forceinline__ void copy_16_hint(void* dst, const void* gmem) {
  uint4 v;
  if constexpr (POLICY == 1) {
    asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(gmem), "l"(l2_policy<POLICY>()));
  } else {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(gmem), "l"(l2_policy<POLICY>()));
  }
  *reinterpret_cast<uint4*>(dst) = v;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace tl

// Common helpers of the tilelang_core CUDA templates (see tl.cuh).
#pragma once
// The standard headers the generated kernel's preamble includes come first, here, so that NVRTC's automatic
// precompiled header (the first #include of a source: tl/tl.cuh) holds all of them; parsing cuda/std/type_traits
// alone is most of a small kernel's front-end time.
#ifdef __CUDACC_RTC__
#include <cuda/std/cstdint>
#include <cuda/std/type_traits>
#else
#include <cstdint>
#include <type_traits>
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// TVM's CUDA codegen prints a bfloat16 infinity constant as __float2bfloat16_rn(inff) (its float printer's
// spelling of inf), which no CUDA header defines.
#ifndef inff
#define inff __int_as_float(0x7f800000)
#endif

namespace tl {

// A vector of TVM's wide storage types (float32x8 in ulonglong4, int8x16 in int4, ...) from its lanes in order,
// for the broadcasts TVM's code generator prints with one argument per lane (backend/cuda/codegen.py).
template <typename V, typename L, typename... R>
__device__ __forceinline__ V pack_lanes(L first, R... rest) {
  static_assert(sizeof(V) == sizeof(L) * (1 + sizeof...(R)), "pack_lanes: lanes do not fill the vector");
  const L lanes[] = {first, static_cast<L>(rest)...};
  V v;
  L* out = reinterpret_cast<L*>(&v);  // the way TVM's own code reads the lanes of these vectors
#pragma unroll
  for (int i = 0; i < 1 + static_cast<int>(sizeof...(R)); ++i) {
    out[i] = lanes[i];
  }
  return v;
}

// 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// XOR swizzle of a byte offset inside a shared tile: the 16-byte chunk index (bits 4..6) is XOR-ed with bits
// SHIFT..SHIFT+2 (the row for rows of >= 128 bytes, else the 128-byte line). SHIFT == 0: no swizzle.
// Must match tilelang_core/transform/cuda/layouts.py:swizzle_expr.
// SHIFT = 200 + s (layouts.py:run_swizzle_code, tl.cuda.fragment_a_swizzle): the same with chunk bit 5 also XOR-ed
// with offset bit 7, for A tiles read in 64-byte lane runs (lanes q and q + 2: 128 bytes apart, other banks).
template <int SHIFT>
__device__ __forceinline__ int swizzle(int byte_off) {
  if constexpr (SHIFT == 0) {
    return byte_off;
  } else if constexpr (SHIFT >= 200 && SHIFT < 1000) {
    return byte_off ^ ((((byte_off >> (SHIFT - 200)) & 7) ^ (((byte_off >> 7) & 1) << 1)) << 4);
  } else {
    return byte_off ^ (((byte_off >> SHIFT) & 7) << 4);
  }
}

// 2^x with the SFU's ex2.approx.ftz (tl.FastExpCUDA): relative error ~2^-22, subnormal results flush to zero.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tl

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

// A float32x8 vector in TVM's storage type for it (ulonglong4: lanes 2k and 2k+1 in component k, low bits first),
// for the broadcasts TVM's code generator prints with eight float arguments (backend/cuda/codegen.py).
__device__ __forceinline__ ulonglong4 make_float32x8(float a, float b, float c, float d, float e, float f,
                                                     float g, float h) {
  auto pack = [](float lo, float hi) {
    return (static_cast<unsigned long long>(__float_as_uint(hi)) << 32) | __float_as_uint(lo);
  };
  return make_ulonglong4(pack(a, b), pack(c, d), pack(e, f), pack(g, h));
}

// 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// XOR swizzle of a byte offset inside a shared tile: the 16-byte chunk index (bits 4..6) is XOR-ed with bits
// SHIFT..SHIFT+2 (the row for rows of >= 128 bytes, else the 128-byte line). SHIFT == 0: no swizzle.
// Must match tilelang_core/transform/cuda/layouts.py:swizzle_expr.
template <int SHIFT>
__device__ __forceinline__ int swizzle(int byte_off) {
  if constexpr (SHIFT == 0) {
    return byte_off;
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

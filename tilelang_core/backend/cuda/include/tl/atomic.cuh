// Atomic max / min for T.atomic_max / T.atomic_min (tl.LowerTileOpsCUDA), relaxed like atomicAdd.
//
// 32- and 64-bit integers use CUDA's atomicMax/atomicMin. Floating types (float, double, half, bfloat16) have no
// hardware max/min atomic: a compare-and-swap loop on the bits of the same width retries only while the value
// would still improve the stored one. A NaN value is skipped (it never compares greater or smaller), as the
// reductions and fmaxf skip it; a NaN already stored stays.
#pragma once
#include "tl/common.cuh"

namespace tl {

// bit casts of the floating types to the unsigned type atomicCAS takes (NVRTC has no __builtin_memcpy)
__device__ __forceinline__ unsigned int atomic_to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ float atomic_from_bits(unsigned int b, float) { return __uint_as_float(b); }
__device__ __forceinline__ unsigned long long atomic_to_bits(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(v));
}
__device__ __forceinline__ double atomic_from_bits(unsigned long long b, double) {
  return __longlong_as_double(static_cast<long long>(b));
}
__device__ __forceinline__ unsigned short atomic_to_bits(half v) { return __half_as_ushort(v); }
__device__ __forceinline__ half atomic_from_bits(unsigned short b, half) { return __ushort_as_half(b); }
__device__ __forceinline__ unsigned short atomic_to_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ __nv_bfloat16 atomic_from_bits(unsigned short b, __nv_bfloat16) {
  return __ushort_as_bfloat16(b);
}

template <bool MAX, typename T>
__device__ __forceinline__ void atomic_cas_minmax(T* addr, T val) {
  using U = decltype(atomic_to_bits(val));
  U* p = reinterpret_cast<U*>(addr);
  U old = *reinterpret_cast<volatile U*>(p);
  const U want = atomic_to_bits(val);
  while (true) {
    U assumed = old;
    T cur = atomic_from_bits(assumed, val);
    bool better = MAX ? (val > cur) : (val < cur);
    if (!better) return;
    old = atomicCAS(p, assumed, want);
    if (old == assumed) return;
  }
}

template <typename T>
__device__ __forceinline__ void atomic_max(T* addr, T val) { atomic_cas_minmax<true>(addr, val); }
template <typename T>
__device__ __forceinline__ void atomic_min(T* addr, T val) { atomic_cas_minmax<false>(addr, val); }

// integers: the hardware atomics (int64_t is `long` on LP64, which atomicMax takes as long long)
#define TL_ATOMIC_MINMAX_INT(T, C)                                                                              \
  __device__ __forceinline__ void atomic_max(T* addr, T val) { atomicMax(reinterpret_cast<C*>(addr), (C)val); } \
  __device__ __forceinline__ void atomic_min(T* addr, T val) { atomicMin(reinterpret_cast<C*>(addr), (C)val); }
TL_ATOMIC_MINMAX_INT(int, int)
TL_ATOMIC_MINMAX_INT(unsigned int, unsigned int)
TL_ATOMIC_MINMAX_INT(long, long long)
TL_ATOMIC_MINMAX_INT(unsigned long, unsigned long long)
TL_ATOMIC_MINMAX_INT(long long, long long)
TL_ATOMIC_MINMAX_INT(unsigned long long, unsigned long long)
#undef TL_ATOMIC_MINMAX_INT

// Vector float adds of 2 / 4 consecutive elements (tl.VectorAtomicsCUDA, pass_configs tl.cuda.vector_atomics):
// one red.global.add.v2/v4.f32 (sm_90+, PTX 8.1; SASS REDG.E.ADD.F32x2 / F32x4) instead of 2 / 4 element REDs:
// half / a quarter of the instructions and one request per sector. Each element is added atomically, as with
// atomicAdd (the vector is not one atomic unit); `addr` is 8- / 16-byte aligned (the pass proves it). Older
// architectures add element by element.
__device__ __forceinline__ void atomic_add_v2(float* addr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
#endif
}
__device__ __forceinline__ void atomic_add_v4(float* addr, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
#else
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
  atomicAdd(addr + 2, c);
  atomicAdd(addr + 3, d);
#endif
}

}  // namespace tl


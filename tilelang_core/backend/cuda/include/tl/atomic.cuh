// Atomic max / min for T.atomic_max / T.atomic_min (tl.LowerTileOpsCUDA), relaxed like atomicAdd.
//
// 32- and 64-bit integers use CUDA's atomicMax/atomicMin. Floating types (float, double, half, bfloat16) have no
// hardware max/min atomic: a compare-and-swap loop on the bits of the same width retries only while the value
// would still improve the stored one. A NaN value is skipped (it never compares greater or smaller), as the
// reductions and fmaxf skip it; a NaN already stored stays.
#pragma once
#include "tl/common.cuh"

namespace tl {

template <typename T> struct atomic_bits;
template <> struct atomic_bits<float> { using type = unsigned int; };
template <> struct atomic_bits<double> { using type = unsigned long long; };
template <> struct atomic_bits<half> { using type = unsigned short; };
template <> struct atomic_bits<__nv_bfloat16> { using type = unsigned short; };

template <bool MAX, typename T>
__device__ __forceinline__ void atomic_cas_minmax(T* addr, T val) {
  using U = typename atomic_bits<T>::type;
  U* p = reinterpret_cast<U*>(addr);
  U old = *reinterpret_cast<volatile U*>(p);
  while (true) {
    U assumed = old;
    T cur;
    __builtin_memcpy(&cur, &assumed, sizeof(T));
    bool better = MAX ? (val > cur) : (val < cur);
    if (!better) return;
    U want;
    __builtin_memcpy(&want, &val, sizeof(T));
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

}  // namespace tl

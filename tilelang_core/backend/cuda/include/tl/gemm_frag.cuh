// One k-step of mma.sync.m16n8k16 whose B fragments the caller computed in registers (tl.DequantFragmentsCUDA).
//
// Why: a T.gemm whose B tile a T.Parallel nest decodes (dequantised weights) need not store the decoded tile in
// shared memory and read it back with ldmatrix: each thread evaluates the nest's expression at the (k, n) of its
// own B fragment elements, straight from the packed bytes, and this template issues the mma with them.
//
// The k order inside a tile is permuted (a dot product's terms may be summed in any order, as long as A and B
// agree): with CH = the k run of one lane (4, 8, 16 or 32; 4 * CH divides K), k-step kk = g * (CH/4) + t uses, in
// lane l (q = l % 4, r = l / 4), the physical k = g*4*CH + q*CH + t*4 + e for e = 0..3 where m16n8k16 puts the
// logical rows 2q, 2q+1, 2q+8, 2q+9. So over the CH/4 steps of a group a lane's k are one contiguous run of CH:
// its packed weights are one wide load, and its A elements are one 8-byte shared load per row and step.
//
// A: the M x K row-major shared tile, XOR-swizzled with SWZ_A (tl::swizzle); warp (wr, wc) of the WARP_M x
// WARP_N grid owns rows wr*WM .. and columns wc*WN .. as in tl::gemm_ss. bfrag: NT x 4 elements,
// bfrag[ni*4 + e] = B(k = the physical k of e, n = wc*WN + ni*8 + r). C: the mma accumulator registers
// ((mi * NT) + ni) * 4 + i, the layout of tl::gemm_ss.
#pragma once
#include "tl/gemm.cuh"

namespace tl {

template <int M, int N, int K, int WARP_M, int WARP_N, int SWZ_A, int CH, int KK, typename T>
__device__ __forceinline__ void gemm_rb_step(const T* A, const T* bfrag, float* C) {
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  constexpr int STEPS = CH / 4;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % (4 * CH) == 0 && CH % 4 == 0 && KK < K / 16,
                "gemm_rb_step: tile does not fit the warp grid or the k permutation");
  constexpr int ES = sizeof(T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N;
  const int q = lane % 4, r = lane / 4;
  const int col = (KK / STEPS) * 4 * CH + q * CH + (KK % STEPS) * 4;
  const char* a_bytes = reinterpret_cast<const char*>(A);
  const unsigned* b32 = reinterpret_cast<const unsigned*>(bfrag);
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    const int row = wr * WM + mi * 16 + r;
    const uint2 lo = *reinterpret_cast<const uint2*>(a_bytes + swizzle<SWZ_A>((row * K + col) * ES));
    const uint2 hi = *reinterpret_cast<const uint2*>(a_bytes + swizzle<SWZ_A>(((row + 8) * K + col) * ES));
    const unsigned a[4] = {lo.x, hi.x, lo.y, hi.y};
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      const unsigned b[2] = {b32[ni * 2], b32[ni * 2 + 1]};
      Mma16816<T>::run(C + (mi * NT + ni) * 4, a, b);
    }
  }
}

}  // namespace tl

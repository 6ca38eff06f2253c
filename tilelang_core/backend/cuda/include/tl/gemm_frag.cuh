// One k-step of mma.sync.m16n8k16 whose B fragments the caller computed in registers (tl.DequantFragmentsCUDA).
//
// Why: a T.gemm whose B tile a T.Parallel nest decodes (dequantised weights) need not store the decoded tile in
// shared memory and read it back with ldmatrix: each thread evaluates the nest's expression at the (k, n) of its
// own B fragment elements, straight from the packed bytes, and this template issues the mma with them.
//
// The k order inside a tile is permuted (a dot product's terms may be summed in any order, as long as A and B
// agree): with CH = the k run of one lane (4, 8, 16 or 32; 4 * CH divides K), k-step kk = g * (CH/4) + t uses, in
// lane l (q = l % 4, r = l / 4), k in the run g*4*CH + q*CH .. + CH where m16n8k16 puts the logical rows 2q, 2q+1
// (one 32-bit register of B) and 2q+8, 2q+9 (the other). So over the CH/4 steps of a group a lane's k are one
// contiguous run of CH: its packed weights are one wide load. Inside the run, register halves are paired D apart
// (D = 1, 2 or 4): pair p holds k = 2D*(p/D) + p%D and that + D, step t takes pairs 2t (rows 2q, 2q+1) and 2t+1
// (rows 2q+8, 2q+9). D = 1 is k = 4t .. 4t+3 in order; D = 4 pairs the nibbles 16 bits apart in one 32-bit word
// of int4 weights (D = 2 the bytes of int8), so the caller can make both halves with one word operation. A is
// loaded with the same permutation: one 8-byte shared load per row and step (D = 4: 16 bytes per two steps) and,
// for D > 1, two byte permutes.
//
// A: the M x K row-major shared tile, XOR-swizzled with SWZ_A (tl::swizzle); warp (wr, wc) of the WARP_M x
// WARP_N grid owns rows wr*WM .. and columns wc*WN .. as in tl::gemm_ss. bfrag: NT x 4 elements,
// bfrag[ni*4 + e] = B(k = the physical k of e, n = wc*WN + ni*8 + r). C: the mma accumulator registers
// ((mi * NT) + ni) * 4 + i, the layout of tl::gemm_ss.
#pragma once
#include "tl/gemm.cuh"

namespace tl {

// One LOP3 of three words with the PTX truth table LUT (0xEA: (a & b) | c; 0x6A: (a & b) ^ c): the word-pair decode
// (tl.DequantFragmentsCUDA's fragment_pairs.py) masks two bit fields and sets the exponent bits in one instruction,
// where ptxas makes two LOP3 of the C expression (one immediate per LOP3).
template <int LUT>
__device__ __forceinline__ unsigned lop3(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return d;
}

// PTX prmt.b32 (default mode): byte i of d is byte c[4i+2:4i] of {b, a}, its sign replicated when c[4i+3] is set.
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// A 16-entry byte table looked up by the four nibbles of 16-bit group G of w (tl.DequantFragmentsCUDA's
// fragment_tables.py: any decode of a 4-bit field, e.g. fp4 e2m1, whose 16 fp16/bf16 values the compiler
// tabulated): byte i of the result is table[nibble 4G + i of w], entry e in byte e % 4 of t[e / 4]. The nibbles
// are prmt selectors: one prmt looks up entries 0..7 (the top bit masked off), a second 8..15, and a third makes
// the byte mask of the nibbles' top bits (bit 3 of nibble i sits at bit 7 of a byte of w << 4 or of w, which prmt's
// sign mode replicates); one LOP3 selects. MASK: the field's mask (1, 3, 7: entries 0..MASK, one prmt).
template <int G, int MASK>
__device__ __forceinline__ unsigned nib_lut4(unsigned w, unsigned t0, unsigned t1, unsigned t2, unsigned t3) {
  const unsigned x = G ? (w >> 16) : w;
  constexpr unsigned LOW = (MASK & 7) * 0x1111u;
  const unsigned lo = prmt(t0, t1, x & LOW);
  if constexpr (MASK < 8) {
    return lo;
  } else {
    const unsigned hi = prmt(t2, t3, x & LOW);
    const unsigned m = prmt(w << 4, w, G ? 0xFBEAu : 0xD9C8u);
    return lop3<0xCA>(m, hi, lo);  // (m & hi) | (~m & lo)
  }
}

// 16 bytes of a lane's packed run straight from global memory (tl.cuda.dequant_fragments_direct), evict-first
// (ld.global.cs: the weights are read once), zeros where pred is false (past the tensor, as the T.copy's zero fill).
// src is 16-byte aligned (the pass proves it); dst is the lane's register array.
__device__ __forceinline__ void ldg_cs16(void* dst, const void* src, int pred) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (pred) v = __ldcs(reinterpret_cast<const uint4*>(src));
  *reinterpret_cast<uint4*>(dst) = v;
}

// 16 bytes of a lane's packed run from a shared tile (tl.cuda.swizzle_packed_tiles): one 128-bit shared load where
// the element-wise vector loads of 8-bit data stop at 8 bytes. src is 16-byte aligned (the pass proves it) and, in a
// swizzled tile, one whole 16-byte chunk; dst is the lane's register array.
__device__ __forceinline__ void lds16(void* dst, const void* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

template <int M, int N, int K, int WARP_M, int WARP_N, int SWZ_A, int CH, int KK, int D, typename T>
__device__ __forceinline__ void gemm_rb_step(const T* A, const T* bfrag, float* C) {
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  constexpr int STEPS = CH / 4;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % (4 * CH) == 0 && CH % 4 == 0 && KK < K / 16,
                "gemm_rb_step: tile does not fit the warp grid or the k permutation");
  static_assert(D == 1 || D == 2 || (D == 4 && CH % 8 == 0), "gemm_rb_step: pairs D apart must fit the run");
  constexpr int ES = sizeof(T);
  constexpr int G = KK / STEPS, TS = KK % STEPS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N;
  const int q = lane % 4, r = lane / 4;
  // the first k of the window of A this step reads: 4 halves at 4t (D = 1, 2), 8 halves at 8(t/2) (D = 4)
  const int col = G * 4 * CH + q * CH + (D == 4 ? (TS / 2) * 8 : TS * 4);
  const char* a_bytes = reinterpret_cast<const char*>(A);
  const unsigned* b32 = reinterpret_cast<const unsigned*>(bfrag);
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    unsigned a[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows r and r + 8: registers a[h] (pair 2t) and a[2 + h] (pair 2t + 1)
      const int row = wr * WM + mi * 16 + r + 8 * h;
      const char* at = a_bytes + swizzle<SWZ_A>((row * K + col) * ES);
      if constexpr (D == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(at);
        const unsigned lo = (TS % 2) ? v.y : v.x, hi = (TS % 2) ? v.w : v.z;
        a[h] = __byte_perm(lo, hi, 0x5410);
        a[2 + h] = __byte_perm(lo, hi, 0x7632);
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(at);
        if constexpr (D == 2) {
          a[h] = __byte_perm(v.x, v.y, 0x5410);
          a[2 + h] = __byte_perm(v.x, v.y, 0x7632);
        } else {
          a[h] = v.x;
          a[2 + h] = v.y;
        }
      }
    }
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      const unsigned b[2] = {b32[ni * 2], b32[ni * 2 + 1]};
      Mma16816<T>::run(C + (mi * NT + ni) * 4, a, b);
    }
  }
}

}  // namespace tl

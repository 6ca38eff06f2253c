// W4A16 tensor-core GEMM step with the int4 weights unpacked in registers (tl.FuseDequantGemmCUDA).
//
// C (M x N, mma accumulator layout of a WARP_M x WARP_N warp grid) += A (M x K, fp16, shared, swizzle SWZ_A)
// * W^T, where W (N x K) = (q - z) * s and q are the nibbles of P (N x K/2 bytes, shared, unswizzled; byte b of a
// row holds k = 2b in its low nibble, 2b + 1 in its high nibble).
//
// Lane l (g = l/4, q = l%4) of a warp owns B column n = g of each 8-column atom. For every 128-wide k chunk it
// loads the 16 bytes (32 weights, k in [k0, k0 + 32) with k0 = chunk*128 + 32q) of that row with one
// ld.shared.v4. A 32-bit word W of them holds k0' + 0..7 (k0' = k0 + 8w) as nibbles 0..7, and
// (W >> 4s) & 0x000F000F is the pair (nibble s, nibble s+4): or-ed with 0x6400 per half it is the half2
// (1024 + q_s, 1024 + q_{s+4}); subtracting 1024 + z (MAGIC, exact) and multiplying by the scale gives the
// weights, bit-identical to the program's fp16 (q - z) * s. Since the k order of a dot product is free, the mma
// k-step h (0, 1) of word w uses b0 = pair(2h), b1 = pair(2h + 1), i.e. logical k (2q, 2q+1, 2q+8, 2q+9) =
// physical k0' + (2h, 2h+4, 2h+1, 2h+5); the A fragment is built from one 16-byte load of the same 8 physical k
// of rows g and g + 8 and two byte permutes per register. (Lane q walks its four words starting at word q, which
// keeps the A loads free of bank conflicts; A and B of a lane always use the same word, so the sum is unchanged.) sc: this thread's scales, sc[ni * NC + chunk] (NC == 1:
// one per row). MODE is a measurement switch (TILELANG_CORE_CUDA_DQ4_MODE): 0 computes; 1 does nothing (the
// kernel is then its memory pipeline alone); 2 unpacks but skips the mma.sync (xor-folds the weights into C[0]).
// SETS > 1 accumulates successive k-steps into SETS register sets (summed into C at the end of the call): at decode
// sizes a warp has only MT * NT accumulators, and one dependent mma.sync chain each would bound the loop by the
// mma latency.
#pragma once
#include "tl/common.cuh"
#include "tl/gemm.cuh"

namespace tl {

__device__ __forceinline__ uint4 lds128(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// (nibbles s, s+4 of w) -> half2 (q_s - z, q_{s+4} - z) * scale, as the 32-bit register mma.sync takes.
template <int MAGIC>
__device__ __forceinline__ unsigned dq4_pair(unsigned w, half2 scale) {
  const unsigned x = (w & 0x000F000Fu) | 0x64006400u;
  const half2 h = *reinterpret_cast<const half2*>(&x);
  const half2 m = __half2half2(__ushort_as_half(static_cast<unsigned short>(MAGIC)));
  const half2 r = __hmul2(__hsub2(h, m), scale);
  return *reinterpret_cast<const unsigned*>(&r);
}

template <int M, int N, int K, int WARP_M, int WARP_N, int SWZ_A, int MAGIC, int NC, int SETS = 1, int MODE = 0>
__device__ __forceinline__ void gemm_dq4(const half* A, const unsigned char* P, const half* sc, float* C) {
  if constexpr (MODE == 1) return;
  unsigned fold = 0;
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % 128 == 0, "gemm_dq4: tile does not fit the warp grid");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N, wc = warp % WARP_N;
  const int g = lane / 4, q = lane % 4;
  const unsigned a_base = smem_addr(A), p_base = smem_addr(P);
  float xacc[SETS > 1 ? SETS - 1 : 1][MT * NT * 4];
#pragma unroll
  for (int s = 0; s + 1 < SETS; ++s) {
#pragma unroll
    for (int r = 0; r < MT * NT * 4; ++r) xacc[s][r] = 0.f;
  }
#pragma unroll
  for (int kc = 0; kc < K / 128; ++kc) {
    const int k0 = kc * 128 + q * 32;
    uint4 bw[NT];
    half2 s2[NT];
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      uint4 v = lds128(p_base + (wc * WN + ni * 8 + g) * (K / 2) + k0 / 2);
      // lane q takes its four words in the order q, q+1, ... (mod 4): the A chunks the lanes of a quarter warp
      // read at one step then fall in distinct bank groups (without it lanes q and q+2 collide: 2-way conflicts)
      if (q & 1) v = make_uint4(v.y, v.z, v.w, v.x);
      if (q & 2) v = make_uint4(v.z, v.w, v.x, v.y);
      bw[ni] = v;
      s2[ni] = __half2half2(sc[ni * NC + (NC == 1 ? 0 : kc)]);
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int kw = k0 + 8 * ((w + q) & 3);  // the physical k of this step's word for this lane
      unsigned a[2][MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        const int row = wr * WM + mi * 16 + g;
        const uint4 lo = lds128(a_base + swizzle<SWZ_A>((row * K + kw) * 2));
        const uint4 hi = lds128(a_base + swizzle<SWZ_A>(((row + 8) * K + kw) * 2));
        a[0][mi][0] = __byte_perm(lo.x, lo.z, 0x5410);  // row g:     k0' + 0, + 4
        a[0][mi][1] = __byte_perm(hi.x, hi.z, 0x5410);  // row g + 8
        a[0][mi][2] = __byte_perm(lo.x, lo.z, 0x7632);  // row g:     k0' + 1, + 5
        a[0][mi][3] = __byte_perm(hi.x, hi.z, 0x7632);
        a[1][mi][0] = __byte_perm(lo.y, lo.w, 0x5410);  // k0' + 2, + 6
        a[1][mi][1] = __byte_perm(hi.y, hi.w, 0x5410);
        a[1][mi][2] = __byte_perm(lo.y, lo.w, 0x7632);  // k0' + 3, + 7
        a[1][mi][3] = __byte_perm(hi.y, hi.w, 0x7632);
      }
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        const unsigned wd = w == 0 ? bw[ni].x : w == 1 ? bw[ni].y : w == 2 ? bw[ni].z : bw[ni].w;
        unsigned b[2][2];
        b[0][0] = dq4_pair<MAGIC>(wd, s2[ni]);
        b[0][1] = dq4_pair<MAGIC>(wd >> 4, s2[ni]);
        b[1][0] = dq4_pair<MAGIC>(wd >> 8, s2[ni]);
        b[1][1] = dq4_pair<MAGIC>(wd >> 12, s2[ni]);
        if constexpr (MODE == 2) {
          fold ^= b[0][0] ^ b[0][1] ^ b[1][0] ^ b[1][1] ^ a[0][0][0] ^ a[1][0][3];
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int set = ((kc * 4 + w) * 2 + h) % SETS;  // a compile-time constant once unrolled
            float* acc = set == 0 ? C : xacc[set > 0 ? set - 1 : 0];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) Mma16816<half>::run(acc + (mi * NT + ni) * 4, a[h][mi], b[h]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int s = 0; s + 1 < SETS; ++s) {
#pragma unroll
    for (int r = 0; r < MT * NT * 4; ++r) C[r] += xacc[s][r];
  }
  if constexpr (MODE == 2) C[0] += __uint_as_float(fold & 0x3fffffffu) * 1e-30f;
}

// -- split-K across a thread-block cluster (sm_90) -------------------------------------------------------------
// The S blocks of a cluster (__cluster_dims__(1, 1, S)) each accumulated one share of K into acc (R registers per
// thread, same layout in every block). Each block parks its partials in its own shared memory (slot r * THREADS +
// tid: consecutive threads, consecutive words), the cluster synchronises, and rank 0 adds ranks 1..S-1 in order
// through distributed shared memory (mapa + ld.shared::cluster); a second cluster barrier keeps every block's
// shared memory alive until rank 0 has read it. On return rank 0's acc holds the full sum; the other ranks' acc is
// left as it was (they skip the epilogue).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ unsigned map_shared_rank(unsigned addr, unsigned rank) {
  unsigned out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

__device__ __forceinline__ float ld_shared_cluster_f32(unsigned addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

template <int R, int S, int THREADS>
__device__ __forceinline__ void cluster_splitk_reduce(float* acc, float* scratch) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int r = 0; r < R; ++r) scratch[r * THREADS + tid] = acc[r];
  cluster_sync_all();
  if (cluster_ctarank() == 0) {
    const unsigned base = smem_addr(scratch);
#pragma unroll
    for (int s = 1; s < S; ++s) {
      const unsigned remote = map_shared_rank(base, s);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += ld_shared_cluster_f32(remote + (r * THREADS + tid) * 4);
    }
  }
  cluster_sync_all();
}

}  // namespace tl

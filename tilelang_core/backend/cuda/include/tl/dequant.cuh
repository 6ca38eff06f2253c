// W4A16 tensor-core GEMM step with the int4 weights unpacked in registers (tl.FuseDequantGemmCUDA).
//
// C (M x N, mma accumulator layout of a WARP_M x WARP_N warp grid) += A (M x K, fp16, shared, swizzle SWZ_A)
// * W^T, where W (N x K) = (q - z) * s and q are the nibbles of P (N x K/2 bytes, shared, unswizzled; byte b of a
// row holds k = 2b in its low nibble, 2b + 1 in its high nibble).
//
// Lane l (g = l/4, q = l%4) of a warp owns B column n = g of each 8-column atom. For every 128-wide k chunk it
// loads the 16 bytes (32 weights, k in [k0, k0 + 32) with k0 = chunk*128 + 32q) of that row with one
// ld.shared.v4. A 32-bit word W of them holds k0' + 0..7 (k0' = k0 + 8w) as nibbles 0..7; dq4_unpack turns it
// into the pairs (nibble s, nibble s+4) as half2 (q - z) * s, bit-identical to the program's fp16 (q - z) * s
// (see there). Since the k order of a dot product is free, the mma
// k-step h (0, 1) of word w uses b0 = pair(2h), b1 = pair(2h + 1), i.e. logical k (2q, 2q+1, 2q+8, 2q+9) =
// physical k0' + (2h, 2h+4, 2h+1, 2h+5); the A fragment is built from one 16-byte load of the same 8 physical k
// of rows g and g + 8 and two byte permutes per register. (Lanes q = 2, 3 walk their four words starting at word
// 2, which keeps the A loads free of bank conflicts; A and B of a lane always use the same word, so the sum is
// unchanged.) sc: this thread's scales, sc[ni * NC + chunk] (NC == 1: one per row).
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

// (a & mask) | magic in one lop3 (the compiler's own lowering takes two: LOP3 has one immediate operand).
__device__ __forceinline__ unsigned and_or(unsigned a, unsigned mask, unsigned magic) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
  return d;
}

// Nibbles (0,4), (1,5), (2,6), (3,7) of w as half2 (q - z) * s: b[0][0], b[0][1], b[1][0], b[1][1] (the order the A
// fragments of dq4_chunk expect). (w & 0x000F000F) | 0x6400 per half is (1024 + q_s, 1024 + q_{s+4}); minus
// 1024 + z (MAGIC) is exact. The odd nibbles are masked in place, (w & 0x00F000F0) | 0x6400 = 1024 + 16 q, and
// hfma2 by 1/16 with -(64 + z) (MAGIC_HI) gives q - z exactly with no shift; one shift by 8 serves nibbles 2..7.
// Times the scale: one rounding, as the program's fp16 product.
template <int MAGIC, int MAGIC_HI, bool UNSCALED = false>
__device__ __forceinline__ void dq4_unpack(unsigned w, half2 s, unsigned (&b)[2][2]) {
  const half2 m = __half2half2(__ushort_as_half(static_cast<unsigned short>(MAGIC)));
  const half2 mh = __half2half2(__ushort_as_half(static_cast<unsigned short>(MAGIC_HI)));
  const half2 sixteenth = __half2half2(__ushort_as_half(static_cast<unsigned short>(0x2C00)));  // 1/16
  const unsigned w8 = w >> 8;
  const unsigned x[4] = {and_or(w, 0x000F000Fu, 0x64006400u), and_or(w, 0x00F000F0u, 0x64006400u),
                         and_or(w8, 0x000F000Fu, 0x64006400u), and_or(w8, 0x00F000F0u, 0x64006400u)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const half2 h = *reinterpret_cast<const half2*>(&x[i]);
    const half2 v = (i & 1) ? __hfma2(h, sixteenth, mh) : __hsub2(h, m);
    const half2 r = UNSCALED ? v : __hmul2(v, s);  // UNSCALED: q - z (the caller scales the accumulators)
    b[i >> 1][i & 1] = *reinterpret_cast<const unsigned*>(&r);
  }
}

// One 128-wide k chunk of a warp: the lane's words bw[ni] (already rotated by q, see above) times the A fragments
// of rows row0 .. row0 + 16*MT (row0 a multiple of 16) of the fp16 shared tile A (row length K), accumulated into
// C / xacc. With no swizzle or a row swizzle (SWZ_A == log2 of the row's bytes: the row only permutes the 16-byte
// chunks inside a 128-byte line) the four per-word A addresses do not depend on kc, mi or the +8 row, so they are
// formed once; any other swizzle is applied per load.
template <int MT, int NT, int K, int SWZ_A, int MAGIC, int MAGIC_HI, int SETS, bool UNSCALED = false>
__device__ __forceinline__ void dq4_chunk(unsigned a_base, int row0, int kc, int g, int q, const uint4* bw,
                                          const half2* s2, float* C, float (*xacc)[MT * NT * 4]) {
  constexpr bool ROW_SWIZZLE = SWZ_A == 0 || (1 << SWZ_A) == K * 2;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const int kw = q * 32 + 8 * ((w + (q & 2)) & 3);  // this step's word's physical k for this lane, in the chunk
    const unsigned a_w = a_base + swizzle<SWZ_A>(((row0 + g) * K + kw) * 2);
    unsigned a[2][MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      uint4 lo, hi;
      if constexpr (ROW_SWIZZLE) {
        const unsigned addr = a_w + (kc * 128 + mi * 16 * K) * 2;
        lo = lds128(addr);
        hi = lds128(addr + 8 * K * 2);
      } else {
        const int row = row0 + mi * 16 + g;
        lo = lds128(a_base + swizzle<SWZ_A>((row * K + kc * 128 + kw) * 2));
        hi = lds128(a_base + swizzle<SWZ_A>(((row + 8) * K + kc * 128 + kw) * 2));
      }
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
      dq4_unpack<MAGIC, MAGIC_HI, UNSCALED>(wd, s2[ni], b);
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

// Lanes q = 2, 3 take their four words in the order 2, 3, 0, 1: the A chunks the lanes of a quarter warp read at
// one step then fall in distinct bank groups (without it lanes q and q+2 — the same 16-byte column of the two
// 128-byte lines of a row — collide: 2-way conflicts; lanes q and q+1 already differ by half a line). A swap of
// register pairs: two selects per word.
__device__ __forceinline__ uint4 dq4_rotate(uint4 v, int q) {
  if (q & 2) v = make_uint4(v.z, v.w, v.x, v.y);
  return v;
}

template <int SETS, int R>
__device__ __forceinline__ void dq4_zero_sets(float (*xacc)[R]) {
#pragma unroll
  for (int s = 0; s + 1 < SETS; ++s) {
#pragma unroll
    for (int r = 0; r < R; ++r) xacc[s][r] = 0.f;
  }
}

template <int SETS, int R>
__device__ __forceinline__ void dq4_fold_sets(float* C, float (*xacc)[R]) {
#pragma unroll
  for (int s = 0; s + 1 < SETS; ++s) {
#pragma unroll
    for (int r = 0; r < R; ++r) C[r] += xacc[s][r];
  }
}

template <int M, int N, int K, int WARP_M, int WARP_N, int SWZ_A, int MAGIC, int MAGIC_HI, int NC, int SETS = 1>
__device__ __forceinline__ void gemm_dq4(const half* A, const unsigned char* P, const half* sc, float* C) {
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % 128 == 0, "gemm_dq4: tile does not fit the warp grid");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N, wc = warp % WARP_N;
  const int g = lane / 4, q = lane % 4;
  const unsigned a_base = smem_addr(A), p_base = smem_addr(P);
  float xacc[SETS > 1 ? SETS - 1 : 1][MT * NT * 4];
  dq4_zero_sets<SETS, MT * NT * 4>(xacc);
#pragma unroll
  for (int kc = 0; kc < K / 128; ++kc) {
    uint4 bw[NT];
    half2 s2[NT];
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      bw[ni] = dq4_rotate(lds128(p_base + (wc * WN + ni * 8 + g) * (K / 2) + kc * 64 + q * 16), q);
      s2[ni] = __half2half2(sc[ni * NC + (NC == 1 ? 0 : kc)]);
    }
    dq4_chunk<MT, NT, K, SWZ_A, MAGIC, MAGIC_HI, SETS>(a_base, wr * WM, kc, g, q, bw, s2, C, xacc);
  }
  dq4_fold_sets<SETS, MT * NT * 4>(C, xacc);
}

// -- weights straight from global memory (decode tiles: one warp row, WARP_M == 1) ------------------------------
// The same product as gemm_dq4, but the packed weights never touch shared memory: each lane loads its 16-byte
// chunks of the tile's rows straight from global memory (ld.global.nc: every weight is read
// once). Pg points at the tile's first byte (row r0, byte c0) of the packed tensor, whose rows are ROW_BYTES long;
// rows_left / cols_left count the rows / bytes of the tensor at or after (r0, c0) — chunks outside read as zeros,
// as the program's zero-filling copy gave.
//
// NEXT > 0 is the register ring: the k loop advances NEXT bytes along the rows per iteration. The ring holds
// R = DEPTH + 1 tiles of this thread's chunks (wbuf: registers, allocated before the loop and kept across
// iterations). gemm_dq4g_prefetch, called before the loop (ahead of the A pipeline's prologue, so the weight
// stream starts at once), loads tiles 0 .. DEPTH-1 into slots 0 .. DEPTH-1. Iteration `it` (from 0; `more`
// iterations follow it) first issues the loads of tile it + DEPTH into slot (it + DEPTH) % R — the slot computed
// in the previous iteration — then computes on slot it % R: DEPTH tiles are in flight while the tensor cores
// work. The body is instantiated once per slot (a branch on it % R), so every register index is a compile-time
// constant and no register with a load in flight is ever copied (a copy would wait for the load: an earlier
// version that copied the next tile into place cost the overlap). NEXT == 0 loads the current tile at the start
// of the call. The unpack (dq4_unpack) and the A fragments (dq4_chunk) are gemm_dq4's.
#ifndef TL_DQ4_LDG
// .cs: evict-first in L2 (the weights are read once; they should not push out other data — or dirty lines that
// would then be written back during this kernel). An L1::no_allocate hint made these loads ~25 % slower on the H200.
#define TL_DQ4_LDG "ld.global.nc.cs.v4.u32"
#endif
// EVICT: the weight copy's T.copy eviction_policy (1 evict_first, the default: the .cs load above; 0 evict_normal:
// a plain ld.global.nc; 2 evict_last: an L2 cache policy, tl/copy.cuh's l2_policy<2>).
template <int EVICT = 1>
__device__ __forceinline__ uint4 ldg128_stream(const void* p, bool pred) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (EVICT == 1) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " @p " TL_DQ4_LDG " {%0, %1, %2, %3}, [%4];\n}\n"
        : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
        : "l"(p), "r"(static_cast<int>(pred)));
  } else if constexpr (EVICT == 0) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
        : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
        : "l"(p), "r"(static_cast<int>(pred)));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " @p ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n}\n"
        : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
        : "l"(p), "r"(static_cast<int>(pred)), "l"(l2_policy<2>()));
  }
  return v;
}

template <int M, int N, int K, int WARP_N, int SWZ_A, int MAGIC, int MAGIC_HI, int NC, int SETS, int ROW_BYTES,
          int NEXT, int DEPTH, int EVICT = 1>
struct Dq4Direct {
  static constexpr int WN = N / WARP_N, MT = M / 16, NT = WN / 8, KC = K / 128, R = DEPTH + 1;
  static constexpr int WORDS = KC * NT * 4;  // registers per tile and thread
  // NC == 0: per-channel scales applied to the accumulators once per call (sc: this thread's two accumulator
  // columns per 8-column atom, sc[ni * 2 + j] for column ni * 8 + 2 q + j); the weights enter the mma as q - z,
  // exact in fp16, so the result is the exact product rounded once in fp32 (the program's fp16 (q - z) * s is
  // rounded per weight: the two differ by that rounding, ~2^-11 relative per term)
  static constexpr bool LATE = NC == 0;
  static_assert(M % 16 == 0 && WN % 8 == 0 && K % 128 == 0 && ROW_BYTES % 16 == 0,
                "gemm_dq4g: tile does not fit the warp grid");
  static_assert(SWZ_A == 0 || (1 << SWZ_A) == K * 2, "gemm_dq4g: A must be unswizzled or swizzled by row");

  // this thread's 16-byte chunks of the tile at Pg into registers w (WORDS of them), zeros outside the tensor
  static __device__ __forceinline__ void load(unsigned* w, const unsigned char* Pg, int rows_left, int cols_left) {
    const int wc = (threadIdx.x / 32) % WARP_N, g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      const int row = wc * WN + ni * 8 + g;
      const unsigned char* p = Pg + static_cast<long long>(row) * ROW_BYTES + q * 16;
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        const uint4 v = ldg128_stream<EVICT>(p + kc * 64, row < rows_left && kc * 64 + q * 16 + 16 <= cols_left);
        unsigned* r = w + (kc * NT + ni) * 4;
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
      }
    }
  }

  // the product of one tile (registers w) with the A tile
  static __device__ __forceinline__ void compute(const unsigned* w, const half* A, const half* sc, float* C) {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const unsigned a_base = smem_addr(A);
    constexpr int REGS = MT * NT * 4;
    float xacc[SETS > 1 ? SETS - 1 : 1][REGS];
    dq4_zero_sets<SETS, REGS>(xacc);
    float part[LATE ? REGS : 1];  // LATE: this call's unscaled sum
    float* acc = C;
    if constexpr (LATE) {
#pragma unroll
      for (int r = 0; r < REGS; ++r) part[r] = 0.f;
      acc = part;
    }
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint4 bv[NT];
      half2 s2[NT];
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        const unsigned* r = w + (kc * NT + ni) * 4;
        bv[ni] = dq4_rotate(make_uint4(r[0], r[1], r[2], r[3]), q);
        s2[ni] = LATE ? __float2half2_rn(1.f) : __half2half2(sc[ni * NC + (NC == 1 ? 0 : kc)]);
      }
      dq4_chunk<MT, NT, K, SWZ_A, MAGIC, MAGIC_HI, SETS, LATE>(a_base, 0, kc, g, q, bv, s2, acc, xacc);
    }
    dq4_fold_sets<SETS, REGS>(acc, xacc);
    if constexpr (LATE) {  // register (mi, ni, c) holds column ni * 8 + 2 q + (c & 1): its scale is sc[ni * 2 + (c & 1)]
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < NT; ++ni)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            C[(mi * NT + ni) * 4 + c] += __half2float(sc[ni * 2 + (c & 1)]) * part[(mi * NT + ni) * 4 + c];
    }
  }

  // iteration it with it % R == S (see above); the slots are wbuf[S * WORDS ...]
  template <int S>
  static __device__ __forceinline__ void step(unsigned* wbuf, int slot, int more, const half* A,
                                              const unsigned char* Pg, int rows_left, int cols_left, const half* sc,
                                              float* C) {
    if (slot == S) {
      if (more >= DEPTH)
        load(wbuf + ((S + DEPTH) % R) * WORDS, Pg + DEPTH * NEXT, rows_left, cols_left - DEPTH * NEXT);
      compute(wbuf + S * WORDS, A, sc, C);
    } else if constexpr (S + 1 < R) {
      step<S + 1>(wbuf, slot, more, A, Pg, rows_left, cols_left, sc, C);
    }
  }
};

// The loads of the loop's first DEPTH tiles (those of tiles < `tiles`; tile j into ring slot j), before the loop.
template <int N, int K, int WARP_N, int ROW_BYTES, int NEXT, int DEPTH, int EVICT = 1>
__device__ __forceinline__ void gemm_dq4g_prefetch(const unsigned char* Pg, int rows_left, int cols_left,
                                                   void* wbuf_, int tiles) {
  using D = Dq4Direct<16, N, K, WARP_N, 0, 0, 0, 1, 1, ROW_BYTES, NEXT, DEPTH, EVICT>;
#pragma unroll
  for (int j = 0; j < DEPTH; ++j)
    D::load(static_cast<unsigned*>(wbuf_) + j * D::WORDS, Pg + j * NEXT, j < tiles ? rows_left : 0,
            cols_left - j * NEXT);
}

template <int M, int N, int K, int WARP_N, int SWZ_A, int MAGIC, int MAGIC_HI, int NC, int SETS, int ROW_BYTES,
          int NEXT, int DEPTH = 1, int EVICT = 1>
__device__ __forceinline__ void gemm_dq4g(const half* A, const unsigned char* Pg, int rows_left, int cols_left,
                                          const half* sc, float* C, void* wbuf_, int it, int more) {
  using D = Dq4Direct<M, N, K, WARP_N, SWZ_A, MAGIC, MAGIC_HI, NC, SETS, ROW_BYTES, NEXT, DEPTH, EVICT>;
  if constexpr (NEXT > 0) {
    D::template step<0>(static_cast<unsigned*>(wbuf_), it % D::R, more, A, Pg, rows_left, cols_left, sc, C);
  } else {
    unsigned w[D::WORDS];
    D::load(w, Pg, rows_left, cols_left);
    D::compute(w, A, sc, C);
  }
}

// split-K through global memory (tl::splitk_global_reduce): tl/splitk.cuh

// -- split-K across a thread-block cluster (sm_90; pass_configs tl.cuda.split_k_reduce='cluster') -------------------------------------------------------------
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

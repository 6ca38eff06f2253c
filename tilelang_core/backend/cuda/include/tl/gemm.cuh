// Tensor-core tile GEMM for T.gemm on shared operands: ldmatrix + mma.sync.m16n8k16 (sm_80+), fp32 accumulation.
//
// C (M x N) is spread over a WARP_M x WARP_N grid of warps; warp (wr, wc) owns rows [wr*WM, (wr+1)*WM) and
// columns [wc*WN, (wc+1)*WN), as MT x NT atoms of 16 x 8. Accumulator register ((mi * NT) + ni) * 4 + k of lane l
// holds row wr*WM + mi*16 + l/4 + 8*(k/2), column wc*WN + ni*8 + 2*(l%4) + k%2 — the `mma` fragment layout of
// tilelang_core/transform/cuda/layouts.py. A is stored M x K (K x M when TRANS_A), B K x N (N x K when TRANS_B),
// row-major, swizzled with SWZ_A / SWZ_B (see tl::swizzle).
#pragma once
#include "tl/common.cuh"
#include "tl/copy.cuh"

namespace tl {

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

template <typename T>
struct Mma16816;

template <>
struct Mma16816<half> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, const unsigned* b) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct Mma16816<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, const unsigned* b) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// ldmatrix the B fragments (NT x 16x8) of k-step kk for warp column wc.
template <int N, int K, int WARP_N, bool TRANS_B, int SWZ_B, typename T>
__device__ __forceinline__ void load_b_fragments(int kk, unsigned b_base, int wc, int lane, unsigned (*b)[2]) {
  constexpr int WN = N / WARP_N;
  constexpr int NT = WN / 8;
  constexpr int B_LD = TRANS_B ? K : N;
  constexpr int ES = sizeof(T);
  const int j = lane / 8, r8 = lane % 8;
#pragma unroll
  for (int ni = 0; ni < NT; ni += 2) {
    if (ni + 1 < NT) {
      int row, col;
      if constexpr (!TRANS_B) {
        row = kk * 16 + (j % 2) * 8 + r8;
        col = wc * WN + ni * 8 + (j / 2) * 8;
      } else {
        row = wc * WN + ni * 8 + (j / 2) * 8 + r8;
        col = kk * 16 + (j % 2) * 8;
      }
      const unsigned addr = b_base + swizzle<SWZ_B>((row * B_LD + col) * ES);
      unsigned t4[4];
      if constexpr (!TRANS_B) {
        ldmatrix_x4_trans(t4, addr);
      } else {
        ldmatrix_x4(t4, addr);
      }
      b[ni][0] = t4[0];
      b[ni][1] = t4[1];
      b[ni + 1][0] = t4[2];
      b[ni + 1][1] = t4[3];
    } else {
      const int jj = j % 2;  // lanes 16..31 repeat the addresses of lanes 0..15 (ignored by .x2)
      int row, col;
      if constexpr (!TRANS_B) {
        row = kk * 16 + jj * 8 + r8;
        col = wc * WN + ni * 8;
      } else {
        row = wc * WN + ni * 8 + r8;
        col = kk * 16 + jj * 8;
      }
      const unsigned addr = b_base + swizzle<SWZ_B>((row * B_LD + col) * ES);
      if constexpr (!TRANS_B) {
        ldmatrix_x2_trans(b[ni], addr);
      } else {
        ldmatrix_x2(b[ni], addr);
      }
    }
  }
}

// ldmatrix the A (MT x 16x16) and B (NT x 16x8) fragments of k-step kk for warp (wr, wc).
template <int M, int N, int K, int WARP_M, int WARP_N, bool TRANS_A, bool TRANS_B, int SWZ_A, int SWZ_B, typename T>
__device__ __forceinline__ void load_fragments(int kk, unsigned a_base, unsigned b_base, int wr, int wc, int lane,
                                               unsigned (*a)[4], unsigned (*b)[2]) {
  constexpr int WM = M / WARP_M;
  constexpr int MT = WM / 16;
  constexpr int A_LD = TRANS_A ? M : K;  // elements per stored row
  constexpr int ES = sizeof(T);
  const int j = lane / 8, r8 = lane % 8;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    int row, col;
    if constexpr (!TRANS_A) {
      row = wr * WM + mi * 16 + (lane % 16);
      col = kk * 16 + (lane / 16) * 8;
    } else {
      row = kk * 16 + (j / 2) * 8 + r8;
      col = wr * WM + mi * 16 + (j % 2) * 8;
    }
    const unsigned addr = a_base + swizzle<SWZ_A>((row * A_LD + col) * ES);
    if constexpr (!TRANS_A) {
      ldmatrix_x4(a[mi], addr);
    } else {
      ldmatrix_x4_trans(a[mi], addr);
    }
  }
  load_b_fragments<N, K, WARP_N, TRANS_B, SWZ_B, T>(kk, b_base, wc, lane, b);
}

template <int M, int N, int K, int WARP_M, int WARP_N, bool TRANS_A, bool TRANS_B, int SWZ_A, int SWZ_B,
          typename T, typename TC>
__device__ __forceinline__ void gemm_ss(const T* A, const T* B, TC* C) {
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % 16 == 0, "gemm_ss: tile does not fit the warp grid");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N, wc = warp % WARP_N;
  const unsigned a_base = smem_addr(A), b_base = smem_addr(B);

  float acc_local[(sizeof(TC) == 4) ? 1 : MT * NT * 4];
  float* acc;
  if constexpr (sizeof(TC) == 4) {
    acc = reinterpret_cast<float*>(C);
  } else {
    acc = acc_local;
#pragma unroll
    for (int i = 0; i < MT * NT * 4; ++i) acc[i] = static_cast<float>(C[i]);
  }

  // the fragments of k-step kk+1 are loaded before the mma.sync of step kk are issued: ldmatrix is volatile asm
  // (it reads shared memory, so it must not move across barriers), so this source order is its schedule
  unsigned a[2][MT][4];
  unsigned b[2][NT][2];
  load_fragments<M, N, K, WARP_M, WARP_N, TRANS_A, TRANS_B, SWZ_A, SWZ_B, T>(0, a_base, b_base, wr, wc, lane, a[0],
                                                                             b[0]);
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    if (kk + 1 < K / 16) {
      load_fragments<M, N, K, WARP_M, WARP_N, TRANS_A, TRANS_B, SWZ_A, SWZ_B, T>(kk + 1, a_base, b_base, wr, wc, lane,
                                                                                 a[(kk + 1) & 1], b[(kk + 1) & 1]);
    }
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        Mma16816<T>::run(acc + (mi * NT + ni) * 4, a[kk & 1][mi], b[kk & 1][ni]);
      }
    }
  }

  if constexpr (sizeof(TC) != 4) {
#pragma unroll
    for (int i = 0; i < MT * NT * 4; ++i) C[i] = static_cast<TC>(acc[i]);
  }
}

// A from registers: A is this thread's register array of an M x K fragment in the mma accumulator layout of a
// WARP_M x 1 warp grid (element ((mi * K/8) + ni) * 4 + k, converted to T). The accumulator of the 8-column atoms
// 2t and 2t+1, as pairs, is the A fragment of k-step t of m16n8k16: a0 = atom 2t rows g, a1 = atom 2t rows g+8,
// a2/a3 = atom 2t+1 (FlashAttention-2's P @ V without a trip through shared memory). B: shared, as in gemm_ss.
template <int M, int N, int K, int WARP_M, bool TRANS_B, int SWZ_B, typename T>
__device__ __forceinline__ void gemm_rs(const T* A, const T* B, float* C) {
  constexpr int WM = M / WARP_M;
  constexpr int MT = WM / 16, NT = N / 8, KA = K / 8;
  static_assert(WM % 16 == 0 && N % 8 == 0 && K % 16 == 0, "gemm_rs: tile does not fit the warp grid");
  const int lane = threadIdx.x % 32;
  const unsigned b_base = smem_addr(B);
  const unsigned* a32 = reinterpret_cast<const unsigned*>(A);
  unsigned b[2][NT][2];
  load_b_fragments<N, K, 1, TRANS_B, SWZ_B, T>(0, b_base, 0, lane, b[0]);
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    if (kk + 1 < K / 16) load_b_fragments<N, K, 1, TRANS_B, SWZ_B, T>(kk + 1, b_base, 0, lane, b[(kk + 1) & 1]);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      unsigned a[4];
      a[0] = a32[(mi * KA + 2 * kk) * 2 + 0];
      a[1] = a32[(mi * KA + 2 * kk) * 2 + 1];
      a[2] = a32[(mi * KA + 2 * kk + 1) * 2 + 0];
      a[3] = a32[(mi * KA + 2 * kk + 1) * 2 + 1];
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) Mma16816<T>::run(C + (mi * NT + ni) * 4, a, b[kk & 1][ni]);
    }
  }
}

// -- software-pipelined mainloop (tl.PipelineCUDA's fused form) ------------------------------------------------
// The loop `for k: cp.async tile k+S-1; gemm(stage k)` with the barrier moved *into* the last k-step of each
// tile: after the last ldmatrix of stage k, wait for tile k+1's copies and __syncthreads(), then ldmatrix the
// first fragments of stage k+1 before issuing the last mma.sync of stage k — so the barrier and the first
// shared-memory loads of a tile overlap tensor-core work (the CUTLASS multistage schedule). `frag` holds those
// first fragments between calls (MT*4 + NT*2 registers).
template <int M, int N, int K, int WARP_M, int WARP_N, bool TRANS_A, bool TRANS_B, int SWZ_A, int SWZ_B, typename T>
__device__ __forceinline__ void pipe_gemm_prefetch(const T* A, const T* B, unsigned* frag) {
  constexpr int MT = M / WARP_M / 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_fragments<M, N, K, WARP_M, WARP_N, TRANS_A, TRANS_B, SWZ_A, SWZ_B, T>(
      0, smem_addr(A), smem_addr(B), warp / WARP_N, warp % WARP_N, lane, reinterpret_cast<unsigned(*)[4]>(frag),
      reinterpret_cast<unsigned(*)[2]>(frag + MT * 4));
}

template <int M, int N, int K, int WARP_M, int WARP_N, bool TRANS_A, bool TRANS_B, int SWZ_A, int SWZ_B, int WAIT,
          typename T>
__device__ __forceinline__ void pipe_gemm_step(const T* A, const T* B, const T* A_next, const T* B_next, float* acc,
                                               unsigned* frag, bool has_next) {
  constexpr int WM = M / WARP_M, WN = N / WARP_N;
  constexpr int MT = WM / 16, NT = WN / 8;
  constexpr int KT = K / 16;
  static_assert(WM % 16 == 0 && WN % 8 == 0 && K % 16 == 0, "pipe_gemm_step: tile does not fit the warp grid");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp / WARP_N, wc = warp % WARP_N;
  const unsigned a_base = smem_addr(A), b_base = smem_addr(B);
  unsigned (*fa)[4] = reinterpret_cast<unsigned(*)[4]>(frag);
  unsigned (*fb)[2] = reinterpret_cast<unsigned(*)[2]>(frag + MT * 4);
  unsigned a[2][MT][4];
  unsigned b[2][NT][2];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[0][mi][r] = fa[mi][r];
  }
#pragma unroll
  for (int ni = 0; ni < NT; ++ni) {
    b[0][ni][0] = fb[ni][0];
    b[0][ni][1] = fb[ni][1];
  }
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    if (kk + 1 < KT) {
      load_fragments<M, N, K, WARP_M, WARP_N, TRANS_A, TRANS_B, SWZ_A, SWZ_B, T>(kk + 1, a_base, b_base, wr, wc, lane,
                                                                                 a[(kk + 1) & 1], b[(kk + 1) & 1]);
    } else {
      cp_async_wait<WAIT>();
      __syncthreads();
      if (has_next) {
        load_fragments<M, N, K, WARP_M, WARP_N, TRANS_A, TRANS_B, SWZ_A, SWZ_B, T>(
            0, smem_addr(A_next), smem_addr(B_next), wr, wc, lane, fa, fb);
      }
    }
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        Mma16816<T>::run(acc + (mi * NT + ni) * 4, a[kk & 1][mi], b[kk & 1][ni]);
      }
    }
  }
}

}  // namespace tl

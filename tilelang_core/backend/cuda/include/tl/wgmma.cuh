// Hopper tile GEMM for T.gemm on shared operands: wgmma.mma_async (sm_90a), fp16/bf16 or fp8 (e4m3/e5m2, any mix)
// in, fp32 accumulation. fp8 instructions are m64nNk32 (one k-step is 32 bytes of K for every type) and read both
// operands K-major (A M x K, B N x K: TRANS_B) — the PTX ISA has no transpose for them.
//
// Warpgroups (4 warps, 128 threads) form a WG_M x WG_N grid over the M x N tile: warpgroup g (gr = g / WG_N,
// gc = g % WG_N) owns the column slice [gc*WN, (gc+1)*WN) (WN = N / WG_N) and the m64 blocks mi*WG_M + gr
// (mi < MI = M / WG_M / 64). For each k-step of 16 it issues, per m64 block and per column chunk of NC columns,
// one wgmma.mma_async.m64n{NC}k16 whose A and B come from shared-memory matrix descriptors. Accumulator register
// ((mi * NT) + ni) * 4 + k (NT = WN / 8) of lane l in warp w (of the group) holds row
// (mi*WG_M + gr)*64 + 16*(w%4) + l/4 + 8*(k/2), column gc*WN + ni*8 + 2*(l%4) + k%2: the `wgmma` fragment layout
// of tilelang_core/transform/cuda/layouts.py.
//
// Shared layouts (tilelang_core/transform/cuda/layouts.py, wgmma_offset_expr): a stored R x C tile (C = the
// contiguous dimension) with swizzle SWZ bytes (128, 64 or 32; W = SWZ / sizeof(T) elements) is kept as C / W
// column blocks of R x W, one after the other, each row of SWZ bytes, and inside every 8-row atom (8 * SWZ bytes)
// the 16-byte chunk index XOR-ed with the row: Swizzle<log2(SWZ/16), 4, 3> of the byte address. Tiles sit on
// 1024-byte boundaries, so the XOR the hardware applies to absolute addresses is the one the stores used.
//   K-major operand (A: M x K, not TRANS_A; B: N x K, TRANS_B): rows = M / N. The descriptor of the m64 (or nNC)
//     block starting at row r0, k-step k0 points at block k0 / W, row r0, byte (k0 % W) * sizeof(T) inside the
//     row; SBO = 8 * SWZ (the next 8-row group); LBO unused (1).
//   MN-major operand (A: K x M, TRANS_A; B: K x N, not TRANS_B): rows = K. The descriptor of the block starting
//     at column c0 (a multiple of W), k-step k0 points at column block c0 / W, row k0; LBO = R * SWZ (the next
//     column block of W), SBO = 8 * SWZ (the next 8 K-rows). The instruction's transpose bit is set.
// Descriptor bits: [0,14) start address >> 4, [16,30) LBO >> 4, [32,46) SBO >> 4, [49,52) base offset (0),
// [62,64) layout: 1 = 128B, 2 = 64B, 3 = 32B swizzle.
//
// Protocol: fence.proxy.async (the tiles were written through the generic proxy — st.shared / cp.async — and
// wgmma reads them through the async proxy; the caller's __syncthreads() precedes this call), then
// wgmma.fence (orders the accumulator registers' earlier writes before the asynchronous MMAs), all wgmma of the
// tile, wgmma.commit_group, wgmma.wait_group 0: when the call returns the accumulators are final and the shared
// tiles may be overwritten. The empty asm statements on the accumulators keep the compiler from moving their
// reads/writes across the fence and the wait.
//
// PENDING = 1 (a T.Pipelined loop whose body is this one gemm, tl.PipelineCUDA; pass_configs
// tl.cuda.wgmma_pipeline): the call ends with wgmma.wait_group 1 instead, so this k-step's group stays in flight
// while the thread goes on to the next iteration (its cp.async wait, barrier and loads) and issues the next
// group behind it; when the call returns, the *previous* call's group is complete (its shared stage is free once
// every warpgroup has returned, i.e. after the next barrier) and the accumulators are not final.
// Only further wgmma of the same shape may touch them until tl::wgmma_drain (wait_group 0) after the loop: the PTX
// ISA orders accumulator accesses between wgmma.mma_async of one shape, any other access to a register of an
// in-flight group is undefined.
#pragma once
#include "tl/common.cuh"
#include "tl/wgmma_ops.cuh"
#include "tl/wgmma_fp8_ops.cuh"

namespace tl {

template <int SWZ>
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  static_assert(SWZ == 128 || SWZ == 64 || SWZ == 32, "wgmma_desc: swizzle must be 128, 64 or 32 bytes");
  constexpr unsigned long long layout = SWZ == 128 ? 1ull : SWZ == 64 ? 2ull : 3ull;
  unsigned long long d = 0;
  d |= static_cast<unsigned long long>((addr >> 4) & 0x3FFF);
  d |= static_cast<unsigned long long>((lbo >> 4) & 0x3FFF) << 16;
  d |= static_cast<unsigned long long>((sbo >> 4) & 0x3FFF) << 32;
  d |= layout << 62;
  return d;
}

// The descriptor of the operand block that starts at row/column `mn0` of the M (or N) dimension, k-step `k0`.
// ROWS/COLS: the stored tile; MN_MAJOR: the M/N dimension is the contiguous one.
template <int ROWS, int COLS, bool MN_MAJOR, int SWZ, typename T>
__device__ __forceinline__ unsigned long long wgmma_operand_desc(unsigned base, int mn0, int k0) {
  constexpr int ES = sizeof(T);
  constexpr int W = SWZ / ES;
  static_assert(COLS % W == 0 && ROWS % 8 == 0, "wgmma_operand_desc: the tile is not made of swizzle atoms");
  if constexpr (!MN_MAJOR) {
    const unsigned addr = base + ((k0 / W) * ROWS * W + mn0 * W + (k0 % W)) * ES;
    return wgmma_desc<SWZ>(addr, 16, 8 * SWZ);
  } else {
    const unsigned addr = base + ((mn0 / W) * ROWS * W + k0 * W) * ES;
    return wgmma_desc<SWZ>(addr, ROWS * SWZ, 8 * SWZ);
  }
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// One wgmma of NC columns: fp16/bf16 (k16, transpose immediates) or fp8 (k32, both operands K-major).
template <int NC, bool TRANS_A, bool TRANS_B, typename T, typename TB>
__device__ __forceinline__ void wgmma_issue(float* d, unsigned long long da, unsigned long long db) {
  if constexpr (sizeof(T) == 1) {
    static_assert(!TRANS_A && TRANS_B, "fp8 wgmma reads A (M x K) and B (N x K) K-major from shared memory");
    WgmmaSSF8<NC, T, TB>::run(d, da, db);
  } else {
    static_assert(sizeof(T) == sizeof(TB), "wgmma_gemm_ss: fp16/bf16 A and B of one type");
    WgmmaSS<NC, T, TRANS_A ? 1 : 0, TRANS_B ? 0 : 1>::run(d, da, db);
  }
}

// OWN_TILE = 1 (tl.cuda.gemm_pingpong): every warpgroup of the block computes the whole tile of its own call (its
// own accumulator), whatever its threadIdx.x / 128; only for a 1 x 1 warpgroup grid
template <int M, int N, int K, int WG_M, int WG_N, int NC, bool TRANS_A, bool TRANS_B, int SWZ_A, int SWZ_B,
          int PENDING = 0, int OWN_TILE = 0, typename T, typename TB>
__device__ __forceinline__ void wgmma_gemm_ss(const T* A, const TB* B, float* C) {
  static_assert(PENDING >= 0 && PENDING <= 2, "wgmma_gemm_ss: PENDING is 0, 1 or 2 groups left in flight");
  static_assert(!OWN_TILE || WG_M * WG_N == 1, "wgmma_gemm_ss: OWN_TILE is for one warpgroup's tile");
  static_assert(sizeof(T) == sizeof(TB), "wgmma_gemm_ss: A and B have one element size");
  constexpr int WM = M / WG_M, WN = N / WG_N;
  constexpr int MI = WM / 64, NT = WN / 8;
  constexpr int KS = 32 / sizeof(T);  // one instruction's K: 32 bytes of the operands (k16 fp16/bf16, k32 fp8)
  static_assert(WM % 64 == 0 && WN % NC == 0 && NC % 8 == 0 && NC <= 256 && K % KS == 0,
                "wgmma_gemm_ss: tile does not fit the warpgroup grid");
  // stored tiles: A is M x K (K x M when TRANS_A), B is K x N (N x K when TRANS_B)
  constexpr int A_ROWS = TRANS_A ? K : M, A_COLS = TRANS_A ? M : K;
  constexpr int B_ROWS = TRANS_B ? N : K, B_COLS = TRANS_B ? K : N;
  const int g = OWN_TILE ? 0 : threadIdx.x / 128;
  const int gr = g / WG_N, gc = g % WG_N;
  const unsigned a_base = smem_addr(A), b_base = smem_addr(B);
  fence_proxy_async_shared();
#pragma unroll
  for (int i = 0; i < MI * NT * 4; ++i) wgmma_fence_operand(C[i]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < K / KS; ++kk) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const unsigned long long da =
          wgmma_operand_desc<A_ROWS, A_COLS, TRANS_A, SWZ_A, T>(a_base, (mi * WG_M + gr) * 64, kk * KS);
#pragma unroll
      for (int nc = 0; nc < WN / NC; ++nc) {
        const unsigned long long db =
            wgmma_operand_desc<B_ROWS, B_COLS, !TRANS_B, SWZ_B, TB>(b_base, gc * WN + nc * NC, kk * KS);
        wgmma_issue<NC, TRANS_A, TRANS_B, T, TB>(C + (mi * NT + nc * (NC / 8)) * 4, da, db);
      }
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<PENDING>();
#pragma unroll
  for (int i = 0; i < MI * NT * 4; ++i) wgmma_fence_operand(C[i]);
}

// T.gemm with A in registers (RS): A is a fragment in the wgmma accumulator layout of a WG_M x 1 warpgroup grid
// over its M x K tile, already converted to T (fp16/bf16) — flash attention's P = softmax(S) for P @ V. In that
// layout the 8 registers (mi * K/8 + 2 kk) * 4 .. + 8 of a thread are exactly its part of the m64 x k16 A slice
// (mi, kk) of a register-A wgmma (rows l/4 and l/4 + 8 of the warp's 16, columns 2(l%4) + {0, 1} and + 8), two
// halves per 32-bit register, so they go to the instruction as they are: no shuffle, no shared memory. B comes from
// shared memory as in wgmma_gemm_ss; the warpgroups split M only (each owns whole rows of A and of C).
template <int M, int N, int K, int WG_M, int NC, bool TRANS_B, int SWZ_B, int PENDING = 0, typename T, typename TB>
__device__ __forceinline__ void wgmma_gemm_rs(const T* A, const TB* B, float* C) {
  static_assert(PENDING >= 0 && PENDING <= 2, "wgmma_gemm_rs: PENDING is 0, 1 or 2 groups left in flight");
  static_assert(sizeof(T) == 2 && sizeof(TB) == 2, "wgmma_gemm_rs: fp16/bf16 A and B");
  constexpr int WM = M / WG_M;
  constexpr int MI = WM / 64, NT = N / 8, KT = K / 16;
  static_assert(WM % 64 == 0 && N % NC == 0 && NC % 8 == 0 && NC <= 256 && K % 16 == 0,
                "wgmma_gemm_rs: tile does not fit the warpgroup grid");
  constexpr int B_ROWS = TRANS_B ? N : K, B_COLS = TRANS_B ? K : N;
  const unsigned b_base = smem_addr(B);
  unsigned a[MI * KT * 4];
#pragma unroll
  for (int i = 0; i < MI * KT * 4; ++i) a[i] = reinterpret_cast<const unsigned*>(A)[i];
  fence_proxy_async_shared();
#pragma unroll
  for (int i = 0; i < MI * NT * 4; ++i) wgmma_fence_operand(C[i]);
#pragma unroll
  for (int i = 0; i < MI * KT * 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int nc = 0; nc < N / NC; ++nc) {
        const unsigned long long db =
            wgmma_operand_desc<B_ROWS, B_COLS, !TRANS_B, SWZ_B, TB>(b_base, nc * NC, kk * 16);
        WgmmaRS<NC, T, TRANS_B ? 0 : 1>::run(C + (mi * NT + nc * (NC / 8)) * 4, a + (mi * KT + kk) * 4, db);
      }
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<PENDING>();
#pragma unroll
  for (int i = 0; i < MI * NT * 4; ++i) wgmma_fence_operand(C[i]);
}

// tl.cuda.attention_overlap (tl.PipelineCUDA): the scores' gemm is issued with PENDING = 2 (no wait: at most it
// and the previous block's P V are in flight), the P V gemm of the previous block behind it with PENDING = 1 (its
// return means the scores' group is done). wgmma_acc_ready<W, N> waits until at most W groups are in flight and
// then ties the N accumulators to that point (the empty asm of wgmma_gemm_*: ptxas may not read them earlier).
template <int W, int NREGS>
__device__ __forceinline__ void wgmma_acc_ready(float* C) {
  if (W >= 0) wgmma_wait_group<(W < 0 ? 0 : W)>();
#pragma unroll
  for (int i = 0; i < NREGS; ++i) wgmma_fence_operand(C[i]);
}

// keep_before_wait<N0, N1, ...>(k, v0, v1, ...): the registers v_j[0 .. N_j) are computed before the next wgmma wait
// (tl.cuda.attention_overlap: the softmax of block k under the previous block's P V). ptxas (CUDA 13.0) schedules a
// wgmma.wait_group as early as its own dependences allow: the wait for P V, which depends on no register of the
// softmax, went right after the scores' wait, above the whole softmax (WARPGROUP.DEPBAR.LE gsb0, 0x0 before the
// first MUFU.EX2: nothing overlapped). It keeps memory operations and the waits in program order, so a store of the
// registers placed before the wait keeps everything they depend on above it. The stores sit in a branch that never
// runs (k is a loop counter, never negative; the test is inline asm, so neither NVVM nor ptxas removes the branch):
// one uniform branch per call at run time, the values unchanged.
__device__ __forceinline__ bool opaque_negative(int k) {
  unsigned r;
  asm volatile("{\n.reg .pred p;\nsetp.lt.s32 p, %1, 0;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(r) : "r"(k));
  return r != 0;
}
template <int N, typename T>
__device__ __forceinline__ void keep_regs(const T* v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "keep_before_wait: registers of 2 or 4 bytes");
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (sizeof(T) == 4) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(0u), "r"(*reinterpret_cast<const unsigned*>(v + i)) : "memory");
    } else {
      asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(0u), "h"(*reinterpret_cast<const unsigned short*>(v + i))
                   : "memory");
    }
  }
}
template <int... N, typename... T>
__device__ __forceinline__ void keep_before_wait(int k, const T*... v) {
  static_assert(sizeof...(N) == sizeof...(T), "keep_before_wait: one register count per array");
  if (opaque_negative(k)) {
    (keep_regs<N>(v), ...);
  }
}

// After a loop of wgmma_gemm_ss<..., PENDING = 1>: wait for the last group, then the NREGS accumulators are final.
// Each accumulator is then rewritten by an exact identity (x + -0.0 == x, bit for bit, NaN kept): with only the
// empty-asm fences, ptxas (CUDA 13.0) scheduled the epilogue's packed bf16 conversions (F2FP.BF16.F32.PACK_AB) of
// the accumulators above the wait (WARPGROUP.DEPBAR.LE gsb0, 0x0), reading them before the last group had written
// them (a warp-specialised bf16 GEMM lost its last k-step); the FADDs are ordinary register writes ptxas places after
// the wait, and the conversions read them.
template <int NREGS>
__device__ __forceinline__ void wgmma_drain(float* C) {
  wgmma_wait_group<0>();
#pragma unroll
  for (int i = 0; i < NREGS; ++i) asm volatile("add.f32 %0, %0, 0f80000000;" : "+f"(C[i])::"memory");
}

}  // namespace tl

// Hopper (sm_90) tensor-memory-accelerator loads completing on shared-memory mbarriers (tl.PipelineCUDA's TMA
// pipeline, transform/cuda/sm90/tma.py). The tensor maps (CUtensorMap, 128 opaque bytes each, encoded by the
// launcher per call: runtime/exported.py, TensorMaps) arrive as one __grid_constant__ kernel parameter, tl_tmaps.
#pragma once
#include "tl/common.cuh"

namespace tl {

struct alignas(64) TmaDesc {
  unsigned long long raw[16];
};

template <int N>
struct TmaDescs {
  TmaDesc m[N];
};

__device__ __forceinline__ void mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// makes the initialised barriers visible to the async proxy (TMA) before any thread uses them
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// one arrival that also announces `bytes` of transactions (the TMA loads of one stage) to complete the phase
__device__ __forceinline__ void mbar_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// one arrival of this thread (a consumer releasing a stage)
__device__ __forceinline__ void mbar_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// wait until the barrier's phase `parity` has completed (its loads have landed)
__device__ __forceinline__ void mbar_wait(void* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "TL_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra TL_MBAR_DONE;\n"
      "bra TL_MBAR_WAIT;\n"
      "TL_MBAR_DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// orders this thread's (and, after a barrier, the block's) generic-proxy accesses of shared memory before the
// async-proxy writes a TMA load issued next makes
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// a 2-D box of `map` at coordinates (c0 innermost, c1) into shared memory at `dst`, completing on `bar`;
// parts of the box outside the tensor are filled with zeros
// (a 1-D tensor is the 2-D map (n, 1), read at (c0, 0): no rank-1 maps, see runtime/exported.py's
// tensor_map_problems)
__device__ __forceinline__ void tma_load_2d(const TmaDesc* map, void* dst, void* bar, int c0,
                                            int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// the same for a 3-D to 5-D map (coordinates innermost first): a 2-D tile of a [batch, seq, heads, dim] tensor is
// a box of (atom, 1, rows, 1), so a ragged seq is zero-filled at its own edge, never read from the next batch
__device__ __forceinline__ void tma_load_3d(const TmaDesc* map, void* dst, void* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
      "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(const TmaDesc* map, void* dst, void* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0),
      "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(const TmaDesc* map, void* dst, void* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], "
      "[%2];" ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0),
      "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// ---- the GEMM epilogue through shared memory and TMA stores (pass_configs tl.cuda.tma_store; transform/cuda/
// sm90/tma_store.py). The wgmma accumulator goes out one column block (one swizzle atom wide) per warpgroup at a
// time: every thread writes its registers of that block into a staging slab of Rows x W elements in the swizzled
// layout the tensor map reads (the layout of layouts.py:wgmma_offset_expr, so a 128 B swizzle spreads the 8 rows
// of a warp's store over all banks), fences, the block meets, and one thread issues the boxes.

// the pair (a, b) stored at `p` as two Out elements in one 32-bit store (half2 / nv_bfloat162)
template <typename Acc>
__device__ __forceinline__ void store_pair(half* p, Acc a, Acc b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(static_cast<float>(a), static_cast<float>(b));
}

template <typename Acc>
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, Acc a, Acc b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(static_cast<float>(a), static_cast<float>(b));
}

// Column block `Step` of every warpgroup's column slice of a wgmma accumulator (MI m64 blocks per warpgroup, NT
// 8-column atoms per slice, WarpM x WarpN warpgroups) into `slabs`: WarpN slabs of Rows x W elements, one per
// warpgroup column, each the smem side of one TMA box of a map with a SwzBytes swizzle.
template <int MI, int NT, int WarpM, int WarpN, int Rows, int W, int SwzBytes, int Step, typename Acc, typename Out>
__device__ __forceinline__ void wgmma_acc_to_slabs(const Acc* acc, Out* slabs) {
  static_assert(W % 8 == 0 && (NT * 8) % W == 0, "wgmma_acc_to_slabs: a slice is whole column blocks of 8-atoms");
  constexpr int LG = sizeof(Out) == 2 ? 1 : 0;
  constexpr int MASK = SwzBytes / 16 - 1;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = warp / 4;
  const int gr = g / WarpN, gc = g % WarpN;
  Out* slab = slabs + gc * (Rows * W);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int a = 0; a < W / 8; ++a) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int reg = mi * NT * 4 + (Step * (W / 8) + a) * 4 + h * 2;
        const int row = mi * WarpM * 64 + 8 * h + gr * 64 + (warp % 4) * 16 + lane / 4;
        const int p = row * W + a * 8 + (lane % 4) * 2;
        const int q = p ^ (((p >> (7 - LG)) & MASK) << (4 - LG));
        store_pair(slab + q, acc[reg], acc[reg + 1]);
      }
    }
  }
}

// a 2-D box of shared memory at `src` into `map`'s tensor at coordinates (c0 innermost, c1); the parts of the box
// outside the tensor are not written (ragged tiles)
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}

// closes this thread's bulk group of the TMA stores issued since the last one
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// waits until at most N of this thread's bulk groups still read shared memory (their sources may be reused)
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// warp specialisation (tl.WarpSpecializeCUDA): the consumer warpgroups meet at named barrier 1 of `Threads`
// threads (barrier 0, __syncthreads, would wait for the producer warpgroup too)
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(Id), "n"(Threads) : "memory");
}

// ping-pong of two consumer warpgroups (pass_configs tl.cuda.pingpong): warpgroup `wg` (0 or 1) waits at named
// barrier 2 + wg until the other has passed it the turn (bar.arrive: 128 arrive, 128 wait), and passes the turn on
// after its gemm; barrier 1 stays the consumers' __syncthreads
__device__ __forceinline__ void pingpong_wait(int wg) {
  asm volatile("bar.sync %0, 256;" ::"r"(2 + wg) : "memory");
}

__device__ __forceinline__ void pingpong_pass(int wg) {
  asm volatile("bar.arrive %0, 256;" ::"r"(3 - wg) : "memory");
}

// a warpgroup gives registers back to the block's pool (the producer) or takes them (the consumers); every thread
// of the warpgroup executes it (sm_90a)
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}

template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}

}  // namespace tl

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
__device__ __forceinline__ void tma_load_2d(const TmaDesc* map, void* dst, void* bar, int c0,
                                            int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// warp specialisation (tl.WarpSpecializeCUDA): the consumer warpgroups meet at named barrier 1 of `Threads`
// threads (barrier 0, __syncthreads, would wait for the producer warpgroup too)
template <int Id, int Threads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(Id), "n"(Threads) : "memory");
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

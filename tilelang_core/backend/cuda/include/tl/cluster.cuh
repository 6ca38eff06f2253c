// Thread-block clusters for the warp-specialised TMA GEMM (sm_90a; pass_configs tl.cuda.cluster, transform/cuda/sm90/
// cluster.py). The kernel is launched with __cluster_dims__(x, y, z). An operand tile the cluster's blocks share (A
// for blocks along N, B for blocks along M) is loaded once: each block's producer loads one slice of it and the TMA
// multicast writes the slice into the same shared offset of every block in the mask, completing its bytes on the
// mbarrier at the same offset of each of them. A stage's empty barrier counts the releases of the consumer warps of
// every block, so no producer writes a stage some block of the cluster still reads.
#pragma once
#include "tl/tma.cuh"

namespace tl {

// every thread of every block of the cluster: what each did before is visible to all after (the barriers'
// initialisation before a peer's multicast or remote arrival reaches them; no block exits while a peer may still
// arrive on its barriers)
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// one arrival of this thread on the mbarrier at the same shared offset as `bar` in each of the cluster's N blocks
// (ranks 0 .. N-1; this block's own included): a stage is free only when every block that reads it has released it.
// The default .release.cta semantics, as CUTLASS's ClusterBarrier::arrive(cta_id): what is released is the wgmma
// reads of the stage, complete at the wait_group before this (an explicit .release.cluster costs a MEMBAR.GPU)
template <int N>
__device__ __forceinline__ void mbar_arrive_cluster(void* bar) {
  const unsigned local = smem_addr(bar);
#pragma unroll
  for (int r = 0; r < N; ++r) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(r));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
  }
}

// a 2-D box of `map` at (c0 innermost, c1) into shared memory at `dst` of every block whose rank is set in `mask`,
// completing on the mbarrier at `bar`'s offset in each of them; outside the tensor: zeros
__device__ __forceinline__ void tma_load_2d_multicast(const TmaDesc* map, void* dst, void* bar, unsigned mask, int c0,
                                                      int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "h"(static_cast<unsigned short>(mask)),
      "r"(c0), "r"(c1)
      : "memory");
}

}  // namespace tl

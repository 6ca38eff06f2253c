// T.alloc_global on CUDA: a workspace in the kernel module's own global memory (tl.LowerGlobalWorkspacesCUDA).
//
// Why: a workspace the program allocates needs memory outside the block that every block of the launch sees.
// A __device__ array of the module is that memory with no allocation at launch and no hidden kernel argument
// (the launcher and the exported runtime stay as they are). It is one array per loaded kernel, reused by every
// launch, so launches are stream-ordered (meta "serial_streams", as for split-K's workspace); its contents at the
// start of a launch are unspecified, as with torch.empty (the CPU backend allocates a fresh one per call).
#pragma once

namespace tl {

template <int KEY, typename T, long long N>
__device__ __align__(256) T global_workspace_data[N];  // aligned as cudaMalloc: vector accesses are legal

// The workspace KEY of the kernel (one per T.alloc_global), N elements of T.
template <int KEY, typename T, long long N>
__device__ __forceinline__ T* global_workspace() {
  return global_workspace_data<KEY, T, N>;
}

}  // namespace tl

/* The three runtime hooks a TVM-generated CPU library calls through function pointers
 * (__TVMBackendParallelLaunch, __TVMBackendAllocWorkspace, __TVMBackendFreeWorkspace), implemented with
 * OpenMP and aligned malloc and linked into every kernel library we build. With them the library runs when
 * loaded by apache-tvm-ffi alone (exported kernels, machines without the TVM compiler); when TVM's own
 * runtime loads it, TVM overwrites the pointers with its thread pool and allocator, which is fine too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

typedef struct { void* sync_handle; int32_t num_task; } TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

/* weak: a library that never launches in parallel or allocates a workspace does not define the pointer */
extern void* __TVMBackendParallelLaunch __attribute__((weak));
extern void* __TVMBackendAllocWorkspace __attribute__((weak));
extern void* __TVMBackendFreeWorkspace __attribute__((weak));

static int tl_parallel_launch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : omp_get_max_threads();
  int failed = 0;
  if (n <= 1) {
    TVMParallelGroupEnv env = {NULL, 1};
    return flambda(0, &env, cdata);
  }
#pragma omp parallel num_threads(n) reduction(| : failed)
  {
    TVMParallelGroupEnv env = {NULL, omp_get_num_threads()};
    if (flambda(omp_get_thread_num(), &env, cdata) != 0) failed = 1;
  }
  return failed ? -1 : 0;
}

static void* tl_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int dtype_code, int dtype_bits) {
  (void)device_type; (void)device_id; (void)dtype_code; (void)dtype_bits;
  void* p = NULL;
  size_t n = nbytes ? (size_t)((nbytes + 63) & ~(uint64_t)63) : 64;
  if (posix_memalign(&p, 64, n) != 0) return NULL;
  return p;
}

static int tl_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type; (void)device_id;
  free(ptr);
  return 0;
}

/* Called by our runtime right after loading: when TVM's own runtime is in the process, its loader points the hooks
 * at TVM's thread pool (sized to half the logical CPUs on x86: one thread on a 2-core VM); ours uses OpenMP with
 * every core (and, next to torch, torch's own libgomp pool). */
void tl_force_backend_hooks(void) {
  if (&__TVMBackendParallelLaunch) __TVMBackendParallelLaunch = (void*)&tl_parallel_launch;
  if (&__TVMBackendAllocWorkspace) __TVMBackendAllocWorkspace = (void*)&tl_alloc_workspace;
  if (&__TVMBackendFreeWorkspace) __TVMBackendFreeWorkspace = (void*)&tl_free_workspace;
}

__attribute__((constructor)) static void tl_install_backend_hooks(void) {
  if (&__TVMBackendParallelLaunch && !__TVMBackendParallelLaunch)
    __TVMBackendParallelLaunch = (void*)&tl_parallel_launch;
  if (&__TVMBackendAllocWorkspace && !__TVMBackendAllocWorkspace)
    __TVMBackendAllocWorkspace = (void*)&tl_alloc_workspace;
  if (&__TVMBackendFreeWorkspace && !__TVMBackendFreeWorkspace)
    __TVMBackendFreeWorkspace = (void*)&tl_free_workspace;
}

"""Per-kernel CUDA resources (registers, spills, shared/local memory) and occupancy, read from real builds.

Kernels are compiled for sm_90 here without a GPU (NVRTC or nvcc); the numbers come from the cubin (cuobjdump)
and ptxas's report. The occupancy rules are checked against CUDA's own calculator (``cuda_occupancy.h``, a
host-only header) compiled with the system C++ compiler.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import tilelang_core as tl
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available
from tilelang_core.backend.cuda.resources import (
    find_cuda_tool,
    occupancy,
    parse_ptxas,
    parse_resource_usage,
    run_tool,
)

needs_cuda_compiler = pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(),
                                         reason="no nvcc or NVRTC: CUDA kernels cannot be compiled here")


def gmm(M, N, K, block_M=64, block_N=64, block_K=32, threads=128, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main


@pytest.fixture(scope="module")
def small():
    return tl.compile(gmm(256, 256, 256), target="cuda")


@pytest.fixture(scope="module")
def spilling():
    # a 128x256 fp32 accumulator over 128 threads needs 256 registers per thread for it alone: ptxas spills
    return tl.compile(gmm(256, 256, 256, block_M=128, block_N=256), target="cuda")


@needs_cuda_compiler
def test_resources_of_a_cuda_kernel_agree_with_ptxas_and_the_launch(small):
    r = small.resources()
    ptxas = parse_ptxas(small.artifact.extra["cuda"]["ptxas_info"], "main_kernel")
    assert r.registers == ptxas["registers"] > 0
    assert r.spills == 0 and r.spill_stores == ptxas["spill_stores"] == 0
    # the two stages' tiles (and, with TMA loads, their mbarriers)
    assert r.dynamic_smem == small.artifact.extra["cuda"]["dyn_smem"] >= (64 * 32 + 32 * 64) * 2 * 2
    # the program's 128 threads plus the producer warpgroup of the warp-specialised TMA loop (sm_90a)
    assert r.threads == 128 + 128 and r.barriers >= 1
    occ = r.occupancy
    assert occ.blocks_per_sm == min(occ.limits.values()) >= 1
    assert occ.warps_per_sm == occ.blocks_per_sm * 8
    assert "regs" in r.summary() and "occupancy" in r.summary()
    d = r.to_dict()
    assert d["registers"] == r.registers and d["blocks_per_sm"] == occ.blocks_per_sm and 0 < d["occupancy"] <= 1


@needs_cuda_compiler
def test_a_kernel_that_spills_reports_spill_bytes_local_memory_and_the_register_limit(spilling, small):
    r = spilling.resources()
    assert r.registers == 255
    assert r.spill_stores > 0 and r.spill_loads > 0
    assert r.local >= r.stack > 0  # spills go to the stack frame, in local memory
    assert r.occupancy.limiter == "registers"
    assert r.occupancy.blocks_per_sm < small.resources().occupancy.blocks_per_sm
    assert r.dynamic_smem > small.resources().dynamic_smem


@needs_cuda_compiler
@pytest.mark.skipif(find_cuda_tool("cuobjdump") is None, reason="no cuobjdump (pip install nvidia-cuda-cuobjdump)")
def test_the_cubin_is_read_when_cuobjdump_is_there(small):
    text = run_tool([find_cuda_tool("cuobjdump"), "--dump-resource-usage", str(small.artifact.library_path)])
    usage = parse_resource_usage(text, "main_kernel")
    r = small.resources()
    assert r.source == "cubin" and usage["registers"] == r.registers and usage["static_smem"] == r.static_smem


def test_a_cpu_kernel_has_no_cuda_resources():
    k = tl.compile(gmm(64, 64, 64, dtype="float32"), target="cpu")
    assert k.resources() is None


def test_occupancy_rejects_bad_arguments_naming_them():
    with pytest.raises(ValueError, match="registers must be a non-negative int, got -1"):
        occupancy(-1, 128, 0)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        occupancy(32, 0, 0)
    with pytest.raises(ValueError, match="no SM limits known for arch 'sm_42'"):
        occupancy(32, 128, 0, "sm_42")


OCC_HEADER = Path("/usr/local/cuda/include/cuda_occupancy.h")
OCC_PROGRAM = r"""
#include <climits>
#include <cstdio>
#include "cuda_occupancy.h"
int main() {  // an H100/H200 (sm_90): 132 SMs, 228 KB shared per SM, 227 KB per block opt-in, 1 KB reserved
  cudaOccDeviceProp p;
  p.computeMajor = 9; p.computeMinor = 0; p.maxThreadsPerBlock = 1024; p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.warpSize = 32; p.sharedMemPerBlock = 49152;
  p.sharedMemPerMultiprocessor = 233472; p.numSms = 132; p.sharedMemPerBlockOptin = 232448;
  p.reservedSharedMemPerBlock = 1024;
  int regs, threads; long smem;
  while (scanf("%d %d %ld", &regs, &threads, &smem) == 3) {
    cudaOccFuncAttributes a;
    a.maxThreadsPerBlock = INT_MAX; a.numRegs = regs; a.sharedSizeBytes = 0;
    a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; a.maxDynamicSharedSizeBytes = 232448; a.numBlockBarriers = 1;
    cudaOccDeviceState s;
    cudaOccResult r;
    int err = (int)cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, smem);
    printf("%d %d\n", err, r.activeBlocksPerMultiprocessor);
  }
}
"""


@pytest.mark.skipif(not OCC_HEADER.is_file() or shutil.which("g++") is None,
                    reason="needs CUDA's cuda_occupancy.h and g++")
def test_occupancy_matches_cudas_own_calculator_for_sm90(tmp_path):
    import random

    src = tmp_path / "occ.cpp"
    src.write_text(OCC_PROGRAM)
    exe = tmp_path / "occ"
    subprocess.run(["g++", "-O1", f"-I{OCC_HEADER.parent}", str(src), "-o", str(exe)], check=True)
    rng = random.Random(19)
    cases = [(rng.randint(16, 255), rng.choice([32, 64, 96, 128, 160, 256, 384, 512, 1024]),
              rng.choice([0, 1024, 16384, 24576, 49152, 65536, 100000, 116736, 200000, 232448]))
             for _ in range(300)]
    cases += [(255, 1024, 0), (64, 128, 0), (32, 256, 102400), (128, 128, 232448 - 1024)]
    out = subprocess.run([str(exe)], input="".join(f"{r} {t} {s}\n" for r, t, s in cases), capture_output=True,
                         text=True, check=True).stdout.split("\n")
    for (regs, threads, smem), line in zip(cases, out):
        err, blocks = (int(x) for x in line.split())
        assert err == 0
        assert occupancy(regs, threads, smem, "sm_90").blocks_per_sm == blocks, (regs, threads, smem)

// tilelang_core CUDA device templates: the building blocks the CUDA passes emit calls to.
//
// Why: TVM's CUDA codegen prints TIR; tile-level operations that need warp-synchronous PTX (cp.async, ldmatrix,
// mma.sync, shuffles) are clearer and easier to get right as small C++ templates, called from the generated
// kernel through T.call_extern. Every template is force-inlined, so the register arrays the kernel passes by
// pointer stay in registers.
#pragma once
#include "tl/common.cuh"
#include "tl/copy.cuh"
#include "tl/gemm.cuh"
#include "tl/gemm_frag.cuh"
#include "tl/reduce.cuh"
#include "tl/splitk.cuh"
#include "tl/dequant.cuh"
#include "tl/atomic.cuh"
#include "tl/workspace.cuh"

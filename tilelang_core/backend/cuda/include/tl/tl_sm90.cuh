// The first include of a kernel that uses wgmma (sm_90a): all of tl.cuh plus the wgmma templates, so that NVRTC's
// precompiled header (made for a source's first #include) holds the large per-shape PTX wrappers too.
#pragma once
#include "tl/tl.cuh"
#include "tl/wgmma.cuh"
#include "tl/tma.cuh"
#include "tl/cluster.cuh"

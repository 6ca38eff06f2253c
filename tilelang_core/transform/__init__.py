"""Our TIR passes, in pipeline order. Each module holds one pass and says what it does and why.

Layout: ``common/`` the target-independent passes and the helpers every pass shares (``rewriter``: the
``Rewriter`` and IR builders; ``regions``: tile-region arithmetic; ``notes``: kernel notes), ``cpu/`` the CPU
lowering, ``cuda/`` the CUDA lowering (``cuda/common``: the attributes CUDA passes hand each other and their shared
IR helpers; ``cuda/layouts``: fragment/shared layouts and swizzles), ``cuda/sm90/`` reserved for Hopper-only
pieces. This module builds the per-target pass lists and re-exports the passes."""

from __future__ import annotations

from typing import Any

from ..pass_config import PassConfigKey  # TileLang's spelling: tilelang.transform.PassConfigKey
from .common.bf16_scalar_params import bf16_scalar_params
from .common.imported_sources import collect_imported_sources
from .common.layout_annotations import apply_index_layouts, collect_layout_annotations
from .common.nan_skipping_minmax import nan_skipping_minmax
from .common.promote_index_int64 import check_index_extents, promote_index_int64
from .common.split_masked_iterations import split_masked_iterations
from .common.validate_tile_ops import validate_tile_ops
from .cpu.check_extern_calls_cpu import check_extern_calls_cpu
from .cpu.clamp_guarded_loops_cpu import clamp_guarded_loops_cpu
from .cpu.fast_exp_cpu import fast_exp_cpu
from .cpu.fp8_cast_cpu import fp8_cast_cpu
from .cpu.localize_buffers_cpu import localize_buffers_cpu
from .cpu.lower_kernel_grid_cpu import lower_kernel_grid_cpu
from .cpu.lower_parallel_cpu import lower_parallel_cpu
from .cpu.lower_tile_ops_cpu import lower_tile_ops_cpu
from .cpu.serialize_small_grids_cpu import serialize_small_grids_cpu
from .cpu.split_div_mod_cpu import split_div_mod_cpu


def cpu_passes(vector_bytes: int) -> list[tuple[str, Any]]:
    """The CPU pipeline as (name, PrimFunc -> PrimFunc): validate, grid → parallel loop, tile ops → loops,
    T.Parallel loops split where their variable is divided by a constant, T.Parallel → guarded loops. Plain
    Python calls (not TVM module passes) so our errors keep their class."""
    return [
        ("tl.ValidateTileOps", validate_tile_ops),
        ("tl.CollectImportedSources", collect_imported_sources),
        ("tl.CheckExternCallsCPU", check_extern_calls_cpu),
        ("tl.CollectLayoutAnnotations", collect_layout_annotations),
        ("tl.CheckIndexExtents", check_index_extents),
        ("tl.SplitMaskedIterations", split_masked_iterations),
        ("tl.LowerKernelGridCPU", lower_kernel_grid_cpu),
        ("tl.LowerTileOpsCPU", lambda f: lower_tile_ops_cpu(f, vector_bytes)),
        ("tl.SplitDivModCPU", split_div_mod_cpu),
        ("tl.LowerParallelCPU", lower_parallel_cpu),
        ("tl.ApplyIndexLayouts", apply_index_layouts),
        ("tl.ClampGuardedLoopsCPU", clamp_guarded_loops_cpu),
        ("tl.SerializeSmallGridsCPU", serialize_small_grids_cpu),
        ("tl.LocalizeBuffersCPU", localize_buffers_cpu),
        ("tl.NanSkippingMinMax", nan_skipping_minmax),
        ("tl.FastExpCPU", fast_exp_cpu),
        ("tl.FP8CastCPU", fp8_cast_cpu),
        ("tl.Bf16ScalarParams", bf16_scalar_params),
        ("tl.PromoteIndexInt64", promote_index_int64),
    ]


def cuda_passes(arch: str = "sm_90", options: Any = None) -> list[tuple[str, Any]]:
    """The CUDA pipeline as (name, PrimFunc -> PrimFunc): validate, launch config, fragment layouts, software
    pipelining, barriers, tile ops -> per-thread code, T.Parallel -> per-thread code, shared-memory placement.
    ``options``: the :class:`~tilelang_core.pass_config.PassConfig` (or a ``pass_configs`` dict) the passes read.
    Imported lazily so the CPU path does not load them."""
    from ..pass_config import resolve
    from .cuda.apply_layout_annotations_cuda import apply_layout_annotations_cuda
    from .cuda.dequant_fragments_cuda import dequant_fragments_cuda
    from .cuda.factor_scale_cuda import factor_scale_cuda
    from .cuda.fast_exp_cuda import fast_exp_cuda
    from .cuda.fp8_encode_cuda import fp8_encode_cuda
    from .cuda.fuse_dequant_gemm_cuda import fuse_dequant_gemm_cuda
    from .cuda.hoist_invariant_reads_cuda import hoist_invariant_reads_cuda
    from .cuda.infer_fragment_layouts_cuda import infer_fragment_layouts_cuda
    from .cuda.insert_syncs_cuda import insert_syncs_cuda
    from .cuda.lower_global_workspaces_cuda import lower_global_workspaces_cuda
    from .cuda.lower_kernel_launch_cuda import lower_kernel_launch_cuda
    from .cuda.lower_parallel_cuda import lower_parallel_cuda
    from .cuda.lower_shared_memory_cuda import lower_shared_memory_cuda
    from .cuda.lower_tile_ops_cuda import lower_tile_ops_cuda
    from .cuda.lower_tile_views_cuda import lower_tile_views_cuda
    from .cuda.pipeline_cuda import pipeline_cuda
    from .cuda.sm90.tma_store import tma_store_cuda
    from .cuda.small_int_to_half_cuda import small_int_to_half_cuda
    from .cuda.split_k_cuda import split_k_cuda
    from .cuda.vector_atomics_cuda import vector_atomics_cuda
    from .cuda.warp_specialize_cuda import warp_specialize_cuda

    opts = resolve(options)
    fragments = bool(opts[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS])
    return [
        ("tl.ValidateTileOps", validate_tile_ops),
        ("tl.CollectImportedSources", collect_imported_sources),
        ("tl.CollectLayoutAnnotations", collect_layout_annotations),
        ("tl.CheckIndexExtents", check_index_extents),
        ("tl.SplitMaskedIterations",
         lambda f: split_masked_iterations(f) if opts[PassConfigKey.TL_CUDA_SPLIT_MASKED_ITERATIONS] else f),
        ("tl.Bf16ScalarParams", bf16_scalar_params),
        ("tl.LowerKernelLaunchCUDA", lower_kernel_launch_cuda),
        ("tl.LowerGlobalWorkspacesCUDA", lower_global_workspaces_cuda),
        ("tl.LowerTileViewsCUDA", lower_tile_views_cuda),
        ("tl.InferFragmentLayoutsCUDA", lambda f: infer_fragment_layouts_cuda(f, arch, opts)),
        ("tl.ApplyLayoutAnnotationsCUDA", apply_layout_annotations_cuda),
        # the W4A16 recogniser (tl.cuda.fuse_dequant) first; tl.cuda.dequant_fragments, the general producer fusion,
        # takes the dequantising gemms it left, after split-K (which splits the generic form's loop), before pipelining
        ("tl.FuseDequantGemmCUDA", lambda f: fuse_dequant_gemm_cuda(f, arch, opts)),
        ("tl.FactorScaleCUDA", lambda f: factor_scale_cuda(f, opts)),
        ("tl.SplitKCUDA", lambda f: split_k_cuda(f, arch, opts)),
        ("tl.DequantFragmentsCUDA", lambda f: dequant_fragments_cuda(
            f, bool(opts[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS_DIRECT]),
            bool(opts[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENT_TABLES]),
            bool(opts[PassConfigKey.TL_CUDA_SWIZZLE_PACKED_TILES]),
            int(opts[PassConfigKey.TL_CUDA_ACCUMULATOR_SETS]),
            bool(opts[PassConfigKey.TL_CUDA_FRAGMENT_A_SWIZZLE])) if fragments else f),
        ("tl.PipelineCUDA", lambda f: pipeline_cuda(f, opts, arch)),
        ("tl.HoistInvariantReadsCUDA",
         lambda f: hoist_invariant_reads_cuda(f, bool(opts[PassConfigKey.TL_CUDA_HOIST_INVARIANT_READS]))),
        ("tl.InsertSyncsCUDA", insert_syncs_cuda),
        ("tl.TmaStoreCUDA", lambda f: tma_store_cuda(f, opts, arch)),
        ("tl.LowerTileOpsCUDA", lambda f: lower_tile_ops_cuda(f, arch)),
        ("tl.FP8EncodeCUDA", fp8_encode_cuda),
        ("tl.LowerParallelCUDA", lower_parallel_cuda),
        ("tl.VectorAtomicsCUDA", lambda f: vector_atomics_cuda(f, opts, arch)),
        ("tl.ApplyIndexLayouts", apply_index_layouts),
        ("tl.LowerSharedMemoryCUDA", lambda f: lower_shared_memory_cuda(f, arch)),
        ("tl.WarpSpecializeCUDA", lambda f: warp_specialize_cuda(f, opts)),
        ("tl.NanSkippingMinMax", lambda f: nan_skipping_minmax(f, cuda=True)),
        ("tl.FastExpCUDA", fast_exp_cuda),
        ("tl.SmallIntToHalfCUDA", small_int_to_half_cuda),
        ("tl.PromoteIndexInt64", promote_index_int64),
    ]


__all__ = ["cpu_passes", "cuda_passes", "validate_tile_ops", "lower_kernel_grid_cpu", "lower_tile_ops_cpu",
           "lower_parallel_cpu", "split_div_mod_cpu",
           "localize_buffers_cpu", "fast_exp_cpu", "clamp_guarded_loops_cpu",
           "fp8_cast_cpu", "PassConfigKey", "serialize_small_grids_cpu",
           "check_index_extents", "promote_index_int64", "nan_skipping_minmax", "bf16_scalar_params"]

"""TileLang language names we do not support, each with the reason and what to use instead.

``T.<name>`` for one of these returns a function that raises ``NotImplementedError`` when the program calls it, so
the error comes at the user's line (the parser reports it there) and points to docs/compat.md, rather than an
``AttributeError`` or a TVM message later.
"""

from __future__ import annotations

from typing import Any

COMPAT_DOC = "docs/compat.md"

_GPU_INTRINSIC = "a hand-scheduled GPU intrinsic; our backends schedule memory and warps themselves"
_TMA = ("explicit TMA / mbarrier programming is not built; use T.copy in a T.Pipelined loop: on sm_90a the CUDA "
        "backend makes it TMA boxes completing on mbarriers itself (cp.async elsewhere)")
_WARP = "warp-level SIMT programming; use T.reduce_* / T.Parallel, which the CUDA backend maps to warps"

UNSUPPORTED: dict[str, str] = {
    "reducer_init": "TileLang's reducer epochs are not built; use T.alloc_reducer + T.fill + T.finalize_reducer "
                    "(CPU and CUDA) or accumulate into a fragment and T.reduce_*",
    "reducer_update": "TileLang's reducer epochs are not built; update a T.alloc_reducer inside T.Parallel "
                      "(r[j] += v) and T.finalize_reducer it, or use a fragment and T.reduce_*",
    "reduce_bitand": "bitwise reductions are not built; reduce with T.reduce_min/max on 0/1 values",
    "reduce_bitor": "bitwise reductions are not built; reduce with T.reduce_max on 0/1 values",
    "reduce_bitxor": "bitwise reductions are not built; use T.reduce_sum and take the parity",
    "warp_reduce_sum": _WARP, "warp_reduce_max": _WARP, "warp_reduce_min": _WARP,
    "warp_reduce_bitand": _WARP, "warp_reduce_bitor": _WARP,
    "shfl_xor": _WARP, "shfl_down": _WARP, "shfl_up": _WARP, "shfl_sync": _WARP,
    "ballot": _WARP, "ballot_sync": _WARP, "activemask": _WARP, "all_sync": _WARP, "any_sync": _WARP,
    "match_all_sync": _WARP, "match_any_sync": _WARP, "shuffle_elect": _WARP,
    "syncthreads_and": _WARP, "syncthreads_or": _WARP, "syncthreads_count": _WARP,
    "get_lane_idx": _WARP, "get_warp_idx": _WARP, "get_warp_idx_sync": _WARP, "get_warp_group_idx": _WARP,
    "atomic_load": "atomic loads with a memory order are not built (our atomics are relaxed updates)",
    "atomic_store": "atomic stores with a memory order are not built (our atomics are relaxed updates)",
    "atomic_or": "bitwise atomics are not built; use T.atomic_max on 0/1 flags",
    "dp4a": _GPU_INTRINSIC + " (write the int8 dot product as a T.Parallel loop or an int8 T.gemm)",
    "loop_break": "breaking out of a loop is not built; guard the remaining iterations with an if",
    "im2col": "not built; gather the patches with T.Parallel loads",
    "c2d_im2col": "not built; gather the patches with T.Parallel loads",
    "gemm_sp": "structured-sparse GEMM is not built; use T.gemm on the dense operand",
    "async_copy": "use T.copy (the CUDA backend makes pipelined copies asynchronous itself)",
    "tma_copy": _TMA, "tma_load": _TMA, "tma_load_2sm": _TMA, "tma_store_arrive": _TMA, "tma_store_wait": _TMA,
    "tma_gather4": _TMA, "tma_gather4_bytes": _TMA, "tma_scatter4": _TMA, "create_tma_descriptor": _TMA,
    "copy_cluster": _TMA, "fence_proxy_async": _TMA,
    "alloc_barrier": _TMA, "alloc_cluster_barrier": _TMA, "barrier_arrive": _TMA, "barrier_wait": _TMA,
    "mbarrier_arrive": _TMA, "mbarrier_arrive_expect_tx": _TMA, "mbarrier_expect_tx": _TMA,
    "mbarrier_wait_parity": _TMA, "named_barrier_arrive": _TMA, "ptx_arrive_cluster_barrier": _TMA,
    "alloc_tmem": "Blackwell tensor memory; we target sm_80/sm_90", "deallocate_tmem": "Blackwell tensor memory",
    "alloc_descriptor": _GPU_INTRINSIC, "increase_descriptor_offset": _GPU_INTRINSIC,
    "set_max_nreg": _GPU_INTRINSIC, "no_set_max_nreg": _GPU_INTRINSIC,
    "inc_max_nreg": _GPU_INTRINSIC, "dec_max_nreg": _GPU_INTRINSIC,
    "annotate_producer_reg_dealloc": _GPU_INTRINSIC, "annotate_consumer_reg_alloc": _GPU_INTRINSIC,
    "ldg32": _GPU_INTRINSIC, "ldg64": _GPU_INTRINSIC, "ldg128": _GPU_INTRINSIC, "ldg256": _GPU_INTRINSIC,
    "stg32": _GPU_INTRINSIC, "stg64": _GPU_INTRINSIC, "stg128": _GPU_INTRINSIC, "stg256": _GPU_INTRINSIC,
    "lds32": _GPU_INTRINSIC, "lds64": _GPU_INTRINSIC, "lds128": _GPU_INTRINSIC,
    "sts32": _GPU_INTRINSIC, "sts64": _GPU_INTRINSIC, "sts128": _GPU_INTRINSIC,
    "ptx_mma_sm70": _GPU_INTRINSIC, "sync_grid": "grid-wide barriers are not built; split the work into two "
                                                 "kernels", "sync_global": "grid-wide barriers are not built",
    "annotate_safe_value": "not built (ragged edges are guarded by the compiler)",
    "annotate_l2_hit_ratio": _GPU_INTRINSIC, "annotate_restrict_buffers": "not built (parameters never alias "
                                                                          "here: the runtime refuses overlaps)",
    "annotate_ws_schedule": "explicit warp-specialisation schedules are not built (the CUDA backend specialises "
                            "T.Pipelined loops itself on Hopper; tl.disable_warp_specialized turns it off)",
    "ws_op": "explicit warp-specialisation schedules are not built (the CUDA backend specialises T.Pipelined loops "
             "itself on Hopper)",
    "annotate_min_blocks_per_sm": _GPU_INTRINSIC,
    "Persistent": "TileLang's persistent loop is not built; use T.Kernel over the tiles (on sm_90a pass_configs "
                  "tl.cuda.persistent makes a wgmma GEMM persistent)",
    "ClusterKernel": "TileLang's cluster kernel is not built; use T.Kernel (on sm_90a pass_configs tl.cuda.cluster "
                     "launches a warp-specialised GEMM in clusters)",
    "CUDASourceCodeKernel": "kernels from CUDA source are not built; write the kernel in the tile language",
    # kernel parameters (docs/compat.md, "Language: kernel parameters, shapes and the frontend")
    # as T.macro parameter annotations they are accepted (TileAnnotation below); as kernel parameters:
    "FragmentBuffer": "kernel parameters are global tensors (T.Tensor); allocate tiles with T.alloc_fragment",
    "SharedBuffer": "kernel parameters are global tensors (T.Tensor); allocate tiles with T.alloc_shared",
    "LocalBuffer": "kernel parameters are global tensors (T.Tensor); allocate tiles with T.alloc_local",
    "make_tensor": "pointer parameters are not built; take a T.Tensor parameter, and for another shape over its "
                   "memory write T.Tensor(shape, dtype, A.data) in the body",
}


# tile annotations: fine on a T.macro's parameters (documentation of what the caller passes), refused on a kernel's
TILE_ANNOTATIONS = ("FragmentBuffer", "SharedBuffer", "LocalBuffer")


class TileAnnotation:
    """What ``T.SharedBuffer(shape, dtype)`` (and ``T.FragmentBuffer`` / ``T.LocalBuffer``) gives when Python
    evaluates a ``T.macro``'s parameter annotations, as TileLang's examples write them: an annotation only; the
    macro receives the caller's tile. A kernel (``T.prim_func``) parameter with it is refused, with the reason."""

    def __init__(self, kind: str, shape: Any, dtype: Any) -> None:
        self.kind, self.shape, self.dtype = kind, shape, dtype

    def __repr__(self) -> str:
        return f"T.{self.kind}({self.shape!r}, {self.dtype!r})"


def _in_tvmscript_parser() -> bool:
    """True when TVMScript's parser is evaluating this call (a ``T.prim_func``'s signature), not Python's ``def``."""
    import sys

    f = sys._getframe(2)
    while f is not None:
        if "/tvm/script/parser/" in f.f_code.co_filename.replace("\\", "/"):
            return True
        f = f.f_back
    return False


def refusal(name: str) -> Any:
    """A stand-in for ``T.<name>`` that raises, when called, why it is not supported."""
    why = UNSUPPORTED[name]

    def not_supported(*args: Any, **kwargs: Any) -> Any:
        msg = f"T.{name} is not supported by tilelang_core: {why} (see {COMPAT_DOC})"
        if name in TILE_ANNOTATIONS:
            if not _in_tvmscript_parser():
                shape = args[0] if args else kwargs.get("shape")
                dtype = args[1] if len(args) > 1 else kwargs.get("dtype", "float32")
                return TileAnnotation(name, shape, dtype)
            # a kernel parameter: TVMScript swallows what its evaluation raises; jit reports this at that line
            from .dtypes import ANNOTATION_ERRORS

            ANNOTATION_ERRORS.last = (msg, f"{name}(")
        raise NotImplementedError(msg)

    not_supported.__name__ = name
    return not_supported

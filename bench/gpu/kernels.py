"""The kernels the GPU check and benchmark run: which factory, which arguments, which torch reference.

Why this module exists: ``bench/gpu/run.py`` compiles every entry here through ``@jit`` on the GPU host (its
default; ``bench/gpu/jit_build.py``) and checks and times it; ``bench/gpu/build.py`` instead compiles them into
``.gpu_artifacts/`` on a machine with TVM and nvcc (no GPU needed) for ``run.py --artifacts``. The
entries reuse the CPU issue's kernels unchanged — ``examples/`` and the factories of ``tests/`` — so "one program,
every target" is what is checked. References are named (functions of ``bench/gpu/refs.py``, torch only) so the
manifest is plain JSON.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Entry:
    """One compiled kernel and how to check (and maybe time) it."""

    name: str
    module: str  # where the @jit factory lives (examples.* or a tests module)
    factory: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    ref: str = ""  # function in refs.py
    ref_kw: dict[str, Any] = field(default_factory=dict)
    rtol: float = 1e-4
    atol: float = 1e-4
    inputs: dict[str, Any] = field(default_factory=dict)  # per-parameter generator overrides: name -> spec
    bench: str | None = None  # benchmark group ("gemm", "add", "softmax", "rmsnorm", ...) or None
    flops: float = 0.0
    bytes: float = 0.0
    check: bool = True
    pass_configs: dict[str, Any] = field(default_factory=dict)  # compiler options (@jit(pass_configs=...))
    # a second reference in refs.py: the exact answer, where ``ref`` is the program's own rounding order; the check
    # then compares with the exact answer, its tolerance widened by the reference's own distance from it
    exact: str = ""


def _gemm_bench(M: int, N: int, K: int, bm: int, bn: int, bk: int, stages: int, threads: int,
                tag: str) -> Entry:
    return Entry(f"gemm_f16_{M}x{N}x{K}_{tag}", "examples.gemm", "matmul_relu", (M, N, K, bm, bn, bk),
                 {"num_stages": stages, "threads": threads, "dtype": "float16", "accum_dtype": "float32"},
                 "matmul_relu", rtol=2e-2, atol=2e-2, bench="gemm", flops=2.0 * M * N * K,
                 bytes=2.0 * (M * K + K * N + M * N))


def entries() -> list[Entry]:
    E = Entry
    out = [
        # -- the CPU issue's kernels (examples/), aligned and ragged -------------------------------------------
        E("quickstart_f32_1024", "examples.gemm", "matmul_relu", (1024, 1024, 1024, 64, 64, 32), {}, "matmul_relu"),
        E("quickstart_f32_ragged", "examples.gemm", "matmul_relu", (300, 200, 130, 64, 64, 32), {}, "matmul_relu"),
        E("quickstart_f16_1024", "examples.gemm", "matmul_relu", (1024, 1024, 1024, 128, 128, 32),
          {"dtype": "float16"}, "matmul_relu", rtol=2e-2, atol=2e-2),
        E("quickstart_f16_unfused", "examples.gemm", "matmul_relu", (1024, 1024, 1024, 128, 128, 32),
          {"dtype": "float16"}, "matmul_relu", rtol=2e-2, atol=2e-2, pass_configs={"tl.cuda.fused_gemm": False}),
        E("quickstart_f16_ragged", "examples.gemm", "matmul_relu", (300, 200, 136, 128, 128, 32),
          {"dtype": "float16"}, "matmul_relu", rtol=2e-2, atol=2e-2),
        E("gemm_f16_ragged_k", "examples.gemm", "matmul", (257, 130, 100, 64, 64, 32),
          {"dtype": "float16"}, "matmul", rtol=2e-2, atol=2e-2),
        E("add_tiled", "examples.elementwise", "add_tiled", (4096, 4096), {}, "add", rtol=0, atol=0),
        E("add_tiled_ragged", "examples.elementwise", "add_tiled", (1000, 1030), {}, "add", rtol=0, atol=0),
        E("add_direct_ragged", "examples.elementwise", "add_direct", (1000, 1030), {}, "add", rtol=0, atol=0),
        E("softmax_4096", "examples.softmax", "softmax", (4096, 4096), {}, "softmax", rtol=1e-5, atol=1e-6),
        E("softmax_ragged", "examples.softmax", "softmax", (1001, 333), {}, "softmax", rtol=1e-5, atol=1e-6),
        E("softmax_rows4", "examples.softmax", "softmax", (1001, 333), {"block_M": 4}, "softmax", rtol=1e-5,
          atol=1e-6),
        E("rmsnorm_4096", "examples.rmsnorm", "rms_norm", (4096, 4096), {}, "rmsnorm", rtol=1e-4, atol=1e-5),
        E("rmsnorm_ragged", "examples.rmsnorm", "rms_norm", (1001, 333), {}, "rmsnorm", rtol=1e-4, atol=1e-5),
        E("gemv_8192", "examples.gemv", "gemv", (8192, 8192), {}, "gemv", rtol=1e-3, atol=1e-3),
        E("gemv_ragged", "examples.gemv", "gemv", (1000, 1030), {}, "gemv", rtol=1e-3, atol=1e-3),
        # -- kernels of the CPU test-suite -------------------------------------------------------------------
        E("t_gemm_transA", "test_gemm", "matmul", (200, 136, 72, 64, 64, 32), {"trans_A": True}, "matmul",
          {"trans_A": True}),
        E("t_gemm_transB", "test_gemm", "matmul", (200, 136, 72, 64, 64, 32), {"trans_B": True}, "matmul",
          {"trans_B": True}),
        E("t_gemm_f16_tAB", "test_gemm", "matmul", (256, 128, 96, 64, 64, 32),
          {"trans_A": True, "trans_B": True, "in_dtype": "float16"}, "matmul", {"trans_A": True, "trans_B": True},
          rtol=2e-2, atol=2e-2),
        E("t_gemm_f16_tB_ragged", "test_gemm", "matmul", (200, 136, 72, 64, 64, 32),
          {"trans_B": True, "in_dtype": "float16"}, "matmul", {"trans_B": True}, rtol=2e-2, atol=2e-2),
        E("t_gemm_bf16", "test_gemm", "matmul", (256, 256, 256, 64, 64, 32), {"in_dtype": "bfloat16"}, "matmul",
          rtol=3e-2, atol=3e-2),
        E("t_gemm_f16_out", "test_gemm", "matmul", (256, 256, 256, 64, 64, 32),
          {"in_dtype": "float16", "out_dtype": "float16", "accum_dtype": "float16"}, "matmul", rtol=3e-2,
          atol=3e-2),
        E("t_gemm_f64", "test_gemm", "matmul", (96, 80, 70, 32, 32, 16),
          {"in_dtype": "float64", "out_dtype": "float64", "accum_dtype": "float64"}, "matmul", rtol=1e-10,
          atol=1e-10),
        E("t_gemm_i8", "test_gemm", "matmul", (96, 64, 80, 32, 32, 16),
          {"in_dtype": "int8", "out_dtype": "int32", "accum_dtype": "int32"}, "matmul", rtol=0, atol=0,
          inputs={"*": ["randint", -8, 8]}),
        E("t_gemm_swizzle", "test_gemm", "matmul", (512, 384, 128, 64, 64, 32), {"swizzle": True}, "matmul"),
        E("t_gemm_a_fragment", "test_gemm", "matmul_a_fragment", (200, 136, 72, 64, 64, 32, 0.5), {},
          "matmul_scaled_a", {"scale": 0.5}),
        E("t_gemm_clear_accum", "test_gemm", "matmul_clear_accum", (128, 96, 64, 32, 32), {}, "matmul"),
        E("t_gemm_batched", "test_gemm", "batched_matmul", (3, 100, 72, 40, 32, 32, 16), {}, "bmm"),
        E("t_add_1d_ragged", "test_elementwise", "add_1d", (1000, 128), {}, "add", rtol=0, atol=0),
        E("t_add_2d_direct", "test_elementwise", "add_2d_direct", (100, 70, 32, 32), {}, "add", rtol=0, atol=0),
        E("t_add_2d_tiles", "test_elementwise", "add_2d_tiles", (100, 70, 32, 32), {}, "add", rtol=0, atol=0),
        E("t_add_f16", "test_elementwise", "add_2d_tiles", (128, 96, 32, 32), {"dtype": "float16"}, "add",
          rtol=1e-3, atol=1e-3),
        E("t_axpy_slices", "test_elementwise", "axpy_slices", (100, 70, 32, 1.5), {}, "axpy", {"alpha": 1.5}),
        E("t_bias_broadcast", "test_elementwise", "bias_add_broadcast", (100, 70, 32, 32), {}, "add_bias"),
        E("t_row_cumsum", "test_language_features", "row_cumsum", (70, 48, 32), {}, "cumsum", rtol=1e-5,
          atol=1e-5),
        E("t_horner", "test_language_features", "cubic_horner", (1000, 128), {}, "horner", rtol=1e-5, atol=1e-5),
        E("t_transpose", "test_language_features", "transpose", (100, 70, 32, 16), {}, "transpose", rtol=0, atol=0),
        E("t_augmented", "test_language_features", "augmented_ops", (96, 80, 32, 32), {}, "augmented", rtol=1e-6,
          atol=1e-6),
        E("t_silu", "test_language_features", "activation", (777, 128, "silu"), {}, "silu", rtol=1e-5, atol=1e-6),
        E("t_split_k", "test_language_features", "split_k_accumulate_scalar", (100, 70, 96, 32, 32, 3), {},
          "accumulate_matmul"),
        E("t_split_k_tile", "test_language_features", "split_k_accumulate_tile", (90, 50, 128, 32, 32, 16, 4,
                                                                                   "slice"), {},
          "accumulate_matmul"),
        E("t_histogram", "test_language_features", "histogram", (1000, 8, 64), {}, "histogram", rtol=0, atol=0,
          inputs={"X": ["randint", 0, 8], "H": ["randint", 0, 5]}),
        E("t_math", "test_language_features", "math_functions", (1000, 128), {}, "math10", rtol=1e-5, atol=1e-6),
        E("t_reduce_sum_d1", "test_reductions", "tile_reduce", (64, 96, 32, 32, "sum", 1), {}, "tile_reduce",
          {"block_M": 32, "block_N": 32, "kind": "sum", "dim": 1, "clear": True}, rtol=1e-5, atol=1e-5),
        E("t_reduce_max_d0", "test_reductions", "tile_reduce", (64, 96, 32, 32, "max", 0), {}, "tile_reduce",
          {"block_M": 32, "block_N": 32, "kind": "max", "dim": 0, "clear": True}, rtol=0, atol=0),
        E("t_reduce_absmax_noclear", "test_reductions", "tile_reduce", (64, 96, 32, 32, "absmax", 1, False), {},
          "tile_reduce", {"block_M": 32, "block_N": 32, "kind": "absmax", "dim": 1, "clear": False}, rtol=0,
          atol=0),
        E("t_reduce_min_d0_noclear", "test_reductions", "tile_reduce", (64, 96, 32, 32, "min", 0, False), {},
          "tile_reduce", {"block_M": 32, "block_N": 32, "kind": "min", "dim": 0, "clear": False}, rtol=0,
          atol=0),
        E("t_row_max_shared", "test_reductions", "row_max_from_shared", (70, 48, 32), {}, "row_max", rtol=0,
          atol=0),
        E("t_online_softmax", "test_reductions", "online_softmax", (100, 256, 4, 64), {}, "softmax", rtol=1e-5,
          atol=1e-6),
        # -- later kernels (flash attention, W4A16 dequantised GEMM): correctness on the GPU path ------------
        E("flash_attn_f32", "examples.flash_attention", "flash_attention", (2, 2, 256, 64), {}, "attention",
          rtol=1e-4, atol=1e-4),
        E("flash_attn_f16_pipelined", "examples.flash_attention", "flash_attention", (2, 2, 256, 64),
          {"dtype": "float16", "num_stages": 2}, "attention", rtol=2e-2, atol=2e-2),
        E("flash_attn_f16_causal_ragged", "examples.flash_attention", "flash_attention", (1, 2, 250, 64, True),
          {"dtype": "float16", "num_stages": 2}, "attention", {"is_causal": True}, rtol=2e-2, atol=2e-2),
        E("dequant_gemm_f32", "examples.dequant_gemm", "dequant_gemm", (16, 256, 512), {}, "dequant_gemm",
          rtol=1e-4, atol=1e-3, inputs={"B": ["randint", 0, 256], "Scale": ["rand", 0.01, 0.11]}),
        E("dequant_gemm_f16_groups", "examples.dequant_gemm", "dequant_gemm", (32, 256, 512, 128),
          {"dtype": "float16"}, "dequant_gemm", rtol=2e-2, atol=2e-2,
          inputs={"B": ["randint", 0, 256], "Scale": ["rand", 0.01, 0.11]}),
    ]
    # -- benchmarks (checked too) ----------------------------------------------------------------------------
    big = [(128, 128, 32, 4, 128), (128, 128, 32, 3, 128), (128, 128, 32, 5, 128), (128, 256, 32, 3, 256),
           (128, 256, 32, 4, 256), (256, 128, 32, 4, 256), (64, 128, 32, 4, 128), (128, 128, 64, 3, 128)]
    configs = {
        (4096, 4096, 4096): big,
        (8192, 8192, 8192): big,
        (16, 8192, 8192): [(16, 64, 128, 4, 128), (16, 32, 256, 4, 128), (16, 64, 256, 3, 128)],
        (128, 8192, 28672): [(128, 128, 32, 4, 128), (64, 128, 64, 4, 128), (128, 64, 64, 4, 128),
                             (128, 64, 32, 4, 128), (64, 128, 32, 4, 128)],
    }
    for (M, N, K), cfgs in configs.items():
        for bm, bn, bk, st, th in cfgs:
            out.append(_gemm_bench(M, N, K, bm, bn, bk, st, th, f"{bm}x{bn}x{bk}s{st}t{th}"))
    # the same best config without the fused mainloop (barrier not overlapped), to measure what it buys
    for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
        e = _gemm_bench(M, N, K, 128, 128, 32, 4, 128, "128x128x32s4t128_unfused")
        e.pass_configs = {"tl.cuda.fused_gemm": False}
        out.append(e)
    # the test-suite's matmul with T.use_swizzle(panel_size=4) (block rasterisation), 3 stages, 128 threads
    for M, N, K in ((4096, 4096, 4096), (8192, 8192, 8192)):
        for bk in (32, 64):
            out.append(Entry(f"gemm_swz_f16_{M}x{N}x{K}_128x128x{bk}", "test_gemm", "matmul", (M, N, K, 128, 128, bk),
                             {"in_dtype": "float16", "out_dtype": "float16", "swizzle": True}, "matmul", rtol=2e-2,
                             atol=2e-2, bench="gemm", flops=2.0 * M * N * K, bytes=2.0 * (M * K + K * N + M * N)))
    M, N = 8192, 8192
    for bm, bn in ((8, 1024), (4, 2048)):
        out.append(E(f"add_f32_{M}x{N}_{bm}x{bn}", "examples.elementwise", "add_direct", (M, N),
                     {"block_M": bm, "block_N": bn, "threads": 256}, "add", rtol=0, atol=0, bench="add",
                     bytes=3.0 * M * N * 4))
    out.append(E(f"add_tiled_f32_{M}x{N}", "examples.elementwise", "add_tiled", (M, N),
                 {"block_M": 8, "block_N": 1024, "threads": 256}, "add", rtol=0, atol=0, bench="add",
                 bytes=3.0 * M * N * 4))
    for threads in (128, 256, 512):
        out.append(E(f"softmax_f32_{M}x{N}_t{threads}", "examples.softmax", "softmax", (M, N),
                     {"block_M": 1, "threads": threads}, "softmax", rtol=1e-5, atol=1e-6, bench="softmax",
                     bytes=2.0 * M * N * 4))
        out.append(E(f"rmsnorm_f32_{M}x{N}_t{threads}", "examples.rmsnorm", "rms_norm", (M, N),
                     {"block_M": 1, "threads": threads}, "rmsnorm", rtol=1e-4, atol=1e-5, bench="rmsnorm",
                     bytes=2.0 * M * N * 4))
    out.append(E("launch_tiny", "test_elementwise", "add_1d", (128, 128), {}, "add", rtol=0, atol=0,
                 bench="launch"))
    out += issue7_entries()
    return out


DQ_INPUTS = {"B": ["randint", 0, 256], "Scale": ["rand", 0.01, 0.11]}
# W4A16 checks: random packed weights and scales; compared with the exact product (see Entry.exact)
DQ_CHECK: dict[str, Any] = {"inputs": DQ_INPUTS, "exact": "dequant_gemm_exact"}


def issue7_entries() -> list[Entry]:
    """Issue 7's GPU workloads: flash attention, W4A16 dequantised GEMM and GEMV, each checked (ragged shapes
    included) and timed at the issue's shapes in several configurations (the run keeps the best per shape)."""
    E = Entry
    out: list[Entry] = []
    # -- flash attention (examples/flash_attention.py, fp16, [batch, seq, heads, dim]) ---------------------------
    fa = "examples.flash_attention"
    for B, H, S, D in ((1, 4, 1000, 128), (2, 4, 1000, 64), (1, 2, 300, 128)):  # ragged sequence lengths
        for causal in (False, True):
            for bm, bn, th in ((128, 64, 256), (128, 128, 256), (64, 64, 128)):
                out.append(E(f"fa_f16_{B}x{H}x{S}x{D}{'_causal' if causal else ''}_{bm}x{bn}t{th}", fa,
                             "flash_attention", (B, H, S, D, causal),
                             {"block_M": bm, "block_N": bn, "num_stages": 2, "threads": th, "dtype": "float16"},
                             "attention", {"is_causal": causal}, rtol=2e-2, atol=2e-2))
    # 8 warps x 16 rows (MT = 1) and 4 warps x 32 rows (MT = 2: half the shared-memory B traffic per mma.sync)
    fa_cfgs = [(128, 64, 2, 256), (128, 128, 2, 256), (64, 64, 2, 128), (128, 64, 3, 256), (128, 64, 2, 128),
               (128, 64, 3, 128), (256, 64, 2, 256), (128, 32, 3, 128)]
    fa_cfgs_d64 = [(128, 64, 2, 256), (128, 128, 2, 256), (128, 64, 3, 256), (256, 64, 2, 256), (128, 64, 2, 128),
                   (128, 128, 2, 128)]
    for B, H, S, D, causal in ((8, 16, 4096, 128, False), (8, 16, 4096, 128, True), (8, 32, 2048, 64, False)):
        fl = 4.0 * B * H * S * S * D / (2 if causal else 1)
        for bm, bn, st, th in (fa_cfgs if D == 128 else fa_cfgs_d64):
            out.append(E(f"fa_f16_{B}x{H}x{S}x{D}{'_causal' if causal else ''}_{bm}x{bn}s{st}t{th}", fa,
                         "flash_attention", (B, H, S, D, causal),
                         {"block_M": bm, "block_N": bn, "num_stages": st, "threads": th, "dtype": "float16"},
                         "attention", {"is_causal": causal}, rtol=2e-2, atol=2e-2, bench="attention", flops=fl,
                         bytes=4.0 * B * H * S * D * 2))
    # -- W4A16 dequantised GEMM (examples/dequant_gemm.py, fp16 activations, int4 weights) -----------------------
    dq = "examples.dequant_gemm"
    for M, N, K, gs, cfg in ((5, 1000, 1024, -1, (16, 64, 128, 3, 128)), (16, 512, 1024, 128, (16, 64, 256, 3, 128)),
                             (100, 200, 384, -1, (64, 64, 128, 2, 128))):  # ragged M and N; K=384: 3 tiles
        bm, bn, bk, st, th = cfg
        out.append(E(f"dq_f16_{M}x{N}x{K}_g{gs}", dq, "dequant_gemm", (M, N, K, gs),
                     {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th,
                      "dtype": "float16"}, "dequant_gemm", rtol=2e-2, atol=2e-2, **DQ_CHECK))
    # decode (M = 16): tl.FuseDequantGemmCUDA reads the weights straight from global memory and splits K over a
    # cluster until the grid has two blocks per SM; "_smem" is the earlier schedule (weights staged through shared
    # memory, pass_configs tl.cuda.dq4_direct=False)
    dq_cfgs = {
        (16, 8192, 8192): [(16, 64, 256, 4, 128), (16, 128, 256, 4, 128), (16, 64, 512, 3, 128),
                           (16, 128, 512, 3, 128), (16, 256, 256, 3, 256), (16, 32, 256, 4, 128),
                           (16, 64, 256, 4, 64), (16, 64, 128, 4, 128), (16, 128, 128, 4, 128),
                           (16, 128, 256, 4, 256), (16, 128, 512, 2, 128), (16, 128, 512, 3, 256),
                           (16, 128, 512, 4, 128), (16, 256, 512, 2, 256), (16, 64, 1024, 2, 128),
                           (16, 256, 256, 4, 128), (16, 256, 256, 3, 128), (16, 128, 256, 3, 128)],
        (128, 8192, 28672): [(128, 64, 128, 4, 256), (64, 64, 128, 4, 128), (64, 128, 128, 4, 256),
                             (32, 64, 256, 4, 128)],
    }
    variants: list[tuple[tuple[int, ...], dict[str, Any], str]] = [
        ((16, 64, 512, 3, 128), {"tl.cuda.dq4_direct": False}, "_smem"),
        ((16, 64, 256, 4, 128), {"tl.cuda.dq4_direct": False}, "_smem"),
        ((16, 64, 256, 4, 128), {"tl.cuda.dq4_depth": 2}, "_d2"),
        ((16, 128, 256, 4, 128), {"tl.cuda.dq4_depth": 2}, "_d2"),
        ((16, 128, 256, 4, 128), {"tl.cuda.dq4_depth": 2, "tl.cuda.split_k": 4}, "_d2s4"),
        ((16, 128, 256, 4, 128), {"tl.cuda.dq4_depth": 3, "tl.cuda.split_k": 4}, "_d3s4"),
        ((16, 128, 256, 3, 128), {"tl.cuda.dq4_depth": 2, "tl.cuda.split_k": 4}, "_d2s4"),
        ((16, 64, 512, 3, 128), {"tl.cuda.dq4_depth": 2}, "_d2"),
        ((16, 64, 256, 4, 128), {"tl.cuda.dq4_depth": 3}, "_d3"),
        ((16, 64, 256, 4, 128), {"tl.cuda.split_k_reduce": "cluster"}, "_cluster"),
        ((16, 64, 256, 4, 128), {"tl.cuda.dq4_late_scale": False}, "_rounded"),
        ((16, 128, 512, 3, 128), {"tl.cuda.dq4_late_scale": False}, "_rounded"),
        ((16, 128, 256, 4, 128), {"tl.cuda.split_k": 8}, "_s8"),
        ((16, 128, 512, 3, 128), {"tl.cuda.split_k": 2}, "_s2"),
        ((16, 128, 512, 3, 128), {"tl.cuda.split_k_reduce": "cluster"}, "_cluster"),
        ((16, 64, 128, 4, 128), {"tl.cuda.dq4_depth": 2}, "_d2"),
        ((16, 64, 128, 4, 128), {"tl.cuda.dq4_depth": 4}, "_d4"),
        ((16, 64, 256, 4, 128), {"tl.cuda.split_k": 8}, "_s8"),
        ((16, 64, 256, 4, 128), {"tl.cuda.split_k": 2}, "_s2"),
        ((16, 128, 256, 4, 128), {"tl.cuda.split_k": 4}, "_s4"),
        ((16, 64, 128, 4, 128), {"tl.cuda.split_k": 8}, "_s8"),
    ]
    for (M, N, K), cfgs in dq_cfgs.items():
        runs = [(c, {}, "") for c in cfgs] + (variants if M == 16 else [])
        for gs in ((-1, 128) if M == 16 else (-1,)):
            for (bm, bn, bk, st, th), opts, tag in runs:
                out.append(E(f"dq_f16_{M}x{N}x{K}_g{gs}_{bm}x{bn}x{bk}s{st}t{th}{tag}", dq, "dequant_gemm",
                             (M, N, K, gs), {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st,
                                             "threads": th, "dtype": "float16"}, "dequant_gemm", rtol=2e-2,
                             atol=2e-2, **DQ_CHECK, bench="dequant", flops=2.0 * M * N * K,
                             bytes=N * K / 2 + 2.0 * (M * K + M * N), pass_configs=opts))
    # the same program without tl.FuseDequantGemmCUDA: unpacking through shared memory (what the fusion buys)
    bm, bn, bk, st, th = 16, 64, 256, 3, 128
    out.append(E(f"dq_f16_16x8192x8192_g-1_{bm}x{bn}x{bk}s{st}t{th}_unfused", dq, "dequant_gemm",
                 (16, 8192, 8192, -1), {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st,
                                        "threads": th, "dtype": "float16"}, "dequant_gemm", rtol=2e-2, atol=2e-2,
                 **DQ_CHECK, bench="dequant", flops=2.0 * 16 * 8192 * 8192,
                 bytes=8192 * 8192 / 2 + 2.0 * (16 * 8192 + 16 * 8192),
                 pass_configs={"tl.cuda.fuse_dequant": False}))
    # split-K shapes with ragged M / N and groups (cluster kernels, direct weights)
    for M, N, K, gs, cfg in ((5, 1000, 8192, -1, (16, 128, 256, 3, 128)), (16, 512, 4096, 128, (16, 128, 256, 3, 128)),
                             (3, 200, 2048, 128, (16, 64, 256, 2, 128)), (7, 136, 640, 128, (16, 64, 256, 2, 128))):
        bm, bn, bk, st, th = cfg
        out.append(E(f"dq_f16_{M}x{N}x{K}_g{gs}_sk", dq, "dequant_gemm", (M, N, K, gs),
                     {"block_M": bm, "block_N": bn, "block_K": bk, "num_stages": st, "threads": th,
                      "dtype": "float16"}, "dequant_gemm", rtol=2e-2, atol=2e-2, **DQ_CHECK))
    # -- GEMV 8192 x 8192 (examples/gemv.py) ---------------------------------------------------------------------
    N = K = 8192
    for dt, es in (("float32", 4), ("float16", 2)):
        for bn, bk, th in ((8, 64, 128), (4, 512, 128), (8, 512, 256), (2, 1024, 256), (16, 256, 256),
                           (4, 1024, 256), (2, 2048, 256), (1, 2048, 256)):
            out.append(E(f"gemv_{dt}_{N}x{K}_{bn}x{bk}t{th}", "examples.gemv", "gemv", (N, K),
                         {"block_N": bn, "block_K": bk, "threads": th, "dtype": dt}, "gemv",
                         rtol=1e-3 if es == 4 else 1e-2, atol=1e-3 if es == 4 else 5e-2, bench="gemv",
                         bytes=float(es * (N * K + N + K))))
    out.append(E("gemv_float16_ragged", "examples.gemv", "gemv", (1000, 1030), {"dtype": "float16"}, "gemv",
                 rtol=1e-2, atol=5e-2))
    return out


# ``run.py --quick``: the headline kernels only, each shape with its fastest configurations of the H200 runs
# (bench/gpu/logs/2026-11-29_h200_final_full-suite.txt) — a run that certainly fits one device call, table included
QUICK = (
    "launch_tiny",
    # quickstart GEMM+ReLU fp16 (4096^3: 128x256 s4 was best, 128x128 s4 the runner-up; 8192^3: 128x256 s3, 128x128 s5)
    "gemm_f16_4096x4096x4096_128x256x32s4t256", "gemm_f16_4096x4096x4096_128x128x32s4t128",
    "gemm_f16_8192x8192x8192_128x256x32s3t256", "gemm_f16_8192x8192x8192_128x128x32s5t128",
    # flash attention fp16 [batch, heads, seq, dim]
    "fa_f16_8x16x4096x128_256x64s2t256", "fa_f16_8x16x4096x128_128x64s2t128",
    "fa_f16_8x16x4096x128_causal_128x32s3t128", "fa_f16_8x16x4096x128_causal_128x128s2t256",
    "fa_f16_8x32x2048x64_128x64s2t128", "fa_f16_8x32x2048x64_256x64s2t256",
    # W4A16 decode 16x8192x8192, per-channel and group 128 (the three finalists of the last full run each)
    "dq_f16_16x8192x8192_g-1_16x128x256s3t128", "dq_f16_16x8192x8192_g-1_16x128x512s2t128",
    "dq_f16_16x8192x8192_g-1_16x128x512s4t128",
    "dq_f16_16x8192x8192_g128_16x128x256s3t128", "dq_f16_16x8192x8192_g128_16x128x256s4t128",
    "dq_f16_16x8192x8192_g128_16x128x128s4t128",
    # GEMV 8192^2 fp32 and fp16
    "gemv_float32_8192x8192_4x1024t256", "gemv_float32_8192x8192_2x1024t256",
    "gemv_float16_8192x8192_1x2048t256", "gemv_float16_8192x8192_2x2048t256",
    # memory-bound 8192^2 fp32
    "add_f32_8192x8192_4x2048", "add_tiled_f32_8192x8192", "softmax_f32_8192x8192_t512", "rmsnorm_f32_8192x8192_t512",
)


def keep(name: str, only: list[str] | None = None, skip: list[str] | None = None, quick: bool = False) -> bool:
    """Whether a run works on the entry ``name``: ``quick`` keeps :data:`QUICK` only; ``only`` / ``skip`` keep /
    drop names containing any of the substrings (``run.py --quick/--only/--skip``, ``build.py --only``)."""
    if quick and name not in QUICK:
        return False
    if only and not any(s in name for s in only):
        return False
    return not (skip and any(s in name for s in skip))


def load_factory(entry: Entry) -> Any:
    """Import the entry's @jit factory (build time only: this imports the compiler)."""
    import importlib

    for p in (str(ROOT), str(ROOT / "tests")):
        if p not in sys.path:
            sys.path.insert(0, p)
    return getattr(importlib.import_module(entry.module), entry.factory)

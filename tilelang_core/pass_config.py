"""Compiler options as data: ``pass_configs``, validated, threaded to the passes, part of the kernel cache key.

``@tilelang.jit(pass_configs={...})`` and ``tilelang.compile(..., pass_configs={...})`` take a dict whose keys
are :class:`PassConfigKey` values (plain strings, as in TileLang). :func:`resolve` checks every entry (an unknown
key or a value of the wrong type is an error naming the key, what is accepted and what was given) and returns a
:class:`PassConfig`: every option with its value (defaults filled in), frozen. That one object travels from
``compile`` through ``backend.cuda.lower`` / ``generate`` / ``build`` to the passes that read it; no pass reads
an environment variable. Its :meth:`PassConfig.key` is hashed into the disk and memory cache keys, so two
kernels compiled with different options never share an entry.

TileLang's key names are accepted where this compiler has an equivalent or where the option cannot change our
output (those are validated and documented as no-ops: no warp specialisation, ...). Options of
our own live under ``tl.cuda.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class PassConfigKey:
    """The accepted ``pass_configs`` keys (strings; ``PassConfigKey.TL_CUDA_FUSE_DEQUANT == "tl.cuda.fuse_dequant"``).

    TileLang's names, accepted and validated, with no effect here (documented in :data:`OPTIONS`):
    ``TL_ENABLE_FAST_MATH``, ``TL_DISABLE_FAST_MATH``, ``TL_DISABLE_VECTORIZE_256``; TileLang's names with an
    effect here: ``TL_DISABLE_TMA_LOWER``, ``TL_DISABLE_WARP_SPECIALIZED``. Ours: ``TL_CUDA_*``.
    """

    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"

    TL_CUDA_FUSE_DEQUANT = "tl.cuda.fuse_dequant"
    TL_CUDA_DQ4_DIRECT = "tl.cuda.dq4_direct"
    TL_CUDA_DQ4_LATE_SCALE = "tl.cuda.dq4_late_scale"
    TL_CUDA_DQ4_DEPTH = "tl.cuda.dq4_depth"
    TL_CUDA_SPLIT_K = "tl.cuda.split_k"
    TL_CUDA_SPLIT_K_REDUCE = "tl.cuda.split_k_reduce"
    TL_CUDA_FUSED_GEMM = "tl.cuda.fused_gemm"
    TL_CUDA_STREAMING_LOADS = "tl.cuda.streaming_loads"
    TL_CUDA_COMPILER = "tl.cuda.compiler"
    TL_CUDA_WGMMA = "tl.cuda.wgmma"
    TL_CUDA_WGMMA_PIPELINE = "tl.cuda.wgmma_pipeline"
    TL_CUDA_LINEINFO = "tl.cuda.lineinfo"
    TL_CUDA_TMA_RELEASE = "tl.cuda.tma_release"
    TL_CUDA_SETMAXNREG = "tl.cuda.setmaxnreg"
    TL_CUDA_PERSISTENT = "tl.cuda.persistent"
    TL_CUDA_SPLIT_MASKED_ITERATIONS = "tl.cuda.split_masked_iterations"
    TL_CUDA_PINGPONG = "tl.cuda.pingpong"
    TL_CUDA_GEMM_PINGPONG = "tl.cuda.gemm_pingpong"
    TL_CUDA_ATTENTION_OVERLAP = "tl.cuda.attention_overlap"
    TL_CUDA_WS_KEEP_OCCUPANCY = "tl.cuda.ws_keep_occupancy"
    TL_CUDA_TMA_STORE = "tl.cuda.tma_store"
    TL_CUDA_TMA_PLAIN_TILES = "tl.cuda.tma_plain_tiles"
    TL_CUDA_DEQUANT_FRAGMENTS = "tl.cuda.dequant_fragments"
    TL_CUDA_DEQUANT_FRAGMENTS_DIRECT = "tl.cuda.dequant_fragments_direct"
    TL_CUDA_WGMMA_WRITTEN_TILES = "tl.cuda.wgmma_written_tiles"
    TL_CUDA_CLUSTER = "tl.cuda.cluster"
    TL_CUDA_VECTOR_ATOMICS = "tl.cuda.vector_atomics"
    TL_CUDA_L2_PREFETCH = "tl.cuda.l2_prefetch"
    TL_CUDA_DEQUANT_FRAGMENT_TABLES = "tl.cuda.dequant_fragment_tables"
    TL_CUDA_HOIST_INVARIANT_READS = "tl.cuda.hoist_invariant_reads"
    TL_CUDA_TMA_MMA_TILES = "tl.cuda.tma_mma_tiles"
    TL_CUDA_FACTOR_SCALE = "tl.cuda.factor_scale"
    TL_CUDA_SWIZZLE_PACKED_TILES = "tl.cuda.swizzle_packed_tiles"
    TL_CUDA_WGMMA_DOUBLE_BUFFER = "tl.cuda.wgmma_double_buffer"
    TL_CUDA_ACCUMULATOR_SETS = "tl.cuda.accumulator_sets"
    TL_CUDA_FRAGMENT_A_SWIZZLE = "tl.cuda.fragment_a_swizzle"


@dataclass(frozen=True)
class Option:
    """One accepted key: its type (``"bool"``, ``"int"`` or ``"choice"``), default, bounds or choices, and what it
    does (``effect``; ``None`` for a TileLang key accepted as a no-op, with ``why`` saying why)."""

    key: str
    kind: str
    default: Any
    doc: str
    choices: tuple[Any, ...] = ()
    minimum: int | None = None
    noop: bool = False

    def accepted(self) -> str:
        if self.kind == "bool":
            return "True or False"
        if self.kind == "cluster":
            return "a tuple of 1 to 3 positive ints whose product is 1, 2 or 4"
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return f"an int >= {self.minimum}" if self.minimum is not None else "an int"

    def check(self, value: Any) -> Any:
        ok = False
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool) and \
                (self.minimum is None or value >= self.minimum)
            if ok and self.choices:
                ok = value in self.choices
        elif self.kind == "choice":
            ok = isinstance(value, str) and value in self.choices
        elif self.kind == "cluster":  # a thread-block cluster shape, kept as (x, y, z)
            ok = isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and \
                all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
            shape = (*value, *(1,) * (3 - len(value))) if ok else ()
            ok = ok and shape[0] * shape[1] * shape[2] in (1, 2, 4)
            if ok:
                return shape
        if not ok:
            raise ValueError(f"pass_configs[{self.key!r}]: expected {self.accepted()}, got {value!r}")
        return value


K = PassConfigKey
_NOOP = "accepted for TileLang compatibility; no effect here: "
OPTIONS: dict[str, Option] = {o.key: o for o in [
    Option(K.TL_DISABLE_TMA_LOWER, "bool", False, "CUDA sm_90: True keeps cp.async for the loads of a T.Pipelined "
           "loop that could be TMA boxes (whole 2-D tiles into wgmma-layout tiles, completing on mbarriers); the "
           "epilogue's TMA stores are tl.cuda.tma_store's"),
    Option(K.TL_DISABLE_WARP_SPECIALIZED, "bool", False, "CUDA sm_90: True keeps the TMA loads of a T.Pipelined "
           "wgmma GEMM loop on one of the program's threads, with a __syncthreads per k-step, instead of a producer "
           "warpgroup (128 more threads) handing stages to the program's warpgroups on mbarriers"),
    Option(K.TL_ENABLE_FAST_MATH, "bool", False, _NOOP + "our exp/exp2 lowering is always the fast polynomial one "
           "and nvcc runs without --use_fast_math", noop=True),
    Option(K.TL_DISABLE_FAST_MATH, "bool", False, _NOOP + "see tl.enable_fast_math", noop=True),
    Option(K.TL_DISABLE_VECTORIZE_256, "bool", False, _NOOP + "vector accesses are at most 128 bits wide",
           noop=True),
    Option(K.TL_CUDA_FUSE_DEQUANT, "bool", True, "CUDA: fuse a W4A16 dequantising nest into the tensor-core GEMM "
           "(tl::gemm_dq4 / gemm_dq4g); False keeps the program's nest and a plain fp16 T.gemm"),
    Option(K.TL_CUDA_DQ4_DIRECT, "bool", True, "CUDA, fused W4A16 at decode tiles (one warp row): read the packed "
           "weights straight from global memory into registers; False stages them through shared memory as the "
           "program says"),
    Option(K.TL_CUDA_DQ4_LATE_SCALE, "bool", True, "CUDA, fused W4A16 with per-channel scales on the direct path: "
           "scale the accumulators once per call (the exact product); False rounds each weight to fp16 as the "
           "program's nest does"),
    Option(K.TL_CUDA_DQ4_DEPTH, "int", 1, "CUDA, fused W4A16 direct path with a register ring: weight tiles in "
           "flight ahead of the one computed (2 and 3 measured slower on the H200)", minimum=1),
    Option(K.TL_CUDA_SPLIT_K, "int", 0, "CUDA: split the K loop of a T.gemm kernel (tl.SplitKCUDA) or of the "
           "fused W4A16 gemm over 1, 2, 4 or 8 blocks, the last block of a tile reducing and running the epilogue; "
           "0 chooses from the grid and the SM count, 1 turns splitting off (a value that does not divide the loop "
           "falls back to 1, with a note)", choices=(0, 1, 2, 4, 8), minimum=0),
    Option(K.TL_CUDA_SPLIT_K_REDUCE, "choice", "workspace", "CUDA, split-K: how the partial sums meet: "
           "'workspace' (a global workspace, the last block of a tile runs the epilogue; a cluster is used when "
           "the workspace would be too large) or 'cluster' (distributed shared memory of a thread-block cluster, "
           "sm_90)", choices=("workspace", "cluster")),
    Option(K.TL_CUDA_FUSED_GEMM, "bool", True, "CUDA: the pipelined tensor-core GEMM mainloop as one fused "
           "template (cp.async + ldmatrix + mma.sync); False keeps the generic pipelined loop"),
    Option(K.TL_CUDA_STREAMING_LOADS, "bool", True, "CUDA: evict-first (__ldcs) loads for inputs read once in a "
           "read-dominated kernel (a cache hint: results are unchanged)"),
    Option(K.TL_CUDA_SPLIT_MASKED_ITERATIONS, "bool", True, "CUDA: a T.Parallel mask affine in a serial loop's "
           "variable (causal, ragged) tested per element only on the iterations where it can be false "
           "(tl.SplitMaskedIterations; always on for the CPU). False tests the mask on every iteration, as "
           "written (docs/attention_masks.md)"),
    Option(K.TL_CUDA_WGMMA, "bool", True, "CUDA sm_90a: T.gemm of shared tiles as Hopper wgmma.mma_async "
           "(warpgroups, swizzled shared layouts); False keeps mma.sync (the reason is noted in the trace)"),
    Option(K.TL_CUDA_WGMMA_PIPELINE, "bool", True, "CUDA sm_90a: in a T.Pipelined loop (num_stages >= 3) whose "
           "body is one wgmma T.gemm, keep one wgmma group in flight across k-steps (wgmma.wait_group 1, loads "
           "num_stages - 2 tiles ahead); False waits for every k-step's group (wait_group 0)"),
    Option(K.TL_CUDA_LINEINFO, "bool", False, "CUDA: a source-line build: the CUDA C carries a `// tl.src FILE:LINE` "
           "comment where each of the user's statements begins, and the cubin and PTX carry line info (-lineinfo), "
           "so SASS and PTX map to the user's lines (the workbench's SASS view); the code is otherwise the same"),
    Option(K.TL_CUDA_TMA_RELEASE, "bool", False, "CUDA sm_90, TMA loads into a loop whose body is one wgmma T.gemm "
           "and that is not warp-specialised (tl.disable_warp_specialized, or a loop that cannot be): "
           "True: the threads release each stage on an mbarrier once its wgmma has retired and the loading thread "
           "waits for that, instead of a __syncthreads in every k-step (measured 2-3% slower on the H200 for the "
           "quickstart GEMM, hence off by default: the loading thread's warp stalls on the release)"),
    Option(K.TL_CUDA_WS_KEEP_OCCUPANCY, "bool", True, "CUDA sm_90a, a TMA loop whose body is more than one gemm "
           "(attention): no producer warpgroup where shared memory leaves room for two or more blocks per SM (the "
           "producer's registers would leave one); False warp-specialises it anyway"),
    Option(K.TL_CUDA_ATTENTION_OVERLAP, "bool", False, "CUDA sm_90a, a warp-specialised loop of two wgmma gemms "
           "whose second reads its A from registers the first's result gives (attention): issue the second one "
           "iteration late, so the statements between them run under it (FlashAttention-3's intra-warpgroup "
           "overlap; off until measured on a GPU)"),
    Option(K.TL_CUDA_PINGPONG, "bool", False, "CUDA sm_90a, a warp-specialised loop of two consumer warpgroups "
           "whose body is more than one gemm (attention): the warpgroups take turns at their first wgmma T.gemm "
           "(named barriers), so one's softmax runs under the other's gemms (FlashAttention-3's ping-pong)"),
    Option(K.TL_CUDA_GEMM_PINGPONG, "bool", False, "CUDA sm_90a, a persistent warp-specialised wgmma GEMM of "
           "threads=128: launch two consumer warpgroups, each with the program's tile and its own accumulator, "
           "taking every other tile of the block's walk and turns at the mainloop (named barriers), so one's "
           "epilogue runs under the other's wgmma (CUTLASS's ping-pong); off by default until measured on the "
           "H200 (transform/cuda/sm90/gemm_pingpong.py; why a kernel keeps one consumer group is noted)"),
    Option(K.TL_CUDA_SETMAXNREG, "bool", True, "CUDA sm_90a, a warp-specialised loop with two or more consumer "
           "warpgroups: the producer warpgroup gives registers to the consumers (setmaxnreg: 40 and 232 per thread "
           "for two); False keeps the launch's equal share"),
    Option(K.TL_CUDA_PERSISTENT, "int", 0, "CUDA sm_90, a warp-specialised GEMM loop with more output tiles than "
           "blocks it may launch: 0 launches one block per SM (132) that walks the tiles in order, loading the next "
           "tile during this tile's epilogue; n > 0 launches n blocks; -1 keeps one block per tile", minimum=-1),
    Option(K.TL_CUDA_TMA_PLAIN_TILES, "bool", False, "CUDA sm_90a, a T.Pipelined loop whose loads become TMA "
           "boxes (it fills a wgmma tile): a load into a plain row-major shared tile (not a wgmma operand, no "
           "swizzle: a float32 LSE row, a uint8 packed-weight tile) becomes a TMA box too (SWIZZLE_NONE, 1-D and "
           "2-D tiles; float32/int32/int8/uint8/fp16/bf16/fp8), instead of keeping the whole loop on cp.async; "
           "off by default until measured on the H200 (transform/cuda/sm90/tma.py, docs/cuda.md)"),
    Option(K.TL_CUDA_TMA_STORE, "bool", True, "CUDA sm_90a, a wgmma GEMM whose T.copy writes the whole "
           "accumulator tile into a 2-D float16/bfloat16 tensor (rows a multiple of 16 bytes): the tile goes out "
           "through a swizzled shared staging ring and TMA stores (cp.async.bulk.tensor, ragged edges clipped by "
           "the tensor map), issued by one thread, instead of each thread's register stores (1.03-1.10x on the "
           "H200's square GEMMs, BENCHMARKS.md); False keeps the register stores; yields to tl.cuda.gemm_pingpong "
           "(transform/cuda/sm90/tma_store.py; why a wgmma GEMM keeps register stores is noted)"),
    Option(K.TL_CUDA_CLUSTER, "cluster", (1, 1, 1), "CUDA sm_90a, a warp-specialised TMA wgmma GEMM loop: launch "
           "the grid in thread-block clusters of this shape ((2, 1): pairs of blocks along blockIdx.x) and load "
           "each operand tile the cluster's blocks share once, TMA-multicast into every block's shared memory "
           "(each block loads a slice); (1, 1, 1) is off; off by default until measured on the H200 "
           "(transform/cuda/sm90/cluster.py; why a kernel is not clustered is noted)"),
    Option(K.TL_CUDA_WGMMA_WRITTEN_TILES, "bool", True, "CUDA sm_90a: a T.gemm whose shared A or B tile is "
           "written by the program's threads (a T.Parallel nest such as a weight dequantisation, a T.fill) takes "
           "wgmma too, the writes going to the wgmma swizzled layout (faster on the H200's dequantised prefill, "
           "BENCHMARKS.md); False keeps mma.sync for such tiles (docs/cuda.md, the dequantised prefill)"),
    Option(K.TL_CUDA_DEQUANT_FRAGMENTS, "bool", True, "CUDA, mma.sync: a T.gemm whose B tile is written by the "
           "T.Parallel nest just before it (any elementwise decode of packed weights) and read by nothing else: each "
           "thread computes its B fragments from the nest's expression in registers, the tile is not materialised "
           "(tl.DequantFragmentsCUDA; 2-3x faster than the shared-tile decode on the H200, BENCHMARKS.md); the W4A16 "
           "recogniser (tl.cuda.fuse_dequant) runs first and keeps the one spelling it takes; False decodes into "
           "the shared tile"),
    Option(K.TL_CUDA_DEQUANT_FRAGMENTS_DIRECT, "bool", False, "CUDA, with tl.cuda.dequant_fragments: a packed tile "
           "the fused nest reads that is only a whole-tile T.copy of global memory is not staged in shared memory: "
           "each lane loads its packed run straight from the global tensor (bounds-guarded, zeros outside, as the "
           "copy was); off until measured on a GPU"),
    Option(K.TL_CUDA_DEQUANT_FRAGMENT_TABLES, "bool", True, "CUDA, with tl.cuda.dequant_fragments: a decode "
           "that is a function of one 4-bit (or narrower) field, such as fp4 e2m1 spelt with selects and shifts, whose "
           "two elements of a register no word operation pairs, is evaluated by the compiler at every field value "
           "and looked up two elements at a time with byte permutes (prmt), bit for bit the nest's values "
           "(transform/cuda/fragment_tables.py); False decodes such fields one element at a time"),
    Option(K.TL_CUDA_HOIST_INVARIANT_READS, "bool", False, "CUDA: register loads of read-only global data that no "
           "iteration of a serial loop changes (a dequantising gemm's per-channel scale in its K loop) move before "
           "the loop, across the barriers the compiler will not move them over; results are bit for bit the same "
           "(transform/cuda/hoist_invariant_reads_cuda.py); off: not faster on the H200 (int8 dequant slower)"),
    Option(K.TL_CUDA_FACTOR_SCALE, "bool", False, "CUDA: a scale that multiplies every weight of a T.gemm's B "
           "operand in its producer T.Parallel nest and does not change with k (a dequantising gemm's per-channel "
           "scale) is applied once to the float32 sums after the K loop instead (sums differ from the program's "
           "per-weight fp16/bf16 rounding by rounding only; transform/cuda/factor_scale_cuda.py); off: on the H200 "
           "1.12-1.20x faster at 16x128x256 decode tiles, 0.87-0.89x at 16x64x512, so a tuning twin"),
    Option(K.TL_CUDA_SWIZZLE_PACKED_TILES, "bool", False, "CUDA, with tl.cuda.dequant_fragments: the packed "
           "shared tiles the fragment decode reads (a T.copy's staging of the weights) are XOR-swizzled by row, as "
           "the mma tiles are, and each lane reads its run 16 bytes at a time, so a warp's eight rows at one column "
           "spread over the banks instead of conflicting (transform/cuda/dequant_fragments_cuda.py); off: correct but "
           "0.69-1.04x on the H200 (the decode loop is issue-bound, not shared-memory-bound)"),
    Option(K.TL_CUDA_FRAGMENT_A_SWIZZLE, "bool", False, "CUDA, with tl.cuda.dequant_fragments: the A tile of a fused "
           "T.gemm whose lanes read it in 16-byte loads of 64-byte runs (block_K of 128 or more) takes a swizzle that "
           "also moves chunk bit 5 by offset bit 7, so those loads are free of bank conflicts (the XOR swizzle puts "
           "lanes q and q + 2 on the same banks; transform/cuda/layouts.py:run_swizzle_code); off until measured"),
    Option(K.TL_CUDA_ACCUMULATOR_SETS, "int", 1, "CUDA, with tl.cuda.dequant_fragments: the k-steps of a fused "
           "T.gemm in its K loop take turns over this many float32 accumulator sets (per thread registers; the extra "
           "sets zeroed before the loop and added into the accumulator right after it), so a decode tile with few "
           "mma.sync accumulators per warp has that many more independent chains (transform/cuda/"
           "dequant_fragments_cuda.py); 1: one set (the program's own accumulator): 2 sets measured 0.92-1.01x on the "
           "H200 (the decode loop is issue-bound, not mma-latency-bound)", choices=(1, 2, 4), minimum=1),
    Option(K.TL_CUDA_WGMMA_DOUBLE_BUFFER, "bool", False, "CUDA sm_90a, with tl.cuda.wgmma_pipeline: a T.Pipelined "
           "loop whose body is its loads, T.Parallel nests writing shared tiles and one wgmma T.gemm reading those "
           "tiles (the dequantised prefill's decode into a shared B tile) gets each written tile twice, alternating "
           "by k, so the gemm's group stays in flight (wait_group 1) while the next k-step's nest writes the other "
           "copy (transform/cuda/pipeline_cuda.py); off: on the H200 1.03-1.30x faster at most prefill tiles, "
           "0.78-0.99x at 128x128x64 s4, so a tuning twin"),
    Option(K.TL_CUDA_TMA_MMA_TILES, "bool", False, "CUDA sm_90: a T.Pipelined loop whose shared tiles are all "
           "mma.sync operand tiles of 128-byte rows (16 x 64 fp16 A, 64 x 64 B: block_K 64) loads them by TMA with "
           "SWIZZLE_128B, which is byte for byte their XOR swizzle when each stage sits on 1024 bytes, completing on "
           "mbarriers (the decode GEMM's 16-row tiles, which no wgmma takes); off: not faster on the H200 (0.93-1.03x "
           "cuBLAS against 1.21-1.25x by cp.async at 16x64x64)"),
    Option(K.TL_CUDA_VECTOR_ATOMICS, "bool", True, "CUDA sm_90+: 2 or 4 adjacent float32 element atomics "
           "(T.atomic_add of a fragment, T.atomic_addx2/x4) into consecutive, provably 8/16-byte aligned elements "
           "of one global tensor under the same guard become one red.global.add.v2/v4.f32 (half / a quarter of "
           "the RED instructions; the flash-attention backward's dQ, faster on the H200: BENCHMARKS.md); False "
           "keeps one atomicAdd per element (transform/cuda/vector_atomics_cuda.py, docs/cuda.md)"),
    Option(K.TL_CUDA_L2_PREFETCH, "int", 128, "CUDA sm_80+: the L2 prefetch size of every cp.async global read "
           "(.L2::64B/128B/256B; 0: no hint, ptxas's choice): 256 also fetches the next 128-byte line of a row into "
           "L2 (a cache hint: results are unchanged; backend/cuda/codegen.py, include/tl/copy.cuh)",
           choices=(0, 64, 128, 256), minimum=0),
    Option(K.TL_CUDA_COMPILER, "choice", "auto", "CUDA: what turns CUDA C into a cubin: 'nvcc', 'nvrtc' (the CUDA "
           "Python bindings) or 'auto' (nvcc when found, else NVRTC)", choices=("auto", "nvcc", "nvrtc")),
]}


@dataclass(frozen=True)
class PassConfig:
    """Every option with its value (defaults filled in), immutable; ``cfg[PassConfigKey.TL_CUDA_SPLIT_K]``."""

    values: tuple[tuple[str, Any], ...]

    def __getitem__(self, key: str) -> Any:
        for k, v in self.values:
            if k == key:
                return v
        raise KeyError(_unknown(key))

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def explicit(self) -> dict[str, Any]:
        """The options that differ from their defaults (what the user set to something else)."""
        return {k: v for k, v in self.values if OPTIONS[k].default != v}

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def key(self) -> str:
        """A stable text for the cache key (every option, sorted)."""
        return repr(self.values)

    def __repr__(self) -> str:
        ex = self.explicit()
        return "PassConfig(" + ", ".join(f"{k}={v!r}" for k, v in ex.items()) + ")" if ex else "PassConfig(defaults)"


def _unknown(key: Any) -> str:
    return (f"pass_configs: unknown key {key!r}; accepted keys: {', '.join(sorted(OPTIONS))} "
            "(see tilelang_core.PassConfigKey)")


def resolve(pass_configs: Mapping[str, Any] | PassConfig | None) -> PassConfig:
    """Validate ``pass_configs`` (a dict of key -> value, a :class:`PassConfig`, or None) and fill in defaults."""
    if isinstance(pass_configs, PassConfig):
        return pass_configs
    if pass_configs is None:
        pass_configs = {}
    if not isinstance(pass_configs, Mapping):
        raise TypeError(f"pass_configs: expected a dict of option -> value, got {type(pass_configs).__name__}")
    given = {}
    for k, v in pass_configs.items():
        if not isinstance(k, str) or k not in OPTIONS:
            raise ValueError(_unknown(k))
        given[k] = OPTIONS[k].check(v)
    return PassConfig(tuple((k, given.get(k, o.default)) for k, o in sorted(OPTIONS.items())))


DEFAULT = resolve(None)


def describe() -> str:
    """A table of the accepted keys (for docs and error messages)."""
    return "\n".join(f"{o.key} ({o.accepted()}, default {o.default!r}): {o.doc}" for o in OPTIONS.values())


__all__ = ["PassConfigKey", "PassConfig", "Option", "OPTIONS", "DEFAULT", "resolve", "describe"]

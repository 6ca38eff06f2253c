"""The wgmma GEMM epilogue through a shared staging ring and TMA stores on sm_90a (pass_configs
``tl.cuda.tma_store``, ``transform/cuda/sm90/tma_store.py``), checked without a GPU: the kernel's source and SASS,
the store map its artifact describes for the launcher, the shared-memory budget, why a kernel keeps its register
stores, and the option itself. The GPU suite runs the kernels against torch (tests/gpu/test_tma_store.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import codegen as cuda_codegen
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.pass_config import resolve

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda_wgmma import _cuobjdump  # noqa: E402
from wgmma_kernels import gemm_t  # noqa: E402

ON = {"tl.cuda.tma_store": True}
OFF = {"tl.cuda.tma_store": False}
# the H200 default for the fp16 4096^3 quickstart: two consumer warpgroups, warp-specialised, persistent (512 tiles)
FLAGSHIP = (4096, 4096, 4096, 128, 256, 64, False, False, 4, 256, "float16")


@tilelang.jit(out_idx=[-1])
def gemm_cast(M: int, N: int, K: int, block_M: int, block_N: int, block_K: int, num_stages: int, threads: int,
              dtype: str):
    """The quickstart GEMM + ReLU whose epilogue casts into a second fragment of the output dtype, stored from
    there (TileLang's examples often spell it this way)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            C_h = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_h[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_h, C[by * block_M, bx * block_N])

    return main


def _artifact(tmp_path, args, pass_configs=None, compile_cubin=True):
    func = gemm_t.get_program(*args)
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([-1], 3), compile_cubin=compile_cubin, pass_configs=pass_configs)
    return art, (tmp_path / "kernel.cu").read_text()


def _sass(tmp_path, art):
    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    return subprocess.run([dis, "-sass", str(tmp_path / art.extra["cuda"]["cubin"])], capture_output=True,
                          text=True, check=True).stdout


def _lowered(args, pass_configs=None):
    seen = {}
    cuda_codegen.lower(gemm_t.get_program(*args), record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a",
                       options=resolve(pass_configs))
    return seen


def _notes(func):
    return [str(n) for n in func.attrs["tl.notes"]] if "tl.notes" in func.attrs else []


def test_the_persistent_gemm_epilogue_goes_out_through_tma_stores_from_a_swizzled_ring(tmp_path):
    art, src = _artifact(tmp_path, FLAGSHIP, ON)
    # a 256-column slice of 64-column blocks (128 B atoms): four boxes of 64 x 128, from a ring of two slabs
    assert src.count("tl::tma_store_2d(&tl_tmaps.m[2], ") == 4 and src.count("tl::tma_store_commit();") == 4
    assert src.count("tl::wgmma_acc_to_slabs<1, 32, 2, 1, 128, 64, 128, ") == 4
    assert "(half2*)(C_ptr" not in src and "C_ptr" not in src  # no register store to C is left
    assert "const __grid_constant__ tl::TmaDescs<3> tl_tmaps)" in src
    maps = art.extra["cuda"]["tma"]
    assert maps[2] == {"param": "C", "dtype": "float16", "dims": [4096, 4096], "box": [64, 128], "swizzle": 128,
                       "store": True}
    # every slab write is fenced for the async proxy before the barrier that hands the slab to the issuing thread
    steps = src.split("tl::wgmma_acc_to_slabs<")[1:]
    for step in steps:
        assert step.index("tl::fence_proxy_async();") < step.index("tl::named_barrier_sync<1, 256>();") < \
            step.index("tl::tma_store_2d(")
    # persistent: the last store has read the ring before the next tile's barrier lets its writes begin
    tile_loop = src[src.index("for (int tile_iter_1 = 0"):]
    assert tile_loop.index("tl::named_barrier_sync<1, 256>();") < tile_loop.index("tl::wgmma_acc_to_slabs<")
    tail = tile_loop[tile_loop.rindex("tl::tma_store_commit();"):]
    assert "tl::tma_store_wait_read<0>();" in tail
    assert "0 bytes spill stores" in art.extra["cuda"]["ptxas_info"]
    sass = _sass(tmp_path, art)
    assert sass.count("UTMASTG.2D") == 4 and "UTMALDG.2D" in sass and "HGMMA.64x256x16.F32" in sass
    assert not re.search(r"\bSTG\b", sass)  # nothing reaches global memory but through the tensor map


def test_a_ragged_bf16_gemm_that_is_not_warp_specialised_stages_over_its_dead_pipeline_tiles(tmp_path):
    args = (1000, 1000, 512, 128, 256, 64, False, False, 4, 256, "bfloat16")
    pcs = {"tl.disable_warp_specialized": True}
    art, src = _artifact(tmp_path, args, {**pcs, **ON})
    (tmp_path / "off").mkdir()
    off, _ = _artifact(tmp_path / "off", args, {**pcs, **OFF}, compile_cubin=False)
    # the box is clipped at the tensor's 1000 rows and columns: no bounds test in the epilogue
    assert art.extra["cuda"]["tma"][-1] == {"param": "C", "dtype": "bfloat16", "dims": [1000, 1000],
                                            "box": [64, 128], "swizzle": 128, "store": True}
    assert src.count("tl::tma_store_2d(") == 4 and "C_ptr" not in src
    # the ring lies over the stages, which are dead after the loop: no more shared memory than the register stores
    assert art.extra["cuda"]["dyn_smem"] == off.extra["cuda"]["dyn_smem"]
    assert "0 bytes spill stores" in art.extra["cuda"]["ptxas_info"]
    assert _sass(tmp_path, art).count("UTMASTG.2D") == 4


def test_with_the_key_off_the_pass_returns_the_kernel_untouched():
    args = (1024, 768, 512, 128, 256, 64, False, False, 4, 256, "float16")
    off = _lowered(args, OFF)
    assert off["tl.TmaStoreCUDA"].same_as(off["tl.InsertSyncsCUDA"])
    assert not any("TMA stores" in n for n in _notes(off["tl.TmaStoreCUDA"]))
    on = _lowered(args, ON)
    assert not on["tl.TmaStoreCUDA"].same_as(on["tl.InsertSyncsCUDA"])


def test_an_epilogue_that_cannot_take_tma_stores_keeps_register_stores_and_says_why():
    # rows of C of 1004 halves are 2008 bytes, not a multiple of 16
    ragged = _lowered((256, 1004, 128, 128, 128, 64, False, False, 3, 256, "float16"), ON)["tl.TmaStoreCUDA"]
    assert any("keeps register stores, not TMA stores" in n and "not a multiple of 16" in n
               for n in _notes(ragged)), _notes(ragged)
    assert "tma_store" not in ragged.script()
    # warp-specialised persistent 192 x 256 tiles in four stages fill 224 KiB, and the next tile's loads run
    # during this tile's epilogue: not even one 24 KiB slab fits beside them
    full = _lowered((4096, 4096, 512, 192, 256, 64, False, False, 4, 384, "float16"), ON)["tl.TmaStoreCUDA"]
    assert any("does not fit in shared memory" in n for n in _notes(full)), _notes(full)
    assert "tl.tma_maps" not in full.attrs or '"store"' not in str(full.attrs["tl.tma_maps"])


def test_a_warp_specialised_kernel_that_is_not_persistent_stages_its_store_in_the_loops_bytes():
    # one tile per block: once the consumers' loop is over every stage has landed and been read, so the slab may
    # reuse the stages' bytes (tl.LowerSharedMemoryCUDA scans the consumers' part of the split)
    args = (768, 1024, 512, 192, 256, 64, False, False, 4, 384, "float16")
    on, off = _lowered(args, ON), _lowered(args, OFF)
    assert '"store": true' in str(on["tl.TmaStoreCUDA"].attrs["tl.tma_maps"]), _notes(on["tl.TmaStoreCUDA"])
    smem = "tl.dyn_smem_bytes"
    assert int(on["tl.LowerSharedMemoryCUDA"].attrs[smem]) == int(off["tl.LowerSharedMemoryCUDA"].attrs[smem])


def test_an_epilogue_cast_into_a_second_fragment_goes_out_from_that_fragment():
    seen = {}
    cuda_codegen.lower(gemm_cast.get_program(1000, 1000, 512, 128, 256, 64, 4, 256, "bfloat16"),
                       record=lambda n, f, _s: seen.__setitem__(n, f), arch="sm_90a", options=resolve(ON))
    text = seen["tl.TmaStoreCUDA"].script()
    assert text.count("tl::wgmma_acc_to_slabs<1, 32, 2, 1, 128, 64, 128, ") == 4 and "address_of(C_h" in text.split(
        "tl::wgmma_acc_to_slabs<")[1].split("\n")[0]


def test_a_program_that_stages_its_epilogue_in_shared_memory_stores_that_tile_as_one_box(tmp_path):
    from test_cuda_warp_specialize import gemm_via_shared

    func = gemm_via_shared.get_program(4096, 4096, 512)  # persistent: 1024 tiles of 128 x 128
    art = build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90a"}, _param_specs(func),
                         _normalize_out_idx([-1], 3), compile_cubin=True, pass_configs=ON)
    src = (tmp_path / "kernel.cu").read_text()
    # the row-major (unswizzled) tile C_s is one box of its 128 columns x 128 rows
    assert art.extra["cuda"]["tma"][-1] == {"param": "C", "dtype": "float16", "dims": [4096, 4096],
                                            "box": [128, 128], "swizzle": 0, "store": True}
    tail = src[src.index("tl::fence_proxy_async();"):]
    assert tail.index("tl::named_barrier_sync<1, 256>();") < tail.index("tl::tma_store_2d(&tl_tmaps.m[2], ") < \
        tail.index("tl::tma_store_commit();") < tail.index("tl::tma_store_wait_read<0>();")
    assert "C_ptr" not in src and "0 bytes spill stores" in art.extra["cuda"]["ptxas_info"]
    sass = _sass(tmp_path, art)
    assert sass.count("UTMASTG.2D") == 1 and not re.search(r"\bSTG\b", sass)


def test_a_split_k_epilogue_is_noted_and_compiles_as_before():
    args = (16, 1024, 2048, 64, 256, 64, False, False, 4, 128, "float16")
    on = _lowered(args, {"tl.cuda.split_k": 2, **ON})["tl.TmaStoreCUDA"]
    assert any("inside a condition or a loop" in n for n in _notes(on)), _notes(on)


def test_the_key_is_validated_and_part_of_the_cache_key(cache_dir):
    with pytest.raises(ValueError, match=r"pass_configs\['tl.cuda.tma_store'\]: expected True or False, got 1"):
        resolve({"tl.cuda.tma_store": 1})
    assert resolve(OFF).key() != resolve(None).key()
    assert resolve(ON).key() == resolve(None).key()  # on by default
    from test_pass_configs import scale_kernel

    tilelang.jit(out_idx=-1)(scale_kernel)(96, 2.0)
    n = len(entries(cache_dir))
    k = tilelang.jit(out_idx=-1, pass_configs=OFF)(scale_kernel)(96, 2.0)
    assert k.cache_status == "compiled" and len(entries(cache_dir)) == n + 1


# -- the staging writes of include/tl/tma.cuh, run on the host -----------------------------------------------------
# The header's tl::wgmma_acc_to_slabs compiled by the host C++ compiler with the CUDA types stubbed (a "half" holds
# a thread/register tag) and run for every thread of the block: each accumulator element must land exactly once, at
# the place in its slab where the TMA box of the tensor map reads tile element (row, col) — the wgmma swizzled
# layout of layouts.wgmma_offset_py, the same the TMA loads fill — and one warp store instruction must touch every
# bank once (the 128 B swizzle; unswizzled rows 128 bytes apart would be an 8-way conflict).
HEADER = Path(__file__).resolve().parents[1] / "tilelang_core" / "backend" / "cuda" / "include" / "tl" / "tma.cuh"
STUBS = r"""
#include <cstdio>
#include <vector>
#define __device__
#define __forceinline__ inline
struct { int x; } threadIdx;
struct half { unsigned short v; };  // 2 bytes, as on the device (the swizzle reads the element size)
struct __nv_bfloat16 { unsigned short v; };
struct __half2 { half x, y; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
using u16 = unsigned short;
inline __half2 __floats2half2_rn(float a, float b) { return {{u16(a)}, {u16(b)}}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {{u16(a)}, {u16(b)}}; }
"""
HARNESS = r"""
template <int Step> void run(int threads, int slab_elems, int nregs) {
  std::vector<half> out(slab_elems, half{65535});
  std::vector<float> acc(nregs);
  for (int t = 0; t < threads; ++t) {
    threadIdx.x = t;
    for (int r = 0; r < nregs; ++r) acc[r] = float(t * 128 + r);  // a tag: thread and register
    wgmma_acc_to_slabs<MI, NT, WM, WN, ROWS, W, SWZ, Step>(acc.data(), out.data());
  }
  for (int e = 0; e < slab_elems; ++e) printf("%d %d %d\n", Step, e, out[e].v);
}
int main() {
  constexpr int steps = NT * 8 / W;
  [&]<int... J>(std::integer_sequence<int, J...>) {
    (run<J>(WM * WN * 128, WN * ROWS * W, MI * NT * 4), ...);
  }(std::make_integer_sequence<int, steps>{});
}
"""


@pytest.mark.parametrize("shape, wm, wn", [((128, 256), 2, 1), ((64, 256), 1, 2), ((128, 128), 1, 1),
                                           ((192, 192), 3, 1)])
def test_the_headers_staging_writes_put_every_accumulator_element_where_the_store_box_reads_it(tmp_path, shape, wm,
                                                                                             wn):
    import shutil

    from tilelang_core.transform.cuda.layouts import WGMMA_SWIZZLE_BASE, FragmentLayout, wgmma_offset_py

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    text = HEADER.read_text()
    body = text[text.index("// the pair (a, b) stored at"):text.index("// a 2-D box of shared memory at `src`")]
    lay = FragmentLayout.wgmma(shape, wm * wn * 128, wm, wn)
    mi, nt = lay.wgmma_tiles
    rows, w, swz = shape[0], 64, 128
    consts = f"constexpr int MI = {mi}, NT = {nt}, WM = {wm}, WN = {wn}, ROWS = {rows}, W = {w}, SWZ = {swz};\n"
    src = tmp_path / "h.cpp"
    src.write_text(STUBS + "#include <utility>\nnamespace tl {\n" + body + "}\nusing namespace tl;\n" + consts
                   + HARNESS)
    exe = tmp_path / "h"
    subprocess.run([cxx, "-std=c++20", "-O1", "-w", str(src), "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    got = {(int(j), int(e)): int(v) for j, e, v in (line.split() for line in out if line)}
    slice_cols, slab = shape[1] // wn, rows * w
    want = {}
    for t in range(lay.threads):
        for r in range(lay.num_regs):
            row, col = lay.element_of(t, r)
            gc, local = divmod(col, slice_cols)
            j, c = divmod(local, w)
            want[(j, gc * slab + wgmma_offset_py(row, c, rows, WGMMA_SWIZZLE_BASE + swz, "float16"))] = t * 128 + r
    assert got == want  # every slot written once, by the thread and register that hold that element
    # banks: the 32 lanes of warp 0's first store instruction (register pair 0) write 4 bytes each
    words = {(2 * e) // 4 for (j, e), v in got.items() if j == 0 and v // 128 < 32 and v % 128 == 0}
    assert len(words) == 32 and len({x % 32 for x in words}) == 32


def test_a_store_map_over_a_misaligned_tensor_names_the_key_that_avoids_it():
    pytest.importorskip("cuda.bindings.driver")
    from tilelang_core.runtime.exported import encode_tensor_map

    spec = {"param": "C", "dtype": "float16", "dims": [256, 256], "box": [64, 128], "swizzle": 128, "store": True}
    with pytest.raises(RuntimeError, match=r"argument 'C'.*multiple of 16 bytes.*'tl.cuda.tma_store': False"):
        encode_tensor_map(spec, 0x1008)

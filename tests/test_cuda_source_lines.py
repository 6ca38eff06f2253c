"""Source-line CUDA builds (``pass_configs={"tl.cuda.lineinfo": True}``): CUDA C, PTX and SASS mapped to the
user's lines, with the code itself unchanged. Compiled for sm_90 without a GPU; SASS needs nvdisasm (the dev
extra's ``nvidia-cuda-nvdisasm``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tilelang_core as tl
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available
from tilelang_core.backend.cuda.resources import find_cuda_tool
from tilelang_core.backend.cuda.source_lines import cuda_line_map, instruction_mix, sass_by_line, sass_with_lines
from tilelang_core.errors import TileLangError

pytestmark = pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(),
                                reason="no nvcc or NVRTC: CUDA kernels cannot be compiled here")
needs_nvdisasm = pytest.mark.skipif(find_cuda_tool("nvdisasm") is None,
                                    reason="no nvdisasm (pip install nvidia-cuda-nvdisasm)")
# the register epilogue, whose instructions the tests below expect at the store and ReLU lines (on sm_90a the default
# tl.cuda.tma_store sends the tile out through shared memory and a TMA store instead)
REGISTER_STORES = {"tl.cuda.tma_store": False}
LINEINFO = {"tl.cuda.lineinfo": True, **REGISTER_STORES}


def gmm_relu(M, N, K, block_M=64, block_N=64, block_K=32, dtype="float16", accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)  # line:copy_a
                T.copy(B[k * block_K, bx * block_N], B_s)  # line:copy_b
                T.gemm(A_s, B_s, C_f)  # line:gemm
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)  # line:relu
            T.copy(C_f, C[by * block_M, bx * block_N])  # line:store
    return main


def line_of(tag: str) -> int:
    text = Path(__file__).read_text().splitlines()
    return next(i for i, t in enumerate(text, start=1) if t.rstrip().endswith(f"# line:{tag}"))


@pytest.fixture(scope="module")
def lined():
    return tl.compile(gmm_relu(256, 256, 256), target="cuda", pass_configs=LINEINFO)


@pytest.fixture(scope="module")
def plain():
    return tl.compile(gmm_relu(256, 256, 256), target="cuda", pass_configs=REGISTER_STORES)


def test_a_source_line_build_marks_each_user_statement_in_the_cuda_c(lined):
    src = lined.get_kernel_source("cuda")
    marked = {ln for f, ln in cuda_line_map(src).values() if f == __file__}
    for tag in ("copy_a", "copy_b", "gemm", "relu", "store"):
        assert line_of(tag) in marked, tag
    assert "__tl_src_line" not in src  # every marker became a comment


def test_the_code_of_a_source_line_build_is_the_same_but_for_the_comments(lined, plain):
    assert lined.artifact.path != plain.artifact.path  # the option is part of the cache key
    without = re.sub(r"\n\s*// tl\.src [^\n]*", "", lined.get_kernel_source("cuda"))
    assert without == plain.get_kernel_source("cuda")


@needs_nvdisasm
def test_sass_instructions_map_to_the_tile_op_lines_and_the_sass_is_unchanged(lined, plain):
    listing = lined.code_by_line("sass")
    gemm, copy_a, relu, store = (listing.of(line_of(t), __file__) for t in ("gemm", "copy_a", "relu", "store"))
    assert instruction_mix(gemm)["HGMMA"] > 0  # sm_90: T.gemm of shared tiles is wgmma
    mix_a = instruction_mix(copy_a)
    assert mix_a["LDGSTS"] + mix_a["UTMALDG"] > 0  # the pipelined T.copy is cp.async (or a TMA load)
    assert instruction_mix(store)["LDG/STG"] > 0
    assert relu and all(instruction_mix(relu)[f] == 0 for f in ("HGMMA", "LDGSTS"))
    mapped = sum(1 for i in listing.instructions if i.user is not None)
    assert mapped >= 0.9 * len(listing.instructions)
    # -lineinfo adds a line table, not code: the instruction stream equals the plain build's
    other = sass_by_line(sass_with_lines(plain.artifact.library_path), plain.get_kernel_source("cuda"))
    assert [i.text for i in listing.instructions] == [i.text for i in other.instructions]
    assert all(i.user is None for i in other.instructions)


def test_ptx_maps_to_the_user_lines(lined):
    listing = lined.code_by_line("ptx")
    assert any(i.opcode == "wgmma" for i in listing.of(line_of("gemm"), __file__))
    assert any(i.opcode == "cp" for i in listing.of(line_of("copy_b"), __file__))
    assert all(i.opcode == "max" or i.opcode == "mov" for i in listing.of(line_of("relu"), __file__))


def test_code_by_line_says_what_is_missing(plain):
    with pytest.raises(TileLangError, match="not a source-line build.*tl.cuda.lineinfo"):
        plain.code_by_line("sass")
    with pytest.raises(ValueError, match="kind must be 'sass' or 'ptx', got 'asm'"):
        plain.code_by_line("asm")
    with pytest.raises(ValueError, match=r"pass_configs\['tl.cuda.lineinfo'\]: expected True or False, got 1"):
        tl.compile(gmm_relu(64, 64, 64), target="cuda", pass_configs={"tl.cuda.lineinfo": 1})


@needs_nvdisasm
def test_on_sm80_the_gemm_line_is_hmma_from_the_fused_mainloop():
    k = tl.compile(gmm_relu(256, 256, 256), target={"kind": "cuda", "arch": "sm_80"}, pass_configs=LINEINFO)
    listing = k.code_by_line("sass")
    gemm = instruction_mix(listing.of(line_of("gemm"), __file__))
    assert gemm["HMMA"] > 0 and gemm["HGMMA"] == 0  # mma.sync (tl::pipe_gemm_step), no wgmma on sm_80
    mix_b = instruction_mix(listing.of(line_of("copy_b"), __file__))
    assert mix_b["LDGSTS"] + mix_b["UTMALDG"] > 0


def row_norm(M, N, block_M=8):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            sq = T.alloc_fragment((block_M, N), "float32")
            ss = T.alloc_fragment((block_M,), "float32")
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = X[bx * block_M + i, j] * X[bx * block_M + i, j]  # line:square
            T.reduce_sum(sq, ss, dim=1)  # line:reduce
            for i, j in T.Parallel(block_M, N):
                Y[bx * block_M + i, j] = X[bx * block_M + i, j] * T.rsqrt(ss[i] / N + 1e-6)  # line:scale
    return main


@needs_nvdisasm
def test_a_reduction_and_vectorised_parallel_loops_keep_their_lines():
    lined = tl.compile(row_norm(256, 1024), target="cuda", pass_configs=LINEINFO)
    listing = lined.code_by_line("sass")
    ops = {tag: {i.opcode for i in listing.of(line_of(tag), __file__)} for tag in ("square", "reduce", "scale")}
    assert "SHFL" in ops["reduce"]  # the cross-thread reduction (tl::block_allreduce) is the T.reduce_sum's
    assert "LDG" in ops["square"]  # the vectorised T.Parallel body (float4 loads; ptxas fuses x*x into the sum)
    assert "STG" in ops["scale"]
    assert sum(1 for i in listing.instructions if i.user is not None) >= len(listing.instructions) - 1
    plain = tl.compile(row_norm(256, 1024), target="cuda")
    other = sass_by_line(sass_with_lines(plain.artifact.library_path), "")
    assert [i.text for i in listing.instructions] == [i.text for i in other.instructions]


@needs_nvdisasm
@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_an_nvcc_source_line_build_maps_the_same_way():
    k = tl.compile(gmm_relu(128, 128, 64), target="cuda", pass_configs={**LINEINFO, "tl.cuda.compiler": "nvcc"})
    assert k.artifact.extra["cuda"]["nvcc_command"][0].endswith("nvcc") and "-lineinfo" in \
        k.artifact.extra["cuda"]["nvcc_command"]
    listing = k.code_by_line("sass")
    assert instruction_mix(listing.of(line_of("gemm"), __file__))["HGMMA"] > 0
    assert k.resources().registers == k.resources().to_dict()["registers"] > 0


def test_the_same_program_at_other_lines_is_a_new_source_line_build(tmp_path):
    """A source-line build writes the user's file and lines into its code, so the cache key covers them: the same
    program text two lines lower (another notebook cell) must not be served the first one's markers (in CI the
    workbench's SASS view of one cell mapped its T.gemm line to another cell's statement)."""
    import inspect
    import textwrap

    src = textwrap.dedent(inspect.getsource(gmm_relu))
    builds = []
    for pad in (0, 2):
        path = tmp_path / f"cell{pad}.py"
        path.write_text("import tilelang_core.language as T\n" + "\n" * pad + src)
        ns: dict = {}
        exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102 - a cell of our own text
        builds.append(tl.compile(ns["gmm_relu"](128, 128, 128), target="cuda", pass_configs=LINEINFO))
    a, b = (k.get_kernel_source() for k in builds)
    assert a != b and "cell0.py" in a and "cell2.py" in b

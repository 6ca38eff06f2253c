"""Tensors of 2³¹ elements or more: 64-bit offsets where the shapes need them (tl.PromoteIndexInt64), int32 kept
for ordinary shapes, a clear refusal of one dimension that large (tl.CheckIndexExtents), and one real CPU run on a
2.1 GB int8 tensor writing its last row (was a segfault; at 2³² elements the last row landed on row 0).

Symbolic sizes (``T.symbolic``): the compiler cannot know how large a call's tensor is, so offsets into a tensor
with a symbolic size are always 64-bit (they were int32 and wrapped), and a call whose symbolic dimension itself is
2³¹ or more is refused with a message naming the argument."""

from __future__ import annotations

import gc
import re

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend import cpu
from tilelang_core.errors import TileLangCompileError

BIG_ROWS = 524289  # × 4096 = 2**31 + 4096 elements: offsets of the last rows do not fit in int32
HUGE_ROWS = 1048577  # × 4096 = 2**32 + 4096: int32 offsets of the last row wrap to row 0
COLS = 4096


def add_one_in_place(M, N, block_M, dtype="int8"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                A[bx * block_M + i, j] = A[bx * block_M + i, j] + T.cast(3, dtype)

    return main


def copy_tiles(M, N, block_M, block_N, dtype="int8"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            S = T.alloc_shared((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], S)
            T.copy(S, B[by * block_M, bx * block_N])

    return main


def flat_add(N, block, dtype="int8"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i]

    return main


def add_one_in_place_symbolic(block_M, dtype="int8", size_dtype="int32"):
    M = T.symbolic("m", size_dtype)

    @T.prim_func
    def main(A: T.Tensor((M, COLS), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, COLS):
                A[bx * block_M + i, j] = A[bx * block_M + i, j] + T.cast(3, dtype)

    return main


def copy_tiles_symbolic(block_M, block_N, dtype="int8"):
    M, N = T.symbolic("m"), T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            S = T.alloc_shared((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], S)
            T.copy(S, B[by * block_M, bx * block_N])

    return main


def flat_copy_symbolic(block, dtype="int8"):
    N = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i]

    return main


def _index_dtypes_handed_to_llvm(func) -> set[str]:
    """Dtypes of the flattened tensor offsets in the TIR TVM hands to LLVM (after its NarrowDataType(32))."""
    import tvm

    seen: list[str] = []

    @tvm.instrument.pass_instrument
    class AfterNarrow:
        def run_after_pass(self, mod, info):
            if info.name == "tirx.NarrowDataType":
                seen.append(mod.script())

    cpu.codegen(cpu.lower(func), [AfterNarrow()])
    (text,) = seen
    # A_1[<offset>] / B_1[...] after FlattenBuffer: an int64 offset prints T.Cast("int64", ...) / T.int64(...)
    offsets = re.findall(r"\b[AB]_1\[(.*?)\] ", text)
    assert offsets, text
    return {"int64" if "int64" in o else "int32" for o in offsets}


@pytest.mark.parametrize("rows", [BIG_ROWS, HUGE_ROWS])
def test_offsets_of_a_tensor_past_two_to_the_31_elements_are_64_bit(rows):
    assert _index_dtypes_handed_to_llvm(add_one_in_place(rows, COLS, 4)) == {"int64"}


def test_offsets_of_ordinary_tensors_stay_32_bit():
    assert _index_dtypes_handed_to_llvm(add_one_in_place(1024, COLS, 4)) == {"int32"}


def test_tile_copies_of_a_huge_tensor_compile_to_64_bit_offsets():
    func = copy_tiles(HUGE_ROWS, COLS, 64, 64)
    out = tilelang.compile(func, target="cpu")
    ir = out.get_kernel_source("tir")
    assert "int64" in ir


def _cuda_kernel_source(func) -> str:
    from tilelang_core.backend.cuda import codegen as cuda_codegen

    src = cuda_codegen.generate(cuda_codegen.lower(func)).source
    return src[src.find('extern "C" __global__'):]


@pytest.mark.parametrize("make", [lambda m: add_one_in_place(m, COLS, 64), lambda m: copy_tiles(m, COLS, 64, 64)],
                         ids=["parallel", "tile-copy"])
def test_cuda_offsets_into_a_huge_tensor_are_64_bit_and_ordinary_ones_32_bit(make):
    big = _cuda_kernel_source(make(HUGE_ROWS))
    # every global access of A is through an int64 offset: blockIdx.x * rows-per-block * 4096 never wraps
    accesses = re.findall(r"A_ptr \+ (.*?)\)\)?;", big)
    assert accesses and all("int64_t" in a for a in accesses), big
    assert "int64_t" not in _cuda_kernel_source(make(1024))


@pytest.mark.parametrize("make", [lambda: add_one_in_place_symbolic(4), lambda: copy_tiles_symbolic(64, 64)],
                         ids=["parallel", "tile-copy"])
def test_offsets_into_a_tensor_with_a_symbolic_size_are_64_bit(make):
    assert _index_dtypes_handed_to_llvm(make()) == {"int64"}


@pytest.mark.parametrize("make", [lambda: add_one_in_place_symbolic(64), lambda: copy_tiles_symbolic(64, 64)],
                         ids=["parallel", "tile-copy"])
def test_cuda_offsets_into_a_tensor_with_a_symbolic_size_are_64_bit(make):
    src = _cuda_kernel_source(make())
    body = src[src.find("{"):]
    accesses = [line for line in body.splitlines() if "A_ptr" in line]  # A_ptr[...] and A_ptr + ... alike
    assert accesses and all("int64_t" in a for a in accesses), src


def test_symbolic_dimension_past_int32_is_refused_at_the_call_naming_the_argument():
    kernel = tilelang.compile(flat_copy_symbolic(256), target="cpu")
    A = torch.empty((2**31 + 512,), dtype=torch.int8)  # not touched: the call is refused before the kernel runs
    try:
        with pytest.raises(ValueError) as e:
            kernel(A, A)
        msg = str(e.value)
        assert "'A'" in msg and "symbolic size n" in msg and "2147484160" in msg and "2147483647" in msg
    finally:
        del A
        gc.collect()


def test_int64_symbolic_size_compiles_and_runs():
    # was an internal TVM error (int32 block indices bound to an int64 grid extent)
    kernel = tilelang.compile(add_one_in_place_symbolic(4, size_dtype="int64"), target="cpu")
    g = torch.Generator().manual_seed(3)
    A = torch.randint(-128, 128, (37, COLS), dtype=torch.int8, generator=g)
    expected = A + 3
    kernel(A)
    torch.testing.assert_close(A, expected, rtol=0, atol=0)


def test_one_dimension_past_int32_is_refused_naming_the_tensor():
    with pytest.raises(TileLangCompileError) as e:
        tilelang.compile(flat_add(2**31 + 512, 256), target="cpu")
    msg = str(e.value)
    assert "'A'" in msg and "2147484160" in msg and "2147483647" in msg and "Reshape" in msg


def _available_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return 0


@pytest.mark.skipif(_available_bytes() < 8 * 2**30, reason="needs ~8 GB of free memory (a 2.1 GB tensor + copies)")
@pytest.mark.parametrize("make", [lambda: add_one_in_place(BIG_ROWS, COLS, 64), lambda: add_one_in_place_symbolic(64)],
                         ids=["static", "symbolic"])
def test_kernel_writes_the_last_row_of_a_tensor_past_two_to_the_31_elements(make):
    kernel = tilelang.compile(make(), target="cpu")
    g = torch.Generator().manual_seed(14)
    A = torch.empty((BIG_ROWS, COLS), dtype=torch.int8)
    sample_rows = [0, 1, 262143, 524223, BIG_ROWS - 2, BIG_ROWS - 1]  # 524223: first row of the last block
    for r in sample_rows:
        A[r] = torch.randint(-128, 128, (COLS,), dtype=torch.int8, generator=g)
    before = A[sample_rows].clone()
    try:
        kernel(A)
        after = A[sample_rows]
        expected = before + 3  # int8 wraps in both
        torch.testing.assert_close(after, expected, rtol=0, atol=0)
    finally:
        del A
        gc.collect()


def test_cuda_int8_kernel_with_a_broadcast_constant_compiles():
    """``A + T.cast(3, "int8")`` vectorises 16 lanes of int8: TVM printed the constant's broadcast as
    ``make_int4`` of sixteen chars, which NVRTC rejected on the H200; it is packed lane by lane now."""
    kernel = tilelang.compile(add_one_in_place(1024, COLS, 64), target="cuda")
    src = kernel.get_kernel_source()
    assert "tl::pack_lanes<int4>((signed char)3" in src

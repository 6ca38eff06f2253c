"""``T.annotate_layout`` honoured: a user ``Layout`` permutes the physical index of a tile on the CPU and CUDA
(results equal to torch, the generated index expression changes), a swizzled layout sets the CUDA shared swizzle,
``make_linear_layout`` clears an mma.sync operand's swizzle and is refused with a note for wgmma, an index map on a
T.gemm operand is a located error on CUDA, a ``Fragment`` is accepted and noted as not honoured; bad maps are
errors naming the argument."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend import cpu as cpu_backend
from tilelang_core.backend.cuda import codegen
from tilelang_core.errors import TileLangCompileError
from tilelang_core.transform.cuda.common import ATTR_SWIZZLE

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402

LAYOUTS = {
    "xor": lambda i, j: (i, j ^ ((i % 8) * 4)),  # keeps runs of 4 elements (16 bytes of float32)
    "transpose": lambda i, j: (j, i),  # column-major: no two neighbours of a row together
    "padded": lambda i, j: i * 68 + j,  # 4 elements of padding per row: a larger physical tile
}


@tilelang.jit(out_idx=[-1])
def staged(M, N, kind, block_M=16):
    """B = A + row index through a shared tile in the user's layout ``LAYOUTS[kind]`` (ragged M allowed)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            s = T.alloc_shared((block_M, N), "float32")
            T.annotate_layout({s: tilelang.layout.Layout((block_M, N), LAYOUTS[kind])})
            T.copy(A[bx * block_M, 0], s)
            for i, j in T.Parallel(block_M, N):
                s[i, j] = s[i, j] + T.cast(i, "float32")
            T.copy(s, B[bx * block_M, 0])

    return main


@tilelang.jit(out_idx=[-1])
def pipelined_row_sums(M, N, block_M=32, block_N=64):
    """B[:, 0] = row sums of A through a multi-buffered shared tile stored column-major (a user Layout)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, 1), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            s = T.alloc_shared((block_M, block_N), "float32")
            acc = T.alloc_fragment((block_M, block_N), "float32")
            r = T.alloc_fragment((block_M,), "float32")
            T.annotate_layout({s: lambda i, j: (j, i)})
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
                T.copy(A[bx * block_M, k * block_N], s)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] += s[i, j]
            T.reduce_sum(acc, r, dim=1)
            for i in T.Parallel(block_M):
                B[bx * block_M + i, 0] = r[i]

    return main


@tilelang.jit(out_idx=[-1])
def swizzle_requested(N, swizzled):
    """B = 2 A through a copy-only fp16 shared tile, with or without ``make_swizzled_layout``."""

    @T.prim_func
    def main(A: T.Tensor((N, 64), "float16"), B: T.Tensor((N, 64), "float16")):
        with T.Kernel(T.ceildiv(N, 64), threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            if swizzled:
                T.annotate_layout({s: tilelang.layout.make_swizzled_layout(s)})
            T.copy(A[bx * 64, 0], s)
            for i, j in T.Parallel(64, 64):
                B[bx * 64 + i, j] = s[i, j] * T.float16(2)

    return main


@tilelang.jit(out_idx=[-1])
def gemm_annotated(kind):
    """C = A @ B (64^3, fp16 -> fp32) with an annotation on A_s or the accumulator."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((64, 64), "float16")
            Bs = T.alloc_shared((64, 64), "float16")
            Cl = T.alloc_fragment((64, 64), "float32")
            if kind == "linear":
                T.annotate_layout({As: tilelang.layout.make_linear_layout(As)})
            elif kind == "index":
                T.annotate_layout({As: lambda i, j: (j, i)})
            elif kind == "fragment":
                T.annotate_layout({Cl: tilelang.layout.Fragment((64, 64), forward_thread_fn=lambda i, j: i)})
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, Cl, clear_accum=True)
            T.copy(Cl, C)

    return main


def _reference(a: torch.Tensor, block_M: int = 16) -> torch.Tensor:
    return a + (torch.arange(a.shape[0]) % block_M)[:, None].float()


def test_cpu_user_layout_permutes_the_tile_index_and_keeps_the_result():
    plain = cpu_backend.lower(staged.get_program(40, 64, "xor")).script()
    assert "s[i * 64 + (j ^ i % 8 * 4)]" in plain  # the tile is flat, indexed through the user's map
    padded = cpu_backend.lower(staged.get_program(40, 64, "padded")).script()
    assert "T.alloc_buffer((1084,))" in padded and "s[i * 68 + j]" in padded  # 16 rows of 68
    a = torch.randn(40, 64)
    torch.testing.assert_close(staged(40, 64, "xor")(a), _reference(a))


def test_cpu_gemm_reads_an_operand_in_a_user_layout():
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    torch.testing.assert_close(gemm_annotated("index")(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kind", ["xor", "padded"])  # column-major: the pipelined test below
def test_cuda_user_layouts_compute_the_same_values_in_the_emulator(kind):
    a = torch.randn(40, 64)
    (b,) = emulate(staged, (40, 64, kind), {}, [a])
    torch.testing.assert_close(b, _reference(a))


def test_cuda_user_layout_applies_to_every_stage_of_a_pipelined_tile():
    a = torch.randn(32, 64)
    (b,) = emulate(pipelined_row_sums, (32, 64), {"block_N": 32}, [a])
    torch.testing.assert_close(b[:, 0], a.sum(1), rtol=1e-5, atol=1e-4)


def test_layout_of_a_kernel_parameter_is_noted_as_not_applied():
    @tilelang.jit(out_idx=[-1])
    def k(N):
        @T.prim_func
        def main(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N, N), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_layout({X: lambda i, j: (j, i)})
                T.copy(X, Y)
        return main

    from tilelang_core.transform.common.notes import read_notes

    notes = read_notes(cpu_backend.lower(k.get_program(8)))
    assert any("layout_map[X]: X is not a tile the kernel allocates" in n for n in notes)


def test_cuda_user_layout_keeps_16_byte_accesses_where_its_runs_allow():
    mod = codegen.lower(staged.get_program(40, 64, "xor"), arch="sm_90")
    src = codegen.generate(mod, arch="sm_90").source
    stores = [ln for ln in src.splitlines() if "*(float4*)(((float*)smem_ptr)" in ln]
    assert stores and all("^" in ln for ln in stores)  # float4 chunks at the permuted offset
    src_t = codegen.generate(codegen.lower(staged.get_program(40, 64, "transpose"), arch="sm_90"),
                             arch="sm_90").source
    assert "float4*)(((float*)smem_ptr)" not in src_t  # runs of 1: scalar accesses


def test_swizzled_layout_request_swizzles_a_copy_only_tile_on_cuda():
    def swz(flag):
        return _swizzles(codegen.lower(swizzle_requested.get_program(128, flag), arch="sm_90"))

    assert not swz(False).get("s")
    assert swz(True)["s"] == 7  # 128-byte rows: the XOR of the 16-byte chunk with the row
    a = torch.randn(128, 64).half()
    (b,) = emulate(swizzle_requested, (128, True), {}, [a])
    torch.testing.assert_close(b, a * 2)


def _swizzles(mod):
    attrs = mod["main"].attrs
    return {str(k.name): int(v) for k, v in attrs[ATTR_SWIZZLE].items()} if ATTR_SWIZZLE in attrs else {}


def test_linear_layout_clears_the_mma_swizzle_and_is_refused_for_wgmma_with_a_note():
    from tilelang_core.transform.common.notes import read_notes

    assert _swizzles(codegen.lower(gemm_annotated.get_program("none"), arch="sm_80"))["As"] == 7
    sm80 = codegen.lower(gemm_annotated.get_program("linear"), arch="sm_80")
    assert _swizzles(sm80)["As"] == 0 and _swizzles(sm80)["Bs"] == 7  # the mma.sync template's SWZ_A = 0
    sm90 = codegen.lower(gemm_annotated.get_program("linear"), arch="sm_90a")  # wgmma needs sm_90a
    assert any("make_linear_layout not honoured: As is a wgmma operand" in n for n in read_notes(sm90))


def test_cuda_index_layout_on_a_gemm_operand_is_a_located_error():
    with pytest.raises(TileLangCompileError, match=r"layout_map\[As\]: a Layout \(index map\) cannot be honoured "
                                                   r"on a T\.gemm operand on CUDA") as e:
        codegen.lower(gemm_annotated.get_program("index"), arch="sm_90")
    assert e.value.location is not None and "T.annotate_layout({As: lambda i, j: (j, i)})" in str(e.value)


def test_cuda_fragment_annotation_is_noted_as_not_honoured():
    from tilelang_core.transform.common.notes import read_notes

    mod = codegen.lower(gemm_annotated.get_program("fragment"), arch="sm_90")
    assert any("layout_map[Cl]: a Fragment is not honoured on CUDA" in n for n in read_notes(mod))


@pytest.mark.parametrize("fn, match", [
    (lambda i, j: (i, 0), r"the layout is not one-to-one: \[0, 0\] and \[0, 1\] both map to \[0, 0\]"),
    (lambda i, j: (i, j - 1), r"the layout maps \[0, 0\] to \[0, -1\], a negative index"),
])
def test_bad_user_layouts_are_errors_naming_the_tile(fn, match):
    @tilelang.jit(out_idx=[-1])
    def k(N):
        @T.prim_func
        def main(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N, N), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((N, N), "float32")
                T.annotate_layout({s: fn})
                T.copy(X, s)
                T.copy(s, Y)
        return main

    with pytest.raises((TileLangCompileError, ValueError), match=r"T\.annotate_layout layout_map\[s\]: " + match):
        k.get_program(8)


def test_layout_of_another_shape_is_an_error_naming_both_shapes():
    @tilelang.jit(out_idx=[-1])
    def k(N):
        @T.prim_func
        def main(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N, N), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((N, N), "float32")
                T.annotate_layout({s: tilelang.layout.Layout((N, 2 * N), lambda i, j: (i, j))})
                T.copy(X, s)
                T.copy(s, Y)
        return main

    with pytest.raises((TileLangCompileError, ValueError), match=r"the Layout's shape \[8, 16\] is not the tile's "
                                                                 r"shape \[8, 8\]"):
        k.get_program(8)

"""A user's own device function: ``T.import_source`` text in the generated CUDA source, callable from a kernel
through ``T.call_extern`` (compiled by the toolkit here, run on the GPU in tests/gpu/test_steering_tools.py); on
the CPU, a ``T.call_extern`` nothing defines is an error at the user's line; a C library function still works."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.errors import TileLangCompileError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import user_device_code_kernels as kernels  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


@needs_nvcc
def test_imported_device_function_is_in_the_cuda_source_and_compiles_to_lop3():
    kernel = tilelang.jit(out_idx=[-1], target="cuda")(kernels.decode_u4.factory)(1000)
    head, body = kernel.get_kernel_source().split("__global__", 1)
    assert "void decode_u4x8_to_f16(const unsigned int* src, half* dst)" in head  # before the kernel
    assert "decode_u4x8_to_f16((&(" in body and "(void*)decode_u4x8_to_f16" not in body
    assert "lop3.b32" in kernel.get_kernel_source("ptx")


def test_call_extern_without_a_cpu_definition_is_a_located_error():
    with pytest.raises(TileLangCompileError, match=r"T\.call_extern\('decode_u4x8_to_f16'\): no CPU definition"
                                                   r".*T\.import_source code is CUDA device code") as e:
        kernels.decode_u4(64)
    assert e.value.location is not None and e.value.location.line > 0
    assert "T.call_extern(\"handle\", \"decode_u4x8_to_f16\"" in str(e.value)


def test_cpu_call_extern_of_a_c_library_function_runs():
    @tilelang.jit(out_idx=[-1])
    def hypot_rows(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.serial(N):
                    Y[i] = T.call_extern("float32", "hypotf", X[i], T.float32(3))
        return main

    x = torch.randn(40)
    torch.testing.assert_close(hypot_rows(40)(x), torch.hypot(x, torch.tensor(3.0)))


def test_reference_decoder_reads_nibbles_in_the_lop3_order():
    w = torch.tensor([0x76543210, 0xFEDCBA98 - (1 << 32)], dtype=torch.int32)
    assert kernels.decode_u4_reference(w).tolist() == [[0, 4, 1, 5, 2, 6, 3, 7], [8, 12, 9, 13, 10, 14, 11, 15]]


@pytest.mark.parametrize("bad", [42, "   "])
def test_import_source_rejects_what_is_not_code(bad):
    @tilelang.jit(out_idx=[-1])
    def k(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32):
                T.import_source(bad)
                for i in T.serial(N):
                    Y[i] = X[i]
        return main

    with pytest.raises((TileLangCompileError, TypeError, ValueError), match=r"T\.import_source source: expected"):
        k.get_program(8)

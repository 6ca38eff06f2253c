"""TileLang's dtype objects (``T.float16``, ``T.bfloat16``, ``T.float8_e4m3fn`` ...) and float8 storage.

Written from TileLang's behaviour (tilelang/language/dtypes.py): a dtype is a ``str`` subclass, so it compares
with strings, names torch attributes and annotates tensors; calling one builds TIR as TVMScript's constructors do;
aliases ``T.float`` / ``T.int`` / ``T.uint`` give float32 / int32 / uint32; ``as_torch()`` maps int4 to int8 storage.
float8 tensors run on the CPU with conversions equal to torch's, bit for bit, and compile for CUDA.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.errors import TileLangCompileError
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact

FP8 = [T.float8_e4m3fn, T.float8_e5m2]


# -- the objects ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
                                  "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2"])
def test_dtype_objects_are_strings_that_name_torch_dtypes(name):
    dt = getattr(T, name)
    assert isinstance(dt, str) and isinstance(dt, T.dtype)
    assert dt == name and str(dt) == name and f"{dt}" == name and hash(dt) == hash(name)
    assert getattr(torch, dt) is dt.as_torch()
    assert {name: 1}[dt] == 1
    assert T.dtype(dt.as_torch()) == name


def test_aliases_and_constructors_give_canonical_names():
    assert (T.float, T.half, T.double, T.int, T.uint, T.short, T.long) == (
        "float32", "float16", "float64", "int32", "uint32", "int16", "int64")
    assert T.dtype("float") == "float32" and T.dtype(float) == "float32" and T.dtype(int) == "int32"
    assert T.dtype(bool) == "bool" and T.dtype(torch.bfloat16) == "bfloat16"
    import numpy as np

    assert T.dtype(np.float16) == "float16" and T.dtype(np.dtype("int8")) == "int8"
    assert T.dtype(T.float16) is T.float16


def test_dtype_properties():
    assert (T.float16.bits, T.float16.bytes, T.float16.lanes) == (16, 2, 1)
    assert T.float16x2.lanes == 2 and T.float16x2.bits == 16
    assert T.int4.bits == 4 and T.int4.bytes == 1 and T.int4.as_torch() is torch.int8
    assert T.float8_e4m3fn.bytes == 1 and T.float8_e5m2.as_torch() is torch.float8_e5m2
    assert T.tfloat32 == "float32" and T.tfloat32.as_torch() is torch.float32


def test_dtype_survives_pickle_and_copy_and_reprs_as_its_string():
    for dt in (T.float16, T.bfloat16, T.float8_e4m3fn):
        back = pickle.loads(pickle.dumps(dt))
        assert back == dt and isinstance(back, T.dtype)
        assert copy.deepcopy(dt) is dt
        assert repr(dt) == repr(str(dt))


def test_unknown_dtype_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unknown dtype 'float17'"):
        T.dtype("float17")


def test_calling_a_dtype_builds_tir_constants_casts_and_variables():
    from tvm import tirx

    c = T.float32(0)
    assert isinstance(c, tirx.FloatImm) and str(c.ty.dtype) == "float32" and c.value == 0.0
    assert str(T.bfloat16(1.5).ty.dtype) == "bfloat16"
    x = tirx.Var("x", "float32")
    cast = T.float16(x)
    assert isinstance(cast, tirx.Cast) and str(cast.ty.dtype) == "float16"
    assert str(T.int32().ty.dtype) == "int32"  # what TVMScript calls for an annotation ``n: T.int32``
    assert str(T.int4(3).ty.dtype) == "int4"


def test_infinity_of_bfloat16_and_float8():
    assert str(T.infinity(T.bfloat16)) == 'T.bfloat16("inf")'
    assert str(T.infinity(T.float8_e5m2)) == 'T.float8_e5m2("inf")'
    with pytest.raises(ValueError, match="float8_e4m3fn has no infinity"):
        T.infinity(T.float8_e4m3fn)


def test_int4_tensors_are_refused_with_the_alternative():
    with pytest.raises(ValueError, match=r"int4 .*pack two 4-bit values.*compat.md"):
        T.Tensor((16, 16), T.int4)


# -- in kernels ----------------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1])
def scaled_add(M, N, dtype, block_M=16):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), T.float32), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            a = T.alloc_fragment((block_M, N), dtype)
            acc = T.alloc_fragment((block_M, N), T.float)
            T.copy(A[bx * block_M, 0], a)
            for i, j in T.Parallel(block_M, N):
                acc[i, j] = T.cast(a[i, j], T.float32) * T.float32(2) + B[bx * block_M + i, j]
            for i, j in T.Parallel(block_M, N):
                C[bx * block_M + i, j] = T.cast(acc[i, j], dtype)
    return main


@pytest.mark.parametrize("dtype", [T.float16, T.bfloat16, T.float32])
def test_dtype_objects_annotate_kernels_like_strings(dtype):
    a = torch.randn(40, 24).to(getattr(torch, dtype))
    b = torch.randn(40, 24)
    c = scaled_add(40, 24, dtype)(a, b)
    assert c.dtype is dtype.as_torch()
    ref = (a.float() * 2 + b).to(c.dtype)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)
    assert scaled_add(40, 24, dtype) is scaled_add(40, 24, str(dtype))  # the same kernel as the string spelling


def _all_bytes(dtype):
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype.as_torch())


def _hard_floats(n):
    g = torch.Generator().manual_seed(7)
    bits = torch.randint(-2**31, 2**31, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    edges = torch.tensor([0.0, -0.0, 448.0, 464.0, 470.0, 480.0, 57344.0, 61439.0, 61440.0, 65536.0, 1e9,
                          float("inf"), -float("inf"), float("nan"), 2.0**-9, 2.0**-10, 3 * 2.0**-11, 2.0**-16,
                          2.0**-17, 3 * 2.0**-18])
    return torch.cat([torch.randn(n, generator=g) * 200, torch.randn(n, generator=g) * 1e-3,
                      torch.randn(n, generator=g) * 1e-5, bits, edges, -edges])


@tilelang.jit(out_idx=[-2, -1])
def fp8_roundtrip(N, fp8, block=256):
    @T.prim_func
    def main(A: T.Tensor((N,), fp8), X: T.Tensor((N,), T.float32), D: T.Tensor((N,), T.float32),
             E: T.Tensor((N,), fp8)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                D[bx * block + i] = T.cast(A[bx * block + i], T.float32)
                E[bx * block + i] = T.cast(X[bx * block + i], fp8)
    return main


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_conversions_on_the_cpu_equal_torch_bit_for_bit(fp8):
    """Every byte decodes as torch decodes it (zero, subnormals, inf, NaN); float32 rounds to nearest even and
    saturates (e4m3fn) or overflows to inf (e5m2) exactly as torch's ``.to()``. TVM's own lowering decoded zero as
    2^-7 and flushed subnormals."""
    x = _hard_floats(4096)
    n = x.numel()
    a = torch.cat([_all_bytes(fp8), _all_bytes(fp8).repeat(n // 256 + 1)])[:n].contiguous()
    d, e = fp8_roundtrip(n, fp8)(a, x)
    ref = a.float()
    assert torch.equal(d.isnan(), ref.isnan())
    ok = ~ref.isnan()
    assert torch.equal(d[ok], ref[ok]) and torch.equal(d[ok].signbit(), ref[ok].signbit())
    assert torch.equal(e.view(torch.uint8), x.to(fp8.as_torch()).view(torch.uint8))


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_constants_are_encoded_as_torch_rounds_them(fp8):
    from tilelang_core.transform.cpu.fp8_cast_cpu import encode_constant

    x = _hard_floats(64)
    got = torch.tensor([encode_constant(float(v), str(fp8)) for v in x], dtype=torch.int32)
    assert torch.equal(got, x.to(fp8.as_torch()).view(torch.uint8).to(torch.int32))


@tilelang.jit(out_idx=[-1])
def fp8_select_mul(N, fp8):
    @T.prim_func
    def main(A: T.Tensor((N,), fp8), B: T.Tensor((N,), fp8), C: T.Tensor((N,), fp8)):
        with T.Kernel(1, threads=128) as bx:  # noqa: F841
            for i in T.Parallel(N):
                C[i] = T.if_then_else(A[i] > B[i], A[i] * B[i], A[i] - B[i])
    return main


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_arithmetic_is_computed_in_float32_and_rounded_once(fp8):
    a = (torch.randn(512) * 4).to(fp8.as_torch())
    b = (torch.randn(512) * 4).to(fp8.as_torch())
    c = fp8_select_mul(512, fp8)(a, b)
    af, bf = a.float(), b.float()
    ref = torch.where(af > bf, af * bf, af - bf).to(fp8.as_torch())
    assert torch.equal(c.view(torch.uint8), ref.view(torch.uint8))


@tilelang.jit(out_idx=[-1])
def fp8_tile_dequant(M, N, fp8, block_M=16):
    @T.prim_func
    def main(A: T.Tensor((M, N), fp8), S: T.Tensor((M,), T.float32), C: T.Tensor((M, N), T.bfloat16)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            a_s = T.alloc_shared((block_M, N), fp8)
            c = T.alloc_fragment((block_M, N), T.float32)
            T.copy(A[bx * block_M, 0], a_s)
            T.copy(a_s, c)
            for i, j in T.Parallel(block_M, N):
                c[i, j] = c[i, j] * S[bx * block_M + i]
            T.copy(c, C[bx * block_M, 0])
    return main


@pytest.mark.parametrize("fp8", FP8)
def test_fp8_tiles_copy_into_float32_fragments_exactly(fp8):
    a = torch.cat([_all_bytes(fp8).view(2, 128)] * 20).contiguous()[:36]
    s = torch.rand(36) + 0.5
    c = fp8_tile_dequant(36, 128, fp8)(a, s)
    ref = (a.float() * s[:, None]).to(torch.bfloat16)
    assert torch.equal(c.float().isnan(), ref.float().isnan())
    ok = ~ref.float().isnan()
    assert torch.equal(c[ok], ref[ok])


@tilelang.jit(out_idx=[-1])
def fp8_gemm(M, N, K, fp8):
    @T.prim_func
    def main(A: T.Tensor((M, K), fp8), B: T.Tensor((K, N), fp8), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=128) as bx:  # noqa: F841
            a = T.alloc_shared((M, K), fp8)
            b = T.alloc_shared((K, N), fp8)
            c = T.alloc_fragment((M, N), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.clear(c)
            T.gemm(a, b, c)
            T.copy(c, C)
    return main


def test_fp8_gemm_accumulates_the_exact_products_in_float32():
    fp8 = T.float8_e4m3fn
    a, b = torch.randn(32, 16).to(fp8.as_torch()), torch.randn(16, 32).to(fp8.as_torch())
    torch.testing.assert_close(fp8_gemm(32, 32, 16, fp8)(a, b), a.float() @ b.float(), rtol=1e-6, atol=1e-6)


# -- CUDA codegen (no GPU needed) ----------------------------------------------------------------------------------

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the toolkit")


def _cuda_source(factory, args, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    func = factory.get_program(*args)
    specs = _param_specs(func)
    build_artifact(func, out, {"kind": "cuda", "arch": "sm_90"}, specs, _normalize_out_idx(factory.out_idx,
                                                                                            len(specs)))
    return (out / "kernel.cu").read_text()


@needs_nvcc
@pytest.mark.parametrize("name,fp8,ctype", [("rt", T.float8_e4m3fn, "fp8_e4"), ("rt", T.float8_e5m2, "fp8_e5"),
                                            ("dq", T.float8_e5m2, "fp8_e5"), ("gemm", T.float8_e4m3fn, "fp8_e4")])
def test_fp8_kernels_compile_for_cuda_with_cuda_fp8_types(tmp_path, name, fp8, ctype):
    factory, args = {"rt": (fp8_roundtrip, (1024, fp8)), "dq": (fp8_tile_dequant, (64, 128, fp8)),
                     "gemm": (fp8_gemm, (64, 64, 64, fp8))}[name]
    src = _cuda_source(factory, args, tmp_path)
    assert "__global__" in src and ctype in src.split("__global__", 1)[1]


@needs_nvcc
def test_dtype_objects_compile_for_cuda(tmp_path):
    src = _cuda_source(scaled_add, (64, 64, T.bfloat16), tmp_path)
    assert "__global__" in src and "nv_bfloat16" in src.split("__global__", 1)[1]


def test_bad_dtype_in_a_kernel_is_located_at_the_users_line():
    @tilelang.jit
    def bad(N):
        @T.prim_func
        def main(A: T.Tensor((N,), T.float32)):
            with T.Kernel(1, threads=128) as bx:  # noqa: F841
                t = T.alloc_fragment((N,), T.int4)
                T.copy(A, t)
        return main

    with pytest.raises(TileLangCompileError, match="int4") as e:
        bad(64)
    assert e.value.location is not None and "alloc_fragment" in e.value.location.source_line()

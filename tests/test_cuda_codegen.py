"""CUDA backend without a GPU: every kernel of the CPU issue lowers, generates CUDA C and compiles with nvcc for
sm_90 (and sm_80), so a codegen regression fails CI on machines with no GPU. Also: target resolution, the
artifact's launch description, the launcher's argument checks, and that the runtime never imports TVM.
Tests that need a GPU are in test_cuda_gpu.py and skip with a visible reason when none is present."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.errors import TileLangCompileError
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact
from tilelang_core.target import cuda_target, resolve_target

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import dequant_gemm, elementwise, flash_attention, gemm, gemv, rmsnorm, softmax  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found (set TILELANG_CORE_NVCC): the CUDA "
                                                             "compile tests need the CUDA toolkit, not a GPU")

# (name, factory, args, kwargs) — the CPU issue's kernels, aligned and ragged, in the dtypes the GPU path cares about
KERNELS = [
    ("quickstart_f32", gemm.matmul_relu, (1024, 1024, 1024, 64, 64, 32), {}),
    ("quickstart_f16", gemm.matmul_relu, (1024, 1024, 1024, 128, 128, 32), {"dtype": "float16"}),
    ("quickstart_f16_ragged", gemm.matmul_relu, (300, 200, 136, 128, 128, 32), {"dtype": "float16"}),
    ("gemm_f16_big", gemm.matmul, (4096, 4096, 4096, 128, 256, 32),
     {"dtype": "float16", "num_stages": 4, "threads": 256}),
    ("gemm_f32_ragged", gemm.matmul, (300, 200, 130, 64, 64, 32), {}),
    ("add_tiled_ragged", elementwise.add_tiled, (1000, 1030), {}),
    ("add_direct", elementwise.add_direct, (4096, 4096), {}),
    ("softmax", softmax.softmax, (4096, 4096), {}),
    ("softmax_ragged_rows4", softmax.softmax, (1001, 333), {"block_M": 4}),
    ("rmsnorm_ragged", rmsnorm.rms_norm, (1001, 333), {}),
    ("gemv_ragged", gemv.gemv, (1000, 1030), {}),
    ("gemv_f16", gemv.gemv, (8192, 8192, 4, 1024, 256), {"dtype": "float16"}),
    ("gemv_f16_ragged", gemv.gemv, (1000, 1030), {"dtype": "float16"}),
    ("softmax_f16", softmax.softmax, (4096, 4096), {"dtype": "float16"}),
    ("rmsnorm_f16_ragged", rmsnorm.rms_norm, (1001, 336), {"dtype": "float16"}),
    ("flash_attention_f16_causal", flash_attention.flash_attention, (1, 2, 250, 64, True),
     {"dtype": "float16", "num_stages": 2}),
    ("dequant_gemm_f16", dequant_gemm.dequant_gemm, (32, 256, 512, 128), {"dtype": "float16"}),
]
SM80 = {"quickstart_f16", "quickstart_f32", "softmax", "rmsnorm_ragged", "gemv_ragged", "add_tiled_ragged"}


def _build(factory, args, kwargs, out: Path, arch: str = "sm_90", compile_cubin: bool = True, pass_configs=None):
    func = factory.get_program(*args, **kwargs)
    specs = _param_specs(func)
    outs = _normalize_out_idx(factory.out_idx, len(specs))
    return build_artifact(func, out, {"kind": "cuda", "arch": arch}, specs, outs, compile_cubin=compile_cubin,
                          pass_configs=pass_configs)


# -- codegen + nvcc ----------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("name,factory,args,kwargs", KERNELS, ids=[k[0] for k in KERNELS])
def test_kernel_compiles_with_nvcc_for_sm90(tmp_path, name, factory, args, kwargs):
    art = _build(factory, args, kwargs, tmp_path)
    meta = art.extra["cuda"]
    cubin = tmp_path / meta["cubin"]
    assert cubin.is_file() and cubin.stat().st_size > 0
    assert meta["arch"] == "sm_90" and meta["block"][0] % 32 == 0
    assert sorted(meta["args"]) == sorted(p.name for p in art.params)
    src = (tmp_path / "kernel.cu").read_text()
    assert '#include "tl/tl.cuh"' in src and "__global__" in src


@needs_nvcc
@pytest.mark.parametrize("name,factory,args,kwargs", [k for k in KERNELS if k[0] in SM80],
                         ids=[k[0] for k in KERNELS if k[0] in SM80])
def test_kernel_compiles_with_nvcc_for_sm80(tmp_path, name, factory, args, kwargs):
    art = _build(factory, args, kwargs, tmp_path, arch="sm_80")
    assert "sm_80" in " ".join(art.extra["cuda"]["nvcc_command"])
    assert (tmp_path / "kernel.cubin").stat().st_size > 0


@needs_nvcc
def test_recorded_nvcc_command_reproduces_the_cubin(tmp_path):
    art = _build(gemm.matmul_relu, (256, 256, 256, 64, 64, 32), {"dtype": "float16"}, tmp_path,
                 pass_configs={"tl.cuda.compiler": "nvcc"})
    cmd = list(art.extra["cuda"]["nvcc_command"])
    out = tmp_path / "again.cubin"
    cmd[cmd.index("-o") + 1] = str(out)
    subprocess.run(cmd, check=True, capture_output=True)
    assert out.stat().st_size > 0


def test_fp16_quickstart_uses_tensor_cores_cp_async_and_a_software_pipeline(tmp_path):
    art = _build(gemm.matmul_relu, (1024, 1024, 1024, 128, 128, 32), {"dtype": "float16", "num_stages": 3},
                 tmp_path, compile_cubin=False)
    src = (tmp_path / "kernel.cu").read_text()
    assert "tl::pipe_gemm_step<128, 128, 32, 2, 2, 0, 0" in src  # mma.sync mainloop, 2x2 warps
    assert "tl::cp_async_16" in src and "tl::cp_async_commit" in src
    assert "tl::cp_async_wait<1>" in src  # 3 stages: at most one group still in flight
    assert art.extra["cuda"]["dyn_smem"] == 3 * (128 * 32 + 32 * 128) * 2


def test_fp32_gemm_uses_the_fma_fallback(tmp_path):
    _build(gemm.matmul_relu, (256, 256, 256, 64, 64, 32), {}, tmp_path, compile_cubin=False)
    src = (tmp_path / "kernel.cu").read_text()
    assert "gemm_ss" not in src and "pipe_gemm" not in src


def test_softmax_reductions_use_the_block_allreduce_template(tmp_path):
    _build(softmax.softmax, (4096, 4096), {}, tmp_path, compile_cubin=False)
    src = (tmp_path / "kernel.cu").read_text()
    assert "tl::block_allreduce<tl::MaxOp, 128, 1>" in src and "tl::block_allreduce<tl::SumOp, 128, 1>" in src
    assert "float4" in src  # 16-byte global loads and stores


def test_use_swizzle_remaps_block_indices(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import test_gemm

    _build(test_gemm.matmul, (512, 512, 128, 64, 64, 32), {"swizzle": True}, tmp_path, compile_cubin=False)
    tir = (tmp_path / "lowered.tir.py").read_text()
    assert "bx_hw" in tir and "by_hw" in tir


# -- vector widths of mixed-precision nests -----------------------------------------------------------------------

def _layouts(func):
    """The fragment layouts the CUDA pipeline picks for ``func``, by fragment name."""
    from tilelang_core.transform import cuda_passes
    from tilelang_core.transform.cuda.common import layouts_of

    for name, fn in cuda_passes():
        func = fn(func)
        if name == "tl.InferFragmentLayoutsCUDA":
            return {buf.name: lay for buf, lay in layouts_of(func).items()}
    raise AssertionError("no layout pass")


def test_blocked_chunks_are_sized_for_the_narrowest_global_tensor():
    """16 bytes of the narrowest global tensor a fragment meets, not of the fragment's own (wider) type."""
    f16 = {"dtype": "float16"}
    assert _layouts(gemv.gemv.get_program(8192, 8192, 4, 1024, 256))["acc"].vec == 4  # fp32 A
    assert _layouts(gemv.gemv.get_program(8192, 8192, 4, 1024, 256, **f16))["acc"].vec == 8  # fp16 A
    assert _layouts(gemv.gemv.get_program(8192, 1020, 4, 1020, 256, **f16))["acc"].vec == 4  # 1020 = 4 * 255
    assert _layouts(softmax.softmax.get_program(64, 4096, **f16))["x"].vec == 8  # T.copy from fp16 X

    @T.prim_func
    def narrow_fragment(A: T.Tensor((256, 256), "float32"), B: T.Tensor((256, 256), "float32")):
        with T.Kernel(8, threads=128) as bx:
            h = T.alloc_fragment((32, 256), "float16")
            T.copy(A[bx * 32, 0], h)
            for i, j in T.Parallel(32, 256):
                B[bx * 32 + i, j] = T.cast(h[i, j], "float32")

    assert _layouts(narrow_fragment)["h"].vec == 4  # fp32 tensors: one float4 per chunk


@pytest.mark.parametrize("block_N,block_K,threads", [(4, 1024, 256), (8, 64, 128), (8, 512, 256), (2, 2048, 256)])
def test_fp16_gemv_reads_a_with_16_byte_loads(tmp_path, block_N, block_K, threads):
    """fp16 A and x with an fp32 accumulator: each chunk is 8 elements, A is read one ``uint4`` (8 halves) at a time
    into registers, and the 32 bytes of fp32 accumulator per chunk are updated as two ``float4`` halves — no access
    is wider than 16 bytes and none of A is narrower."""
    art = _build(gemv.gemv, (8192, 8192, block_N, block_K, threads), {"dtype": "float16"}, tmp_path,
                 compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    a_loads = re.findall(r"= __ldcs\(\(const (\w+)\*\)\(A_ptr \+", src)  # (streaming loads: A is read once)
    assert a_loads and set(a_loads) == {"uint4"}
    assert "A_ptr[" not in src  # no element-wise reads of A
    assert "ulonglong" not in src and "*(float4*)(acc_ptr" in src


def test_fp16_softmax_moves_16_bytes_per_global_access_beside_fp32_fragments(tmp_path):
    """``T.copy`` of fp16 X into the fp32 fragment loads 8 halves per access and converts them in two float4 halves;
    the fp16 Y written from the fp32 rows is stored 8 halves at a time."""
    art = _build(softmax.softmax, (4096, 4096), {"dtype": "float16"}, tmp_path, compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert re.search(r"\*\(uint4\*\)\(X_vec_ptr\w* \+ 0\) = \*\(uint4\*\)\(X_ptr \+", src)
    assert re.search(r"\*\(uint4\*\)\(Y_ptr \+ [^;]*\) = \*\(uint4\*\)\(Y_vec_ptr", src)
    assert "ulonglong" not in src and "*(half4*)(X_ptr" not in src and "*(half4*)(Y_ptr" not in src


# -- errors ----------------------------------------------------------------------------------------------------

def _kernel_with_threads(threads):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    return main


def test_thread_count_must_be_a_multiple_of_32(tmp_path):
    func = _kernel_with_threads(48)
    with pytest.raises(TileLangCompileError, match="multiple of 32"):
        build_artifact(func, tmp_path, {"kind": "cuda", "arch": "sm_90"}, _param_specs(func), [1],
                       compile_cubin=False)


def test_gemm_accumulator_used_at_other_indices_is_a_located_error(tmp_path):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A[bx * 64, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.clear(acc)
            T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(64, 64):
                C[i, j] = acc[j, i]

    with pytest.raises(TileLangCompileError, match="fragment acc is the accumulator of a T.gemm") as ei:
        build_artifact(main, tmp_path, {"kind": "cuda", "arch": "sm_90"}, _param_specs(main), [2],
                       compile_cubin=False)
    assert ei.value.location is not None and ei.value.location.file.endswith("test_cuda_codegen.py")


def test_in_place_permutation_of_a_fragment_runs_as_sequential_code_in_every_thread(tmp_path):
    """A fragment read at other indices becomes replicated: every thread keeps all of it and runs the loop as
    written, which keeps the CPU's sequential semantics."""

    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((16, 16), "float32")
            T.copy(A[bx * 16, 0], a)
            for i, j in T.Parallel(16, 16):
                a[j, i] = a[i, j] + 1.0
            T.copy(a, B[bx * 16, 0])

    art = build_artifact(main, tmp_path, {"kind": "cuda", "arch": "sm_90"}, _param_specs(main), [1],
                         compile_cubin=False)
    assert "a_ptr[256]" in (tmp_path / art.sources["cuda"]).read_text()


def test_too_much_shared_memory_is_reported_with_the_tiles(tmp_path):
    with pytest.raises(TileLangCompileError, match="shared memory"):
        _build(gemm.matmul, (4096, 4096, 4096, 256, 256, 64), {"dtype": "float16", "num_stages": 4, "threads": 256},
               tmp_path, compile_cubin=False)


# -- targets ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,arch", [("cuda", "sm_90a"), ("CUDA", "sm_90a"), ("cuda -arch=sm_80", "sm_80"),
                                         ("cuda:sm_80", "sm_80"), ({"kind": "cuda"}, "sm_90a"),
                                         ({"kind": "cuda", "arch": "sm_80"}, "sm_80"), ("nvidia", "sm_90a"),
                                         ("cuda -arch=sm_90", "sm_90")])
def test_cuda_targets_resolve_with_their_architecture(target, arch):
    assert resolve_target(target) == "cuda"
    assert cuda_target(target) == {"kind": "cuda", "arch": arch}


@pytest.mark.parametrize("target", ["cuda -arch=sm_70", {"kind": "cuda", "arch": "sm_61"}, "cuda -arch=foo"])
def test_unsupported_cuda_architectures_are_rejected(target):
    with pytest.raises(ValueError, match="architecture"):
        resolve_target(target)


def test_auto_target_is_the_cpu_without_a_gpu(monkeypatch):
    import tilelang_core.target as tgt

    monkeypatch.setenv("TILELANG_CORE_NO_GPU", "1")
    tgt.gpu_visible.cache_clear()
    try:
        assert resolve_target("auto") == "cpu"
    finally:
        tgt.gpu_visible.cache_clear()


# -- jit, artifact, launcher -----------------------------------------------------------------------------------

@needs_nvcc
def test_jit_with_cuda_target_builds_a_self_describing_artifact():
    kernel = tilelang.jit(out_idx=[-1], target="cuda")(elementwise.add_tiled.factory)(1000, 1030)
    assert kernel.target == {"kind": "cuda", "arch": "sm_90a"}
    assert "__global__" in kernel.get_kernel_source("cuda")
    meta = json.loads((kernel.artifact.path / "meta.json").read_text())
    cuda = meta["extra"]["cuda"]
    assert cuda["grid"] == [2, 125, 1] and cuda["block"] == [128, 1, 1]
    assert meta["library"] == "kernel.cubin" and len(meta["library_sha256"]) == 64
    again = tilelang.jit(out_idx=[-1], target="cuda")(elementwise.add_tiled.factory)(1000, 1030)
    assert again.cache_status == "disk"


@needs_nvcc
def test_launcher_rejects_cpu_tensors_and_wrong_shapes_before_touching_the_gpu(tmp_path):
    from tilelang_core.runtime import load_artifact
    from tilelang_core.runtime.cuda_launcher import CudaKernelCallable, make_callable

    _build(elementwise.add_tiled, (64, 64), {"block_M": 8, "block_N": 64}, tmp_path)
    kern = make_callable(load_artifact(tmp_path))
    assert isinstance(kern, CudaKernelCallable)
    a = torch.randn(64, 64)
    with pytest.raises(ValueError, match="argument 'A': expected a tensor on cuda"):
        kern._launch(a, a, a)
    with pytest.raises(TypeError, match="argument 'A': expected dtype float32, got float16"):
        kern._launch(a.half(), a, a)
    with pytest.raises(ValueError, match=r"argument 'A': expected shape \[64, 64\], got \[64, 32\]"):
        kern._launch(a[:, :32].contiguous(), a, a)
    with pytest.raises(TypeError, match="expected 2 input tensor"):
        kern(a)


def test_cuda_tensors_must_be_16_byte_aligned_but_cpu_ones_only_element_aligned():
    """A view with a storage offset would make a CUDA kernel's 16-byte loads fault (a sticky error that ends the
    CUDA context): refused with the parameter's name — by the launcher and by exported modules alike (one check).
    CPU kernels assume element alignment only."""
    from tilelang_core.runtime.call import check_tensor
    from tilelang_core.runtime.exported import Param, alignment_for, check_alignment

    assert alignment_for("cuda", 2) == 16 and alignment_for("cuda", 4) == 16 and alignment_for("cpu", 4) == 4
    view = torch.randn(65)[1:]  # 4 bytes past torch's aligned allocation
    with pytest.raises(ValueError, match=r"argument 'B': expected a 16-byte aligned tensor, got a data pointer 4 "
                                         r"bytes past alignment \(a view with a storage offset\?\); call .clone"):
        check_alignment("B", view.data_ptr(), view.numel(), alignment_for("cuda", view.element_size()))
    check_alignment("B", view.data_ptr(), 0, 16)  # empty: nothing is read
    assert check_tensor(Param("B", [64], "float32"), view, "cpu") is view


class _RecordingDriver:
    """Stands in for ``cuda.bindings.driver`` (no GPU here): records the calls the launch helpers make."""

    class CUfunction_attribute:  # noqa: N801 - the driver's spelling
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = "static"
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max_dynamic"

    def __init__(self, static_smem: int = 0):
        self.static_smem, self.calls = static_smem, []

    def cuFuncGetAttribute(self, attr, fn):  # noqa: N802
        return (0, self.static_smem)

    def cuFuncSetAttribute(self, fn, attr, value):  # noqa: N802
        self.calls.append(("set", attr, value))
        return (0,)

    def cuStreamSynchronize(self, stream):  # noqa: N802
        self.calls.append(("sync", stream))
        return (0,)


def _unpack(res, what):
    return res[1] if len(res) == 2 else None


def test_shared_memory_opt_in_counts_the_templates_static_shared_memory():
    from tilelang_core.runtime.exported import raise_smem_limit

    drv = _RecordingDriver(static_smem=64)  # tl::splitk_global_reduce's flag
    raise_smem_limit(drv, "fn", 48 * 1024, _unpack)  # 48 KiB dynamic + 64 B static: past the default
    assert drv.calls == [("set", "max_dynamic", 48 * 1024)]
    drv = _RecordingDriver(static_smem=64)
    raise_smem_limit(drv, "fn", 32 * 1024, _unpack)
    assert drv.calls == []


def test_a_stateful_kernel_waits_for_the_previous_stream_only_when_the_stream_changes():
    from tilelang_core.runtime.exported import StreamOrder

    drv, order = _RecordingDriver(), StreamOrder()
    for stream in (11, 11, 22, 22, 11):
        order.before_launch(drv, 0, stream, _unpack)
    assert drv.calls == [("sync", 11), ("sync", 22)]
    order.before_launch(drv, 1, 33, _unpack)  # another device: its own history
    assert drv.calls == [("sync", 11), ("sync", 22)]


@tilelang.jit(out_idx=[-1])
def _normalize_rows_two_pass(N, threads=128):
    """Reads each row of X twice (the sum, then the division): X must keep normal caching."""

    @T.prim_func
    def main(X: T.Tensor((64, N), "float32"), Y: T.Tensor((64, N), "float32")):
        with T.Kernel(64, threads=threads) as bx:
            s = T.alloc_fragment((N,), "float32")
            r = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(N):
                s[i] = X[bx, i]
            T.reduce_sum(s, r, dim=0)
            for i in T.Parallel(N):
                Y[bx, i] = X[bx, i] / r[0]

    return main


def test_read_once_inputs_get_streaming_loads_and_reused_ones_do_not(tmp_path):
    # GEMV: each element of A is read by one thread once (evict-first), x by every block (normal caching)
    (tmp_path / "gemv").mkdir()
    art = _build(gemv.gemv, (8192, 8192, 2, 2048, 256), {"dtype": "float16"}, tmp_path / "gemv", compile_cubin=False)
    src = (tmp_path / "gemv" / art.sources["cuda"]).read_text()
    assert "__ldcs((const uint4*)(A_ptr + " in src
    assert "*(uint4*)(A_ptr + " not in src and "*(uint4*)(x_ptr + " in src and "__ldcs((const uint4*)(x_ptr" not in src
    # an elementwise kernel writes as much as it reads: its inputs keep normal caching
    (tmp_path / "add").mkdir()
    art = _build(elementwise.add_tiled, (1024, 1024), {}, tmp_path / "add", compile_cubin=False)
    assert "__ldcs" not in (tmp_path / "add" / art.sources["cuda"]).read_text()
    # a row read in two passes
    (tmp_path / "two").mkdir()
    art = _build(_normalize_rows_two_pass, (512,), {}, tmp_path / "two", compile_cubin=False)
    assert "__ldcs" not in (tmp_path / "two" / art.sources["cuda"]).read_text()
    # tensors handed to device templates by address (cp.async sources, W4A16 weights) are not rewritten
    (tmp_path / "dq").mkdir()
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"},
                 tmp_path / "dq", compile_cubin=False)
    assert "__ldcs(" not in (tmp_path / "dq" / art.sources["cuda"]).read_text()


def test_streaming_rewrite_touches_loads_only_not_addresses_or_other_tensors():
    from tilelang_core.backend.cuda.streaming_loads import rewrite_source

    src = ("  float4 v = *(float4*)(A_ptr + (i * 4));\n  y = A_ptr[(i + 1)] + B_ptr[i];\n"
           "  tl::cp(&(A_ptr[3]), &A_ptr[4]);\n  *(uint4*)(x_ptr + 0) = *(uint4*)(A_ptr + ((a) + b));\n"
           "  q = *(longlong4*)(A_ptr + 1);\n")
    assert rewrite_source(src, {"A": "float32"}) == (
        "  float4 v = __ldcs((const float4*)(A_ptr + (i * 4)));\n  y = __ldcs(&A_ptr[(i + 1)]) + B_ptr[i];\n"
        "  tl::cp(&(A_ptr[3]), &A_ptr[4]);\n  *(uint4*)(x_ptr + 0) = __ldcs((const uint4*)(A_ptr + ((a) + b)));\n"
        "  q = *(longlong4*)(A_ptr + 1);\n")  # no __ldcs overload for longlong4: left alone


@needs_nvcc
def test_streaming_loads_compile_and_can_be_switched_off(tmp_path):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    art = _build(gemv.gemv, (1000, 1030), {"dtype": "float16"}, tmp_path / "on")  # ragged: scalar and vector forms
    src = (tmp_path / "on" / art.sources["cuda"]).read_text()
    assert "__ldcs(&A_ptr[" in src and "__ldcs((const " in src
    art = _build(gemv.gemv, (1000, 1030), {"dtype": "float16"}, tmp_path / "off", compile_cubin=False,
                 pass_configs={"tl.cuda.streaming_loads": False})
    assert "__ldcs" not in (tmp_path / "off" / art.sources["cuda"]).read_text()


def test_runtime_and_launcher_import_neither_tvm_nor_tvm_ffi():
    code = ("import sys, tilelang_core.runtime, tilelang_core.runtime.cuda_launcher; "
            "bad = [m for m in sys.modules if m == 'tvm' or m.startswith(('tvm.', 'tvm_ffi'))]; "
            "assert not bad, bad")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(ROOT))


# -- issue 7: flash attention and W4A16 code paths ---------------------------------------------------------------

def _ptxas_spills(art) -> int:
    info = art.extra["cuda"]["ptxas_info"]
    return sum(int(x.split()[0]) for x in info.split(",") if "spill stores" in x)


@needs_nvcc
def test_flash_attention_keeps_row_statistics_per_thread_and_feeds_p_from_registers(tmp_path):
    """Online-softmax row statistics get the mma_row layout (quad shuffles, no block all-reduce), P @ V takes P
    straight from the accumulator registers, and the 128x64 fp16 kernel compiles without spills."""
    art = _build(flash_attention.flash_attention, (2, 4, 1000, 128, True),
                 {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 256, "dtype": "float16"}, tmp_path)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "tl::row_allreduce<tl::MaxOp, 1, 2>" in src and "tl::row_allreduce<tl::SumOp, 1, 2>" in src
    assert "block_allreduce" not in src
    assert "tl::gemm_rs<128, 128, 64, 8, 0," in src and "acc_s_cast_smem" not in src
    assert "scores_max_ptr[2]" in src  # two rows per thread, not all 128
    assert "tl::fast_exp2" in src
    assert _ptxas_spills(art) == 0


@needs_nvcc
def test_w4a16_unpack_nest_is_fused_into_the_tensor_core_gemm(tmp_path):
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path)
    src = (tmp_path / art.sources["cuda"]).read_text()
    # decode tile (one warp row): the weights go global -> registers, double-buffered across k iterations, the
    # first tile's loads issued before the loop (ahead of the A pipeline's prologue)
    assert "tl::gemm_dq4g<16, 64, 256, 4, 9, 25608, 54400, 2, 2, 512, 128, 1>" in src
    assert "dq_wbuf_ptr" in src and "B_packed" not in src
    pre = src.index("tl::gemm_dq4g_prefetch<64, 256, 4, 512, 128, 1>(")
    assert pre < src.index("tl::cp_async_16(") < src.index("for (int k")
    assert "(&(dq_wbuf_ptr[0])), k, (3 - k))" in src  # iteration k of the loop, 3 - k iterations follow
    assert art.extra["cuda"]["dyn_smem"] == 3 * 16 * 256 * 2  # only A is staged; no packed or fp16 B tile
    assert "__cluster_dims__" not in src  # 16 blocks, but only 4 k-tiles: not worth splitting
    assert _ptxas_spills(art) == 0


@needs_nvcc
def test_w4a16_weights_can_be_staged_through_shared_memory(tmp_path):
    """pass_configs tl.cuda.dq4_direct=False: the program's own schedule (packed tile copied to shared memory)."""
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path,
                 pass_configs={"tl.cuda.dq4_direct": False})
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "tl::gemm_dq4<16, 64, 256, 1, 4," in src and "gemm_dq4g" not in src
    assert art.extra["cuda"]["dyn_smem"] == 3 * (16 * 256 * 2 + 64 * 128)  # A and packed B stages; no fp16 B tile
    assert _ptxas_spills(art) == 0


@needs_nvcc
def test_per_channel_scales_are_loaded_once_before_the_k_loop(tmp_path):
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 2048, -1),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path,
                 compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    loop = src.index("for (int k")
    assert "dq_scale_ptr[0] = " in src[:loop] and "dq_scale_ptr[0] = " not in src[loop:]


@needs_nvcc
def test_per_channel_scales_multiply_the_accumulators_not_every_weight(tmp_path):
    """Per-channel scales on the direct path: the mma takes q - z and each call scales its fp32 partial sums (NC = 0),
    two scales per 8-column atom (the thread's two accumulator columns); the program's per-weight rounding is one
    switch away."""
    cfg = {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 2048, -1), cfg, tmp_path)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "tl::gemm_dq4g<16, 64, 256, 4, 9, 25608, 54400, 0," in src
    assert "half dq_scale_ptr[4];" in src  # NT = 2 atoms x 2 columns
    assert "((((int)threadIdx.x) & 3) * 2)) + 1)]" in src  # column 2 q + 1 of the atom
    assert _ptxas_spills(art) == 0
    (tmp_path / "rounded").mkdir()
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 2048, -1), cfg, tmp_path / "rounded", compile_cubin=False,
                 pass_configs={"tl.cuda.dq4_late_scale": False})
    src = (tmp_path / "rounded" / art.sources["cuda"]).read_text()
    assert "tl::gemm_dq4g<16, 64, 256, 4, 9, 25608, 54400, 1," in src and "half dq_scale_ptr[2];" in src


def test_group_scales_are_loaded_one_k_iteration_ahead(tmp_path):
    """Group scales change with k: iteration k loads k + 1's before its gemm call and moves them in after it."""
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 8192, 128),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path,
                 compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    loop = src.index("for (int k")
    call = src.index("tl::gemm_dq4g<", loop)
    assert "dq_scale_ptr[0] = Scale_ptr[" in src[:loop]  # the split share's first k, before the loop
    assert "int dq_ks0 = (((int)blockIdx.z) * " in src[:loop]  # rebound to the share when K is split
    assert "dq_scale_next_ptr[0] = " in src[loop:call]
    assert "dq_scale_ptr[0] = dq_scale_next_ptr[0];" in src[call:]


def test_wide_m_tiles_keep_the_weights_in_shared_memory(tmp_path):
    """With two warp rows both would load the same weights: the direct path is for one warp row only."""
    art = _build(dequant_gemm.dequant_gemm, (128, 1024, 1024, -1),
                 {"block_M": 64, "block_N": 64, "block_K": 128, "num_stages": 3, "dtype": "float16"}, tmp_path,
                 compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "tl::gemm_dq4<" in src and "gemm_dq4g" not in src


@needs_nvcc
def test_w4a16_fusion_can_be_switched_off(tmp_path):
    # the recogniser off: the general producer fusion (tl.cuda.dequant_fragments, on by default) takes the example
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128), {"dtype": "float16"}, tmp_path,
                 pass_configs={"tl.cuda.fuse_dequant": False})
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "gemm_dq4" not in src and "tl::gemm_rb_step<" in src
    (tmp_path / "shared").mkdir()
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128), {"dtype": "float16"}, tmp_path / "shared",
                 pass_configs={"tl.cuda.fuse_dequant": False, "tl.cuda.dequant_fragments": False})
    src = (tmp_path / "shared" / art.sources["cuda"]).read_text()
    assert "gemm_dq4" not in src and "gemm_rb_step" not in src and "tl::gemm_ss<" in src


def _build_split_k_decode(tmp_path, compile_cubin: bool = True, pass_configs=None):
    """W4A16 at 16 x 1024 x 8192, 128-wide tiles: 8 blocks and a long K loop, so the pass splits K."""
    return _build(dequant_gemm.dequant_gemm, (16, 1024, 8192, -1),
                  {"block_M": 16, "block_N": 128, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path,
                  compile_cubin=compile_cubin, pass_configs=pass_configs)


@needs_nvcc
def test_small_grid_long_k_dequant_gemm_splits_k_through_a_global_workspace(tmp_path):
    art = _build_split_k_decode(tmp_path)
    src = (tmp_path / art.sources["cuda"]).read_text()
    # direct weights: split until two blocks per SM (8 x 8 = 64 blocks < 264), each share keeps 4 >= 3 k-tiles
    assert art.extra["cuda"]["grid"] == [8, 1, 8]
    # no cluster (a cluster launch left SMs idle): the partials go through the module's workspace and the last
    # block of each tile (8 of them, 16 registers x 128 threads each) runs the epilogue
    assert "__cluster_dims__" not in src and "cluster_splitk_reduce" not in src
    assert "if (tl::splitk_global_reduce<16, 8, 128, 8>((&(C_local_ptr[0]))))" in src
    assert _ptxas_spills(art) == 0
    assert art.extra["cuda"]["serial_streams"] is True  # the launcher orders launches across streams
    # the register double buffer and the hoisted first loads follow the split loop's bounds
    assert "(k - (((int)blockIdx.z) * 4)), (((((int)blockIdx.z) * 4) + 3) - k))" in src
    pre = src[src.index("tl::gemm_dq4g_prefetch<"):]
    assert "(((int)blockIdx.z) * 512)" in pre[:pre.index(";")] and pre[:pre.index(";")].endswith(", 4)")


@needs_nvcc
def test_split_k_can_reduce_through_a_cluster_instead(tmp_path):
    art = _build_split_k_decode(tmp_path, pass_configs={"tl.cuda.split_k_reduce": "cluster"})
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert art.extra["cuda"]["grid"] == [8, 1, 8]
    assert "__cluster_dims__(1, 1, 8)" in src and "tl::cluster_splitk_reduce<" in src
    assert "if (((int)blockIdx.z) == 0)" in src  # rank 0 writes C
    assert art.extra["cuda"]["serial_streams"] is False


@needs_nvcc
def test_split_k_falls_back_to_a_cluster_when_the_workspace_would_be_too_big(tmp_path, monkeypatch):
    from tilelang_core.transform.cuda import fuse_dequant_gemm_cuda

    monkeypatch.setattr(fuse_dequant_gemm_cuda, "WORKSPACE_LIMIT", 1024)  # bytes: any split-K needs more
    art = _build_split_k_decode(tmp_path, compile_cubin=False)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert "__cluster_dims__(1, 1, 8)" in src and "splitk_global_reduce" not in src


def test_kernels_without_split_k_keep_no_state_between_launches(tmp_path):
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, 128),
                 {"block_M": 16, "block_N": 64, "block_K": 256, "num_stages": 3, "dtype": "float16"}, tmp_path,
                 compile_cubin=False)
    assert art.extra["cuda"]["serial_streams"] is False


def test_split_factor_fills_the_sms_for_direct_weights():
    from tilelang_core.transform.cuda.fuse_dequant_gemm_cuda import _split_factor

    assert _split_factor(128, 32, 4, "sm_90", direct=True) == 4  # 512 blocks: >= 2 per SM
    assert _split_factor(128, 32, 4, "sm_90", direct=False) == 1  # the shared-memory schedule: grid not < SMs / 2
    assert _split_factor(8, 32, 3, "sm_90", direct=True) == 8  # capped at a cluster of 8
    assert _split_factor(128, 4, 3, "sm_90", direct=True) == 1  # a share would be shorter than the pipeline
    assert _split_factor(8, 32, 3, "sm_80", direct=True) == 1  # clusters need sm_90
    # with the kernel's registers known: never a second wave. 64 tiles at ~150 registers x 128 threads: 3 blocks
    # per SM (396 slots), so 4 (256 blocks), not 8 (512); at ~120 registers 4 blocks per SM fit, so 8
    assert _split_factor(64, 32, 4, "sm_90", direct=True) == 8
    assert _split_factor(64, 32, 4, "sm_90", direct=True, regs=150, threads=128) == 4
    assert _split_factor(64, 32, 4, "sm_90", direct=True, regs=120, threads=128) == 8


def test_register_estimate_tracks_ptxas_for_the_decode_tiles():
    """The split-K choice uses an estimate made before ptxas runs; ptxas's counts for these tiles (H200 build):
    16x64x256 113, 16x128x256 159, 16x128x512 232, 16x128x128 127 registers (per-channel, 128 threads)."""
    from tilelang_core.transform.cuda.fuse_dequant_gemm_cuda import estimated_registers

    cases = [((16, 2, 256, 1, 2, True, 4), 113), ((16, 4, 256, 1, 1, True, 8), 159),
             ((16, 4, 512, 1, 1, True, 8), 232), ((16, 4, 128, 1, 1, True, 8), 127)]
    for args, ptxas in cases:
        assert abs(estimated_registers(*args) - ptxas) <= 0.1 * ptxas, (args, estimated_registers(*args), ptxas)


@needs_nvcc
def test_split_k_can_be_switched_off(tmp_path):
    art = _build_split_k_decode(tmp_path, pass_configs={"tl.cuda.split_k": 1})
    assert art.extra["cuda"]["grid"] == [8, 1, 1]
    assert "__cluster_dims__" not in (tmp_path / art.sources["cuda"]).read_text()


@needs_nvcc
def test_scalar_temporaries_inside_t_parallel_do_not_serialise_the_nest(tmp_path):
    """``q = ...`` inside a T.Parallel body is private to one iteration: the nest is still split over threads."""
    art = _build(dequant_gemm.dequant_gemm, (16, 1024, 1024, -1),
                 {"block_M": 16, "block_N": 64, "block_K": 128, "num_stages": 2, "dtype": "float16"}, tmp_path,
                 pass_configs={"tl.cuda.fuse_dequant": False})
    src = (tmp_path / art.sources["cuda"]).read_text()
    # 64 x 128 unpacked weights over 128 threads: 64 per thread, not the whole 8192-element tile
    assert src.count("q_ptr") < 400


@tilelang.jit(out_idx=[-1])
def _two_phase_staging(N=4096, block=1024, threads=128):
    """Stages X through one shared tile, then Y through another: the two tiles are never alive together."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
        with T.Kernel(N // block, threads=threads) as bx:
            xs = T.alloc_shared((block,), "float32")
            ys = T.alloc_shared((block,), "float32")
            acc = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], xs)
            T.copy(xs, acc)
            T.copy(Y[bx * block], ys)
            for i in T.Parallel(block):
                acc[i] = acc[i] + ys[block - 1 - i]
            T.copy(acc, Z[bx * block])

    return main


@needs_nvcc
def test_shared_tiles_with_disjoint_lifetimes_share_bytes_behind_a_barrier(tmp_path):
    art = _build(_two_phase_staging, (), {}, tmp_path)
    src = (tmp_path / art.sources["cuda"]).read_text()
    assert art.extra["cuda"]["dyn_smem"] == 1024 * 4  # one tile's bytes, not two
    # xs's last read (into acc) and ys's first write (the copy from Y) are separated by a barrier: without it a fast
    # thread could overwrite bytes a slow one still reads
    body = src[src.rindex("__global__"):]
    body = body[body.index("{"):]
    last_xs_read = body.index("= *(float4*)(((float*)smem_ptr)", body.index("X_ptr"))
    first_ys_write = body.index("Y_ptr")
    assert "__syncthreads()" in body[last_xs_read:first_ys_write]


@needs_nvcc
def test_flash_attention_output_tile_reuses_the_input_tiles(tmp_path):
    """128x64 tiles, 2 stages, 128 threads: Q 32 KiB + K, V 2 x 2 x 16 KiB; the 32 KiB output staging tile lives
    after the loop and takes Q's bytes: 96 KiB, so two blocks fit on an SM (the H200 has 227 KiB)."""
    art = _build(flash_attention.flash_attention, (1, 2, 512, 128, False),
                 {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128, "dtype": "float16"}, tmp_path)
    assert art.extra["cuda"]["dyn_smem"] == 96 * 1024

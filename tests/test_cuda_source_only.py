"""TVM never compiles our CUDA source, also where its CUDA runtime is loaded (a machine with a GPU driver).

On a GPU host TVM's libtvm_runtime_cuda registers ``ffi.Module.create.cuda``; its code generator then hands the
CUDA C to that factory, which compiles it through ``tvm_callback_cuda_compile`` (NVRTC, without our include path),
and every kernel using our ``tl::`` templates failed there. These tests recreate that condition on a machine with
no GPU, in a child process (the global function table is process-wide): a stand-in for the runtime's factory that
calls the compile callback as TVM's does, and a callback that fails as TVM's NVRTC one did. Our kernels must compile
(nvcc or NVRTC, our flags), the callback must never see our source, and TVM's callback must be back afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tilelang_core.backend.cuda import find_nvcc

ROOT = Path(__file__).resolve().parents[1]

GPU_HOST_CONDITION = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r})
    import tvm, tvm_ffi

    seen = []

    def tvm_nvrtc_stand_in(code, *target):
        seen.append(code)
        raise RuntimeError("NVRTC compilation failed: error: name followed by '::' must be a class or namespace name")

    def cuda_module_factory(code, fmt, fmap, sources):
        # what TVM's CUDA runtime does with fmt == "cuda": compile the source through the callback, which must
        # return the image as bytes (a str fails there: "Cannot convert from type `ffi.String` to `bytes`")
        image = tvm_ffi.get_global_func("tvm_callback_cuda_compile")(code, None)
        if not isinstance(image, (bytes, bytearray)):
            raise TypeError(f"Cannot convert from type `{{type(image).__name__}}` to `bytes`")
        return tvm_ffi.get_global_func("runtime.SourceModuleCreate")("", "cu")

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", tvm_nvrtc_stand_in, override=True)
    tvm_ffi.register_global_func("ffi.Module.create.cuda", cuda_module_factory, override=True)
''')


def _run(body: str, cache: Path) -> subprocess.CompletedProcess:
    """``body`` in a child process under the GPU host's condition, with an empty kernel cache of its own."""
    code = GPU_HOST_CONDITION.format(root=str(ROOT)) + textwrap.dedent(body)
    env = {**os.environ, "TILELANG_CORE_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA toolkit")
def test_template_kernels_compile_where_tvm_would_compile_cuda_itself(tmp_path):
    proc = _run('''
        import tilelang_core as tilelang
        from examples import gemm, flash_attention
        k = tilelang.jit(out_idx=[-1], target="cuda")(gemm.matmul_relu.factory)(256, 256, 256, 128, 128, 32,
                                                                                 dtype="float16")
        src = k.get_kernel_source()
        assert "tl::" in src and "__global__" in src, src[:400]
        assert k.artifact.extra["cuda"]["nvcc_command"], "our compiler step did not run"
        fa = tilelang.jit(out_idx=[3], target="cuda")(flash_attention.flash_attention.factory)(1, 2, 128, 64, True,
                                                                                              dtype="float16")
        assert "tl::" in fa.get_kernel_source()
        assert not seen, "TVM's compile callback was handed our source"
        try:  # TVM's own callback (here: the stand-in) is registered again after our compiles
            tvm_ffi.get_global_func("tvm_callback_cuda_compile")("x", None)
        except RuntimeError as e:
            assert "NVRTC compilation failed" in str(e)
        else:
            raise AssertionError("the compile callback was not restored")
        print("OK")
    ''', tmp_path)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


def test_the_stand_in_reproduces_the_gpu_host_failure_without_the_override(tmp_path):
    """Control: with our override disabled, the same compile fails as it did on the H200 (so the test above can
    fail)."""
    proc = _run('''
        import contextlib
        import tilelang_core as tilelang
        import tilelang_core.backend.cuda.codegen as codegen
        from tilelang_core.backend.cuda.source_only import CapturedSource
        from tilelang_core.errors import TileLangCompileError
        from examples import gemm

        @contextlib.contextmanager
        def no_override():
            yield CapturedSource()

        codegen.source_only = no_override
        try:
            tilelang.jit(out_idx=[-1], target="cuda")(gemm.matmul_relu.factory)(256, 256, 256, 128, 128, 32,
                                                                              dtype="float16")
        except TileLangCompileError as e:
            assert "NVRTC compilation failed" in str(e), str(e)
            assert seen and "tl::" in str(seen[0])
            print("FAILED AS ON THE H200")
    ''', tmp_path)
    assert proc.returncode == 0 and "FAILED AS ON THE H200" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


def test_override_is_scoped_and_restores_the_previous_callback():
    import tvm  # noqa: F401 - registers TVM's own callback
    import tvm_ffi

    from tilelang_core.backend.cuda.source_only import CALLBACK, PLACEHOLDER, source_only

    before = tvm_ffi.get_global_func(CALLBACK, allow_missing=True)
    with source_only() as captured:
        assert bytes(tvm_ffi.get_global_func(CALLBACK)(b"__global__ void k() {}", None)) == PLACEHOLDER
    assert captured.sources == ["__global__ void k() {}"]
    after = tvm_ffi.get_global_func(CALLBACK, allow_missing=True)
    assert (before is None) == (after is None)
    if before is not None:  # the same function object is registered again
        assert before.same_as(after) if hasattr(before, "same_as") else True

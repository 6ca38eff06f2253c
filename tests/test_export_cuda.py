"""Exporting a CUDA kernel on a machine without a GPU: the module embeds the cubin and its launch description,
imports without TVM, validates inputs like the core, and refuses to run where there is no matching GPU."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
from test_export import matmul_relu

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/bin/nvcc").exists(),
                                reason="nvcc is not installed: CUDA kernels cannot be compiled here")


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cuda_kernel():
    factory = type(matmul_relu)(matmul_relu.factory, [-1], "cuda")  # same program, target="cuda"
    return factory(128, 96, 64)


def test_cuda_export_embeds_the_cubin_and_its_launch_description(cuda_kernel, tmp_path):
    path = cuda_kernel.export(tmp_path / "mm_cuda.py")
    text = path.read_text()
    assert "'kind': 'cuda'" in text and "'arch': 'sm_90a'" in text
    for piece in ("'grid':", "'block':", "'dyn_smem':", "'kernel':", "'args':", "LIBRARY_BASE64"):
        assert piece in text
    module = load_module(path)
    cubin = Path(cuda_kernel.artifact.library_path).read_bytes()
    assert module.META["library_sha256"] and module.kernel.device == "cuda"
    import base64
    import hashlib
    assert hashlib.sha256(base64.b64decode(module.LIBRARY_BASE64)).hexdigest() == hashlib.sha256(cubin).hexdigest()
    assert module.META["cuda"]["block"] == list(cuda_kernel.artifact.extra["cuda"]["block"])


def test_cuda_export_rejects_cpu_tensors_with_the_core_message(cuda_kernel, tmp_path):
    module = load_module(cuda_kernel.export(tmp_path / "mm_cuda_dev.py"))
    a, b = torch.randn(128, 64), torch.randn(64, 96)
    with pytest.raises(ValueError, match=r"argument 'A': expected a tensor on cuda, got one on cpu"):
        module.kernel(a, b)
    with pytest.raises(TypeError, match=r"argument 'A': expected dtype float32, got float16"):
        module.kernel(a.half(), b)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_export_refuses_to_launch_without_a_gpu(cuda_kernel, tmp_path):
    module = load_module(cuda_kernel.export(tmp_path / "mm_cuda_nogpu.py"))
    with pytest.raises(RuntimeError, match=r"compiled for CUDA sm_90a; this machine has no CUDA GPU"):
        module.check_gpu(module.META, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible: the exported CUDA kernel is not run")
def test_cuda_export_runs_and_matches_torch_on_a_gpu(cuda_kernel, tmp_path):
    module = load_module(cuda_kernel.export(tmp_path / "mm_cuda_gpu.py"))
    a, b = torch.randn(128, 64, device="cuda"), torch.randn(64, 96, device="cuda")
    torch.testing.assert_close(module.kernel(a, b), torch.relu(a @ b), rtol=1e-3, atol=1e-3)

"""The JIT: memory and disk caches (observed through cache_stats), invalidation, corruption recovery,
out_idx handling, kernel metadata and sources, and target selection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T
import tilelang_core.target as tilelang_target
from tilelang_core.runtime import ParamSpec, load_artifact


def scale_kernel(N, alpha, block_N=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N)) as bx:
            x = T.alloc_fragment((block_N,), "float32")
            T.copy(X[bx * block_N], x)
            for i in T.Parallel(block_N):
                x[i] = x[i] * alpha
            T.copy(x, Y[bx * block_N])

    return main


def combine_add(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = A[bx * 64 + i] + B[bx * 64 + i]

    return main


def combine_add_twin(N):
    """Same kernel text as combine_add under another factory name: must share its cache entry."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = A[bx * 64 + i] + B[bx * 64 + i]

    return main


def combine_sub(N):
    """Differs from combine_add only in the kernel body (one operator)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = A[bx * 64 + i] - B[bx * 64 + i]

    return main


def two_outputs(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Sum: T.Tensor((N,), "float32"), Prod: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Sum[bx * 64 + i] = X[bx * 64 + i] + 1.0
                Prod[bx * 64 + i] = X[bx * 64 + i] * 2.0

    return main


def output_in_the_middle(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Out[bx * 64 + i] = A[bx * 64 + i] * B[bx * 64 + i]

    return main


def not_a_kernel(N):
    return N * 2


# decorating at import time, as user code does; tests below also build fresh @jit objects from the plain factories
scale_jit = tilelang.jit(out_idx=[-1])(scale_kernel)


class StatsDelta:
    def __init__(self) -> None:
        self.before = tilelang.cache_stats()

    def __call__(self) -> dict[str, int]:
        now = tilelang.cache_stats()
        return {k: now[k] - self.before[k] for k in now}


def delta_of(**expected: int) -> dict[str, int]:
    base = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "corrupt_rebuilt": 0}
    base.update(expected)
    return base




# -- memory and disk cache ------------------------------------------------------------------------------------

@pytest.mark.parametrize("first_use", [
    "tilelang.cache_stats()",
    "tilelang.compile",
    "tilelang.JITKernel",
    "import tilelang_core.jit.kernel",
])
def test_jit_decorator_is_available_whatever_public_name_is_used_first(first_use):
    """`tilelang.jit` must be the decorator even when another lazily imported name is touched before it."""
    code = (
        "import inspect, tilelang_core as tilelang\n"
        f"{first_use}\n"
        "assert not inspect.ismodule(tilelang.jit), f'tilelang.jit is {tilelang.jit!r}'\n"
        "assert callable(tilelang.jit)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_cache_stats_reports_the_four_counters():
    stats = tilelang.cache_stats()
    assert set(stats) == {"memory_hits", "disk_hits", "compiles", "corrupt_rebuilt"}
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())


def test_first_call_compiles_and_repeated_call_is_a_memory_hit_returning_the_same_kernel(cache_dir):
    factory = tilelang.jit(out_idx=[-1])(scale_kernel)
    d = StatsDelta()
    k1 = factory(256, 2.0)
    assert d() == delta_of(compiles=1)
    assert k1.cache_status == "compiled"
    d = StatsDelta()
    k2 = factory(256, 2.0)
    k3 = factory(N=256, alpha=2.0, block_N=64)  # same binding spelled with keywords and the default
    assert k2 is k1 and k3 is k1
    assert d() == delta_of(memory_hits=2)
    x = torch.randn(256)
    torch.testing.assert_close(k2(x), 2.0 * x, rtol=0, atol=0)


def test_new_jit_object_for_the_same_factory_loads_from_disk_without_compiling(cache_dir):
    tilelang.jit(out_idx=[-1])(scale_kernel)(300, 1.5)
    d = StatsDelta()
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(300, 1.5)
    assert d() == delta_of(disk_hits=1)
    assert kernel.cache_status == "disk"
    assert "from disk cache" in repr(kernel)
    x = torch.randn(300)
    torch.testing.assert_close(kernel(x), 1.5 * x, rtol=0, atol=0)


def test_disk_cache_entry_holds_meta_json_and_library_under_kernels_key(cache_dir):
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(128, 3.0)
    (entry,) = entries(cache_dir)
    assert (entry / "kernel.so").is_file()
    meta = json.loads((entry / "meta.json").read_text())
    assert [p["name"] for p in meta["params"]] == ["X", "Y"]
    assert meta["out_idx"] == [1]
    assert kernel.artifact.path == entry


def test_cache_dir_is_read_from_the_environment_at_each_call(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(first))
    tilelang.jit(out_idx=[-1])(scale_kernel)(96, 0.5)
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(second))
    d = StatsDelta()
    tilelang.jit(out_idx=[-1])(scale_kernel)(96, 0.5)
    assert d() == delta_of(compiles=1)  # the new directory is empty: no disk hit
    assert len(entries(first)) == 1 and len(entries(second)) == 1


def test_changing_a_factory_argument_compiles_a_new_kernel(cache_dir):
    factory = tilelang.jit(out_idx=[-1])(scale_kernel)
    factory(256, 2.0)
    d = StatsDelta()
    k_alpha = factory(256, 3.0)
    k_block = factory(256, 2.0, block_N=32)
    k_size = factory(200, 2.0)
    assert d() == delta_of(compiles=3)
    assert len(entries(cache_dir)) == 4
    x = torch.randn(256)
    torch.testing.assert_close(k_alpha(x), 3.0 * x, rtol=0, atol=0)
    torch.testing.assert_close(k_block(x), 2.0 * x, rtol=0, atol=0)
    x2 = torch.randn(200)
    torch.testing.assert_close(k_size(x2), 2.0 * x2, rtol=0, atol=0)


def test_changing_the_kernel_source_invalidates_the_cache_but_identical_source_shares_it(cache_dir):
    a, b = torch.randn(256), torch.randn(256)
    k_add = tilelang.jit(out_idx=[-1])(combine_add)(256)
    d = StatsDelta()
    k_sub = tilelang.jit(out_idx=[-1])(combine_sub)(256)
    assert d() == delta_of(compiles=1)
    torch.testing.assert_close(k_add(a, b), a + b, rtol=0, atol=0)
    torch.testing.assert_close(k_sub(a, b), a - b, rtol=0, atol=0)
    d = StatsDelta()
    k_twin = tilelang.jit(out_idx=[-1])(combine_add_twin)(256)
    assert d() == delta_of(disk_hits=1)
    torch.testing.assert_close(k_twin(a, b), a + b, rtol=0, atol=0)


def test_changing_out_idx_compiles_a_new_kernel(cache_dir):
    tilelang.jit(out_idx=[-1])(two_outputs)(128)
    d = StatsDelta()
    kernel = tilelang.jit(out_idx=[1, 2])(two_outputs)(128)
    assert d() == delta_of(compiles=1)
    x = torch.randn(128)
    s, p = kernel(x)
    torch.testing.assert_close(s, x + 1, rtol=0, atol=0)
    torch.testing.assert_close(p, x * 2, rtol=0, atol=0)


def test_equivalent_out_idx_spellings_share_one_disk_entry(cache_dir):
    tilelang.jit(out_idx=[-1])(scale_kernel)(64, 2.0)
    d = StatsDelta()
    tilelang.jit(out_idx=-1)(scale_kernel)(64, 2.0)
    tilelang.jit(out_idx=1)(scale_kernel)(64, 2.0)
    tilelang.jit(out_idx=[1])(scale_kernel)(64, 2.0)
    assert d() == delta_of(disk_hits=3)


@pytest.mark.parametrize("target", ["cpu", "llvm", "auto", {"kind": "llvm"}])
def test_cpu_target_spellings_all_compile_for_the_host_and_share_the_cache(cache_dir, target):
    tilelang.jit(out_idx=[-1])(scale_kernel)(64, 4.0)
    d = StatsDelta()
    kernel = tilelang.jit(out_idx=[-1], target=target)(scale_kernel)(64, 4.0)
    assert d() == delta_of(disk_hits=1)
    assert kernel.target["kind"] == "llvm"
    x = torch.randn(64)
    torch.testing.assert_close(kernel(x), 4.0 * x, rtol=0, atol=0)


def _replace_file(path: Path, data: bytes) -> None:
    """Swap in new contents as a new file. This process has the old library mapped; rewriting that inode in place
    would pull the code out from under the live mapping (SIGBUS), which is not what a corrupt cache means."""
    tmp = path.with_name(path.name + ".corrupt")
    tmp.write_bytes(data)
    tmp.replace(path)


def _truncate_library(entry: Path) -> None:
    lib = entry / "kernel.so"
    _replace_file(lib, lib.read_bytes()[:100])


def _flip_library_byte(entry: Path) -> None:
    lib = entry / "kernel.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    _replace_file(lib, bytes(data))


def _delete_library(entry: Path) -> None:
    (entry / "kernel.so").unlink()


def _garbage_meta(entry: Path) -> None:
    (entry / "meta.json").write_text("{ this is not json")


def _meta_with_missing_field(entry: Path) -> None:
    meta = json.loads((entry / "meta.json").read_text())
    del meta["params"]
    (entry / "meta.json").write_text(json.dumps(meta))


def _delete_meta(entry: Path) -> None:
    (entry / "meta.json").unlink()


@pytest.mark.parametrize("corrupt", [_truncate_library, _flip_library_byte, _delete_library, _garbage_meta,
                                     _meta_with_missing_field, _delete_meta])
def test_corrupt_disk_entry_is_detected_removed_and_rebuilt(cache_dir, corrupt):
    tilelang.jit(out_idx=[-1])(scale_kernel)(200, -1.5)
    (entry,) = entries(cache_dir)
    corrupt(entry)
    d = StatsDelta()
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(200, -1.5)
    assert d() == delta_of(corrupt_rebuilt=1, compiles=1)
    assert kernel.cache_status == "compiled"
    x = torch.randn(200)
    torch.testing.assert_close(kernel(x), -1.5 * x, rtol=0, atol=0)
    # the rebuilt entry is sound again
    d = StatsDelta()
    again = tilelang.jit(out_idx=[-1])(scale_kernel)(200, -1.5)
    assert d() == delta_of(disk_hits=1)
    torch.testing.assert_close(again(x), -1.5 * x, rtol=0, atol=0)


def build_scale_kernel_160():
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(160, 2.5)
    assert kernel.cache_status == "compiled", kernel.cache_status


def load_truncated_scale_kernel_160():
    d = StatsDelta()
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(160, 2.5)
    assert d() == delta_of(corrupt_rebuilt=1, compiles=1), d()
    x = torch.randn(160)
    torch.testing.assert_close(kernel(x), 2.5 * x, rtol=0, atol=0)


def test_entry_truncated_on_disk_between_sessions_is_rebuilt_by_the_next_session(cache_dir, run_isolated):
    """The realistic case: one session leaves the entry, the library is truncated on disk, a later session loads."""
    run_isolated(build_scale_kernel_160)
    (entry,) = entries(cache_dir)
    lib = entry / "kernel.so"
    with open(lib, "r+b") as f:  # in place: no live process has it mapped
        f.truncate(lib.stat().st_size // 3)
    run_isolated(load_truncated_scale_kernel_160)
    (rebuilt,) = entries(cache_dir)
    assert rebuilt.name == entry.name
    load_artifact(rebuilt)  # verifies the library against its recorded hash; raises if still corrupt


def test_disabling_the_disk_cache_compiles_every_time_and_writes_no_entries(cache_dir, monkeypatch):
    monkeypatch.setenv("TILELANG_CORE_DISABLE_CACHE", "1")
    d = StatsDelta()
    tilelang.jit(out_idx=[-1])(scale_kernel)(64, 5.0)
    kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(64, 5.0)
    assert d() == delta_of(compiles=2)
    assert entries(cache_dir) == []
    x = torch.randn(64)
    torch.testing.assert_close(kernel(x), 5.0 * x, rtol=0, atol=0)


def test_get_program_returns_the_prim_func_without_compiling(cache_dir):
    d = StatsDelta()
    prog = scale_jit.get_program(256, 2.0)
    assert d() == delta_of()
    assert type(prog).__name__ == "PrimFunc"
    text = prog.script()
    assert "tl.copy" in text and "T.Buffer((256,)" in text
    assert entries(cache_dir) == []


def test_compile_builds_a_callable_kernel_from_a_prim_func(cache_dir):
    prog = tilelang.jit(scale_kernel).get_program(130, 0.25)
    kernel = tilelang.compile(prog, out_idx=[-1], target="cpu")
    assert isinstance(kernel, tilelang.JITKernel)
    x = torch.randn(130)
    torch.testing.assert_close(kernel(x), 0.25 * x, rtol=0, atol=0)
    d = StatsDelta()
    tilelang.compile(prog, out_idx=[-1], target="cpu")
    assert d() == delta_of(disk_hits=1)


def test_compile_rejects_something_that_is_not_a_prim_func():
    with pytest.raises(TypeError, match="expected a @T.prim_func, got function"):
        tilelang.compile(scale_kernel, out_idx=[-1])


def test_factory_that_returns_no_prim_func_raises_type_error():
    with pytest.raises(TypeError, match="not_a_kernel: a @jit factory must return a @T.prim_func, got int"):
        tilelang.jit(not_a_kernel)(3)


def test_calling_a_factory_with_wrong_arguments_names_the_factory():
    factory = tilelang.jit(out_idx=[-1])(scale_kernel)
    with pytest.raises(TypeError, match="scale_kernel: "):
        factory(256)
    with pytest.raises(TypeError, match="scale_kernel: "):
        factory(256, 2.0, bogus=1)


# -- out_idx -------------------------------------------------------------------------------------------------

def test_out_idx_none_writes_into_caller_tensors_and_returns_none(cache_dir):
    kernel = tilelang.jit(combine_add)(256)
    assert kernel.out_idx == [] and kernel.in_idx == [0, 1, 2]
    a, b, c = torch.randn(256), torch.randn(256), torch.randn(256)
    assert kernel(a, b, c) is None
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"expected 3 input tensor\(s\) \(A, B, C\), got 2"):
        kernel(a, b)


@pytest.mark.parametrize("out_idx", [2, -1, [2], [-1]])
def test_single_out_idx_spellings_allocate_and_return_the_output(cache_dir, out_idx):
    kernel = tilelang.jit(out_idx=out_idx)(combine_add)(256)
    assert kernel.out_idx == [2] and kernel.in_idx == [0, 1]
    a, b = torch.randn(256), torch.randn(256)
    c = kernel(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (256,) and c.dtype == torch.float32
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_kernel_with_out_idx_also_accepts_a_preallocated_output(cache_dir):
    kernel = tilelang.jit(out_idx=[-1])(combine_add)(256)
    a, b, c = torch.randn(256), torch.randn(256), torch.randn(256)
    out = kernel(a, b, c)
    assert out is c
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_negative_out_idx_list_returns_several_outputs_in_parameter_order(cache_dir):
    kernel = tilelang.jit(out_idx=[-1, -2])(two_outputs)(200)
    assert kernel.out_idx == [1, 2] and kernel.in_idx == [0]
    x = torch.randn(200)
    s, p = kernel(x)
    torch.testing.assert_close(s, x + 1, rtol=0, atol=0)
    torch.testing.assert_close(p, x * 2, rtol=0, atol=0)


def test_out_idx_in_the_middle_maps_inputs_around_it(cache_dir):
    kernel = tilelang.jit(out_idx=[1])(output_in_the_middle)(128)
    assert kernel.in_idx == [0, 2]
    a, b = torch.randn(128), torch.randn(128)
    torch.testing.assert_close(kernel(a, b), a * b, rtol=0, atol=0)


def test_fresh_output_tensors_are_allocated_on_every_call(cache_dir):
    kernel = tilelang.jit(out_idx=[-1])(combine_add)(64)
    a, b = torch.randn(64), torch.randn(64)
    c1 = kernel(a, b)
    c2 = kernel(b, b)
    assert c1.data_ptr() != c2.data_ptr()
    torch.testing.assert_close(c1, a + b, rtol=0, atol=0)
    torch.testing.assert_close(c2, b + b, rtol=0, atol=0)


@pytest.mark.parametrize("out_idx", [3, -4, [0, 5]])
def test_out_of_range_out_idx_raises_value_error(out_idx):
    with pytest.raises(ValueError, match=r"out_idx: index -?\d+ is out of range for a kernel with 3 parameters"):
        tilelang.jit(out_idx=out_idx)(combine_add)(64)


@pytest.mark.parametrize("out_idx", [[None], 1.5, [0, object()]])
def test_non_integer_out_idx_raises_type_error(out_idx):
    with pytest.raises(TypeError, match="out_idx: expected an int or a list of ints"):
        tilelang.jit(out_idx=out_idx)(combine_add)(64)


@pytest.mark.parametrize("out_idx", [["C"], "C"])
def test_out_idx_given_as_parameter_names_is_rejected_with_a_message_about_out_idx(out_idx):
    with pytest.raises((TypeError, ValueError), match="out_idx"):
        tilelang.jit(out_idx=out_idx)(combine_add)(64)


# -- kernel metadata and sources ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def matmul_like_kernel():
    return tilelang.jit(out_idx=[-1])(combine_add)(192)


def test_kernel_params_describe_every_tensor(matmul_like_kernel):
    params = matmul_like_kernel.params
    assert params == [ParamSpec("A", (192,), "float32"), ParamSpec("B", (192,), "float32"),
                      ParamSpec("C", (192,), "float32")]


def test_kernel_target_is_an_llvm_target_for_the_host(matmul_like_kernel):
    target = matmul_like_kernel.target
    assert target["kind"] == "llvm"
    assert target.get("mcpu")
    assert "mtriple" in target


def test_kernel_repr_names_factory_arguments_tensors_target_and_origin(matmul_like_kernel):
    text = repr(matmul_like_kernel)
    assert text.startswith("<JITKernel combine_add(N=192)")
    assert "target=llvm" in text
    assert "inputs=[A: float32[192], B: float32[192]]" in text
    assert "outputs=[C: float32[192]]" in text
    assert "compiled in" in text or "from disk cache" in text


def test_repr_of_a_kernel_without_outputs_says_none(cache_dir):
    text = repr(tilelang.jit(combine_add)(64))
    assert "outputs=[none]" in text
    assert "inputs=[A: float32[64], B: float32[64], C: float32[64]]" in text


def test_get_kernel_source_returns_llvm_ir_by_default(matmul_like_kernel):
    ir = matmul_like_kernel.get_kernel_source()
    assert ir == matmul_like_kernel.get_kernel_source("llvm")
    assert "define" in ir and "target triple" in ir


def test_get_kernel_source_returns_assembly_and_lowered_tir(matmul_like_kernel):
    asm = matmul_like_kernel.get_kernel_source("asm")
    assert ".text" in asm and "ret" in asm
    tir = matmul_like_kernel.get_kernel_source("tir")
    assert "def main" in tir
    assert "tl.copy" not in tir and "tl.gemm" not in tir  # tile ops are lowered
    assert set(matmul_like_kernel.source_kinds) >= {"llvm", "asm", "tir"}


def test_get_kernel_source_of_unknown_kind_raises_key_error(matmul_like_kernel):
    with pytest.raises(KeyError, match="ptx"):
        matmul_like_kernel.get_kernel_source("ptx")


def test_sources_are_available_after_loading_from_disk(cache_dir):
    tilelang.jit(out_idx=[-1])(combine_sub)(64)
    kernel = tilelang.jit(out_idx=[-1])(combine_sub)(64)
    assert kernel.cache_status == "disk"
    assert "define" in kernel.get_kernel_source("llvm")
    assert "def main" in kernel.get_kernel_source("tir")


# -- targets --------------------------------------------------------------------------------------------------

needs_no_cuda_backend = pytest.mark.skipif(
    getattr(tilelang_target, "CUDA_BACKEND_AVAILABLE", False),
    reason="this build has a CUDA backend; target='cuda' is then a valid target, not an error",
)


@needs_no_cuda_backend
@pytest.mark.parametrize("target", ["cuda", "CUDA", "cuda -arch=sm_90", "nvidia", {"kind": "cuda"}])
def test_cuda_target_raises_tilelang_error_saying_the_backend_is_unavailable(target):
    with pytest.raises(tilelang.TileLangError, match="CUDA backend is not available"):
        tilelang.jit(out_idx=[-1], target=target)(scale_kernel)


@needs_no_cuda_backend
def test_compile_with_cuda_target_raises_tilelang_error():
    prog = tilelang.jit(scale_kernel).get_program(64, 1.0)
    with pytest.raises(tilelang.TileLangError, match="CUDA backend is not available"):
        tilelang.compile(prog, out_idx=[-1], target="cuda")


@pytest.mark.parametrize("target", ["tpu", "rocm", "", {"kind": "metal"}, {}])
def test_unknown_target_raises_value_error(target):
    with pytest.raises(ValueError, match="target"):
        tilelang.jit(out_idx=[-1], target=target)(scale_kernel)


def test_non_string_target_raises_type_error():
    with pytest.raises(TypeError, match="target: expected a string or a TVM target dict, got int"):
        tilelang.jit(out_idx=[-1], target=42)(scale_kernel)


def test_error_classes_form_one_hierarchy():
    assert issubclass(tilelang.TileLangCompileError, tilelang.TileLangError)
    assert issubclass(tilelang.TileLangRuntimeError, tilelang.TileLangError)
    assert issubclass(tilelang.TileLangError, Exception)

"""Compiler options as data (issue 14, parts 1-3): ``pass_configs`` validated and threaded to the passes, TileLang's
``@jit`` / ``compile`` keywords, and a kernel cache key that covers every ingredient that changes the output.

Each cache-key test changes one ingredient and shows that the kernel compiles afresh (a new disk entry), where
before this issue several of them (the ``TILELANG_CORE_CUDA_*`` switches, ``jit/``, ``target.py``, the TVM and nvcc
versions) were served the stale kernel.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import cache
from tilelang_core.pass_config import OPTIONS, PassConfigKey, resolve

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


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




# -- part 1: pass_configs -----------------------------------------------------------------------------------------

def test_pass_config_keys_are_strings_with_tilelang_names_where_tilelang_has_them():
    assert tilelang.PassConfigKey is PassConfigKey
    assert PassConfigKey.TL_DISABLE_TMA_LOWER == "tl.disable_tma_lower"
    assert PassConfigKey.TL_DISABLE_WARP_SPECIALIZED == "tl.disable_warp_specialized"
    assert PassConfigKey.TL_ENABLE_FAST_MATH == "tl.enable_fast_math"
    assert PassConfigKey.TL_DISABLE_VECTORIZE_256 == "tl.disable_vectorize_256"
    ours = {"tl.cuda.fuse_dequant", "tl.cuda.dq4_direct", "tl.cuda.dq4_late_scale", "tl.cuda.dq4_depth",
            "tl.cuda.split_k", "tl.cuda.split_k_reduce", "tl.cuda.fused_gemm", "tl.cuda.streaming_loads",
            "tl.cuda.compiler"}
    assert ours <= set(OPTIONS)
    # TileLang's keys are documented no-ops here, except tl.disable_tma_lower (TMA loads on sm_90, sm90/tma.py) and
    # tl.disable_warp_specialized (the producer warpgroup, sm90/warp_specialize.py)
    real = ("tl.disable_tma_lower", "tl.disable_warp_specialized")
    assert all(OPTIONS[k].noop for k in OPTIONS if not k.startswith("tl.cuda.") and k not in real)
    assert not any(OPTIONS[k].noop for k in real)


@pytest.mark.parametrize("configs,words", [
    ({"tl.cuda.nonsense": True}, ["'tl.cuda.nonsense'", "accepted keys", "tl.cuda.fuse_dequant"]),
    ({"tl.cuda.fuse_dequant": 0}, ["'tl.cuda.fuse_dequant'", "True or False", "got 0"]),
    ({"tl.cuda.split_k": 3}, ["'tl.cuda.split_k'", "one of 0, 1, 2, 4, 8", "got 3"]),
    ({"tl.cuda.dq4_depth": 0}, ["'tl.cuda.dq4_depth'", "an int >= 1", "got 0"]),
    ({"tl.cuda.split_k_reduce": "global"}, ["'tl.cuda.split_k_reduce'", "'workspace', 'cluster'", "'global'"]),
    ({"tl.cuda.compiler": "clang"}, ["'tl.cuda.compiler'", "'auto', 'nvcc', 'nvrtc'", "'clang'"]),
    ({"tl.disable_tma_lower": "yes"}, ["'tl.disable_tma_lower'", "True or False", "'yes'"]),
    ({"tl.cuda.dequant_fragments": 1}, ["'tl.cuda.dequant_fragments'", "True or False", "got 1"]),
])
def test_a_bad_key_or_value_is_an_error_naming_the_key_what_is_accepted_and_what_was_given(configs, words):
    for call in (lambda: resolve(configs), lambda: tilelang.jit(pass_configs=configs),
                 lambda: tilelang.compile(scale_kernel(64, 1.0), out_idx=-1, pass_configs=configs)):
        with pytest.raises(ValueError) as e:
            call()
        assert all(w in str(e.value) for w in words), str(e.value)


def _bad_value(option):
    """A value ``option`` refuses: a non-bool for a switch, a string for an int, a name not among the choices."""
    if option.kind == "bool":
        return 1
    if option.kind == "int":
        return "2"
    return "not-a-choice"


@pytest.mark.parametrize("key", sorted(OPTIONS))
def test_every_key_refuses_a_value_of_the_wrong_kind_naming_the_key_and_the_value(key):
    option = OPTIONS[key]
    bad = _bad_value(option)
    with pytest.raises(ValueError) as e:
        resolve({key: bad})
    assert repr(key) in str(e.value) and option.accepted() in str(e.value) and repr(bad) in str(e.value), str(e.value)
    assert resolve({key: option.default})[key] == option.default  # its default is accepted


def test_pass_configs_must_be_a_dict():
    with pytest.raises(TypeError, match="pass_configs: expected a dict"):
        tilelang.jit(pass_configs=[("tl.cuda.split_k", 1)])


def test_defaults_are_filled_in_and_spelling_a_default_is_the_same_config():
    assert resolve({}) == resolve(None) == resolve({"tl.cuda.fuse_dequant": True})
    cfg = resolve({PassConfigKey.TL_CUDA_SPLIT_K: 4})
    assert cfg["tl.cuda.split_k"] == 4 and cfg["tl.cuda.fuse_dequant"] is True
    assert cfg.explicit() == {"tl.cuda.split_k": 4}
    assert "tl.cuda.split_k=4" in repr(cfg)


def test_the_kernel_and_its_factory_show_the_options_in_force(cache_dir):
    factory = tilelang.jit(out_idx=-1, pass_configs={"tl.disable_tma_lower": True})(scale_kernel)
    k = factory(128, 2.0)
    assert k.pass_configs.explicit() == {"tl.disable_tma_lower": True}
    assert "pass_configs={'tl.disable_tma_lower': True}" in repr(k)
    assert "tl.disable_tma_lower=True" in repr(factory)
    assert k.artifact.extra["pass_configs"] == {"tl.disable_tma_lower": True}
    assert "pass_configs {'tl.disable_tma_lower': True}" in repr(k.trace).splitlines()[0]
    x = torch.randn(128)
    torch.testing.assert_close(k(x), 2.0 * x, rtol=0, atol=0)


def test_no_compiler_module_reads_a_codegen_switch_from_the_environment():
    root = Path(tilelang.__file__).parent
    offenders = [str(f.relative_to(root)) for f in root.rglob("*.py")
                 if "TILELANG_CORE_CUDA_" in f.read_text() or "DQ4_MODE" in f.read_text()]
    assert not offenders, offenders
    cuh = [str(f.relative_to(root)) for f in root.rglob("*.cuh") if "MODE" in f.read_text()]
    assert not cuh, cuh  # the measurement mode that skipped the computation is gone from the device templates


# -- part 3: TileLang's keywords -----------------------------------------------------------------------------------

def test_an_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'passconfigs'"):
        tilelang.jit(out_idx=-1, passconfigs={})
    with pytest.raises(TypeError, match="unexpected keyword argument 'block_M'"):
        tilelang.compile(scale_kernel(64, 1.0), block_M=64)


@pytest.mark.parametrize("kw,words", [
    ({"execution_backend": "cython"}, ["execution_backend='cython'", "not supported here", "tvm_ffi"]),
    ({"execution_backend": "nvrtc"}, ["not supported here", "tl.cuda.compiler"]),
    ({"target_host": "c"}, ["target_host='c'", "not supported here"]),
    ({"compile_flags": 3}, ["compile_flags", "got 3"]),
    ({"verbose": "yes"}, ["verbose", "'yes'"]),
    ({"debug_root_path": 5}, ["debug_root_path", "got 5"]),
])
def test_unsupported_values_of_tilelang_keywords_say_so(kw, words):
    with pytest.raises((ValueError, TypeError)) as e:
        tilelang.jit(out_idx=-1, **kw)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_supported_values_of_tilelang_keywords_are_accepted(cache_dir, tmp_path, capsys):
    dbg = tmp_path / "debug"
    factory = tilelang.jit(out_idx=[-1], target="auto", target_host=None, execution_backend="auto", verbose=True,
                           pass_configs={}, debug_root_path=str(dbg), compile_flags=None)(scale_kernel)
    k = factory(64, 3.0)
    assert "tilelang_core: scale_kernel compiled in" in capsys.readouterr().err
    written = sorted(p.suffix for p in dbg.iterdir())
    assert written == [".ll", ".py"]
    x = torch.randn(64)
    torch.testing.assert_close(k(x), 3.0 * x, rtol=0, atol=0)
    k2 = tilelang.compile(scale_kernel(64, 3.0), out_idx=-1, execution_backend="tvm_ffi", target_host="llvm")
    torch.testing.assert_close(k2(x), 3.0 * x, rtol=0, atol=0)


def test_compile_flags_are_refused_on_the_cpu():
    with pytest.raises(ValueError, match="compile_flags.*not supported for the CPU"):
        tilelang.compile(scale_kernel(64, 1.0), out_idx=-1, compile_flags=["-O0"])


# -- part 2: the cache key covers what changes the output ------------------------------------------------------------

def _compiles_afresh(cache_dir: Path, build) -> None:
    """``build()`` after a first ``build()`` with one ingredient changed in between must be a new entry."""
    n = len(entries(cache_dir))
    k = build()
    assert k.cache_status == "compiled", k.cache_status
    assert len(entries(cache_dir)) == n + 1


def test_pass_configs_are_part_of_the_key(cache_dir):
    tilelang.jit(out_idx=-1)(scale_kernel)(96, 2.0)
    _compiles_afresh(cache_dir, lambda: tilelang.jit(out_idx=-1, pass_configs={"tl.disable_vectorize_256": True})(
        scale_kernel)(96, 2.0))
    # and the default spelled out is the same kernel
    k = tilelang.jit(out_idx=-1, pass_configs={"tl.disable_vectorize_256": False})(scale_kernel)(96, 2.0)
    assert k.cache_status == "disk"


def test_the_memory_cache_keys_on_the_options_too(cache_dir):
    f = tilelang.jit(out_idx=-1)(scale_kernel)
    k1 = f(96, 2.0)
    f2 = tilelang.jit(out_idx=-1, pass_configs={"tl.enable_fast_math": True})(scale_kernel)
    assert f2(96, 2.0) is not k1 and f2.options.key() != f.options.key()


def test_the_compiler_sources_are_all_of_the_package_that_makes_kernels():
    root = Path(tilelang.__file__).parent
    rel = {f.relative_to(root).as_posix() for f in cache.compiler_sources(root)}
    assert {"jit/__init__.py", "jit/cache.py", "jit/cuda.py", "target.py", "pass_config.py", "errors.py",
            "transform/cuda/fuse_dequant_gemm_cuda.py", "backend/cuda/include/tl/dequant.cuh",
            "backend/cuda/nvcc.py"} <= rel
    assert not any(r.startswith(("trace/", "autotune/")) for r in rel)


def test_editing_any_compiler_source_changes_the_digest(tmp_path):
    root = Path(tilelang.__file__).parent
    copy = tmp_path / "tilelang_core"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = cache.sources_digest(copy)
    assert base == cache.sources_digest(copy) and len(base) == len(cache.compiler_digest())  # deterministic
    # (not compared with compiler_digest(): that is computed once per process, and the tree may change under a
    # long test run)
    for rel in ("jit/__init__.py", "target.py", "backend/cuda/include/tl/dequant.cuh"):
        f = copy / rel
        text = f.read_text()
        f.write_text(text + "\n// edited\n" if rel.endswith(".cuh") else text + "\n# edited\n")
        assert cache.sources_digest(copy) != base, rel
        f.write_text(text)
    assert cache.sources_digest(copy) == base


def test_the_compiler_digest_is_part_of_the_key(cache_dir, monkeypatch):
    tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0)
    monkeypatch.setattr(cache, "compiler_digest", lambda: "edited-compiler")
    _compiles_afresh(cache_dir, lambda: tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0))


def test_the_tvm_version_is_part_of_the_key(cache_dir, monkeypatch):
    tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0)
    monkeypatch.setattr(cache, "tvm_version", lambda: "0.99.0")
    _compiles_afresh(cache_dir, lambda: tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0))


def test_the_llvm_version_is_part_of_the_cpu_key(cache_dir, monkeypatch):
    from tilelang_core.backend import cpu

    tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0)
    monkeypatch.setattr(cpu, "llvm_version", lambda: 999)
    _compiles_afresh(cache_dir, lambda: tilelang.jit(out_idx=-1)(scale_kernel)(80, 2.0))


def test_no_stale_version_marker_is_left():
    assert not hasattr(cache, "PIPELINE_VERSION")
    assert set(cache.versions()) == {"tilelang_core", "tvm", "compiler"}


# -- CUDA: the stale-kernel case of the issue, and the CUDA compiler in the key -------------------------------------

def _w4a16(pass_configs=None, **kw):
    from examples import dequant_gemm

    f = tilelang.jit(out_idx=dequant_gemm.dequant_gemm.out_idx, target="cuda", pass_configs=pass_configs, **kw)
    return f(dequant_gemm.dequant_gemm.factory)(16, 1024, 1024, 128, block_M=16, block_N=64, block_K=256,
                                                num_stages=3, dtype="float16")


@needs_nvcc
def test_w4a16_with_fuse_dequant_off_then_on_never_shares_a_cache_entry(cache_dir):
    """The demonstrated stale kernel: compiled once with the fusion off, it was served later with it on."""
    off = _w4a16({"tl.cuda.fuse_dequant": False})
    assert "gemm_dq4" not in off.get_kernel_source()
    on = _w4a16()  # a fresh factory: no memory cache, same disk cache
    assert on.cache_status == "compiled" and on.artifact.path != off.artifact.path
    assert "tl::gemm_dq4g<" in on.get_kernel_source()
    again = _w4a16({"tl.cuda.fuse_dequant": False})
    assert again.cache_status == "disk" and again.artifact.path == off.artifact.path


@needs_nvcc
def test_the_cuda_compiler_identity_and_compile_flags_are_part_of_the_key(cache_dir, monkeypatch):
    from tilelang_core.backend.cuda import nvcc

    _w4a16()
    n = len(entries(cache_dir))
    flagged = _w4a16(compile_flags=["-lineinfo"])
    assert flagged.cache_status == "compiled" and len(entries(cache_dir)) == n + 1
    assert "-lineinfo" in flagged.artifact.extra["cuda"]["nvcc_command"]
    assert _w4a16(compile_flags="-lineinfo").cache_status == "disk"  # the same flags, spelled as one string
    monkeypatch.setattr(nvcc, "_nvcc_version", lambda path: "Cuda compilation tools, release 99.9")
    monkeypatch.setattr(nvcc, "_nvrtc_version", lambda: "99.9")  # whichever compiler "auto" resolves to
    _compiles_afresh(cache_dir, _w4a16)
    assert nvcc.compiler_identity("sm_90", "nvcc")["version"].endswith("99.9")
    assert "-O3" in nvcc.compiler_identity("sm_90", "nvcc")["flags"]


def test_a_failed_compile_records_the_options_and_its_reproducer_applies_them(tmp_path):
    import subprocess
    import sys

    from tilelang_core.errors import TileLangCompileError

    sys.path.insert(0, str(Path(__file__).parent))
    import test_trace

    opts = {"tl.disable_warp_specialized": True}
    factory = tilelang.jit(out_idx=[-1], pass_configs=opts)(test_trace.broken_gemm.factory)
    with pytest.raises(TileLangCompileError) as ei:
        factory(128, 128, 128)
    rep = ei.value.report
    assert rep.pass_configs == opts and "pass_configs={'tl.disable_warp_specialized': True}" in rep.render()
    path = ei.value.save_repro(tmp_path / "repro.py")
    assert "PASS_CONFIGS = {'tl.disable_warp_specialized': True}" in path.read_text()
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 1 and "reproduced the same error" in res.stderr, res.stderr[-3000:]

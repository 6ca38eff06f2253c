"""``compile()`` for ``target="cuda"``: lower, generate CUDA C, nvcc to a cubin, cache, wrap in a JITKernel.

Kept beside ``jit/__init__.py`` (which dispatches here) so the CUDA path shares the kernel cache — same key
scheme, same atomic build-then-rename — without touching the CPU path. The artifact is self-describing (cubin,
kernel symbol, grid, block, dynamic shared memory, argument order, the nvcc command line), so it runs through
:mod:`tilelang_core.runtime.cuda_launcher` on a machine without TVM.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import TileLangCompileError
from ..runtime.artifact import Artifact, ParamSpec, sha256_file
from . import cache
from .kernel import JITKernel


def toolchain(target: dict[str, Any], pass_configs: Any = None, compile_flags: list[str] | None = None) -> dict:
    """What identifies the CUDA compiler a build for ``target`` would use (for the cache key): nvcc's path,
    version and flags (``compile_flags`` included) or NVRTC's version and options."""
    from ..backend import cuda as cuda_backend
    from ..pass_config import PassConfigKey, resolve

    arch = str(target.get("arch", cuda_backend.DEFAULT_ARCH))
    compiler = resolve(pass_configs)[PassConfigKey.TL_CUDA_COMPILER]
    return {"cuda": cuda_backend.compiler_identity(arch, compiler, compile_flags)}


def build_artifact(func: Any, out_dir: Any, target: dict[str, Any], specs: list[ParamSpec], outs: list[int],
                   name: str | None = None, config: dict[str, Any] | None = None,
                   compile_cubin: bool = True, pass_configs: Any = None,
                   compile_flags: list[str] | None = None) -> Artifact:
    """Build ``func`` for CUDA into ``out_dir`` (with ``pass_configs`` and extra compiler ``compile_flags``) and
    write its ``meta.json``."""
    from ..backend import cuda as cuda_backend
    from ..pass_config import resolve
    from ..transform.common.notes import read_notes
    from ..transform.cuda.lower_global_workspaces_cuda import WORKSPACE_MARK

    opts = resolve(pass_configs)
    arch = str(target.get("arch", cuda_backend.DEFAULT_ARCH))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    mod = cuda_backend.lower(func, arch=arch, options=opts)
    timings["lower"] = time.perf_counter() - t0
    build = cuda_backend.build(mod, out_dir, arch, compile=compile_cubin, options=opts, flags=compile_flags)
    timings.update(build.timings)
    (out_dir / "lowered.tir.py").write_text(mod.script())
    meta = build.launch_meta()
    if WORKSPACE_MARK in build.source_file.read_text():  # T.alloc_global: a workspace in the module, one at a time
        meta["serial_streams"] = True
    art = Artifact(path=out_dir, entry=build.kernel, target=dict(target), params=specs, out_idx=outs,
                   library=build.cubin.name, sources={"cuda": build.source_file.name, "tir": "lowered.tir.py"},
                   library_sha256=sha256_file(build.cubin) if compile_cubin else "",
                   extra={"name": name or "main", "config": {k: repr(v) for k, v in (config or {}).items()},
                          "cuda": meta, "timings": timings, "pass_configs": opts.explicit(),
                          "compile_flags": list(compile_flags or []), "notes": read_notes(mod) + build.notes})
    art.write_meta()
    return art


def _source_positions(func: Any) -> str:
    """Every statement's user file and line, in order: a source-line build (``tl.cuda.lineinfo``) writes them into
    its code, so two programs of the same text at other lines (two notebook cells) must not share a cache entry."""
    import tvm_ffi
    from tvm import tirx

    from ..transform.common.rewriter import location_of

    seen: list[str] = []

    def note(x: Any) -> Any:
        loc = location_of(getattr(x, "span", None))
        if loc is not None:
            seen.append(f"{loc.file}:{loc.line}")
        return x

    kinds = [getattr(tirx, n) for n in ("Evaluate", "For", "BufferStore", "IfThenElse", "Bind") if hasattr(tirx, n)]
    tvm_ffi.structural_map(func.body, [(k, note) for k in kinds])
    return ";".join(seen)


def compile_cuda(func: Any, specs: list[ParamSpec], outs: list[int], target: dict[str, Any],
                 name: str | None = None, config: dict[str, Any] | None = None, pass_configs: Any = None,
                 compile_flags: list[str] | None = None) -> JITKernel:
    from ..pass_config import PassConfigKey, resolve

    strided = [p for p in specs if getattr(p, "strides", None)]
    if strided:  # the CUDA lowering's vectorised copies and tensor-core paths assume row-major tensors
        raise TileLangCompileError(f"kernel parameter {strided[0].name}: a T.StridedTensor with strides "
                                   f"{list(strided[0].strides)} is supported on the CPU only for now; for CUDA pass a "
                                   "contiguous tensor (T.Tensor) (docs/compat.md)", stage="tl.CheckStridesCUDA")
    opts = resolve(pass_configs)
    t0 = time.perf_counter()
    text = func.script()
    if opts[PassConfigKey.TL_CUDA_LINEINFO]:  # the build's line markers name the user's file and lines: key them
        text += "\n# source positions: " + _source_positions(func)
    key = cache.disk_key(text, outs, target, opts, toolchain(target, opts, compile_flags))
    with cache.compile_lock(key):  # one thread (of any process) compiles a key; the others then find it on disk
        art = cache.disk_get(key)
        status = "disk"
        tmp = None
        if art is None:
            status = "compiled"
            tmp = cache.new_build_dir()
            try:
                art = build_artifact(func, tmp.path, target, specs, outs, name=name, config=config,
                                     pass_configs=opts, compile_flags=compile_flags)
            except BaseException:
                tmp.remove()
                raise
            art = cache.disk_put(key, tmp, art)
            cache.count("compiles")
    kernel = JITKernel(art, program=func, config=config, cache_status=status,
                       compile_seconds=time.perf_counter() - t0, name=name, pass_configs=opts)
    cache.tie_to_kernel(tmp, kernel)
    return kernel

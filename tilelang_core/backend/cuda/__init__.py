"""CUDA backend: our CUDA passes, TVM's CUDA code generator, then nvcc (or NVRTC) to a cubin.

``lower`` runs ``transform.cuda_passes``; ``build`` generates CUDA C (``kernel.cu``, which includes our device
templates from ``include/tl``), compiles it for the requested architecture (``sm_90`` by default, ``sm_80``
...) and returns what the artifact records: the cubin, the kernel symbol, the launch configuration (grid, block,
dynamic shared memory) and the kernel's argument order. Works without a GPU or driver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import source_lines
from .codegen import CudaSource, generate, lower
from .nvcc import INCLUDE_DIR, compile_cubin, compiler_identity, find_nvcc, nvcc_command

DEFAULT_ARCH = "sm_90"
STATEFUL_MARK = "tl::splitk_global_reduce<"  # device code that keeps state between launches in module globals


@dataclass
class CudaBuild:
    """What one CUDA build produced (files live in ``out_dir``)."""

    cubin: Path
    source_file: Path
    kernel: str
    arg_names: list[str]
    grid: list[int | str]
    block: list[int]
    dyn_smem: int
    arch: str
    command: list[str] = field(default_factory=list)
    compiler_output: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    serial_streams: bool = False  # the kernel keeps state in module globals (split-K workspace)
    arg_dtypes: list[str] = field(default_factory=list)  # per kernel argument: "handle" (a tensor) or a scalar dtype
    tma: list[dict[str, Any]] = field(default_factory=list)  # tensor maps to encode per launch (exported.TensorMaps)
    notes: list[str] = field(default_factory=list)  # code generation's notes (an option that changed nothing)

    def launch_meta(self) -> dict[str, Any]:
        """The launch description the artifact stores (``extra["cuda"]``)."""
        return {"cubin": self.cubin.name, "kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "dyn_smem": int(self.dyn_smem), "args": list(self.arg_names),
                "arg_dtypes": list(self.arg_dtypes), "arch": self.arch,
                "nvcc_command": list(self.command), "ptxas_info": self.compiler_output[-4000:],
                "serial_streams": self.serial_streams, "tma": list(self.tma)}


def build(mod: Any, out_dir: Path, arch: str = DEFAULT_ARCH, instruments: list[Any] | None = None,
          compile: bool = True, compiler: str | None = None, options: Any = None,  # noqa: A002
          flags: list[str] | None = None, header_cache: Path | None = None) -> CudaBuild:
    """CUDA C for ``mod`` into ``out_dir/kernel.cu`` and (``compile=True``) a cubin ``out_dir/kernel.cubin``, by
    ``compiler`` (``"auto"``: NVRTC when installed, else nvcc; None: the ``tl.cuda.compiler`` of ``options``, a
    :class:`~tilelang_core.pass_config.PassConfig` or ``pass_configs`` dict), with extra compiler ``flags``;
    ``header_cache``: where NVRTC keeps its precompiled headers (e.g. under the kernel cache; None: none)."""
    from ...pass_config import PassConfigKey, resolve

    opts = resolve(options)
    if compiler is None:
        compiler = opts[PassConfigKey.TL_CUDA_COMPILER]
    out_dir = Path(out_dir)
    lineinfo = bool(opts[PassConfigKey.TL_CUDA_LINEINFO])
    files: list[str] = []
    if lineinfo:  # a source-line build: markers before the user's statements, -lineinfo (see source_lines)
        mod, files = source_lines.mark_source_lines(mod)
        flags = [*(flags or []), "-lineinfo"]
    src: CudaSource = generate(mod, arch, instruments, opts)
    if lineinfo:
        src.source = source_lines.finish_source(src.source, files)
    cu = out_dir / "kernel.cu"
    cu.write_text(src.source)
    cubin = out_dir / "kernel.cubin"
    cmd: list[str] = []
    msgs = ""
    t0 = time.perf_counter()
    if compile:
        cmd, msgs = compile_cubin(cu, cubin, arch, compiler, flags=flags, header_cache=header_cache)
    timings = dict(src.timings)
    timings["nvcc"] = time.perf_counter() - t0
    return CudaBuild(cubin=cubin, source_file=cu, kernel=src.kernel, arg_names=src.arg_names, grid=src.grid,
                     block=src.block, dyn_smem=src.dyn_smem, arch=arch, command=cmd, compiler_output=msgs,
                     timings=timings, serial_streams=STATEFUL_MARK in src.source, arg_dtypes=src.arg_dtypes,
                     tma=src.tma, notes=list(src.notes))


__all__ = ["CudaBuild", "CudaSource", "DEFAULT_ARCH", "INCLUDE_DIR", "build", "compile_cubin", "compiler_identity",
           "find_nvcc", "generate", "lower", "nvcc_command"]

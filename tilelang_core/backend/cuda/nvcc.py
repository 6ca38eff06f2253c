"""Compiling generated CUDA C to a cubin: nvcc (found on PATH or in the usual places), or NVRTC when only the
CUDA Python bindings are installed. No GPU or driver is needed for either; the command line is recorded in the
artifact so a build can be reproduced by hand.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from ...errors import TileLangCompileError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"


@functools.lru_cache(maxsize=1)
def find_nvcc() -> str | None:
    """Path of nvcc: ``$TILELANG_CORE_NVCC``, ``PATH``, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``."""
    env = os.environ.get("TILELANG_CORE_NVCC")
    if env:
        return env
    found = shutil.which("nvcc")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and os.path.isfile(os.path.join(base, "bin", "nvcc")):
            return os.path.join(base, "bin", "nvcc")
    return None


def nvcc_command(source: Path, output: Path, arch: str, nvcc: str | None = None) -> list[str]:
    """The nvcc command line that turns ``source`` into a cubin for ``arch`` (e.g. ``sm_90``)."""
    nvcc = nvcc or find_nvcc() or "nvcc"
    code = arch.replace("sm_", "")
    return [nvcc, "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "-O3", "-std=c++17",
            "-Xptxas=-v", "-diag-suppress=177", f"-I{INCLUDE_DIR}", "-o", str(output), str(source)]


def compile_cubin(source: Path, output: Path, arch: str) -> tuple[list[str], str]:
    """Compile ``source`` to ``output``; returns (command, compiler messages: ptxas resource usage)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return _compile_nvrtc(source, output, arch)
    cmd = nvcc_command(source, output, arch, nvcc)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise TileLangCompileError(f"nvcc failed to compile the generated CUDA code ({source}):\n"
                                   f"{' '.join(cmd)}\n{res.stderr[-6000:]}", stage="nvcc")
    return cmd, res.stderr


def _compile_nvrtc(source: Path, output: Path, arch: str) -> tuple[list[str], str]:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TileLangCompileError("no CUDA compiler: nvcc is not on PATH (set TILELANG_CORE_NVCC) and the NVRTC "
                                   "Python bindings (pip install cuda-python) are not installed",
                                   stage="nvcc") from None
    code = arch.replace("sm_", "")
    opts = [f"--gpu-architecture=sm_{code}", "-std=c++17", f"-I{INCLUDE_DIR}", "-default-device"]
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    if os.path.isdir(os.path.join(cuda_home, "include")):
        opts.append(f"-I{os.path.join(cuda_home, 'include')}")
    text = source.read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(text, source.name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    err_log, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise TileLangCompileError(f"NVRTC failed to compile the generated CUDA code ({source}):\n"
                                   f"{log.decode(errors='replace')[-6000:]}", stage="nvcc")
    err, size = nvrtc.nvrtcGetCUBINSize(prog)
    _check_nvrtc(err, "nvrtcGetCUBINSize")
    cubin = b" " * size
    (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
    _check_nvrtc(err, "nvrtcGetCUBIN")
    output.write_bytes(cubin)
    return ["nvrtc", *opts, str(source)], log.decode(errors="replace")


def _check_nvrtc(err: object, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise TileLangCompileError(f"NVRTC {what} failed: {err}", stage="nvcc")

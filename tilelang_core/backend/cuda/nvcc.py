"""Compiling generated CUDA C to a cubin: NVRTC (the CUDA Python bindings) or nvcc (found on PATH or in the usual
places). No GPU or driver is needed for either; the command line is recorded in the artifact so a build can be
reproduced by hand.

``compiler="auto"`` takes NVRTC when it is installed, else nvcc. NVRTC runs in-process (no process start, no host
compilation pass, no ``cuda_runtime.h``), and keeps a header cache for the process: NVRTC's automatic precompiled
header covers a source's first ``#include`` (``tl/tl.cuh``, or ``tl/tl_sm90.cuh`` for wgmma kernels; they include
every standard header the generated preamble needs), so the second and later kernels of a session skip parsing
our templates and CUDA's headers. NVRTC deletes the files it made when the process exits, so the folder is private
to the process (keyed inside by the headers' contents, NVRTC's version and the options: an edited header never
reuses a stale one). The cubin is the same byte for byte with or without it (``bench/gpu/compile_probe.py``
checks; ``tests/test_nvrtc_header_cache.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
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


def nvcc_command(source: Path, output: Path, arch: str, nvcc: str | None = None,
                 flags: list[str] | None = None) -> list[str]:
    """The nvcc command line that turns ``source`` into a cubin for ``arch`` (e.g. ``sm_90``); ``flags`` (the
    kernel's ``compile_flags``) go before the output."""
    nvcc = nvcc or find_nvcc() or "nvcc"
    code = arch.replace("sm_", "")
    return [nvcc, "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "-O3", "-std=c++17",
            "-Xptxas=-v", "-diag-suppress=177", f"-I{INCLUDE_DIR}", *(flags or []), "-o", str(output), str(source)]


@functools.lru_cache(maxsize=8)
def _nvcc_version(nvcc: str) -> str:
    try:
        res = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
        return res.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"


@functools.lru_cache(maxsize=1)
def _nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}" if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else f"unavailable: {err}"
    except Exception as e:  # noqa: BLE001 - ImportError, or the library missing
        return f"unavailable: {type(e).__name__}"


def compiler_identity(arch: str, compiler: str = "auto", flags: list[str] | None = None) -> dict[str, str]:
    """What identifies the CUDA compiler a build would use, for the kernel cache key: which one (nvcc or NVRTC),
    its version (``nvcc --version``; NVRTC's version) and the exact flags (paths of the source and output left
    out)."""
    which = resolve_compiler(compiler)
    if which == "nvrtc":
        return {"compiler": "nvrtc", "version": _nvrtc_version(),
                "flags": " ".join([*_nvrtc_options(arch), *(flags or [])])}
    nvcc = find_nvcc() or "nvcc"
    cmd = nvcc_command(Path("kernel.cu"), Path("kernel.cubin"), arch, nvcc, flags)
    return {"compiler": "nvcc", "path": nvcc, "version": _nvcc_version(nvcc), "flags": " ".join(cmd[1:])}


COMPILERS = ("auto", "nvcc", "nvrtc")


def cuda_include_dirs() -> list[str]:
    """CUDA's own header folders for NVRTC (nvcc knows them): ``include``, its ``cccl`` (``cuda/std`` since CUDA
    13) and the per-architecture ``targets/<triple>/include``, under ``$CUDA_HOME``, ``$CUDA_PATH`` or
    ``/usr/local/cuda``, and the headers of pip's ``nvidia-cuda-*`` wheels."""
    import platform

    bases = [b for b in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if b]
    nvcc = find_nvcc()
    if nvcc:
        bases.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    triple = f"{platform.machine()}-{platform.system().lower()}"
    found: list[str] = []
    for base in bases:
        for inc in (Path(base) / "include", Path(base) / "targets" / triple / "include"):
            for d in (inc, inc / "cccl"):
                if d.is_dir() and str(d) not in found:
                    found.append(str(d))
    try:  # pip wheels: nvidia/cu13/include (cuda-toolkit), nvidia/cuda_nvrtc/include, ...
        import nvidia  # type: ignore[import-not-found]

        for root in getattr(nvidia, "__path__", []):
            for d in sorted(Path(root).glob("*/include")) + sorted(Path(root).glob("*/include/cccl")):
                if str(d) not in found:
                    found.append(str(d))
    except ImportError:
        pass
    return found


@functools.lru_cache(maxsize=1)
def nvrtc_available() -> bool:
    """Whether NVRTC can be used: the CUDA Python bindings import and find the NVRTC library."""
    try:
        from cuda.bindings import nvrtc

        err, _major, _minor = nvrtc.nvrtcVersion()
        return err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # noqa: BLE001 - ImportError, or the library missing (RuntimeError from the bindings)
        return False


def resolve_compiler(compiler: str = "auto") -> str:
    """``"nvcc"`` or ``"nvrtc"``: ``"auto"`` takes NVRTC when the CUDA Python bindings find it (faster: in-process,
    with a header cache), else nvcc."""
    if compiler not in COMPILERS:
        raise ValueError(f"compiler: expected one of {', '.join(COMPILERS)}, got {compiler!r}")
    if compiler == "auto":
        return "nvrtc" if nvrtc_available() else "nvcc"
    return compiler


def compile_cubin(source: Path, output: Path, arch: str, compiler: str = "auto",
                  flags: list[str] | None = None, header_cache: Path | None = None) -> tuple[list[str], str]:
    """Compile ``source`` to ``output`` (``flags``: extra compiler options); returns (command, compiler messages:
    ptxas resource usage). ``header_cache``: the folder for NVRTC's precompiled headers (None: this process's
    private one)."""
    if resolve_compiler(compiler) == "nvrtc":
        return _compile_nvrtc(source, output, arch, flags, header_cache)
    nvcc = find_nvcc()
    if nvcc is None:
        raise TileLangCompileError("compiler='nvcc': nvcc is not on PATH (set TILELANG_CORE_NVCC or CUDA_HOME)",
                                   stage="nvcc")
    cmd = nvcc_command(source, output, arch, nvcc, flags)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise TileLangCompileError(f"nvcc failed to compile the generated CUDA code ({source}):\n"
                                   f"{' '.join(cmd)}\n{res.stderr[-6000:]}", stage="nvcc")
    return cmd, res.stderr


def compile_ptx(source: Path, arch: str, compiler: str = "auto",
                flags: list[str] | None = None) -> tuple[str, list[str]]:
    """The PTX of ``source`` for ``arch`` (same flags as the cubin build); returns (text, command)."""
    import tempfile

    if resolve_compiler(compiler) == "nvrtc":
        return _nvrtc_ptx(source, arch, flags)
    with tempfile.TemporaryDirectory(prefix="tilelang_core_ptx_") as tmp:
        out = Path(tmp) / "kernel.ptx"
        cmd = [c for c in nvcc_command(source, out, arch, flags=flags) if c not in ("-cubin", "-Xptxas=-v")]
        cmd.insert(1, "-ptx")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise TileLangCompileError(f"nvcc -ptx failed ({source}):\n{' '.join(cmd)}\n{res.stderr[-6000:]}",
                                       stage="nvcc")
        return out.read_text(), cmd


def _nvrtc_options(arch: str) -> list[str]:
    code = arch.replace("sm_", "")
    return [f"--gpu-architecture=sm_{code}", "-std=c++17", "--ptxas-options=-v", "-diag-suppress=177",
            f"-I{INCLUDE_DIR}", "-default-device",
            *(f"-I{d}" for d in cuda_include_dirs())]


def _headers_digest() -> str:
    """A hash of our device templates' text (``include/``), for the header cache's folder name."""
    h = hashlib.sha256()
    for f in sorted(INCLUDE_DIR.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(INCLUDE_DIR)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def header_cache_dir(root: Path, opts: list[str]) -> Path | None:
    """The folder under ``root`` holding NVRTC's precompiled header for these options, created with permissions
    for this user only; None when it cannot be made (the compile then goes without)."""
    key = hashlib.sha256("\0".join([_headers_digest(), _nvrtc_version(), *opts]).encode()).hexdigest()[:16]
    path = Path(root) / "nvrtc-pch" / key
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.access(path, os.W_OK) or (hasattr(os, "getuid") and path.stat().st_uid != os.getuid()):
            return None
    except OSError:
        return None
    return path


@functools.lru_cache(maxsize=1)
def _private_header_root() -> Path:
    """This process's folder for NVRTC's precompiled headers (removed at exit, as NVRTC removes their files)."""
    import atexit
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tilelang_core_nvrtc_pch_"))
    atexit.register(shutil.rmtree, root, True)
    return root


@contextlib.contextmanager
def _first_pch_lock(pch_dir: Path | None) -> Iterator[None]:
    """While the header cache holds no precompiled header yet, one compile at a time (across processes) creates
    it; once it exists compiles only read it and take no lock."""
    if pch_dir is None or any(pch_dir.glob("*.pch")):
        yield
        return
    try:
        fd = os.open(pch_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _nvrtc_program(source: Path, opts: list[str], pch_dir: Path | None = None) -> tuple[object, str]:
    """A compiled NVRTC program for ``source`` and its log (raises with the log when compilation fails); with
    ``pch_dir``, NVRTC's automatic precompiled header lives there."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TileLangCompileError("no CUDA compiler: nvcc is not on PATH (set TILELANG_CORE_NVCC) and the NVRTC "
                                   "Python bindings (pip install cuda-bindings nvidia-cuda-nvrtc) are not "
                                   "installed", stage="nvcc") from None
    if pch_dir is not None:
        opts = [*opts, "-pch", f"-pch-dir={pch_dir}"]
    err, prog = nvrtc.nvrtcCreateProgram(source.read_bytes(), source.name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    with _first_pch_lock(pch_dir):
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise TileLangCompileError(f"NVRTC failed to compile the generated CUDA code ({source}):\n"
                                   f"{log.decode(errors='replace')[-6000:]}", stage="nvcc")
    if pch_dir is not None:
        _grow_pch_heap(nvrtc, prog)
    return prog, log.decode(errors="replace").rstrip("\x00 ")


def _grow_pch_heap(nvrtc: object, prog: object) -> None:
    """When NVRTC could not create the precompiled header for want of heap, give the next compile enough."""
    try:
        (status,) = nvrtc.nvrtcGetPCHCreateStatus(prog)  # type: ignore[attr-defined]
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED:  # type: ignore[attr-defined]
            err, need = nvrtc.nvrtcGetPCHHeapSizeRequired(prog)  # type: ignore[attr-defined]
            if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:  # type: ignore[attr-defined]
                nvrtc.nvrtcSetPCHHeapSize(need)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):  # bindings without the PCH API: nothing to grow
        pass


def _compile_nvrtc(source: Path, output: Path, arch: str, flags: list[str] | None = None,
                   header_cache: Path | None = None) -> tuple[list[str], str]:
    from cuda.bindings import nvrtc

    opts = [*_nvrtc_options(arch), *(flags or [])]
    pch_dir = header_cache_dir(header_cache if header_cache is not None else _private_header_root(), opts)
    prog, log = _nvrtc_program(source, opts, pch_dir)
    err, size = nvrtc.nvrtcGetCUBINSize(prog)
    _check_nvrtc(err, "nvrtcGetCUBINSize")
    cubin = b" " * size
    (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
    _check_nvrtc(err, "nvrtcGetCUBIN")
    output.write_bytes(cubin)
    return ["nvrtc", *opts, str(source)], log


def _nvrtc_ptx(source: Path, arch: str, flags: list[str] | None = None) -> tuple[str, list[str]]:
    from cuda.bindings import nvrtc

    opts = [*_nvrtc_options(arch), *(flags or [])]
    opts[0] = opts[0].replace("sm_", "compute_")  # PTX is for a virtual architecture
    prog, _ = _nvrtc_program(source, opts)
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    _check_nvrtc(err, "nvrtcGetPTXSize")
    ptx = b" " * size
    (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
    _check_nvrtc(err, "nvrtcGetPTX")
    return ptx.decode(errors="replace").rstrip("\x00"), ["nvrtc", *opts, str(source)]


def _check_nvrtc(err: object, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise TileLangCompileError(f"NVRTC {what} failed: {err}", stage="nvcc")

"""CPU backend: our CPU passes, then TVM's LLVM codegen for the host, then a shared library.

The LLVM target names the host CPU explicitly (``mtriple`` + ``mcpu``; with TVM's default triple a host mcpu is
silently dropped, losing AVX-512/FMA). The library is linked with a small C shim that gives it TVM's parallel-launch
and workspace hooks (OpenMP), so it runs when loaded by ``apache-tvm-ffi`` alone — the same path exported kernels
take on machines without the TVM compiler.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FailureReport, TileLangCompileError

SHIM_SOURCE = Path(__file__).resolve().parent.parent / "runtime" / "cpu_backend_shim.c"


@functools.lru_cache(maxsize=1)
def host_cpu() -> str:
    import tvm

    return str(tvm.target.codegen.llvm_get_system_cpu())


@functools.lru_cache(maxsize=1)
def host_features() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def vector_bytes() -> int:
    """SIMD register width of the host in bytes (what the micro-kernels are blocked for)."""
    feats = host_features()
    if "avx512f" in feats:
        return 64
    if "avx2" in feats or "avx" in feats:
        return 32
    return 16


def host_target() -> dict[str, Any]:
    machine = platform.machine()
    triple = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}.get(
        machine, f"{machine}-unknown-linux-gnu")
    return {"kind": "llvm", "mtriple": triple, "mcpu": host_cpu(), "opt-level": 3}


def lower(func: Any, record: Any = None) -> Any:
    """Run our CPU passes on a PrimFunc with tile ops; returns an IRModule of plain TIR.

    ``record(name, func, seconds)``, when given, sees the function after each pass (the compile trace).
    """
    import tvm

    from ..transform import cpu_passes

    for name, fn in cpu_passes(vector_bytes()):
        t0 = time.perf_counter()
        func = fn(func)
        if record is not None:
            record(name, func, time.perf_counter() - t0)
    return tvm.IRModule({"main": func})


@dataclass
class CpuBuild:
    """What one CPU build produced (files live in ``out_dir``)."""

    library: Path
    sources: dict[str, str] = field(default_factory=dict)
    link_command: list[str] = field(default_factory=list)  # exactly as run
    target: dict[str, Any] = field(default_factory=dict)
    llvm_target: str = ""  # the target string the LLVM module was generated for (mtriple, mcpu, opt-level, ...)
    llvm_version: int = 0
    timings: dict[str, float] = field(default_factory=dict)


_SHIM_LOCK = threading.Lock()


def _c_compiler() -> tuple[str, str]:
    """The C compiler that builds the runtime shim, and where that name came from (for error messages)."""
    cc = os.environ.get("CC")
    return (cc, f"$CC={cc!r}") if cc else ("gcc", "the default 'gcc' ($CC is not set)")


def compiler_not_found(cc: str, origin: str, what: str, err: OSError) -> TileLangCompileError:
    """The error for a C compiler that cannot be run: names it, where it came from and how to fix it."""
    return TileLangCompileError(
        f"{what} needs a C compiler: tried {cc!r} ({origin}), which could not be run ({err.strerror or err}). "
        "Install gcc or clang, or set CC (and CXX, used for linking) to the compiler's full path, e.g. "
        "CC=/usr/bin/gcc", stage="codegen")


def _intact_shim(obj: Path) -> bool:
    """The shim's file name ends with the first 16 hex digits of its own SHA-256: a truncated or garbage file
    (or one half-copied by hand) does not match."""
    try:
        return hashlib.sha256(obj.read_bytes()).hexdigest()[:16] == obj.stem.rsplit("-", 1)[-1]
    except OSError:
        return False


def _shim_object(shim_dir: Path) -> Path:
    """The compiled runtime shim in ``shim_dir``, built on first use, once per source and C compiler.

    One build at a time in this process (threads wait for the first); across processes each builds into its own
    temporary file and renames it into place, so racing builds never clobber each other. The object is named by
    its own hash, so a damaged one is detected, removed (with a warning) and rebuilt instead of failing every
    later link."""
    cc, origin = _c_compiler()
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes() + b"\0" + cc.encode()).hexdigest()[:16]
    with _SHIM_LOCK:
        for obj in sorted(shim_dir.glob(f"cpu_backend_shim-{digest}-*.o")):
            if _intact_shim(obj):
                return obj
            import warnings

            warnings.warn(f"removing a damaged CPU runtime shim object {obj} (it does not match its recorded "
                          "hash) and building it again", RuntimeWarning, stacklevel=4)
            with contextlib.suppress(OSError):
                obj.unlink()
        shim_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".cpu_backend_shim-{digest}-", suffix=".tmp.o", dir=shim_dir)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            cmd = [cc, "-c", "-O2", "-fPIC", "-fopenmp", "-x", "c", str(SHIM_SOURCE), "-o", str(tmp)]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:  # FileNotFoundError, PermissionError: CC names nothing runnable
                raise compiler_not_found(cc, origin, "compiling the CPU runtime shim", e) from None
            if res.returncode != 0:
                raise TileLangCompileError(f"compiling the CPU runtime shim failed: {' '.join(cmd)}\n{res.stderr}",
                                           stage="codegen", report=FailureReport(command=" ".join(cmd),
                                                                                 command_output=res.stderr))
            obj = shim_dir / f"cpu_backend_shim-{digest}-{hashlib.sha256(tmp.read_bytes()).hexdigest()[:16]}.o"
            os.replace(tmp, obj)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return obj


def codegen(mod: Any, instruments: list[Any] | None = None) -> Any:
    """TVM's TIR pipeline and LLVM codegen for the host (no linking); returns TVM's executable.

    ``instruments`` (``tvm.instrument.pass_instrument`` objects) see every TVM pass: the compile trace uses this.
    """
    import tvm

    try:
        # tl.FP8CastCPU has lowered every float8 conversion exactly; TVM's FP8ComputeLegalize would promote
        # float8 tiles to float32 through its own conversion, which is wrong for zero and subnormals
        with tvm.transform.PassContext(opt_level=3, instruments=instruments or [],
                                       disabled_pass=["tirx.FP8ComputeLegalize"]):
            return tvm.compile(mod, target=tvm.target.Target(host_target()))
    except Exception as e:  # noqa: BLE001 - TVM raises many kinds; report as ours
        raise TileLangCompileError(f"LLVM code generation failed: {e}", stage="codegen") from e


class _Linker:
    """``export_library``'s ``fcompile``: links exactly as TVM's ``create_shared`` does, but keeps the command
    line and the compiler's output, for the kernel's ``sources`` and for failure reports."""

    def __init__(self) -> None:
        self.command: list[str] = []
        self.output = ""

    def __call__(self, output: str, objects: list[str], options: list[str] | None = None, **_: Any) -> None:
        from tvm.support import cc

        compiler = cc.get_cc() or "g++"
        self.command = [compiler, "-shared", "-fPIC", "-o", output, *(options or []), *objects]
        try:
            res = subprocess.run(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            origin = next((f"${v}={os.environ[v]!r}" for v in ("CXX", "CC") if os.environ.get(v)),
                          "found on PATH by TVM")
            raise compiler_not_found(compiler, origin, "linking the kernel library", e) from None
        self.output = res.stdout
        if res.returncode != 0:
            raise RuntimeError(f"Compilation error:\n{res.stdout}\nCommand line: {' '.join(self.command)}")


def build(mod: Any, out_dir: Path, shim_cache: Path, instruments: list[Any] | None = None,
          want_sources: bool = True) -> CpuBuild:
    """LLVM codegen for the host and link into ``out_dir/kernel.so``."""
    target = host_target()
    t0 = time.perf_counter()
    ex = codegen(mod, instruments)
    t1 = time.perf_counter()
    lib = out_dir / "kernel.so"
    shim = _shim_object(Path(shim_cache))
    options = [str(shim), "-fopenmp", "-O2"]
    linker = _Linker()
    try:
        ex.export_library(str(lib), fcompile=linker, options=options)
    except TileLangCompileError:
        raise
    except Exception as e:  # noqa: BLE001
        raise TileLangCompileError(f"linking the kernel library failed: {e}", stage="link",
                                   report=FailureReport(stage="link", command=" ".join(linker.command),
                                                        command_output=linker.output)) from e
    t2 = time.perf_counter()
    sources = {}
    if want_sources:
        sources = {"llvm": ex.mod.inspect_source("ll"), "asm": ex.mod.inspect_source("asm")}
    llvm_target = ""
    try:
        llvm_target = str(ex.mod.get_function("_get_target_string")())
    except Exception:  # noqa: BLE001 - informational only
        pass
    t3 = time.perf_counter()
    return CpuBuild(library=lib, sources=sources, link_command=linker.command, target=target,
                    llvm_target=llvm_target, llvm_version=llvm_version(),
                    timings={"codegen": t1 - t0, "link": t2 - t1, "sources": t3 - t2})


@functools.lru_cache(maxsize=1)
def llvm_version() -> int:
    """Major version of the LLVM inside TVM (0 when unknown)."""
    import tvm

    try:
        return int(tvm.target.codegen.llvm_version_major())
    except Exception:  # noqa: BLE001
        return 0

"""The kernel cache: in memory per process, and on disk across processes.

The disk key is a SHA-256 over everything that can change the generated code: the program as parsed (its
TVMScript text, which includes every specialised argument), ``out_idx``, the resolved target, the
``pass_configs`` (every option, defaults filled in), the compiler's own sources (:func:`compiler_digest`), the
versions of tilelang_core and TVM, the LLVM version on the CPU, and for CUDA the identity of the CUDA compiler
(nvcc's path, ``--version`` and flags, or NVRTC's version) with the kernel's ``compile_flags``. Entries are written to a
temporary folder and renamed into place (atomic on one filesystem), so a reader never sees half an entry; an
entry whose metadata or library hash does not check out is removed and rebuilt. (The CPU key's toolchain part
is the LLVM major version and ``$CC``, which compiles the runtime shim.)

Location: ``$TILELANG_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilelang_core``, else ``~/.cache/tilelang_core``.
``TILELANG_CORE_DISABLE_CACHE=1`` turns the disk cache off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TileLangRuntimeError
from ..runtime.artifact import Artifact, load_artifact


def cache_dir() -> Path:
    env = os.environ.get("TILELANG_CORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilelang_core"


def disk_cache_enabled() -> bool:
    return os.environ.get("TILELANG_CORE_DISABLE_CACHE", "") not in ("1", "true", "yes")


@dataclass
class CacheStats:
    """Counters since process start (or the last :func:`reset_stats`)."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    corrupt_rebuilt: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


STATS = CacheStats()
_LOCK = threading.Lock()
_MEMORY: dict[Any, Any] = {}


def reset_stats() -> None:
    global STATS
    STATS.__dict__.update(CacheStats().__dict__)


def memory_get(key: Any) -> Any:
    with _LOCK:
        k = _MEMORY.get(key)
    if k is not None:
        STATS.memory_hits += 1
    return k


def memory_put(key: Any, value: Any) -> None:
    with _LOCK:
        _MEMORY[key] = value


def clear_memory() -> None:
    with _LOCK:
        _MEMORY.clear()


# Parts of the package that cannot change a compiled kernel (they read kernels, never make them): left out of
# compiler_digest so that editing a trace view or the profiler does not empty everyone's cache.
NOT_COMPILER = ("trace/", "autotune/", "profiler.py", "quickstart.py", "machine.py", "export.py")
SOURCE_SUFFIXES = (".py", ".c", ".h", ".cc", ".cu", ".cuh")


def compiler_sources(root: Path | None = None) -> list[Path]:
    """The files :func:`compiler_digest` hashes: every source of the package (language, passes, backends, device
    templates, runtime shim, ``jit/``, ``target.py``, ``pass_config.py``, ...) but :data:`NOT_COMPILER`."""
    root = root or Path(__file__).resolve().parent.parent
    out = []
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if f.suffix in SOURCE_SUFFIXES and f.is_file() and "__pycache__" not in rel and \
                not rel.startswith(NOT_COMPILER):
            out.append(f)
    return out


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A hash of the compiler's own sources (:func:`compiler_sources`), so editing the compiler invalidates cached
    kernels even without a version bump."""
    return sources_digest(Path(__file__).resolve().parent.parent)


def sources_digest(root: Path) -> str:
    """The hash of :func:`compiler_sources` under the package folder ``root`` (names and contents)."""
    h = hashlib.sha256()
    for f in compiler_sources(root):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def tvm_version() -> str:
    """TVM's version (the package metadata, else ``tvm.__version__``)."""
    try:
        from importlib.metadata import version

        v = version("apache-tvm")
    except Exception:  # noqa: BLE001
        try:
            import tvm

            v = str(tvm.__version__)
        except Exception:  # noqa: BLE001
            v = "unknown"
    return v


def versions() -> dict[str, str]:
    """The versions in every key: tilelang_core, TVM, and the hash of the compiler's sources."""
    from .. import __version__

    return {"tilelang_core": __version__, "tvm": tvm_version(), "compiler": compiler_digest()}


def key_ingredients(out_idx: list[int], target: dict[str, Any], pass_configs: Any = None,
                    toolchain: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything but the program text that goes into :func:`disk_key` (also stored in the entry's meta.json).
    ``pass_configs``: a :class:`~tilelang_core.pass_config.PassConfig` (or dict); ``toolchain``: what identifies the
    code generator and compiler below us (the LLVM version on the CPU; the CUDA compiler's identity and the
    ``compile_flags`` on CUDA)."""
    from ..pass_config import resolve

    return {"out_idx": list(out_idx), "target": target, "versions": versions(),
            "pass_configs": resolve(pass_configs).key(), "toolchain": toolchain or {}}


def disk_key(program_text: str, out_idx: list[int], target: dict[str, Any], pass_configs: Any = None,
             toolchain: dict[str, Any] | None = None) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(key_ingredients(out_idx, target, pass_configs, toolchain), sort_keys=True,
                        default=repr).encode())
    h.update(program_text.encode())
    return h.hexdigest()[:32]


def disk_get(key: str) -> Artifact | None:
    if not disk_cache_enabled():
        return None
    path = cache_dir() / "kernels" / key
    if not path.exists():
        return None
    try:
        art = load_artifact(path)
    except TileLangRuntimeError:
        STATS.corrupt_rebuilt += 1
        shutil.rmtree(path, ignore_errors=True)
        return None
    STATS.disk_hits += 1
    return art


def new_build_dir() -> Path:
    root = cache_dir() / "kernels" if disk_cache_enabled() else Path(tempfile.gettempdir()) / "tilelang_core_nocache"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))


def disk_put(key: str, tmp_dir: Path, artifact: Artifact) -> Artifact:
    """Move a finished build into place atomically; returns the artifact at its final path."""
    if not disk_cache_enabled():
        return artifact
    final = cache_dir() / "kernels" / key
    try:
        os.rename(tmp_dir, final)
    except OSError:
        # another process won the race (or a stale entry is there): keep theirs if it is sound
        existing = disk_get(key)
        if existing is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            STATS.disk_hits -= 1  # not a hit from the caller's point of view
            return existing
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp_dir, final)
    artifact.path = final
    return artifact

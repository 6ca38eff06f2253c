"""The kernel cache: in memory per process, and on disk across processes.

The disk key is a SHA-256 over everything that can change the generated code: the program as parsed (its
TVMScript text, which includes every specialised argument), ``out_idx``, the resolved target, and the versions
of tilelang_core, TVM and the compiler pipeline. Entries are written to a temporary folder and renamed into
place (atomic on one filesystem), so a reader never sees half an entry; an entry whose metadata or library
hash does not check out is removed and rebuilt.

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

PIPELINE_VERSION = "cpu-2"


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


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A hash of the compiler's own sources (language, passes, backends, runtime shim), so editing the compiler
    invalidates cached kernels even without a version bump."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in ("language", "transform", "backend", "runtime"):
        for f in sorted((root / sub).rglob("*")):
            if f.suffix in (".py", ".c", ".h", ".cu", ".cuh") and f.is_file():
                h.update(f.relative_to(root).as_posix().encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def versions() -> dict[str, str]:
    from .. import __version__

    try:
        from importlib.metadata import version

        tvm_version = version("apache-tvm")
    except Exception:  # noqa: BLE001
        tvm_version = "unknown"
    return {"tilelang_core": __version__, "tvm": tvm_version, "pipeline": PIPELINE_VERSION,
            "compiler": compiler_digest()}


def disk_key(program_text: str, out_idx: list[int], target: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"out_idx": out_idx, "target": target, "versions": versions()}, sort_keys=True).encode())
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

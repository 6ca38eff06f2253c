"""The kernel cache: in memory per process, and on disk across processes.

The disk key is a SHA-256 over everything that can change the generated code: the program as parsed (its
TVMScript text, which includes every specialised argument), ``out_idx``, the resolved target, the
``pass_configs`` (every option, defaults filled in), the compiler's own sources (:func:`compiler_digest`), the
versions of tilelang_core and TVM, the LLVM version on the CPU, and for CUDA the identity of the CUDA compiler
(nvcc's path, ``--version`` and flags, or NVRTC's version) with the kernel's ``compile_flags``. (The CPU key's
toolchain part is the LLVM major version and ``$CC``, which compiles the runtime shim.)

Faults (docs/design.md, "The kernel cache under faults and threads"): entries are built in a locked temporary
folder (:mod:`.build_dirs`) and renamed into place (atomic on one filesystem), so a reader never sees half an
entry and a killed compile's folder is swept by the next process. Each entry holds ``checksums.json``, the SHA-256
of every other file in it; an entry that does not check out (a truncated or garbage file, an edited ``meta.json``,
a file or a dangling link in place of the folder) is discarded with a :class:`CacheWarning` and rebuilt. An unusable
cache folder falls back to a private one (:mod:`.cache_location`).

Threads: :func:`key_lock` makes one thread compile a key while the others wait for its result; the counters
(:data:`STATS`) are updated under a lock (:func:`count`). Processes: :func:`compile_lock` adds a file lock per key
(:mod:`.process_lock`), so two processes sharing a cache folder compile a kernel once.

Location: ``$TILELANG_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilelang_core``, else ``~/.cache/tilelang_core``.
``TILELANG_CORE_DISABLE_CACHE=1`` turns the disk cache off; :func:`without_disk_cache` for one thread.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TileLangRuntimeError
from ..runtime.artifact import Artifact, load_artifact, sha256_file
from . import build_dirs, process_lock
from .cache_location import (  # noqa: F401  (re-exported: the cache's public names live here)
    CacheWarning,
    cache_dir,
    cache_root,
    disk_cache_enabled,
    forget,
    private_dir,
    shim_dir,
    warn_once,
    without_disk_cache,
)

CHECKSUMS = "checksums.json"
BUILD_PREFIX = ".tmp-"


@dataclass
class CacheStats:
    """Counters since process start (or the last :func:`reset_stats`); change them through :func:`count`."""

    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    corrupt_rebuilt: int = 0

    def as_dict(self) -> dict[str, int]:
        with _LOCK:
            return dict(self.__dict__)


STATS = CacheStats()
_LOCK = threading.Lock()
_MEMORY: dict[Any, Any] = {}
_KEY_LOCKS: dict[Any, list[Any]] = {}  # key -> [lock, number of threads holding or waiting for it]
_SWEPT: set[str] = set()


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the counter ``name`` of :data:`STATS` (thread-safe)."""
    with _LOCK:
        setattr(STATS, name, getattr(STATS, name) + n)


def reset_stats() -> None:
    with _LOCK:
        STATS.__dict__.update(CacheStats().__dict__)


@contextlib.contextmanager
def key_lock(key: Any) -> Iterator[None]:
    """Single-flight: one thread at a time inside the block for one ``key`` (others for other keys run on). The
    lock table holds only keys in use, so it does not grow with the number of kernels."""
    with _LOCK:
        entry = _KEY_LOCKS.setdefault(key, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _LOCK:
            entry[1] -= 1
            if entry[1] == 0:
                del _KEY_LOCKS[key]


@contextlib.contextmanager
def compile_lock(key: str) -> Iterator[None]:
    """Single flight for one disk key: threads of this process (:func:`key_lock`), then other processes sharing
    the cache folder (:mod:`.process_lock`, an ``flock`` that never waits forever)."""
    with key_lock(key):
        root = cache_root()
        with process_lock.hold(None if root is None else root / "kernels", key):
            yield


def memory_get(key: Any) -> Any:
    with _LOCK:
        k = _MEMORY.get(key)
    if k is not None:
        count("memory_hits")
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


def load_entry(path: Path) -> Artifact:
    """Load and verify a cache entry: every file against ``checksums.json`` (the library too), the metadata, and
    the generated sources read into memory. Raises :class:`TileLangRuntimeError` saying what is wrong."""
    try:
        recorded = json.loads((path / CHECKSUMS).read_text())
        if not isinstance(recorded, dict) or "meta.json" not in recorded:
            raise ValueError(f"{CHECKSUMS} lists no meta.json")
        for name, digest in recorded.items():
            if sha256_file(path / name) != digest:
                raise ValueError(f"{name} does not match its recorded SHA-256")
    except (OSError, ValueError, TypeError) as e:
        raise TileLangRuntimeError(f"corrupt or incomplete kernel cache entry at {path}: {e}") from e
    art = load_artifact(path, verify=False)  # the library was just checked against checksums.json
    if art.library not in recorded or any(f not in recorded for f in art.sources.values()):
        raise TileLangRuntimeError(f"corrupt kernel cache entry at {path}: a file it names is not checksummed")
    try:
        art.keep_sources()
    except OSError as e:
        raise TileLangRuntimeError(f"corrupt kernel cache entry at {path}: {e}") from e
    return art


def _lookup(key: str, path: Path | None = None) -> Artifact | None:
    """The sound entry for ``key`` (at ``path``, else in the cache) or None; a broken one is discarded (with a
    warning) so it can be rebuilt."""
    if path is None:
        root = cache_root()
        path = None if root is None else root / "kernels" / key
    if path is None or not os.path.lexists(path):
        return None
    try:
        return load_entry(path)
    except TileLangRuntimeError as e:
        count("corrupt_rebuilt")
        warnings.warn(f"discarding a broken kernel cache entry and compiling it again: {e}", CacheWarning,
                      stacklevel=5)
        build_dirs.discard(path)
        return None


def disk_get(key: str) -> Artifact | None:
    art = _lookup(key)
    if art is not None:
        count("disk_hits")
    return art


def new_build_dir() -> build_dirs.BuildDir:
    """A locked folder to build a kernel in: inside the cache (so the finished build can be renamed into place),
    or in the process's private folder when the disk cache is off. The first build of a process in a cache folder
    sweeps the folders that killed compiles left there."""
    root = cache_root()
    if root is None:
        return build_dirs.BuildDir.create(private_dir() / "builds", prefix="build-")
    kernels = root / "kernels"
    with _LOCK:
        first = str(kernels) not in _SWEPT
        _SWEPT.add(str(kernels))
    if first:
        build_dirs.sweep(kernels, prefix=BUILD_PREFIX)
    try:
        build = build_dirs.BuildDir.create(kernels, prefix=BUILD_PREFIX)
    except OSError:  # the cache folder went away or became unwritable since it was checked: check it again
        forget(root)
        root = cache_root()
        if root is None:
            return build_dirs.BuildDir.create(private_dir() / "builds", prefix="build-")
        kernels = root / "kernels"
        build = build_dirs.BuildDir.create(kernels, prefix=BUILD_PREFIX)
    build.entries = kernels
    return build


def write_checksums(folder: Path) -> None:
    """Record the SHA-256 of every file in a finished build (what :func:`load_entry` verifies)."""
    sums = {f.name: sha256_file(f) for f in sorted(folder.iterdir()) if f.is_file() and f.name != CHECKSUMS}
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=1, sort_keys=True))


def disk_put(key: str, build: build_dirs.BuildDir, artifact: Artifact) -> Artifact:
    """Move a finished build into the cache atomically; returns the artifact at its final path (the sound entry
    another process put there first, if one did). When the disk cache is off, or the entry cannot be written, the
    build stays where it is and lives as long as its kernel (:func:`tie_to_kernel`)."""
    artifact.keep_sources()
    if build.entries is None:
        return artifact
    final = build.entries / key
    write_checksums(build.path)
    for _ in range(3):
        try:
            os.rename(build.path, final)
        except OSError:
            # another process won the race (keep theirs if sound), or something broken is in the way
            existing = _lookup(key, final)
            if existing is not None:
                build.remove()
                return existing
            continue
        build.published = True
        build.release()
        artifact.path = final
        return artifact
    warn_once(f"unwritable:{final}", f"could not write the kernel cache entry {final}; this kernel is kept for "
              "this process only")
    return artifact


def tie_to_kernel(build: build_dirs.BuildDir | None, kernel: Any) -> None:
    """An unpublished build folder (disk cache off, or the entry could not be written) is removed when its kernel
    is garbage-collected (or at exit), so uncached compiles leave nothing behind."""
    if build is not None and not build.published:
        weakref.finalize(kernel, build.remove)

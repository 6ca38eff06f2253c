"""Where the disk kernel cache lives, and what happens when that place cannot be used.

The configured folder is ``$TILELANG_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilelang_core``, else
``~/.cache/tilelang_core``. Before the first write to it, a process checks that it can create the folder and write
a file in it. When it cannot (read-only, a file in the way, another user's folder, a read-only filesystem), the
process warns once (a :class:`CacheWarning` naming the folder and the reason) and caches in a private temporary
folder of its own instead, removed when the process exits: kernels still compile and run, they are just not
shared with other processes. Nothing raises a raw ``OSError`` at the user.

The disk cache is off with ``TILELANG_CORE_DISABLE_CACHE=1``, or for the calling thread only inside
:func:`without_disk_cache` (a context variable, so other threads' compiles keep their cache and the process
environment is never touched). Uncached builds go to the private folder too (never to the configured cache), and
each is removed when its kernel is garbage-collected.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from . import build_dirs


class CacheWarning(UserWarning):
    """The disk kernel cache cannot be used as configured (or held a broken entry); what was done instead."""


_BYPASS: contextvars.ContextVar[bool] = contextvars.ContextVar("tilelang_core_bypass_disk_cache", default=False)
_LOCK = threading.Lock()
_USABLE: dict[str, Path] = {}  # configured folder -> the folder this process caches in for it
_WARNED: set[str] = set()
_PRIVATE: build_dirs.BuildDir | None = None


def cache_dir() -> Path:
    """The configured cache folder (read from the environment at each call; it may not be usable)."""
    env = os.environ.get("TILELANG_CORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilelang_core"


def disk_cache_enabled() -> bool:
    """False under ``TILELANG_CORE_DISABLE_CACHE=1`` (or ``true``/``yes``) and inside :func:`without_disk_cache`."""
    if _BYPASS.get():
        return False
    return os.environ.get("TILELANG_CORE_DISABLE_CACHE", "") not in ("1", "true", "yes")


@contextlib.contextmanager
def without_disk_cache() -> Iterator[None]:
    """Compile without the disk cache (no lookup, no entry written) in the calling thread, for the ``with`` block.

    Other threads are not affected and the process environment is not changed (unlike setting
    ``TILELANG_CORE_DISABLE_CACHE``, which applies to every thread). The memory cache of a ``@jit`` factory still
    applies: use a new factory to force a compile."""
    token = _BYPASS.set(True)
    try:
        yield
    finally:
        _BYPASS.reset(token)


def warn_once(topic: str, message: str) -> None:
    """A :class:`CacheWarning`, at most once per process for each ``topic``."""
    with _LOCK:
        if topic in _WARNED:
            return
        _WARNED.add(topic)
    warnings.warn(message, CacheWarning, stacklevel=4)


def private_dir() -> Path:
    """This process's own temporary folder (mode 0700): uncached builds, and the cache when the configured one
    cannot be used. Removed at exit; a folder left by a killed process is removed by the next one (see
    :mod:`.build_dirs`)."""
    global _PRIVATE
    with _LOCK:
        if _PRIVATE is None or not _PRIVATE.path.is_dir():
            parent = Path(tempfile.gettempdir())
            build_dirs.sweep(parent, prefix=PRIVATE_PREFIX, owned_only=True)
            _PRIVATE = build_dirs.BuildDir.create(parent, prefix=PRIVATE_PREFIX)
            atexit.register(_remove_private, _PRIVATE)
        return _PRIVATE.path


PRIVATE_PREFIX = f"tilelang_core-{os.getuid() if hasattr(os, 'getuid') else 'user'}-proc-"


def _remove_private(d: build_dirs.BuildDir) -> None:
    shutil.rmtree(d.path, ignore_errors=True)
    d.release()


def cache_root() -> Path | None:
    """The folder this process caches kernels in: the configured one when usable, else (after one warning) a
    private one; None when the disk cache is off."""
    if not disk_cache_enabled():
        return None
    want = cache_dir()
    with _LOCK:
        root = _USABLE.get(str(want))
    if root is not None and root.is_dir():
        return root
    problem = unusable(want)
    if problem is None:
        root = want
    else:
        root = private_dir() / "cache"
        root.mkdir(exist_ok=True)
        warn_once(f"unusable:{want}", f"the kernel cache folder {want} cannot be used ({problem}); kernels are "
                  f"cached for this process only, in {root}. Point TILELANG_CORE_CACHE_DIR at a folder you can "
                  "write, or set TILELANG_CORE_DISABLE_CACHE=1 to turn the disk cache off")
    with _LOCK:
        _USABLE[str(want)] = root
    return root


def forget(root: Path) -> None:
    """Re-check ``root`` before its next use (it failed while in use: deleted, made read-only ...)."""
    with _LOCK:
        for k, v in list(_USABLE.items()):
            if v == root:
                del _USABLE[k]


def unusable(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the cache (None when it can): it must be a folder this process can create and
    write a file in (a real write, so a read-only filesystem is caught even for root)."""
    kernels = folder / "kernels"
    try:
        kernels.mkdir(parents=True, exist_ok=True)
        if not kernels.is_dir():
            return f"{kernels} is not a folder"
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=kernels)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        return f"{e.strerror or e}{where}"
    return None


def shim_dir() -> Path:
    """Where the CPU runtime shim object is kept: the cache folder, or the private folder when the disk cache is
    off (an uncached compile writes nothing to the configured cache)."""
    root = cache_root()
    return root if root is not None else private_dir()

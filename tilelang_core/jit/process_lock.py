"""Cross-process single flight for one kernel cache key: two processes asking for the same kernel compile it once.

Threads of one process already wait for each other (``cache.key_lock``); this adds the same between processes
sharing a cache folder. The lock is an ``flock`` on ``<cache>/kernels/.lock-<key>``, a file beside the entry it
guards. The kernel drops an ``flock`` when its holder dies, however it dies (``kill -9`` included), so a crashed
compile never blocks the next one. A holder that is alive but stuck (stopped, or a compile that never ends) is
waited for at most :data:`WAIT_SECONDS`; then the waiter warns (``CacheWarning``) and compiles the kernel itself,
which is always safe: entries are built apart and renamed into place, and the loser of that race keeps the
winner's entry (``cache.disk_put``). When no lock file can be made (a read-only cache, no ``fcntl``), compiles run
unlocked in the same way, never failing for want of a lock.

The lock file is removed by its holder on release, while still holding it; a waiter that then acquires the lock of
the removed file (it had opened it before the removal) notices that the path no longer names the file it locked and
tries again, so two processes never both believe they hold the key.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from .cache_location import CacheWarning

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None  # type: ignore[assignment]

LOCK_PREFIX = ".lock-"
WAIT_SECONDS = 300.0  # the longest a compile waits for another process's compile of the same kernel
_BUSY = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


def lock_path(folder: Path, key: str) -> Path:
    """The lock file of ``key`` in a cache's ``kernels`` folder."""
    return folder / f"{LOCK_PREFIX}{key}"


@contextlib.contextmanager
def hold(folder: Path | None, key: str, wait_seconds: float | None = None) -> Iterator[bool]:
    """Hold the cross-process lock of ``key`` in ``folder`` (None: no disk cache, nothing to lock) for the block;
    yields whether it is held (False after a timeout or when no lock file could be made: the block runs anyway)."""
    if folder is None or fcntl is None:
        yield False
        return
    path = lock_path(folder, key)
    fd = _acquire(path, WAIT_SECONDS if wait_seconds is None else wait_seconds)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                path.unlink()  # while still holding it: see the module docstring
            os.close(fd)


def _acquire(path: Path, wait_seconds: float) -> int | None:
    deadline = time.monotonic() + wait_seconds
    delay = 0.005
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # an empty cache has no kernels folder yet
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError:
            return None  # a read-only or vanished cache folder: compile unlocked
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in _BUSY:  # e.g. ENOLCK on a network filesystem: compile unlocked
                        os.close(fd)
                        return None
                if time.monotonic() >= deadline:
                    os.close(fd)
                    warnings.warn(_timeout_message(path, wait_seconds), CacheWarning, stacklevel=5)
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            if _still_named(path, fd):
                return fd
            os.close(fd)  # we locked a file its holder had already removed: lock the current one
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise


def _still_named(path: Path, fd: int) -> bool:
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _timeout_message(path: Path, wait_seconds: float) -> str:
    return (f"another process has been compiling this kernel for {wait_seconds:g} s (lock {path}); compiling it "
            "here too (safe: the first finished copy is kept)")

"""Build folders that a killed process cannot leave behind for good, and removal that readers never see half-done.

A compile writes its kernel into a fresh folder ``<parent>/<prefix><token>`` and renames it into the cache when
done. Beside the folder lies ``<prefix><token>.lock``, created (exclusively) and ``flock``-ed by the builder
*before* the folder exists and held until the folder is renamed away or removed. The kernel lets go of a flock when
its process dies, however it dies (``kill -9`` included), so :func:`sweep` can tell a live build (lock held) from
the remains of a killed one (lock free, or no lock file at all) without guessing from ages or process ids, and
removes only the latter. The same scheme marks each process's private temporary folder (see
:mod:`.cache_location`).

:func:`discard` removes a cache entry whatever it has become (a folder, a file, a link, a dangling link): a folder
is first renamed to a ``.trash-`` name, so no reader sees it half-deleted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None  # type: ignore[assignment]

TRASH_PREFIX = ".trash-"


class BuildDir:
    """A folder under construction, with the lock that tells :func:`sweep` its builder is alive."""

    def __init__(self, path: Path, lock_fd: int | None, lock_path: Path | None):
        self.path = path
        self._lock_fd = lock_fd
        self._lock_path = lock_path
        self.published = False  # renamed into the cache (then its lifetime is the cache's)
        self.entries: Path | None = None  # the cache's kernels folder it is meant for (None: never published)

    @classmethod
    def create(cls, parent: Path, prefix: str) -> BuildDir:
        """A new empty folder ``parent/<prefix><token>`` (mode 0700) with its lock held."""
        parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            name = prefix + secrets.token_hex(6)
            lock_path = parent / f"{name}.lock"
            try:
                fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            except FileExistsError:
                continue
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            path = parent / name
            try:
                path.mkdir(mode=0o700)
            except BaseException:
                _unlink(lock_path)
                os.close(fd)
                raise
            return cls(path, fd, lock_path)
        raise FileExistsError(f"could not make a fresh build folder in {parent}")

    def release(self) -> None:
        """Drop the lock (after the folder was renamed away or removed)."""
        if self._lock_fd is not None:
            if self._lock_path is not None:
                _unlink(self._lock_path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        """Delete the folder and drop the lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


def sweep(parent: Path, prefix: str, owned_only: bool = False) -> int:
    """Remove the folders ``parent/<prefix>*`` whose builder is gone (their lock is free or missing), and
    ``.trash-*`` folders a killed remover left. Never touches a folder whose lock is held. ``owned_only``: only
    this user's (in a shared folder such as /tmp). Returns how many were removed; errors are ignored (another
    process may be sweeping too)."""
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name in names:
        path = parent / name
        if name.startswith(TRASH_PREFIX) and not owned_only:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
            continue
        if not name.startswith(prefix) or name.endswith(".lock"):
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if owned_only and uid is not None and st.st_uid != uid:
            continue
        if _builder_alive(parent / f"{name}.lock"):
            continue
        discard(path)
        _unlink(parent / f"{name}.lock")
        removed += 1
    return removed


def _builder_alive(lock_path: Path) -> bool:
    """True while some process holds ``lock_path``'s flock. A missing lock file means no live builder: the lock is
    created before the folder and removed only after it."""
    if fcntl is None:
        return True  # cannot tell: never remove
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also releases the lock we may have taken
    return False


def discard(path: Path) -> None:
    """Remove ``path`` whatever it is (folder, file, link, dangling link); a folder atomically leaves its name
    first. Quietly does nothing when it is already gone."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
            return
        trash = path.with_name(TRASH_PREFIX + secrets.token_hex(6))
        try:
            os.rename(path, trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()

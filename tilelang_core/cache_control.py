"""TileLang's cache switches: ``tilelang.disable_cache()``, ``enable_cache()``, ``is_cache_enabled()``.

They turn the on-disk kernel cache off and on for this process and the compile workers it starts, through the
same ``TILELANG_CORE_DISABLE_CACHE`` setting the README documents (so a worker process sees what its parent
chose). A ``@jit`` factory's in-memory cache still returns the kernel it compiled for the same arguments: that is
one object reused, not a stale build.
"""

from __future__ import annotations

import os

_VAR = "TILELANG_CORE_DISABLE_CACHE"


def disable_cache() -> None:
    """Compile without reading or writing the disk cache from now on."""
    os.environ[_VAR] = "1"


def enable_cache() -> None:
    """Use the disk cache again (the default)."""
    os.environ.pop(_VAR, None)


def is_cache_enabled() -> bool:
    """Whether compiles use the disk cache (False after :func:`disable_cache` or with the variable set)."""
    return os.environ.get(_VAR, "") not in ("1", "true", "yes")

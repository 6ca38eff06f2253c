"""TileLang's buffer predicates (``is_global``, ``is_shared``, ``is_fragment``, ``is_local``): which memory a
buffer (or a region or load of one) lives in, read from its scope string. Our scopes are TileLang's: ``global``,
``shared`` / ``shared.dyn``, ``local.fragment``, ``local`` and ``local.var``."""

from __future__ import annotations

from typing import Any


def _scope(obj: Any) -> str:
    buf = getattr(obj, "buffer", obj)  # a BufferRegion or BufferLoad names its buffer
    scope = getattr(buf, "scope", None)
    if scope is None:
        raise TypeError(f"expected a buffer, a buffer region or a load, got {type(obj).__name__}")
    return str(scope() if callable(scope) else scope)


def is_global(obj: Any) -> bool:
    return _scope(obj) == "global"


def is_shared(obj: Any, allow_dynamic: bool = True) -> bool:
    s = _scope(obj)
    return s == "shared" or (allow_dynamic and s == "shared.dyn")


def is_shared_dynamic(obj: Any) -> bool:
    return _scope(obj) == "shared.dyn"


def is_fragment(obj: Any) -> bool:
    return _scope(obj).startswith("local.fragment")


def is_local(obj: Any) -> bool:
    return _scope(obj) in ("local", "local.var")

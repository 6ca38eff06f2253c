"""Compiling a cell's kernel through tilelang_core's public API, with a session cache.

Why this module exists: re-running an unchanged cell must be instant ("cached"), while a changed cell, argument,
library version, or a changed user variable the cell reads must recompile. The key therefore covers the cell text,
the factory arguments, ``out_idx``, the target, the versions of the libraries that generate code, and a
fingerprint of the user-namespace values the cell reads. Below this cache, tilelang_core's own disk cache still
applies (a fresh kernel process finds earlier builds there: status ``disk``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import types
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError

from .cell import JIT_FACTORY, PRIM_FUNC, CellProgram

MAX_ENTRIES = 64
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))


@dataclass
class BuildResult:
    """A compiled kernel and how it was obtained."""

    kernel: Any  # tilelang_core.JITKernel
    status: str  # "compiled" | "disk" (tilelang_core's disk cache) | "cached" (this session)
    seconds: float  # wall time of this request: the compile, or the cache lookup
    compile_seconds: float  # what the compile itself took when it happened
    key: str


def library_versions() -> dict[str, str]:
    """Versions of everything that generates code; a change recompiles."""
    from importlib.metadata import PackageNotFoundError, version

    import tilelang_core

    from . import __version__

    out = {"workbench": __version__, "tilelang_core": tilelang_core.__version__}
    for dist in ("apache-tvm", "apache-tvm-ffi"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "absent"
    return out


def _fingerprint_value(value: Any) -> str | None:
    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset)) and all(isinstance(v, _SIMPLE) for v in value):
        return repr(value)
    if isinstance(value, types.FunctionType):  # a helper defined in another cell: its code counts
        code = value.__code__
        return hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16]
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__} {getattr(value, '__version__', '')}"
    return None  # other objects (tensors, widgets ...) do not shape the program


def namespace_fingerprint(names: list[str], namespace: dict[str, Any]) -> dict[str, str]:
    """The user-namespace values, among ``names``, that can change the program the cell builds."""
    out = {}
    for n in names:
        if n in namespace:
            fp = _fingerprint_value(namespace[n])
            if fp is not None:
                out[n] = fp
    return out


def cache_key(cell_text: str, kind: str, kwargs: dict[str, Any], out_idx: list[int], target: Any,
              fingerprint: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(cell_text.encode())
    h.update(json.dumps({"kind": kind, "kwargs": {k: repr(v) for k, v in sorted(kwargs.items())},
                         "out_idx": out_idx, "target": repr(target), "ns": fingerprint,
                         "versions": library_versions()}, sort_keys=True).encode())
    return h.hexdigest()[:24]


def jit_decorator() -> Any:
    """``tilelang_core.jit`` (the decorator), whatever the state of the ``tilelang_core.jit`` attribute."""
    import tilelang_core

    jit = tilelang_core.jit
    return jit.jit if isinstance(jit, types.ModuleType) else jit  # robust to `import tilelang_core.jit` first


def _disk_cache_bypassed(force: bool) -> contextlib.AbstractContextManager[None]:
    """``--force``: bypass tilelang_core's disk cache too, for this compile only (``tilelang_core.without_disk_cache``
    applies to the calling thread and never touches the process environment, so other threads' compiles keep
    their cache)."""
    import tilelang_core

    return tilelang_core.without_disk_cache() if force else contextlib.nullcontext()


def effective_out_idx(program: CellProgram, out_idx: list[int] | None) -> list[int]:
    """``--out-idx``, else what ``@tilelang.jit(out_idx=...)`` said, else the last parameter."""
    if program.eager is not None:  # its outputs are the T.empty tensors it declares
        if out_idx is not None:
            raise UsageError("--out-idx: an eager @jit function's outputs are the tensors it declares with T.empty")
        return []
    if out_idx is not None:
        return out_idx
    if program.kind == JIT_FACTORY and program.obj.out_idx is not None:
        given = program.obj.out_idx
        return [given] if isinstance(given, int) else list(given)
    return [-1]


def effective_target(program: CellProgram, target: str) -> Any:
    if target == "auto" and program.kind == JIT_FACTORY:
        return program.obj.target
    return target


def compile_program(program: CellProgram, kwargs: dict[str, Any], out_idx: list[int], target: Any,
                    name: str) -> Any:
    """Compile with the public API: ``tilelang_core.compile`` for a prim_func, ``tilelang_core.jit`` otherwise."""
    import tilelang_core

    if program.kind == PRIM_FUNC:
        return tilelang_core.compile(program.obj, out_idx=out_idx, target=target, name=name)
    options = getattr(program.obj, "options", None)  # the cell's own @tilelang.jit(pass_configs=...) stays in force
    given = getattr(getattr(options, "pass_configs", None), "explicit", dict)()
    if program.eager is not None:  # the eager spelling: .compile(...) with the T.const sizes as keywords
        return jit_decorator()(target=target, pass_configs=given or None)(program.function).compile(**kwargs)
    return jit_decorator()(out_idx=out_idx, target=target, pass_configs=given or None)(program.function)(**kwargs)


class BuildCache:
    """Kernels compiled in this session, least recently used evicted first."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get(self, key: str) -> tuple[Any, float] | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: str, kernel: Any, compile_seconds: float) -> None:
        with self._lock:
            self._entries[key] = (kernel, compile_seconds)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def build(self, program: CellProgram, cell_text: str, kwargs: dict[str, Any], out_idx: list[int],
              target: Any, name: str, force: bool = False) -> BuildResult:
        """Compile, or return the kernel compiled earlier for the same key."""
        t0 = time.perf_counter()
        fp = namespace_fingerprint(program.free_names, program.namespace)
        key = cache_key(cell_text, program.kind, kwargs, out_idx, target, fp)
        hit = None if force else self.get(key)
        if hit is not None:
            kernel, compile_seconds = hit
            return BuildResult(kernel, "cached", time.perf_counter() - t0, compile_seconds, key)
        with _disk_cache_bypassed(force):
            kernel = compile_program(program, kwargs, out_idx, target, name)
        seconds = time.perf_counter() - t0
        status = "disk" if getattr(kernel, "cache_status", "compiled") == "disk" else "compiled"
        self.put(key, kernel, seconds)
        return BuildResult(kernel, status, seconds, seconds, key)

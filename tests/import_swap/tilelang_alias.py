"""``tilelang_core`` under the name ``tilelang``, for programs written for TileLang (``import tilelang``,
``import tilelang.language as T``) to run unchanged.

How: ``tilelang`` is a small proxy module whose attributes are ``tilelang_core``'s, and a finder on
``sys.meta_path`` answers every ``tilelang.<sub>`` import with the module object ``tilelang_core.<sub>`` (the
same object, never a second copy: a second copy of the language would register TVM's ops twice and hold its own
caches). A proxy rather than ``sys.modules["tilelang"] = tilelang_core`` because importing a subpackage binds it
on its parent: ``import tilelang.jit`` would otherwise replace the ``jit`` decorator on ``tilelang_core`` by the
``jit`` subpackage.

This is test tooling (the import-swap suite runs each program in a child process with :func:`install` called
first); a user's program changes its import instead (``import tilelang_core as tilelang``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

NAME, REAL = "tilelang", "tilelang_core"


class _Package(types.ModuleType):
    """``tilelang``: every attribute is ``tilelang_core``'s; a submodule bound here never hides one of them."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(REAL), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("__") and hasattr(importlib.import_module(REAL), name):
            return  # the import system binding tilelang.<sub> on its parent: keep tilelang_core's own attribute
        super().__setattr__(name, value)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``tilelang.<sub>`` -> the already imported (or now imported) ``tilelang_core.<sub>`` module object."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith(NAME + "."):
            return None
        real = REAL + fullname[len(NAME):]
        if real not in sys.modules and importlib.util.find_spec(real) is None:
            return None  # "No module named 'tilelang.x'", as for any missing module
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        mod = importlib.import_module(REAL + spec.name[len(NAME):])
        self._specs = getattr(self, "_specs", {})
        self._specs[spec.name] = getattr(mod, "__spec__", None)  # the import system overwrites it; put it back
        return mod

    def exec_module(self, module: Any) -> None:
        original = self._specs.pop(module.__spec__.name, None)
        if original is not None:
            module.__spec__ = original


def install() -> None:
    """Make ``import tilelang`` (and ``tilelang.<sub>``) give ``tilelang_core``. Idempotent."""
    if isinstance(sys.modules.get(NAME), _Package):
        return
    real = importlib.import_module(REAL)
    pkg = _Package(NAME, real.__doc__)
    pkg.__path__ = []  # a package, so that ``import tilelang.language`` asks the finders
    sys.modules[NAME] = pkg
    for name, mod in list(sys.modules.items()):  # submodules imported already: the same objects under both names
        if name.startswith(REAL + "."):
            sys.modules.setdefault(NAME + name[len(REAL):], mod)
    sys.meta_path.insert(0, _Finder())

"""The body of a ``%%tilekernel`` cell as Python source the compiler can find again.

Why this module exists: TVMScript's parser reads a ``@T.prim_func``'s source through ``inspect``/``linecache``, and
our diagnostics quote the user's line. A cell has no file, so we register its text in ``linecache`` under a unique
name (``<tilekernel-NAME-HASH>``) and compile it with that name: the parser finds the source, and every location
(parser diagnostics, pass errors, Python tracebacks) names that pseudo-file, which we map back to the cell's lines.
This module also runs the cell in a namespace seeded from the user's and picks out the kernel factory it defines.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import types
from dataclasses import dataclass, field
from typing import Any

FACTORY = "factory"  # a plain function returning a @T.prim_func
JIT_FACTORY = "jit_factory"  # a function already decorated with @tilelang.jit
PRIM_FUNC = "prim_func"  # a @T.prim_func defined directly in the cell


@dataclass(frozen=True)
class CellSource:
    """A cell body registered in ``linecache``; line 1 of the body is line ``first_line`` of the notebook cell."""

    name: str
    text: str
    filename: str
    first_line: int = 2  # line 1 of a notebook cell is the %%tilekernel line

    @classmethod
    def register(cls, name: str, text: str) -> CellSource:
        """Register ``text`` in ``linecache`` under a name unique to its content; idempotent."""
        if not text.endswith("\n"):
            text += "\n"
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        filename = f"<tilekernel-{name}-{digest}>"
        # mtime None: linecache.checkcache() leaves the entry alone (as for IPython's own cells)
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        return cls(name=name, text=text, filename=filename)

    def lines(self) -> list[str]:
        return self.text.splitlines()

    def line(self, body_line: int) -> str:
        """The text of body line ``body_line`` (1-based), or ''."""
        lines = self.lines()
        return lines[body_line - 1] if 1 <= body_line <= len(lines) else ""

    def cell_line(self, body_line: int) -> int:
        """The notebook cell's line number of body line ``body_line``."""
        return body_line + self.first_line - 1


@dataclass
class CellProgram:
    """What a cell defines: the kernel object, its kind, and the names it reads from the user namespace."""

    kind: str
    obj: Any
    namespace: dict[str, Any]
    free_names: list[str] = field(default_factory=list)

    @functools.cached_property
    def eager(self) -> Any:
        """The eager-spelled ``@jit`` function (a kernel written without an inner ``@T.prim_func``: ``T.const``,
        ``T.empty``, annotated tensor parameters) as tilelang_core's ``@jit`` makes it, else None. It offers
        ``compile(**args_and_sizes)``, ``sizes`` (the ``T.const`` names) and ``tensor_params``."""
        if self.kind == JIT_FACTORY:
            return self.obj if getattr(self.obj, "eager", False) else None
        if self.kind != FACTORY:
            return None
        from .build import jit_decorator

        try:
            made = jit_decorator()(self.obj)
        except Exception:  # noqa: BLE001 - not a function the core can wrap: the classic path reports it
            return None
        return made if getattr(made, "eager", False) else None

    @property
    def function(self) -> Any:
        """The Python function to inspect for parameters (the undecorated factory), or None for a prim_func."""
        if self.kind == JIT_FACTORY:
            return self.obj.factory
        return self.obj if self.kind == FACTORY else None


class CellDefinitionError(Exception):
    """The cell ran but does not define a usable kernel factory (message says what was found)."""


def parse(cell: CellSource) -> ast.Module:
    """Parse the cell body; raises SyntaxError whose filename is the cell's pseudo-file."""
    return ast.parse(cell.text, filename=cell.filename)


def free_names(tree: ast.Module) -> list[str]:
    """Names the cell reads but never binds: its dependencies on the user namespace (part of the cache key)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return sorted(loaded - bound)


def _top_level_defs(tree: ast.Module) -> list[str]:
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def classify(obj: Any) -> str | None:
    """The kind of kernel object ``obj`` is, or None."""
    if type(obj).__name__ == "PrimFunc" and hasattr(obj, "params") and hasattr(obj, "body"):
        return PRIM_FUNC
    if callable(getattr(obj, "get_program", None)) and isinstance(getattr(obj, "factory", None), types.FunctionType):
        return JIT_FACTORY
    if isinstance(obj, types.FunctionType):
        return FACTORY
    return None


def run(cell: CellSource, user_ns: dict[str, Any], injected: dict[str, Any]) -> CellProgram:
    """Execute the cell in a copy of ``user_ns`` plus ``injected`` and return the kernel it defines.

    The factory is the top-level definition named like the kernel; otherwise the only top-level function.
    Exceptions raised by the cell itself (SyntaxError, NameError at definition time, TVMScript diagnostics for a
    module-level ``@T.prim_func``) propagate unchanged, carrying the cell's pseudo-filename.
    """
    tree = parse(cell)
    ns = dict(user_ns)
    ns.update(injected)
    # A module name that is not in sys.modules: TVMScript's parser asks inspect.getmodule() for the function's module
    # and reads its whole source; for IPython's __main__ (no file) that fails with "could not get source code".
    ns["__name__"] = f"__tilekernel_{cell.name}__"
    exec(compile(tree, cell.filename, "exec"), ns)  # running the user's cell is the point
    defs = _top_level_defs(tree)
    candidates = [cell.name] if cell.name in ns and cell.name in _bound_names(tree) else []
    if not candidates:
        candidates = defs if len(defs) == 1 else []
    if not candidates:
        found = ", ".join(defs) or "no functions"
        raise CellDefinitionError(
            f"the cell must define the kernel factory {cell.name!r} (or exactly one top-level function); "
            f"found {found}")
    obj = ns[candidates[0]]
    kind = classify(obj)
    if kind is None:
        raise CellDefinitionError(
            f"{candidates[0]!r} is a {type(obj).__name__}; expected a kernel factory (a function returning a "
            "@T.prim_func), a @tilelang.jit factory or a @T.prim_func")
    return CellProgram(kind=kind, obj=obj, namespace=ns, free_names=free_names(tree))


def _bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set(_top_level_defs(tree))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names

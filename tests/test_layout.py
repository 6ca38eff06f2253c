"""The package layout reads as the pipeline, and the import graph keeps it so (issue 14 part 5). Every module is
found by walking the package and every import is read with ``ast`` (module-level and function-level alike), so a new
file is covered without editing this test:

* ``transform/cpu/`` never imports ``transform/cuda/`` and vice versa; ``transform/common/`` imports neither;
* no pass reaches into another module's private helpers (``from .x import _helper``, ``x._helper``);
* the runtime never imports the compiler: no runtime module imports TVM or our language / passes / backends / JIT,
  and nothing the runtime loads (transitively, module-level imports and parent packages) imports TVM, because GPU
  boxes and exported kernels run without it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG_ROOT = Path(__file__).resolve().parents[1] / "tilelang_core"
PKG = PKG_ROOT.name

# what a runtime module may not import: TVM's compiler (tvm_ffi, its runtime, is fine) and our compiling packages
COMPILER = ("tvm", f"{PKG}.language", f"{PKG}.transform", f"{PKG}.backend", f"{PKG}.jit", f"{PKG}.trace",
            f"{PKG}.autotune")


class Tree:
    """The modules of a package found by walking its folder, and their imports read with ``ast``."""

    def __init__(self, root: Path):
        self.root = root
        self.modules = {self._name(p): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}
        self._imports: dict[tuple[str, bool], list[tuple[str, tuple[str, ...], int]]] = {}

    def _name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def where(self, mod: str, line: int) -> str:
        return f"{self.modules[mod].relative_to(self.root.parent)}:{line}"

    def _package_of(self, name: str) -> str:
        return name if self.modules[name].name == "__init__.py" else name.rpartition(".")[0]

    def imports_of(self, name: str, module_level_only: bool = False) -> list[tuple[str, tuple[str, ...], int]]:
        """(imported module, names imported from it, line) for every import in module ``name`` (relative ones
        resolved); ``module_level_only``: only the statements that run when the module is imported."""
        cached = self._imports.get((name, module_level_only))
        if cached is not None:
            return cached
        tree = ast.parse(self.modules[name].read_text(), filename=str(self.modules[name]))
        if module_level_only:  # what runs on import: top-level statements, including under if/try
            nodes = [n for top in tree.body if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                    ast.ClassDef)) for n in ast.walk(top)]
        else:
            nodes = list(ast.walk(tree))
        out = []
        for node in nodes:
            if isinstance(node, ast.Import):
                out.extend((a.name, (), node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = self._package_of(name).split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                names = tuple(a.name for a in node.names)
                out.append((mod, names, node.lineno))
                for n in names:  # ``from . import x`` imports the submodule x
                    if f"{mod}.{n}" in self.modules:
                        out.append((f"{mod}.{n}", (), node.lineno))
        self._imports[(name, module_level_only)] = out
        return out

    def under(self, package: str) -> list[str]:
        return [m for m in self.modules if _in(m, package)]


def _in(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


TREE = Tree(PKG_ROOT)


def cross_target_imports(tree: Tree, package: str, forbidden: tuple[str, ...]) -> list[str]:
    pkg = tree.root.name
    return [f"{tree.where(m, line)} imports {imp}" for m in tree.under(f"{pkg}.{package}")
            for imp, _, line in tree.imports_of(m) if any(_in(imp, f"{pkg}.{f}") for f in forbidden)]


def test_the_walk_finds_the_pipeline_packages():
    # guards the test itself: if the layout moves, the checks below must not pass by finding nothing
    for package in ("transform.common", "transform.cpu", "transform.cuda", "runtime"):
        assert len(TREE.under(f"{PKG}.{package}")) >= 2, package


@pytest.mark.parametrize("package, forbidden", [
    ("transform.cpu", ("transform.cuda",)),
    ("transform.cuda", ("transform.cpu",)),
    ("transform.common", ("transform.cpu", "transform.cuda")),
])
def test_a_target_package_of_passes_never_imports_the_other_target(package, forbidden):
    bad = cross_target_imports(TREE, package, forbidden)
    assert not bad, "\n".join(bad)


def test_no_pass_reaches_into_another_modules_private_helpers():
    bad = []
    for m in TREE.under(f"{PKG}.transform"):
        for imp, names, line in TREE.imports_of(m):
            if imp == m or not _in(imp, PKG):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                bad.append(f"{TREE.where(m, line)} imports {private} from {imp}")
        # ``module._helper`` through an imported module object
        tree = ast.parse(TREE.modules[m].read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for imp, _, _ in TREE.imports_of(m):
                    for a in node.names:
                        if imp.endswith("." + a.name) and imp in TREE.modules:
                            aliases[a.asname or a.name] = imp
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if _in(a.name, PKG):
                        aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__"):
                bad.append(f"{TREE.where(m, node.lineno)} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


def _parents(mod: str) -> list[str]:
    parts = mod.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_runtime_modules_import_none_of_the_compiling_packages():
    # every import of a runtime module, even one inside a function (it would run on a GPU box without TVM)
    bad = [f"{TREE.where(m, line)} imports {imp}" for m in TREE.under(f"{PKG}.runtime")
           for imp, _, line in TREE.imports_of(m) if any(_in(imp, c) for c in COMPILER)]
    assert not bad, "\n".join(bad)


def runtime_chains_to_tvm(tree: Tree) -> list[str]:
    """Transitively: the runtime's imports, what those modules import when loaded (their module-level imports), and
    the packages above each (importing a.b.c runs a/__init__.py first)."""
    pkg = tree.root.name
    seen: dict[str, str] = {}  # module -> the chain of imports that loads it
    todo = []
    for m in tree.under(f"{pkg}.runtime"):
        seen[m] = m
        todo.append((m, False))
    bad = []
    while todo:
        m, module_level_only = todo.pop()
        for imp, _, line in tree.imports_of(m, module_level_only):
            chain = f"{seen[m]} -> {imp} ({tree.where(m, line)})"
            if _in(imp, "tvm"):
                bad.append(chain)
                continue
            for dep in [*_parents(imp), imp]:
                if dep in tree.modules and dep not in seen:
                    seen[dep] = chain if dep == imp else f"{chain} -> {dep} (its package)"
                    todo.append((dep, True))
    assert f"{pkg}.errors" not in tree.modules or f"{pkg}.errors" in seen, "the walk did not follow the imports"
    return bad


def test_what_the_runtime_loads_never_loads_tvm():
    # tilelang_core/__init__ binds the light ``jit`` decorator, which must stay free of TVM at import
    bad = runtime_chains_to_tvm(TREE)
    assert not bad, "the runtime reaches TVM's compiler:\n" + "\n".join(bad)


def test_the_layout_checker_sees_a_violation(tmp_path):
    # the checker's own control, on a copy of the layout: a cpu pass importing a cuda helper is found, with its line
    root = tmp_path / PKG
    for rel, text in {"__init__.py": "", "transform/__init__.py": "", "transform/cpu/__init__.py": "",
                      "transform/cuda/__init__.py": "", "transform/cuda/common.py": "def count_uses(): ...\n",
                      "transform/cpu/ok_cpu.py": "import os\n",
                      "transform/cpu/bad_cpu.py": "import os\n\n\ndef f():\n    from ..cuda.common import count_uses\n"
                      }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert cross_target_imports(Tree(root), "transform.cpu", ("transform.cuda",)) == [
        f"{PKG}/transform/cpu/bad_cpu.py:5 imports {PKG}.transform.cuda.common"]


def test_the_runtime_checker_follows_imports_through_parent_packages(tmp_path):
    # control: the runtime imports errors; loading it runs the package's __init__, which imports a TVM-using jit
    root = tmp_path / PKG
    for rel, text in {"__init__.py": "from .jit import jit\n", "errors.py": "import re\n",
                      "jit/__init__.py": "import tvm\n\njit = None\n", "runtime/__init__.py": "",
                      "runtime/call.py": "from ..errors import re\n\n\ndef f():\n    import tvm_ffi\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (chain,) = runtime_chains_to_tvm(Tree(root))
    assert chain.endswith(f"-> tvm ({PKG}/jit/__init__.py:1)") and f"{PKG}.errors" in chain, chain

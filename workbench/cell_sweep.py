"""A tuning panel's sweep through the tuner's executors: the cell as a module workers can import, ``--ref`` as an
expression they can evaluate, and ``tilelang_core.autotune.tune(executor=...)`` driven from a background thread.

Why this module exists: the panel's own sweep measures one configuration after another on the workbench's thread.
The tuner's executors (``"local"``: compile processes and a timing process per GPU; ``"ray"``: a Ray cluster) are
faster, but their workers are other processes: they cannot see a ``%%tilekernel`` cell (its factory lives only in
the notebook's process) nor the notebook namespace ``--ref`` is evaluated in. So this module

- writes the cell, behind the imports every cell gets (``T``, ``tilelang``, ``torch``) and the notebook values it
  reads (modules, numbers, strings), to a module file and imports it: the factory is then a module-level function
  of a file, which a worker process imports by path (the source text, hence the tuning database's source hash, is
  the cell's own);
- turns ``--ref`` into :class:`ExpressionReference`: the expression, the input names and the modules and simple
  values it reads, picklable, so the timing worker evaluates the same expression;
- runs ``tune`` on a thread of its own (a slider move keeps being served meanwhile) with ``on_result``,
  ``on_progress`` (each worker's count: the panel's per-worker progress bars) and ``should_stop`` (Stop).

What cannot go to a worker is refused by name: a cell that reads a notebook function or object, a ``--ref`` that
names a notebook variable other than a module or a simple value. ``executor="inline"`` (the panel's own sweep)
has no such limits. The module file is on this host's disk: a Ray cluster of several hosts needs it on a shared
folder (docs/tuning.md).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXECUTORS = ("inline", "local", "ray")
_SIMPLE = (int, float, complex, str, bytes, bool, type(None))
_CELL_IMPORTS = ("import tilelang_core\nimport tilelang_core as tilelang\nimport tilelang_core.language as T\n"
                 "import torch\n")
_INJECTED = {"T", "tilelang", "tilelang_core", "torch"}
_DIR: list[Path] = []
_LOCK = threading.Lock()


def _cells_dir() -> Path:
    with _LOCK:
        if not _DIR:
            _DIR.append(Path(tempfile.mkdtemp(prefix="workbench-cells-")))
        return _DIR[0]


def _names_read(tree: ast.AST) -> set[str]:
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.comprehension):
            for t in ast.walk(node.target):
                if isinstance(t, ast.Name):
                    bound.add(t.id)
    return loaded - bound


def _bindings(names: set[str], namespace: dict[str, Any], what: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The modules (name -> module name) and simple values the names are bound to; anything else is refused."""
    modules: dict[str, str] = {}
    values: dict[str, Any] = {}
    for n in sorted(names):
        if n in _INJECTED:
            continue
        if n not in namespace:
            if hasattr(builtins, n):
                continue
            raise ValueError(f"{what} reads {n!r}, which the notebook does not define")
        v = namespace[n]
        if isinstance(v, types.ModuleType):
            modules[n] = v.__name__
        elif isinstance(v, _SIMPLE) or (isinstance(v, (tuple, list, frozenset))
                                        and all(isinstance(x, _SIMPLE) for x in v)):
            values[n] = v
        else:
            raise ValueError(f"{what} reads the notebook's {n!r} (a {type(v).__name__}), which a worker process "
                             "cannot get; define it in the cell, or sweep with executor='inline'")
    return modules, values


def _preamble(modules: dict[str, str], values: dict[str, Any]) -> str:
    lines = [f"import {m} as {n}" if n != m else f"import {m}" for n, m in modules.items()]
    lines += [f"{n} = {v!r}" for n, v in values.items()]
    return "\n".join(lines) + ("\n" if lines else "")


def cell_factory(wk: Any) -> Any:
    """The cell's factory as a module-level function of a module file (imported here, by path in workers)."""
    program = wk.program
    if program.function is None:
        raise ValueError(f"{wk.name}: the cell defines a @T.prim_func with fixed shapes; nothing to sweep")
    tree = ast.parse(wk.cell.text)
    modules, values = _bindings(_names_read(tree), program.namespace, f"the cell {wk.name!r}")
    text = _CELL_IMPORTS + _preamble(modules, values) + wk.cell.text
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    module = f"workbench_cell_{wk.name}_{digest}"
    path = _cells_dir() / f"{module}.py"
    if module not in sys.modules:
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(module, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod
        spec.loader.exec_module(mod)
    mod = sys.modules[module]
    qual = program.function.__name__
    factory = getattr(mod, qual, None)
    if factory is None:
        raise ValueError(f"{wk.name}: the cell's factory {qual!r} is not a module-level definition")
    return factory


@dataclass
class ExpressionReference:
    """``--ref`` as a worker process evaluates it: the expression over the kernel's inputs (``names``), with the
    modules and simple notebook values it reads. Picklable (its class is importable from the workbench)."""

    expr: str
    names: list[str]
    modules: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._code = compile(self.expr, "<--ref>", "eval")

    def __getstate__(self) -> dict[str, Any]:
        return {"expr": self.expr, "names": self.names, "modules": self.modules, "values": self.values}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def __call__(self, *inputs: Any) -> Any:
        import importlib

        import torch

        env: dict[str, Any] = {"torch": torch, **self.values}
        env.update({n: importlib.import_module(m) for n, m in self.modules.items()})
        env.update(zip(self.names, inputs))
        return eval(self._code, env)  # the user's --ref expression


def expression_reference(wk: Any) -> ExpressionReference | None:
    """``--ref`` of the cell as an :class:`ExpressionReference` (None without ``--ref``)."""
    expr = wk.options.ref
    if expr is None:
        return None
    names = [wk.params[i].name for i in wk.kernel.in_idx]
    read = _names_read(ast.parse(expr, mode="eval")) - set(names)
    modules, values = _bindings(read, wk.program.namespace, f"--ref {expr!r}")
    return ExpressionReference(expr, names, modules, values)


@dataclass
class SizedInputs:
    """The profiler's seeded inputs at the cell's ``--shapes`` values of its symbolic sizes (picklable)."""

    sizes: dict[str, int]

    def __call__(self, kernel: Any) -> list[Any]:
        from tilelang_core.autotune.measure import inputs_for

        return inputs_for(kernel, self.sizes)


def executor_for(choice: Any) -> Any:
    """What ``tune(executor=...)`` gets for the panel's choice (a name, or an executor object as is)."""
    if isinstance(choice, str) and choice not in EXECUTORS:
        raise ValueError(f"executor: expected one of {', '.join(map(repr, EXECUTORS))}, got {choice!r}")
    return choice


def start_sweep(wk: Any, configs: list[dict[str, Any]], *, executor: Any, db: Any,
                on_result: Callable[[Any], None], on_progress: Callable[[Any], None],
                should_stop: Callable[[], bool],
                on_done: Callable[[Any, BaseException | None], None]) -> threading.Thread:
    """Run ``tune`` over ``configs`` (each a full knob setting) on a thread; ``on_done(result, error)`` at the end.
    Raises ``ValueError`` at once (before the thread starts) when the cell or ``--ref`` cannot reach a worker."""
    from tilelang_core.autotune import tune

    factory = cell_factory(wk)
    ref = expression_reference(wk)
    inputs = SizedInputs(dict(wk.sizes)) if getattr(wk, "sizes", None) else None
    opts = wk.options
    ex = executor_for(executor)

    def run() -> None:
        try:
            result = tune(factory, configs, args=dict(wk.kwargs), ref=ref, rtol=opts.rtol, atol=opts.atol,
                          out_idx=list(wk.out_idx), target=wk.target_request, executor=ex,
                          db=db if db is not None else False, name=wk.name, progress=False, on_result=on_result,
                          on_progress=on_progress, should_stop=should_stop, inputs=inputs)
        except BaseException as e:  # noqa: BLE001 - shown in the panel, never raised into a widget callback
            on_done(None, e)
            return
        on_done(result, None)

    thread = threading.Thread(target=run, name=f"workbench-sweep-{wk.name}", daemon=True)
    thread.start()
    return thread


__all__ = ["EXECUTORS", "ExpressionReference", "SizedInputs", "cell_factory", "expression_reference",
           "executor_for", "start_sweep"]

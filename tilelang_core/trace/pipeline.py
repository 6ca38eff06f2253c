"""``python -m tilelang_core.trace --pipeline``: the pass list of a target, each pass's purpose, the options in force.

Why this module exists: the pipeline is data (:func:`tilelang_core.transform.cpu_passes` / ``cuda_passes``), and a
user deciding whether a ``pass_configs`` entry matters — or why a kernel lowered the way it did — should be able to
read the ordered passes and the options they run with without a program to compile. Each pass's one-line purpose
is the first line of its module's docstring (one pass per module), or of its function's where a module holds two.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

_HELPER_MODULES = {"notes", "rewriter", "regions", "common", "layouts"}  # no passes in these
_PREFIX = re.compile(r"^pass(es)?:\s*", re.IGNORECASE)


def _first_line(doc: str | None) -> str:
    line = next((ln.strip() for ln in (doc or "").splitlines() if ln.strip()), "")
    return _PREFIX.sub("", line)


def _pass_functions() -> dict[str, Any]:
    """Every public function of the pass modules under ``tilelang_core.transform`` (``common/``, ``cpu/``,
    ``cuda/``, ...), by its name without underscores; the shared helper modules are skipped."""
    import tilelang_core.transform as pkg

    found: dict[str, Any] = {}
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):
        leaf = info.name.rsplit(".", 1)[-1]
        if info.ispkg or leaf.startswith("_") or leaf in _HELPER_MODULES:
            continue
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and not name.startswith("_") and obj.__module__ == mod.__name__:
                found.setdefault(name.replace("_", "").lower(), obj)
    return found


def pass_purpose(pass_name: str, funcs: dict[str, Any] | None = None) -> str:
    """One line saying what the pass ``tl.Name`` does (from its module's or function's docstring)."""
    funcs = _pass_functions() if funcs is None else funcs
    fn = funcs.get(pass_name.split(".", 1)[-1].lower())
    if fn is None:
        return ""
    mod = importlib.import_module(fn.__module__)
    if fn.__module__.rsplit(".", 1)[-1] == fn.__name__:
        return _first_line(mod.__doc__) or _first_line(fn.__doc__)
    return _first_line(fn.__doc__) or _first_line(mod.__doc__)


def pipeline_passes(target: str = "cuda", pass_configs: Any = None) -> list[tuple[str, str]]:
    """``(pass name, purpose)`` in pipeline order for ``target`` (``"cpu"`` or ``"cuda"``)."""
    from ..pass_config import resolve
    from ..transform import cpu_passes, cuda_passes

    opts = resolve(pass_configs)
    if target == "cpu":
        passes = cpu_passes(64)
    elif target == "cuda":
        from ..target import cuda_target

        passes = cuda_passes(cuda_target("cuda")["arch"], opts)
    else:
        raise ValueError(f"--target: expected 'cpu' or 'cuda' for --pipeline, got {target!r}")
    funcs = _pass_functions()
    return [(name, pass_purpose(name, funcs)) for name, _fn in passes]


def describe_pipeline(target: str = "cuda", pass_configs: Any = None) -> str:
    """The text ``--pipeline`` prints: numbered passes with their purpose, then every option for the target with
    its value (``*`` marks one set away from its default)."""
    from ..pass_config import OPTIONS, resolve

    opts = resolve(pass_configs)
    rows = pipeline_passes(target, opts)
    width = max(len(n) for n, _ in rows)
    lines = [f"{target} pipeline: our passes, in order (then TVM's TIR passes and code generation):"]
    lines += [f"  {i:>2}. {name:<{width}}  {purpose}" for i, (name, purpose) in enumerate(rows, 1)]
    explicit = opts.explicit()
    lines.append("options in force (pass_configs; * = set):")
    for key, value in opts.values:
        if target == "cpu" and key.startswith("tl.cuda."):
            continue
        mark = "*" if key in explicit else " "
        lines.append(f"  {mark} {key} = {value!r}" + ("  (accepted, no effect here)" if OPTIONS[key].noop else ""))
    return "\n".join(lines)

"""``export_kernel(kernel, path)``: a compiled kernel as one standalone Python module.

Why this module exists: a kernel worth keeping has to leave the notebook — into a service, onto a machine with no
compiler. ``export_kernel`` writes a single ``.py`` file holding the compiled library (base64, with its SHA-256),
the configuration, parameter shapes and dtypes, the kernel source as written, and a small loader
(:mod:`tilelang_core.runtime.exported`, copied in). ``import matmul_relu_512; matmul_relu_512.kernel(a, b)`` then
works in a fresh process that has only ``torch`` and ``apache-tvm-ffi`` — not ``apache-tvm``, not tilelang_core.

One file rather than a folder: it can be copied, committed or attached as it is, and cannot lose its library.
The library is written out to a content-addressed cache on first use (``runtime.exported.materialize``). The CPU
library is self-contained for ``apache-tvm-ffi`` (it links the OpenMP shim for TVM's parallel-launch hooks), so
``tvm_ffi.load_module(path)["main"](...)`` is all the loader needs. A CUDA kernel embeds its cubin and launch
description (kernel symbol, grid, block, dynamic shared memory, argument order) and launches through the CUDA
driver bindings (``cuda-bindings``); exporting one needs no GPU, loading checks the GPU's architecture.
"""

from __future__ import annotations

import ast
import base64
import datetime
import os
import pprint
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from . import __version__
from .runtime import exported as _loader
from .runtime.artifact import sha256_file

_JSON_SIMPLE = (str, int, float, bool, type(None))


def _jsonable(value: Any) -> Any:
    if isinstance(value, _JSON_SIMPLE):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"tilelang_core": __version__}
    for dist in ("apache-tvm", "apache-tvm-ffi", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def loader_source() -> str:
    """The loader's code as it goes into an exported module (its module docstring removed)."""
    text = Path(_loader.__file__).read_text()
    tree = ast.parse(text)
    first = tree.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
        text = "\n".join(text.splitlines()[first.end_lineno:]).lstrip("\n")
    return text


def _string_literal(text: str) -> str:
    """A readable literal for multi-line text (a raw triple-quoted string when that is exact, else repr)."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


def _base64_literal(data: bytes, width: int = 100) -> str:
    b64 = base64.b64encode(data).decode()
    chunks = textwrap.wrap(b64, width) or [""]
    return "(\n" + "".join(f'    "{c}"\n' for c in chunks) + ")"


def module_path(path: str | Path, name: str) -> Path:
    """Where the module goes: ``path`` itself, or ``<path>/<name>.py`` when ``path`` is a folder."""
    p = Path(path).expanduser()
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        p = p / f"{name}.py"
    if p.suffix != ".py":
        raise ValueError(f"export path {str(path)!r}: expected a .py file name (or a folder)")
    if not p.stem.isidentifier():
        raise ValueError(f"export path {str(path)!r}: {p.stem!r} cannot be imported as a module; use letters, "
                         "digits and underscores, e.g. 'matmul_relu_512.py'")
    return p.resolve()


def build_meta(kernel: Any, name: str, reference: str | None, library_sha256: str) -> dict[str, Any]:
    """What the exported module records about the kernel (plain JSON-like data)."""
    art = kernel.artifact
    out_dtypes = [kernel.params[i].dtype for i in kernel.out_idx]
    tol = 1e-2 if any(d in ("float16", "bfloat16") for d in out_dtypes) else 1e-4
    return {
        "format": _loader.EXPORT_FORMAT,
        "name": name,
        "entry": art.entry,
        "target": _jsonable(dict(art.target)),
        "cpu_flags": _loader.isa_flags() if art.target.get("kind") != "cuda" else [],
        "params": [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype, "kind": getattr(p, "kind", "tensor"),
                    "strides": list(p.strides) if getattr(p, "strides", None) else None}
                   for p in kernel.params],
        "out_idx": list(kernel.out_idx),
        "config": _jsonable(dict(kernel.config)),
        "reference": reference,
        "tolerance": tol,
        "library_sha256": library_sha256,
        **({"cuda": _jsonable({k: v for k, v in art.extra["cuda"].items() if k != "cubin"})}
           if art.target.get("kind") == "cuda" else {}),
        "versions": _versions(),
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _docstring(meta: dict[str, Any], module: str) -> str:
    params = meta["params"]
    outs = set(meta["out_idx"])
    ins = ", ".join(f"{p['name']}: {p['dtype']}{p['shape']}" for i, p in enumerate(params) if i not in outs)
    outputs = ", ".join(f"{p['name']}: {p['dtype']}{p['shape']}" for i, p in enumerate(params) if i in outs)
    cfg = ", ".join(f"{k}={v}" for k, v in meta["config"].items())
    in_names = ", ".join(p["name"].lower() for i, p in enumerate(params) if i not in outs)
    tgt = meta["target"]
    if tgt.get("kind") == "cuda":
        target_line = f"cuda arch={tgt.get('arch')} (needs torch and cuda-bindings, and a GPU of that architecture)"
        needs = "torch and cuda-bindings"
    else:
        target_line = f"{tgt.get('kind')} mtriple={tgt.get('mtriple')} mcpu={tgt.get('mcpu')}"
        needs = "torch and apache-tvm-ffi"
    body = textwrap.dedent(f'''\
        Kernel {meta["name"]}({cfg}), exported by tilelang_core {meta["versions"]["tilelang_core"]}.

        target:  {target_line}
        inputs:  {ins}
        outputs: {outputs or "none (the kernel writes its arguments)"}

        Usage (needs {needs}; not apache-tvm, not tilelang_core)::

            import {module}
            out = {module}.kernel({in_names})

        ``kernel.config``, ``kernel.params``, ``kernel.source`` (the kernel as written) and ``META`` describe it;
        ``python {module}.py`` runs a self-test. Generated file: edit the kernel source and export again instead.
        ''')
    quotes = '"' * 3
    return "r" + quotes + body.replace(quotes, "'''") + quotes + "\n"


def render_module(kernel: Any, name: str, module: str, source: str, reference: str | None = None) -> str:
    """The text of the exported module."""
    library = Path(kernel.artifact.library_path).read_bytes()
    meta = build_meta(kernel, name, reference, sha256_file(kernel.artifact.library_path))
    parts = [
        _docstring(meta, module),
        "# ---- loader (tilelang_core/runtime/exported.py) ----\n",
        loader_source().rstrip() + "\n\n",
        "# ---- this kernel ----\n",
        f"META = {pprint.pformat(meta, indent=1, width=110, compact=True, sort_dicts=False)}\n\n",
        f"KERNEL_SOURCE = {_string_literal(source)}\n\n",
        f"LIBRARY_BASE64 = {_base64_literal(library)}\n\n",
        "kernel = ExportedKernel(META, LIBRARY_BASE64, KERNEL_SOURCE)\n",
        '__all__ = ["kernel", "META", "KERNEL_SOURCE", "ExportedKernel"]\n\n',
        'if __name__ == "__main__":\n    raise SystemExit(self_test(kernel))\n',
    ]
    return "".join(parts)


def export_kernel(kernel: Any, path: str | Path, *, source: str | None = None, reference: str | None = None,
                  name: str | None = None) -> Path:
    """Write ``kernel`` (a compiled ``JITKernel``) as a standalone module at ``path``; returns its absolute path.

    ``source`` is the kernel as written (the workbench passes the cell; default: the program's TVMScript);
    ``reference`` an optional torch expression over the input names, used by the module's self-test.
    """
    target = getattr(kernel, "target", {}) or {}
    if target.get("kind") not in ("llvm", "cuda"):
        raise ValueError(f"export: expected a kernel compiled for the CPU (llvm) or CUDA, got target {target}")
    name = name or getattr(kernel, "name", None) or "kernel"
    out = module_path(path, name)
    if source is None:
        program = getattr(kernel, "program", None)
        source = program.script() if program is not None else "# (the kernel source was not available at export)\n"
    text = render_module(kernel, name, out.stem, source, reference)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}-", suffix=".py.tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a module is meant to be read
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


__all__ = ["export_kernel", "render_module", "loader_source", "module_path"]

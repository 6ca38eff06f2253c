"""``err.save_repro(path)``: a failed compile as a self-contained script that fails the same way elsewhere.

Why this module exists: "it fails on my machine" is only actionable with the exact kernel, arguments, target and
compiler setup. The script embeds the factory's whole source file (registered under its original path, so
TVMScript can read it and error locations print exactly as before), the factory name and its arguments, ``out_idx``,
the target and the compiler environment, then calls the factory and re-raises the
:class:`~tilelang_core.errors.TileLangCompileError`, saying whether its message matches the recorded one. One
configuration per script: to bisect, edit one value at a time.

Limits: only the factory's own file is embedded (local modules it imports must exist where the script runs), and
the factory must be reachable as a module-level name.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ..errors import TileLangCheckError, TileLangCompileError, TileLangError


def _literal(text: str) -> str:
    """``text`` as a Python string literal: a readable raw triple-quoted block when possible."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)


def _docstring_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


TEMPLATE = '''#!/usr/bin/env python3
"""Reproducer for a tilelang_core {kind} failure, written by save_repro() on {date}.

error:   {error}
stage:   {stage} (last stage that succeeded: {last_good})
kernel:  {call}
from:    {source_file_doc}
target:  {target} (compiled for: {resolved})
versions: {versions}

Run: python {script}
{what}
The kernel's source file is embedded below (SOURCE) under its original path, so error locations print as they
did. Change one value at a time to bisect.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
import shutil
import sys
import types

SOURCE_FILE = {source_file!r}
MODULE_NAME = {module!r}
FACTORY = {factory!r}
JIT = {jit!r}  # True: a @tilelang_core.jit factory; False: a function returning a @T.prim_func
# factory argument -> Python expression, evaluated in the kernel's module
ARGS = {args}
OUT_IDX = {out_idx!r}
TARGET = {target!r}
PASS_CONFIGS = {pass_configs!r}  # the compiler options that differed from the defaults
# compiler environment when it failed (compilers are applied only where they exist on this machine)
ENVIRONMENT = {environment!r}
EXPECTED_STAGE = {stage!r}
EXPECTED_ERROR = {expected}
{check_constants}
SOURCE = {source}


def load_kernel_module() -> types.ModuleType:
    """Execute the embedded source as a module whose file is SOURCE_FILE (served from linecache)."""
    linecache.cache[SOURCE_FILE] = (len(SOURCE), None, SOURCE.splitlines(keepends=True), SOURCE_FILE)
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = SOURCE_FILE
    sys.modules[MODULE_NAME] = module
    exec(compile(SOURCE, SOURCE_FILE, "exec"), module.__dict__)
    return module


def apply_environment() -> None:
    for key, value in ENVIRONMENT.items():
        if key in ("CC", "CXX") and not shutil.which(value.split()[0]):
            print(f"note: {{key}}={{value}} was used but is not found here; keeping the default", file=sys.stderr)
            continue
        os.environ[key] = value


def call(fn, arguments):
    """Call ``fn`` with its bound arguments (var-positional/var-keyword parameters spread out)."""
    positional, keywords = [], {{}}
    params = inspect.signature(fn).parameters
    for name, value in arguments.items():
        kind = params[name].kind if name in params else inspect.Parameter.KEYWORD_ONLY
        if kind == inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            keywords.update(value)
        elif kind == inspect.Parameter.POSITIONAL_ONLY:
            positional.append(value)
        else:
            keywords[name] = value
    return fn(*positional, **keywords)


def normalise(message: str) -> str:
    """The message with temporary build paths masked (they differ from run to run)."""
    return re.sub(r"\\S*(/tmp\\w+|/\\.tmp-[\\w-]+)\\S*", "<tmp>", message)


def build(tilelang_core, module):
    """Call the factory with ARGS (and compile, for a plain function): the kernel, or the compile error."""
    arguments = {{name: eval(expr, module.__dict__) for name, expr in ARGS.items()}}  # noqa: S307
    factory = module
    for part in FACTORY.split("."):
        factory = getattr(factory, part)
    if JIT:
        if PASS_CONFIGS and getattr(factory, "factory", None) is not None:
            factory = tilelang_core.jit(out_idx=factory.out_idx, target=factory.target,
                                        pass_configs=PASS_CONFIGS)(factory.factory)
        if getattr(factory, "eager", False):  # an eager @jit function: compile() takes the sizes as keywords
            return call(factory.compile, arguments)
        return call(factory, arguments)
    return tilelang_core.compile(call(factory, arguments), out_idx=OUT_IDX, target=TARGET,
                                 pass_configs=PASS_CONFIGS or None)


{main}

if __name__ == "__main__":
    main()
'''


COMPILE_MAIN = """def main() -> None:
    apply_environment()
    import tilelang_core

    module = load_kernel_module()
    try:
        build(tilelang_core, module)
    except tilelang_core.TileLangCompileError as err:
        same = normalise(str(err)) == normalise(EXPECTED_ERROR)
        stage = err.report.stage if err.report is not None else err.stage
        print(f"reproduced {'the same' if same else 'a DIFFERENT'} error (stage {stage}, expected "
              f"{EXPECTED_STAGE})", file=sys.stderr)
        raise
    print("did not reproduce: the kernel compiled without error", file=sys.stderr)
    sys.exit(2)
"""

CHECK_MAIN = """def main() -> None:
    apply_environment()
    import tilelang_core
    from tilelang_core.profiler import Profiler

    module = load_kernel_module()
    kernel = build(tilelang_core, module)
    reference = eval(REFERENCE, module.__dict__)  # noqa: S307
    try:
        Profiler(kernel, seed=SEED).assert_allclose(reference, rtol=RTOL, atol=ATOL, max_mismatched_ratio=0)
    except AssertionError as err:
        same = normalise(str(err).splitlines()[0]) == normalise(EXPECTED_ERROR.splitlines()[0])
        print(f"reproduced {'the same' if same else 'a DIFFERENT'} failed check", file=sys.stderr)
        raise
    print("did not reproduce: the kernel now matches its reference", file=sys.stderr)
    sys.exit(2)
"""


def render_repro(err: TileLangCompileError | TileLangCheckError, script_name: str = "repro.py") -> str:
    """The reproducer script's text for ``err`` (see :func:`write_repro`)."""
    rep = err.report
    if rep is None or not rep.factory or not rep.source:
        raise TileLangError("save_repro: this error carries no kernel factory and source (it was not raised "
                            "through @tilelang_core.jit or the trace CLI), so there is nothing to replay")
    if "<locals>" in rep.factory:
        raise TileLangError(f"save_repro: the factory {rep.factory} is defined inside a function; define it at "
                            "module level so a script can reach it")
    check_constants = ""
    if rep.kind == "check":
        if not rep.check.get("reference_resolvable"):
            raise TileLangError(f"save_repro: the reference {rep.check.get('reference')} cannot be named from the "
                                "kernel's module (a lambda or a local function?); define it at module level")
        seed = rep.check.get("seed")
        check_constants = (f"REFERENCE = {rep.check['reference']!r}  # evaluated in the kernel's module\n"
                           f"RTOL = {rep.check['rtol']!r}\nATOL = {rep.check['atol']!r}\n"
                           f"SEED = {0 if seed is None else seed!r}  # seed of the profiler's random inputs"
                           + ("  (the original check used the caller's own tensors)" if seed is None else "")
                           + "\n")
        what = ("It rebuilds the kernel with exactly this configuration and repeats the check on the same seeded "
                "inputs,\nraising the same AssertionError (exit status 1); status 2 if the kernel now passes.")
    else:
        what = ("It rebuilds exactly this configuration and re-raises the same TileLangCompileError (exit status 1); "
                "it exits\nwith status 2 if the kernel now compiles.")
    module = rep.module if rep.module and rep.module != "__main__" else "kernel_under_repro"
    args = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in rep.args.items()) + "}"
    first = str(err).splitlines()[0] if str(err) else ""
    return TEMPLATE.format(
        kind=rep.kind, date=datetime.datetime.now().isoformat(timespec="seconds"),
        error=_docstring_safe(first), stage=rep.stage or getattr(err, "stage", None), last_good=rep.last_good_stage,
        call=_docstring_safe(f"{rep.factory}({', '.join(f'{k}={v}' for k, v in rep.args.items())})"),
        source_file=rep.source_file, source_file_doc=_docstring_safe(str(rep.source_file)),
        resolved=_docstring_safe(str(rep.resolved_target)),
        versions=", ".join(f"{k} {v}" for k, v in rep.versions.items()), script=script_name, module=module,
        factory=rep.factory, jit=rep.jit, args=args, out_idx=_plain(rep.out_idx), target=_plain(rep.target),
        environment=dict(rep.environment), pass_configs=dict(rep.pass_configs), expected=repr(str(err)),
        source=_literal(rep.source),
        check_constants=check_constants, what=what, main=CHECK_MAIN if rep.kind == "check" else COMPILE_MAIN,
    )


def _plain(value: Any) -> Any:
    """Targets and out_idx as literals (lists, dicts, strings, ints)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def write_repro(err: TileLangCompileError | TileLangCheckError, path: str | Path) -> Path:
    """Write the reproducer for ``err`` to ``path`` (a ``.py`` file); returns the path."""
    path = Path(path)
    text = render_repro(err, path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path

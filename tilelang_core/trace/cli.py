"""``python -m tilelang_core.trace``: the compile trace from a terminal, for people outside notebooks.

Why this module exists: the same views the workbench draws — the stage table, one stage's IR, a diff between
stages or between two configurations, the generated code with its command line — should be one shell command
away, and a failing kernel should be one flag away from a reproducer script (``--save-repro``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  python -m tilelang_core.trace examples/gemm.py:matmul --args M=256 N=256 K=256 block_M=64 block_N=64 block_K=32
  ... --list                               stage names, one a line
  ... --stage tl.LowerTileOpsCPU           that stage's TVMScript (also: an index, 'first', 'last')
  ... --diff tl.LowerKernelGridCPU tl.LowerTileOpsCPU
  ... --changed                            the diff of every stage that changed the IR
  ... --vs block_M=128 [--stage input]     the same stage for another configuration, as a diff
  ... --code asm [--commands]              generated code (llvm | asm), or the commands that made it
  ... --source-map [STAGE]                 IR statements -> your file:line
  ... --save-repro bug.py                  on a compile failure, write a self-contained reproducer
  python -m tilelang_core.trace --pipeline --target cuda --pass-config tl.cuda.split_k=4
                                           the passes in order with their purpose, and the options in force
"""


def parse_value(text: str) -> Any:
    """A factory argument from the command line: a Python literal (``64``, ``'float16'``, ``(1, 2)``), else the
    text itself (so ``dtype=float16`` works unquoted)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_assignments(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"error: expected NAME=VALUE, got {item!r}")
        out[key] = parse_value(value)
    return out


def load_factory(spec: str) -> Any:
    """``path/to/file.py:name`` or ``package.module:name`` -> the object (a @jit factory or a function)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise SystemExit(f"error: expected path/to/kernel.py:factory, got {spec!r}")
    if where.endswith(".py") or "/" in where:
        path = Path(where).resolve()
        if not path.is_file():
            raise SystemExit(f"error: no such file: {where}")
        sys.path.insert(0, str(path.parent))
        mod_name = path.stem if path.stem not in sys.modules else f"_tilelang_trace_{path.stem}"
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        assert mspec is not None and mspec.loader is not None
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mod_name] = module
        mspec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    obj: Any = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SystemExit(f"error: {where} has no attribute {name!r}") from None
    return obj


def build_kernel(obj: Any, kwargs: dict[str, Any], target: str, out_idx: Any) -> Any:
    """Compile ``obj(**kwargs)``: a @jit factory directly, a plain function through ``tilelang_core.compile``."""
    import inspect

    import tilelang_core
    from tilelang_core.errors import TileLangCompileError
    from tilelang_core.jit import JITFactory

    if getattr(obj, "eager", False):  # an eager @jit function (jit/eager.py): sizes are keywords, compile() builds
        from tilelang_core.jit.eager import EagerJITFactory

        if out_idx is not None:
            raise SystemExit("error: --out-idx does not apply to an eager @jit function (its outputs are its T.empty)")
        if target != "auto":
            obj = EagerJITFactory(obj.factory, target, obj.options, obj._decorator_pass_configs)
        return obj.compile(**kwargs)
    if isinstance(obj, JITFactory):
        if target != "auto":
            obj = JITFactory(obj.factory, obj.out_idx if out_idx is None else out_idx, target, obj.options)
        elif out_idx is not None:
            obj = JITFactory(obj.factory, out_idx, obj.target, obj.options)
        return obj(**kwargs)
    if not callable(obj):
        raise SystemExit(f"error: {obj!r} is not a kernel factory")
    try:
        ba = inspect.signature(obj).bind(**kwargs)
        ba.apply_defaults()
        config = dict(ba.arguments)
    except TypeError as e:
        raise SystemExit(f"error: {getattr(obj, '__name__', obj)}: {e}") from None
    try:
        func = obj(**kwargs)
        if type(func).__name__ != "PrimFunc":
            raise SystemExit(f"error: {obj.__name__} returned {type(func).__name__}, not a @T.prim_func")
        return tilelang_core.compile(func, out_idx=out_idx, target=target, name=obj.__name__, config=config)
    except TileLangCompileError as e:
        from .report import describe_factory

        describe_factory(e, obj, config, out_idx=out_idx, target=target, jit=False)
        raise


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tilelang_core.trace",
        description="Show how a tile kernel is lowered: every stage's IR (ours and TVM's passes) with timings, "
                    "diffs between stages or configurations, and the generated code with its command line.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", nargs="?", help="path/to/kernel.py:factory (a @tilelang_core.jit factory, or a function "
                                  "returning a @T.prim_func); package.module:factory works too")
    p.add_argument("--args", nargs="*", default=[], metavar="NAME=VALUE",
                   help="factory arguments, e.g. M=256 block_M=64 dtype=float16 (values are Python literals)")
    p.add_argument("--target", default="auto", choices=["auto", "cpu", "cuda"], help="target (default: auto)")
    p.add_argument("--out-idx", type=int, nargs="*", default=None, metavar="I",
                   help="output parameter indices (default: the factory's own)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--list", action="store_true", help="print the stage names only")
    view.add_argument("--diff", nargs=2, metavar=("A", "B"), help="unified diff from stage A to stage B")
    view.add_argument("--changed", action="store_true", help="the diff of every stage that changed the IR")
    view.add_argument("--vs", nargs="+", metavar="NAME=VALUE",
                      help="diff the same stage (--stage, default input) against a configuration with these "
                           "arguments changed")
    view.add_argument("--code", choices=["llvm", "asm", "cuda", "ptx", "sass"],
                      help="print generated code of this kind")
    view.add_argument("--source-map", nargs="?", const="input", metavar="STAGE",
                      help="IR statements of STAGE (default input) -> the user's file:line")
    view.add_argument("--json", action="store_true", help="the whole trace as JSON")
    p.add_argument("--stage", metavar="NAME", help="print this stage's TVMScript (name, index, 'first', 'last')")
    p.add_argument("--commands", action="store_true", help="with --code: print the command line behind the code")
    p.add_argument("--context", type=int, default=3, help="diff context lines (default 3)")
    p.add_argument("--save-repro", metavar="PATH", help="on a compile failure, write a reproducer script to PATH")
    p.add_argument("--pipeline", action="store_true",
                   help="print the target's passes in order with their purpose and the options in force (no kernel)")
    p.add_argument("--pass-config", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="with --pipeline: pass_configs entries, e.g. tl.cuda.split_k=4 (values are Python literals)")
    return p


def _pass_configs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --pass-config: expected KEY=VALUE, got {item!r}")
        out[key] = parse_value(value)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    from tilelang_core.errors import TileLangCompileError, TileLangError

    if args.pipeline:
        from .pipeline import describe_pipeline

        try:
            print(describe_pipeline("cpu" if args.target == "cpu" else "cuda", _pass_configs(args.pass_config)))
        except (ValueError, TypeError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.kernel is None:
        parser.error("a kernel (path/to/kernel.py:factory) is required unless --pipeline is given")
    if args.pass_config:
        parser.error("--pass-config applies to --pipeline (a kernel's options are its factory's pass_configs)")

    from .model import diff_kernels

    obj = load_factory(args.kernel)
    kwargs = parse_assignments(args.args)
    out_idx = args.out_idx if args.out_idx else None
    try:
        kernel = build_kernel(obj, kwargs, args.target, out_idx)
        other = build_kernel(obj, {**kwargs, **parse_assignments(args.vs)}, args.target, out_idx) if args.vs else None
    except TileLangCompileError as e:
        print(f"compile failed: {e}\n", file=sys.stderr)
        if e.report is not None:
            print(e.report.render(), file=sys.stderr)
        if args.save_repro:
            try:
                path = e.save_repro(args.save_repro)
                print(f"\nreproducer written to {path} (run: python {path})", file=sys.stderr)
            except TileLangError as e2:
                print(f"\ncould not write a reproducer: {e2}", file=sys.stderr)
        return 1
    except TileLangError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.save_repro:
        print("note: the kernel compiled; there is no failure to reproduce", file=sys.stderr)

    try:
        if args.code:
            sources = kernel.sources
            if args.code not in sources:
                print(f"error: no {args.code!r} code for this target; available: {', '.join(sources)}",
                      file=sys.stderr)
                return 2
            g = sources[args.code]
            print(g.command if args.commands else g.text)
            return 0
        tr = kernel.trace
        if args.list:
            print("\n".join(tr.names()))
        elif args.diff:
            text = tr.diff(args.diff[0], args.diff[1], context=args.context)
            print(text or f"(no change between {args.diff[0]} and {args.diff[1]})", end="" if text else "\n")
        elif args.changed:
            for st, text in tr.diffs(context=args.context):
                print(f"### {st.index}: {st.name} ({st.origin}, {st.seconds * 1e3:.2f} ms)")
                print(text)
        elif other is not None:
            text = diff_kernels(kernel, other, stage=args.stage or "input", context=args.context)
            print(text or "(no change)", end="" if text else "\n")
        elif args.source_map:
            for summary, loc in tr.source_map(args.source_map):
                print(f"{loc.file}:{loc.line}:{loc.column}  {summary}")
        elif args.json:
            print(tr.to_json(indent=1))
        elif args.stage is not None:
            key: Any = int(args.stage) if args.stage.lstrip("-").isdigit() else args.stage
            print(tr.stage(key).text)
        else:
            print(repr(tr))
    except (KeyError, IndexError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0
    return 0

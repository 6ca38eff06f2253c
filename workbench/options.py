"""Validated options of one ``%%tilekernel`` run, parsed from the magic's arguments.

Why this module exists: the magic's argument *declarations* live on the magic (IPython's ``magic_arguments`` builds
``%tilekernel?`` help from them), but turning strings like ``M=512,N=512`` or ``--out-idx -1`` into values and
rejecting bad ones with a reason is plain parsing that tests can call directly. Every problem raises IPython's
``UsageError`` (IPython shows it without a traceback, and nbclient still stops on it).
"""

from __future__ import annotations

import ast
import inspect
import shlex
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

TARGETS = ("auto", "cpu", "llvm", "host", "cuda")
HALF_DTYPES = ("float16", "bfloat16")


@dataclass
class Options:
    """One run's settings after validation."""

    name: str
    shapes: dict[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    ref: str | None = None
    target: str = "auto"
    rtol: float | None = None
    atol: float | None = None
    out_idx: list[int] | None = None
    bench: bool = True
    force: bool = False
    quiet: bool = False
    panel: bool = False  # show the tuning panel instead of the summary
    tune: dict[str, list[Any]] = field(default_factory=dict)  # --tune axes for the panel
    line: str = ""  # the %%tilekernel line as given (after {var} expansion)

    def check_key(self) -> tuple[Any, ...]:
        """What the correctness check and the benchmark depend on besides the kernel itself."""
        return (self.ref, self.rtol, self.atol, self.bench)


def unquote(text: str | None) -> str | None:
    """Drop one level of shell quotes: IPython's magic argument splitter keeps them (``--ref "a @ b"``)."""
    if text is None or len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return text
    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string option such as dtype=float16


def parse_assignments(text: str | None, what: str) -> dict[str, Any]:
    """``"M=512,N=512,K=512"`` (commas or spaces) -> ``{"M": 512, ...}``; values are Python literals or words."""
    if not text:
        return {}
    out: dict[str, Any] = {}
    for item in text.replace(" ", ",").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier() or not value.strip():
            raise UsageError(f"{what}: expected NAME=VALUE pairs separated by commas (e.g. M=512,N=512,K=512), "
                             f"got {item!r}")
        if key in out:
            raise UsageError(f"{what}: {key} is given twice")
        out[key] = _literal(value.strip())
    return out


def parse_out_idx(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise UsageError(f"--out-idx: expected comma-separated ints (e.g. -1 or 2,3), got {text!r}") from None


def parse_reference(expr: str | None) -> str | None:
    """Check that ``--ref`` is one Python expression (it is evaluated later, in the user namespace)."""
    if expr is None:
        return None
    expr = expr.strip()
    try:
        compile(expr, "<--ref>", "eval")
    except SyntaxError as e:
        raise UsageError(f"--ref: not a Python expression: {expr!r} ({e.msg})") from None
    return expr


def parse(args: Any) -> Options:
    """Validate the namespace ``magic_arguments.parse_argstring`` returned."""
    for key in ("name", "shapes", "dtype", "ref", "target", "out_idx"):
        setattr(args, key, unquote(getattr(args, key)))
    name = args.name
    if not name.isidentifier():
        raise UsageError(f"%%tilekernel: the kernel name must be a Python identifier, got {name!r}")
    target = args.target.strip().lower()
    if target not in TARGETS and not target.startswith(("cuda:", "cuda ", "cuda-")):
        raise UsageError(f"--target: expected one of {', '.join(TARGETS)} (or cuda:sm_XX), got {args.target!r}")
    for flag in ("rtol", "atol"):
        v = getattr(args, flag)
        if v is not None and not v >= 0:
            raise UsageError(f"--{flag}: expected a non-negative number, got {v}")
    return Options(
        name=name, shapes=parse_assignments(args.shapes, "--shapes"), dtype=args.dtype,
        ref=parse_reference(args.ref), target=target, rtol=args.rtol, atol=args.atol,
        out_idx=parse_out_idx(args.out_idx), bench=not args.no_bench, force=args.force, quiet=args.quiet,
        panel=bool(getattr(args, "panel", False) or getattr(args, "tune", None)), tune=parse_tune_axes(args))


def parse_tune_axes(args: Any) -> dict[str, list[Any]]:
    """``--tune block_M=32,64,128 num_stages=1:4`` -> axes (tokens may also come as one quoted string)."""
    tokens = getattr(args, "tune", None)
    if not tokens:
        return {}
    from .tunables import parse_tune

    return parse_tune([unquote(t) or "" for t in tokens])


def factory_kwargs(function: Any, opts: Options, eager: Any = None,
                   symbols: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments to call the factory with: ``--shapes`` plus ``dtype`` from ``--dtype``.

    Unknown names and missing required arguments are usage errors that list the factory's signature.
    ``eager``: the cell's eager-spelled ``@jit`` function (its tensor parameters are not factory arguments, its
    ``T.const`` sizes are). ``symbols``: when given, ``--shapes`` names that are not factory arguments go there
    instead of being refused (the values of the kernel's symbolic sizes, checked once the kernel is compiled).
    """
    sig = inspect.signature(function)
    params = dict(sig.parameters)
    if eager is not None:
        tensors = set(eager.tensor_params)
        params = {n: p for n, p in params.items() if n not in tensors}
        sig = sig.replace(parameters=list(params.values()))
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = dict(opts.shapes)
    if symbols is not None and not takes_kwargs:
        sizes = set(eager.sizes) if eager is not None else set()
        for k in [k for k in kwargs if k not in params and k not in sizes]:
            symbols[k] = kwargs.pop(k)
    if eager is not None:
        missing = [n for n in eager.sizes if n not in kwargs]
        if missing:
            raise UsageError(f"--shapes: give {', '.join(f'{m}=...' for m in missing)} (the T.const size(s) of "
                             f"{function.__name__}: the magic compiles it without tensors)")
        for n in eager.sizes:  # sizes are call keywords of .compile(...), like parameters here
            params[n] = inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY)
        sig = sig.replace(parameters=sorted(params.values(), key=lambda p: p.kind))
    if opts.dtype is not None:
        if "dtype" not in params and not takes_kwargs:
            raise UsageError(f"--dtype: the factory {function.__name__}{sig} has no 'dtype' parameter; write the "
                             "dtype in the kernel, or add a dtype parameter to the factory")
        if "dtype" in kwargs and kwargs["dtype"] != opts.dtype:
            raise UsageError("--dtype and --shapes dtype=... disagree")
        kwargs["dtype"] = opts.dtype
    unknown = [k for k in kwargs if k not in params] if not takes_kwargs else []
    if unknown:
        raise UsageError(f"--shapes: the factory {function.__name__}{sig} has no parameter(s) "
                         f"{', '.join(unknown)}")
    _check_bare_words(function, sig, opts.shapes)
    try:
        sig.bind(**kwargs)
    except TypeError as e:
        missing = [n for n, p in params.items() if p.default is p.empty and n not in kwargs
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise UsageError(f"--shapes: give {', '.join(f'{m}=...' for m in missing)} (the factory "
                             f"{function.__name__}{sig} has no default for them)") from None
        raise UsageError(f"--shapes: cannot call {function.__name__}{sig} with {kwargs}: {e}") from None
    return kwargs


def _check_bare_words(function: Any, sig: inspect.Signature, shapes: dict[str, Any]) -> None:
    """A bare word (``M=abc``: not a Python literal) is a string; refuse it where the factory expects a number.

    Without this the string reaches the kernel's shapes and fails deep inside TVM. A bare word is fine for a
    parameter whose default is a string, for ``dtype``-like parameters, and when it names a dtype (``float16``).
    """
    import tilelang_core.language as T

    for key, value in shapes.items():
        if not isinstance(value, str) or "dtype" in key.lower() or value in T.SUPPORTED_DTYPES \
                or isinstance(getattr(T, value, None), str):  # T.float16, T.half ...: dtype objects are strings
            continue
        param = sig.parameters.get(key)
        default = param.default if param is not None else inspect.Parameter.empty
        if isinstance(default, str):
            continue
        expected = (f"a {type(default).__name__} like its default {default!r}" if default is not None
                    and default is not inspect.Parameter.empty else "a number (e.g. 512)")
        raise UsageError(f"--shapes: {key}={value}: expected {expected} for the factory "
                         f"{function.__name__}{sig}, got the bare word {value!r}; quote it ({key}='{value}') "
                         "to pass a string")


def unrecognized_hint(message: str) -> str:
    """argparse's "unrecognized arguments: N=128 K=64" after ``--shapes M=256 N=128``: say that commas separate
    the pairs (a space ends the option's value)."""
    extra = message.split("unrecognized arguments:", 1)[-1].split()
    if extra and all("=" in t and t.split("=", 1)[0].isidentifier() for t in extra):
        return (f"{message.strip()}\nhint: NAME=VALUE pairs are separated by commas, not spaces: "
                f"--shapes ...,{','.join(extra)} (or quote the whole list: --shapes \"M=256 N=128\")")
    return message


def default_tolerance(dtypes: list[str]) -> float:
    """Default rtol = atol for comparing outputs of these dtypes (the loosest wins)."""
    tol = 0.0
    for dt in dtypes:
        if dt in HALF_DTYPES:
            tol = max(tol, 1e-2)
        elif dt == "float32":
            tol = max(tol, 1e-4)
        elif dt == "float64":
            tol = max(tol, 1e-7)
    return tol

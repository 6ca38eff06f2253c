"""``tilelang_core.jit`` and ``tilelang_core.compile``: from a kernel program to a callable kernel.

``@jit`` wraps a *factory*: a Python function taking sizes and options and returning a ``@T.prim_func``. Each
distinct argument tuple is specialised once; results are cached in memory (per decorated factory) and on disk
(see :mod:`.cache`).
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import SourceLocation, TileLangCompileError, TileLangError
from ..pass_config import DEFAULT, PassConfig
from ..pass_config import resolve as resolve_pass_configs
from ..target import resolve_target
from . import cache
from .kernel import JITKernel

_LOC_RE = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")


def _from_diagnostic(e: BaseException) -> TileLangCompileError:
    """Turn a TVMScript parser DiagnosticError into our error, keeping the user's file and line."""
    text = str(e)
    m = _LOC_RE.search(text)
    loc = SourceLocation(m["file"], int(m["line"]), int(m["col"])) if m else None
    msg_line = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")), text.strip())
    msg = msg_line[len("error:"):].strip() if msg_line.startswith("error:") else msg_line
    from ..language.dtypes import ANNOTATION_ERRORS

    pending = getattr(ANNOTATION_ERRORS, "last", None)
    if pending is not None and "Unexpected type for TIR Arg" in msg:
        # a string annotation (PEP 563) whose evaluation raised our error: report that, at the line spelling it
        msg, literal = pending
        if loc is not None:
            loc = _find_literal(loc, literal)
    return TileLangCompileError(msg, loc, stage="parse")


def _find_literal(loc: SourceLocation, literal: str) -> SourceLocation:
    """The first line at or after ``loc`` that spells ``literal`` (a repr, either quote style)."""
    import linecache

    alts = {literal, literal.replace("'", '"')}
    for n in range(loc.line, loc.line + 200):
        text = linecache.getline(loc.file, n)
        if not text:
            break
        for a in alts:
            if a in text:
                return SourceLocation(loc.file, n, text.index(a) + 1)
    return loc


def _from_language_error(e: BaseException) -> TileLangCompileError | None:
    """A ValueError/TypeError raised by one of our language helpers while Python evaluated the user's kernel
    code outside the TVMScript parser (e.g. a ``T.Tensor`` annotation, evaluated when the ``def`` runs): report
    it at the user's line. Returns None for exceptions that did not come from our language."""
    import os
    import traceback

    if not isinstance(e, (ValueError, TypeError)):
        return None
    frames = traceback.extract_tb(e.__traceback__)
    lang_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "language")
    if not frames or not os.path.abspath(frames[-1].filename).startswith(lang_dir):
        return None
    pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(pkg_dir) and "/tvm/" not in f.filename]
    if not user:
        return None
    fr = user[-1]
    col = (getattr(fr, "colno", None) or 0) + 1
    return TileLangCompileError(str(e), SourceLocation(fr.filename, fr.lineno or 0, col), stage="parse")


def _is_diagnostic(e: BaseException) -> bool:
    return type(e).__name__ == "DiagnosticError"


def _is_prim_func(func: Any) -> bool:
    return type(func).__name__ == "PrimFunc" and hasattr(func, "params") and hasattr(func, "body")


def _param_specs(func: Any) -> list[Any]:
    """The parameters as the runtime sees them: tensors (static or symbolic sizes) and scalars (``n: T.int32``)."""
    from ..runtime.artifact import ParamSpec

    specs = []
    from tvm import tirx

    bare: set[str] = set()
    used: dict[str, str] = {}
    for p in func.params:
        if not tirx.is_buffer_var(p):
            dt = str(p.dtype) if hasattr(p, "dtype") else str(getattr(getattr(p, "ty", None), "dtype", ""))
            if dt in ("", "handle") or dt.startswith("handle"):
                raise TileLangCompileError(f"kernel parameter {p}: expected a tensor (T.Tensor(shape, dtype)) or "
                                           f"a scalar (T.int32, T.float32 ...), got a {dt or type(p).__name__}")
            specs.append(ParamSpec(p.name, (), dt, "scalar"))
            bare.add(p.name)
            continue
        shape: list[int | str] = []
        for s in p.shape:
            try:
                shape.append(int(s))
                continue
            except TypeError:
                pass
            if isinstance(s, tirx.Var):
                bare.add(s.name)
            else:
                for v in tirx.analysis.undefined_vars(s):
                    used.setdefault(v.name, f"{p.name} ({s})")
            shape.append(str(s))
        strides = tuple(int(x) for x in p.strides) if len(p.strides) else None  # a T.StridedTensor's layout
        specs.append(ParamSpec(p.name, tuple(shape), str(p.dtype), strides=strides))
    missing = sorted(set(used) - bare)
    if missing:
        name = missing[0]
        raise TileLangCompileError(f"kernel parameter {used[name]}: the symbolic size {name} appears only inside an "
                                   f"expression, so a call cannot tell its value; give some tensor a dimension that "
                                   f"is exactly {name} (or pass it as a scalar parameter {name}: T.int32)")
    return specs


def _normalize_out_idx(out_idx: Any, n: int) -> list[int]:
    if out_idx is None:
        return []
    if isinstance(out_idx, int):
        out_idx = [out_idx]
    if not isinstance(out_idx, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                         for i in out_idx):
        raise TypeError(f"out_idx: expected an int or a list of ints (parameter positions, negative counts from the "
                        f"end), got {out_idx!r}")
    idx = list(out_idx)
    for i in idx:
        if not -n <= i < n:
            raise ValueError(f"out_idx: index {i} is out of range for a kernel with {n} parameters")
    return sorted({i % n for i in idx})


# TileLang's keywords of ``@jit`` / ``compile`` (tilelang/jit/__init__.py), each with its meaning here:
#   out_idx, target, pass_configs: as in TileLang; target_host: the host is ours ("llvm"/"auto"/None only);
#   execution_backend: one backend here ("tvm_ffi"; "auto"/None); verbose: one line per compile on stderr;
#   compile_flags: extra nvcc/NVRTC flags (CUDA only); debug_root_path: the program and kernel source written there.
EXECUTION_BACKENDS = (None, "auto", "tvm_ffi")
TARGET_HOSTS = (None, "auto", "llvm")


@dataclass(frozen=True)
class CompileOptions:
    """The validated compile keywords shared by ``@jit`` and ``compile`` (everything but the program and target)."""

    out_idx: Any = None
    pass_configs: PassConfig = DEFAULT
    compile_flags: tuple[str, ...] = ()
    verbose: bool = False
    debug_root_path: str | None = None

    def key(self) -> tuple:
        return (repr(self.out_idx), self.pass_configs.key(), self.compile_flags)


def _compile_options(out_idx: Any = None, target_host: Any = None, execution_backend: Any = None,
                     verbose: Any = None, pass_configs: Any = None, compile_flags: Any = None,
                     debug_root_path: Any = None) -> CompileOptions:
    """Validate TileLang's compile keywords (a clear error for each value this compiler does not support)."""
    if execution_backend not in EXECUTION_BACKENDS:
        raise ValueError(f"execution_backend={execution_backend!r} is not supported here: tilelang_core has one "
                         "execution backend, 'tvm_ffi' (kernels are called through apache-tvm-ffi; 'auto' or None "
                         "pick it). For NVRTC compilation use pass_configs={'tl.cuda.compiler': 'nvrtc'}")
    if not (target_host in TARGET_HOSTS or (type(target_host).__name__ == "Target"
                                            and str(getattr(target_host, "kind", "")) == "llvm")):
        raise ValueError(f"target_host={target_host!r} is not supported here: the host side is always this "
                         "machine's CPU ('llvm'); pass None, 'auto' or 'llvm'")
    if verbose is not None and not isinstance(verbose, bool):
        raise TypeError(f"verbose: expected True, False or None, got {verbose!r}")
    if compile_flags is None:
        flags: tuple[str, ...] = ()
    elif isinstance(compile_flags, str):
        import shlex

        flags = tuple(shlex.split(compile_flags))
    elif isinstance(compile_flags, (list, tuple)) and all(isinstance(f, str) for f in compile_flags):
        flags = tuple(compile_flags)
    else:
        raise TypeError(f"compile_flags: expected a str or a list of str (extra nvcc/NVRTC flags), got "
                        f"{compile_flags!r}")
    if debug_root_path is not None and not isinstance(debug_root_path, (str, os.PathLike)):
        raise TypeError(f"debug_root_path: expected a folder path (str or os.PathLike), got {debug_root_path!r}")
    return CompileOptions(out_idx=out_idx, pass_configs=resolve_pass_configs(pass_configs), compile_flags=flags,
                          verbose=bool(verbose), debug_root_path=None if debug_root_path is None
                          else os.fspath(debug_root_path))


def compile(func: Any, out_idx: Any = None, target: Any = "auto", *, target_host: Any = None,  # noqa: A001
            execution_backend: Any = None, verbose: Any = None, pass_configs: Any = None,
            compile_flags: Any = None, debug_root_path: Any = None, name: str | None = None,
            config: dict[str, Any] | None = None) -> JITKernel:
    """Compile a ``@T.prim_func`` for ``target``; returns a callable :class:`JITKernel`.

    TileLang's keywords: ``out_idx``, ``target``, ``target_host`` (None, "auto" or "llvm": the host is this CPU),
    ``execution_backend`` (None, "auto" or "tvm_ffi": the one backend here), ``verbose`` (a line per compile on
    stderr), ``pass_configs`` (a dict of :class:`~tilelang_core.PassConfigKey` -> value, validated, part of the
    cache key), ``compile_flags`` (extra nvcc/NVRTC flags; CUDA only), ``debug_root_path`` (a folder to write the
    program and the generated source into). Ours: ``name`` and ``config`` (the factory's name and arguments,
    for reports and the repr)."""
    opts = _compile_options(out_idx, target_host, execution_backend, verbose, pass_configs, compile_flags,
                            debug_root_path)
    return _compile(func, target, opts, name=name, config=config)


def _compile(func: Any, target: Any, opts: CompileOptions, name: str | None = None,
             config: dict[str, Any] | None = None) -> JITKernel:
    backend = resolve_target(target)
    if not _is_prim_func(func):
        raise TypeError(f"compile: expected a @T.prim_func, got {type(func).__name__}")
    specs = _param_specs(func)
    outs = _normalize_out_idx(opts.out_idx, len(specs))
    if backend == "cuda":
        from ..target import cuda_target
        from .cuda import compile_cuda

        kernel = compile_cuda(func, specs, outs, cuda_target(target), name=name, config=config,
                              pass_configs=opts.pass_configs, compile_flags=list(opts.compile_flags))
    else:
        if opts.compile_flags:
            raise ValueError(f"compile_flags={list(opts.compile_flags)!r} is not supported for the CPU target here "
                             "(LLVM generates the code in-process; the flags are for nvcc/NVRTC on CUDA)")
        kernel = _compile_cpu(func, target, backend, specs, outs, opts, name, config)
    _after_compile(kernel, func, opts)
    return kernel


def _after_compile(kernel: JITKernel, func: Any, opts: CompileOptions) -> None:
    """``verbose`` and ``debug_root_path``."""
    if opts.verbose:
        import sys

        how = {"compiled": f"compiled in {kernel.compile_seconds:.2f} s", "disk": "loaded from the disk cache"}
        print(f"tilelang_core: {kernel.name} {how.get(kernel.cache_status, kernel.cache_status)} "
              f"({kernel.artifact.path}){'; ' + repr(kernel.pass_configs) if kernel.pass_configs.explicit() else ''}",
              file=sys.stderr)
    if opts.debug_root_path is not None:
        from pathlib import Path

        root = Path(opts.debug_root_path)
        root.mkdir(parents=True, exist_ok=True)
        stem = f"{kernel.name}_{kernel.artifact.path.name}"
        (root / f"{stem}.program.py").write_text(func.script())
        kind = "cuda" if kernel.artifact.target.get("kind") == "cuda" else "llvm"
        (root / f"{stem}.{'cu' if kind == 'cuda' else 'll'}").write_text(kernel.get_kernel_source(kind))


def _compile_cpu(func: Any, target: Any, backend: str, specs: list[Any], outs: list[int], opts: CompileOptions,
                 name: str | None, config: dict[str, Any] | None) -> JITKernel:
    from ..backend import cpu as cpu_backend

    t0 = time.perf_counter()
    tgt = cpu_backend.host_target() if backend == "cpu" else {}
    toolchain = {"llvm": cpu_backend.llvm_version(), "cc": os.environ.get("CC", "gcc")}
    key = cache.disk_key(func.script(), outs, tgt, opts.pass_configs, toolchain)
    with cache.compile_lock(key):  # one thread (of any process) compiles a key; the others then find it on disk
        art = cache.disk_get(key)
        status = "disk"
        tmp = None
        if art is None:
            status = "compiled"
            tmp = cache.new_build_dir()
            try:
                art = _build_cpu(func, target, tgt, specs, outs, opts, name, config, tmp.path)
            except BaseException:
                tmp.remove()
                raise
            art = cache.disk_put(key, tmp, art)
            cache.count("compiles")
    kernel = JITKernel(art, program=func, config=config, cache_status=status,
                       compile_seconds=time.perf_counter() - t0, name=name, pass_configs=opts.pass_configs)
    cache.tie_to_kernel(tmp, kernel)
    return kernel


def _build_cpu(func: Any, target: Any, tgt: dict[str, Any], specs: list[Any], outs: list[int], opts: CompileOptions,
               name: str | None, config: dict[str, Any] | None, tmp: Any) -> Any:
    """Lower, generate and link ``func`` into the folder ``tmp``; returns its artifact (meta.json written)."""
    from ..backend import cpu as cpu_backend
    from ..runtime.artifact import Artifact, sha256_file
    from ..transform.common.notes import read_notes

    try:
        mod = cpu_backend.lower(func)
        build = cpu_backend.build(mod, tmp, cache.shim_dir())
    except TileLangCompileError as e:
        from ..trace.report import describe_compile_failure

        describe_compile_failure(e, func, target=target, resolved_target=tgt, out_idx=outs, specs=specs,
                                 name=name, config=config, pass_configs=opts.pass_configs)
        raise
    sources = {}
    for kind, text in (("llvm", build.sources.get("llvm", "")), ("asm", build.sources.get("asm", "")),
                       ("tir", mod.script())):
        fname = {"llvm": "kernel.ll", "asm": "kernel.s", "tir": "lowered.tir.py"}[kind]
        (tmp / fname).write_text(text)
        sources[kind] = fname
    art = Artifact(path=tmp, entry="main", target=tgt, params=specs, out_idx=outs, sources=sources,
                   library_sha256=sha256_file(build.library),
                   extra={"name": name or "main", "config": {k: repr(v) for k, v in (config or {}).items()},
                          "link_command": build.link_command, "llvm_target": build.llvm_target,
                          "llvm_version": build.llvm_version, "notes": read_notes(mod),
                          "pass_configs": opts.pass_configs.explicit()})
    art.write_meta()
    return art


class JITFactory:
    """What ``@jit`` returns: call it with the factory's arguments to get a compiled kernel."""

    def __init__(self, factory: Callable[..., Any], out_idx: Any, target: Any, options: CompileOptions | None = None):
        self.factory = factory
        import dataclasses

        self.options = dataclasses.replace(options if options is not None else CompileOptions(), out_idx=out_idx)
        self.out_idx = out_idx
        self.target = target
        self._memory: dict[Any, JITKernel] = {}
        functools.update_wrapper(self, factory)

    def _bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        import inspect

        try:
            ba = inspect.signature(self.factory).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.factory.__name__}: {e}") from None
        ba.apply_defaults()
        return dict(ba.arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        try:
            config = self._bind(args, kwargs)
        except TypeError:  # only tuning arguments left out: the user's best or the shipped default, if known
            from ..autotune.defaults import call_with_defaults

            kernel = call_with_defaults(self, args, kwargs)
            if kernel is None:
                raise
            return kernel
        try:
            mkey = (tuple((k, repr(v)) for k, v in config.items()), repr(self.target), self.options.key())
        except Exception:  # noqa: BLE001
            mkey = None
        if mkey is None:
            return self._specialise(config, args, kwargs)
        hit = self._memory.get(mkey)
        if hit is None:
            with cache.key_lock(("jit factory", id(self), mkey)):  # threads asking for one key: one compiles
                hit = self._memory.get(mkey)
                if hit is None:
                    kernel = self._specialise(config, args, kwargs)
                    self._memory[mkey] = kernel
                    return kernel
        cache.count("memory_hits")
        return hit

    def _specialise(self, config: dict[str, Any], args: tuple, kwargs: dict) -> JITKernel:
        func = self.get_program(*args, **kwargs)
        try:
            kernel = _compile(func, self.target, self.options, name=self.factory.__name__, config=config)
        except TileLangCompileError as e:
            self._describe(e, config)
            raise
        kernel.factory = self
        return kernel

    def get_program(self, *args: Any, **kwargs: Any) -> Any:
        """The ``@T.prim_func`` the factory builds for these arguments (TIR with tile ops, not compiled)."""
        from ..language.dtypes import ANNOTATION_ERRORS

        ANNOTATION_ERRORS.last = None
        try:
            func = self.factory(*args, **kwargs)
        except TileLangCompileError as e:
            self._describe(e, self._bind(args, kwargs))
            raise
        except TileLangError:
            raise
        except Exception as e:
            if _is_diagnostic(e):
                err = _from_diagnostic(e)
                self._describe(err, self._bind(args, kwargs))
                raise err from None
            located = _from_language_error(e)
            if located is not None:
                self._describe(located, self._bind(args, kwargs))
                raise located from e
            raise
        if not _is_prim_func(func):
            raise TypeError(f"{self.factory.__name__}: a @jit factory must return a @T.prim_func, "
                            f"got {type(func).__name__}")
        return func

    def _describe(self, err: TileLangCompileError, config: dict[str, Any]) -> None:
        """Record the factory, its arguments and its source file in the error's failure report."""
        from ..trace.report import describe_factory

        describe_factory(err, self.factory, config, out_idx=self.out_idx, target=self.target, jit=True,
                         pass_configs=self.pass_configs)

    @property
    def pass_configs(self) -> PassConfig:
        """The options every kernel of this factory is compiled with."""
        return self.options.pass_configs

    def __repr__(self) -> str:
        opts = self.pass_configs.explicit()
        return (f"<tilelang_core.jit factory {self.factory.__name__}, {len(self._memory)} specialisation(s) cached"
                f"{', ' + repr(self.pass_configs) if opts else ''}>")


def jit(func: Callable[..., Any] | None = None, *, out_idx: Any = None, target: Any = "auto",
        target_host: Any = None, execution_backend: Any = None, verbose: Any = None, pass_configs: Any = None,
        debug_root_path: Any = None, compile_flags: Any = None) -> Any:
    """Decorate a kernel factory: ``@tilelang_core.jit(out_idx=[-1])``.

    Takes TileLang's keywords (see :func:`compile` for what each means here); all are checked now, so a bad
    option fails at the decorator. Any other keyword is a ``TypeError`` naming it."""
    if target is None:
        target = "auto"
    resolve_target(target)  # fail early on a bad target
    opts = _compile_options(out_idx, target_host, execution_backend, verbose, pass_configs, compile_flags,
                            debug_root_path)

    def wrap(f: Callable[..., Any]) -> JITFactory:
        if not callable(f):
            raise TypeError(f"jit: expected a kernel factory (a function returning a @T.prim_func), got "
                            f"{type(f).__name__}")
        from .eager import EagerJITFactory, is_eager

        if is_eager(f):  # TileLang's eager spelling: the body is the kernel (see jit/eager.py)
            if out_idx is not None:
                raise ValueError(f"{f.__name__}: out_idx is not used by an eager @jit function (one without an inner "
                                 "@T.prim_func): its outputs are the tensors it declares with T.empty")
            return EagerJITFactory(f, target, opts, decorator_pass_configs=pass_configs)
        return JITFactory(f, out_idx, target, opts)

    return wrap(func) if func is not None else wrap


def cache_stats() -> dict[str, int]:
    """Cache counters: memory_hits, disk_hits, compiles, corrupt_rebuilt."""
    return cache.STATS.as_dict()


without_disk_cache = cache.without_disk_cache

__all__ = ["jit", "compile", "JITKernel", "JITFactory", "CompileOptions", "cache_stats", "without_disk_cache"]

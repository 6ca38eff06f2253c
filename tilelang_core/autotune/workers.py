"""Compiling many configurations at once in worker processes, with results handed over through the disk cache.

Why this module exists: compiling is the slow part of a sweep and it is CPU-bound Python + TVM, so threads do not
help (the GIL, and TVM's pass pipeline is not known to be thread-safe). Worker *processes* do: each compiles some
configurations into the shared disk kernel cache, and the tuner's own process then gets every kernel from there in
milliseconds. The pool uses the ``spawn`` start method (fork after TVM or torch have started threads can hang) and is
kept for the rest of the session, so only the first sweep pays the workers' start-up (importing torch and TVM).

A worker must be able to import the factory: it has to be a module-level function (or ``@jit`` factory) of an
importable module or of a script file. Factories defined in a notebook cell, inside another function, or in
``exec``'d code cannot be imported; :func:`factory_ref` returns ``None`` for them and the tuner compiles them
in its own process instead (one at a time, in the calling thread).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

_POOL: ProcessPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
MAX_REASON_LINES = 6
PASS_CONFIGS = "pass_configs"  # a configuration's own compiler options (see compile_config)
_DERIVED: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(factory), options) -> (factory, derived factory)
_DERIVED_LOCK = threading.Lock()


@dataclass(frozen=True)
class FactoryRef:
    """How a worker process finds a factory: module name, qualified name, and the module's file as a fallback."""

    module: str
    qualname: str
    file: str | None


def _resolve(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def factory_ref(factory: Any) -> FactoryRef | None:
    """A reference a worker process can import, or ``None`` (cell-, closure- or exec-defined factories)."""
    func = getattr(factory, "factory", factory)
    qual = getattr(func, "__qualname__", "")
    module = getattr(func, "__module__", None)
    code = getattr(func, "__code__", None)
    if not qual or not module or "<" in qual or code is None or code.co_filename.startswith("<"):
        return None
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    try:
        found = _resolve(mod, qual)
    except AttributeError:
        return None
    if found is not factory and getattr(found, "factory", None) is not func and found is not func:
        return None  # the module attribute is something else (rebound, or decorated differently)
    if module == "__main__" and not file:
        return None
    return FactoryRef(module, qual, file)


def main_is_guarded() -> bool:
    """Whether worker processes may start: ``spawn`` re-imports the ``__main__`` script in every worker, so a script
    must keep its top level behind ``if __name__ == "__main__":`` (Jupyter, ``python -m``, ``-c`` are fine)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if spec is not None and getattr(spec, "name", None) or not path:
        return True  # a module run with -m, an interactive session or a kernel: nothing to re-run
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return True
    return False


def load_factory(ref: FactoryRef) -> Any:
    """Import the factory a :class:`FactoryRef` names (in a worker)."""
    mod = None
    if ref.module != "__main__":
        try:
            mod = importlib.import_module(ref.module)
        except ImportError:
            mod = None
    if mod is None:
        if not ref.file:
            raise ImportError(f"cannot import {ref.module}")
        name = "__tilelang_autotune_main__" if ref.module == "__main__" else ref.module
        spec = importlib.util.spec_from_file_location(name, ref.file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {ref.file}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return _resolve(mod, ref.qualname)


def jitted(factory: Any, out_idx: Any = None, target: Any = None) -> Any:
    """``factory`` as a ``@jit`` factory: as is when it already is one and nothing is overridden. An eager-spelled
    function (no inner ``@T.prim_func``) stays an eager ``@jit`` function: its outputs are its ``T.empty`` tensors,
    so ``out_idx`` does not apply; compile it with :func:`compile_config`."""
    from ..jit import JITFactory, jit
    from ..jit.eager import is_eager

    if getattr(factory, "eager", False):
        if target is None:
            return factory
        given = getattr(getattr(factory.options, "pass_configs", None), "explicit", dict)()
        return jit(target=target, pass_configs=given or None)(factory.factory)
    if not isinstance(factory, JITFactory) and callable(factory) and is_eager(factory):
        return jit(target="auto" if target is None else target)(factory)
    if isinstance(factory, JITFactory):
        if out_idx is None and target is None:
            return factory
        return JITFactory(factory.factory, factory.out_idx if out_idx is None else out_idx,
                          factory.target if target is None else target, factory.options)
    return jit(out_idx=-1 if out_idx is None else out_idx, target="auto" if target is None else target)(factory)


def _takes(jf: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(getattr(jf, "factory", jf)).parameters
    except (TypeError, ValueError):
        return False


def with_pass_configs(jf: Any, extra: Any) -> Any:
    """``jf`` compiling with the options ``extra`` over its own ``pass_configs`` (one derived factory per distinct
    set, kept, so its in-memory kernels are reused). An unknown key or a bad value is the ``ValueError`` of
    :func:`tilelang_core.pass_config.resolve`, naming it."""
    import dataclasses
    import json

    from ..jit import JITFactory, jit
    from ..pass_config import resolve
    from .record import jsonable

    if not isinstance(extra, dict):
        raise TypeError(f"a configuration's {PASS_CONFIGS!r} must be a dict of option -> value, got {extra!r}")
    key = (id(jf), json.dumps(jsonable(extra), sort_keys=True))
    with _DERIVED_LOCK:
        hit = _DERIVED.get(key)
        if hit is not None and hit[0] is jf:
            return hit[1]
    given = getattr(getattr(jf.options, "pass_configs", None), "explicit", dict)()
    merged = resolve({**given, **extra})
    if getattr(jf, "eager", False):
        derived = jit(target=jf.target, pass_configs=merged.explicit() or None)(jf.factory)
    elif isinstance(jf, JITFactory):
        derived = JITFactory(jf.factory, jf.out_idx, jf.target, dataclasses.replace(jf.options, pass_configs=merged))
    else:
        raise TypeError(f"{PASS_CONFIGS!r} in a configuration needs a @jit factory, got {type(jf).__name__}")
    with _DERIVED_LOCK:
        _DERIVED[key] = (jf, derived)
    return derived


def compile_config(jf: Any, kwargs: dict[str, Any]) -> Any:
    """The kernel of one configuration: ``jf(**kwargs)`` for a factory, ``jf.compile(**kwargs)`` for an eager
    ``@jit`` function (calling one runs the kernel; ``kwargs`` then hold its ``T.const`` sizes, e.g. ``N=1024``).

    ``kwargs[PASS_CONFIGS]`` (a dict; unless the factory has a parameter of that name) is not an argument: the
    configuration is compiled with those options over the factory's own (``tl.cuda.persistent``,
    ``tl.disable_warp_specialized``, ...: :mod:`.spaces` sweeps them)."""
    if PASS_CONFIGS in kwargs and not _takes(jf, PASS_CONFIGS):
        kwargs = dict(kwargs)
        extra = kwargs.pop(PASS_CONFIGS)
        if extra:
            jf = with_pass_configs(jf, extra)
    return jf.compile(**kwargs) if getattr(jf, "eager", False) else jf(**kwargs)


def reason(e: BaseException) -> str:
    """Why a configuration failed, in a few lines."""
    lines = (str(e) or type(e).__name__).strip().splitlines()
    text = "\n".join(lines[:MAX_REASON_LINES]) + (" ..." if len(lines) > MAX_REASON_LINES else "")
    return text if text.startswith(type(e).__name__) else f"{type(e).__name__}: {text}"


def compile_in_worker(ref: FactoryRef, kwargs: dict[str, Any], out_idx: Any, target: Any,
                      cache_dir: str | None) -> tuple[str | None, float]:
    """Worker entry point: compile one configuration into the disk cache; returns (failure reason or None, s)."""
    if cache_dir is not None:
        os.environ["TILELANG_CORE_CACHE_DIR"] = cache_dir
    t0 = time.perf_counter()
    try:
        compile_config(jitted(load_factory(ref), out_idx, target), kwargs)
    except Exception as e:  # noqa: BLE001 - a failing config is a result
        return reason(e), time.perf_counter() - t0
    return None, time.perf_counter() - t0


def _worker_init(parent: int) -> None:
    """Workers ignore Ctrl-C (and Jupyter's interrupt): the tuner's process decides when they stop. They also exit
    when that process is gone (a killed or restarted notebook kernel cannot shut its pool down)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="tilelang-autotune-parent-watch", daemon=True).start()


def pool(workers: int) -> ProcessPoolExecutor:
    """The session's worker pool (``spawn``), resized when a different size is asked for."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE != workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_init, initargs=(os.getpid(),))
            _POOL_SIZE = workers
        return _POOL


def shutdown() -> None:
    """Stop the worker processes (they are otherwise kept for the next sweep)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.shutdown(wait=True, cancel_futures=True)
        _POOL, _POOL_SIZE = None, 0


def compile_parallel(ref: FactoryRef, configs: list[dict[str, Any]], out_idx: Any, target: Any, workers: int,
                     on_done: Any = None) -> list[tuple[str | None, float]]:
    """Compile every configuration in ``workers`` processes; returns (failure reason or None, seconds) per config.

    ``on_done(index, reason, seconds)`` is called as each finishes (in completion order).
    """
    from ..jit.cache import cache_dir

    executor = pool(workers)
    cdir = str(cache_dir())
    futures: list[Future] = [executor.submit(compile_in_worker, ref, kw, out_idx, target, cdir) for kw in configs]
    index = {f: i for i, f in enumerate(futures)}
    results: list[tuple[str | None, float]] = [("not compiled", 0.0)] * len(configs)
    from concurrent.futures import as_completed

    broken = False
    for fut in as_completed(futures):
        i = index[fut]
        try:
            results[i] = fut.result()
        except BrokenProcessPool:
            broken = True
            results[i] = ("the compiler crashed (its worker process died)", 0.0)
        except Exception as e:  # noqa: BLE001 - e.g. the arguments could not be pickled
            results[i] = (reason(e), 0.0)
        if on_done is not None:
            on_done(i, *results[i])
    if broken:
        shutdown()  # a fresh pool next time
    return results


__all__ = ["FactoryRef", "factory_ref", "load_factory", "jitted", "compile_parallel", "compile_in_worker", "pool",
           "shutdown", "reason"]

"""TileLang's ``tilelang.autotuner`` spelling, over our :mod:`tilelang_core.autotune`.

Why a second module: TileLang programs import ``from tilelang.autotuner import autotune, AutoTuner,
set_autotune_inputs`` and pass TileLang's options; this facade maps them onto :func:`tilelang_core.autotune.tune`
(parallel compiles, sequential timing, the tuning database), so those programs run unchanged:

* ``@autotune(configs=..., warmup=, rep=, ref_prog=, supply_type=, supply_prog=, rtol=, atol=, skip_check=)``
  above ``@tilelang.jit``: calling the factory with the problem arguments tunes once per argument set and returns
  the best kernel; passing a tuned argument explicitly skips tuning. ``configs`` may be a function of the call's
  arguments, as in TileLang.
* ``AutoTuner.from_kernel(kernel=fn, configs=...).set_compile_args(out_idx=, target=, pass_configs=)
  .set_profile_args(...).run(warmup, rep, timeout)`` returns an :class:`AutotuneResult` (``latency``,
  ``config``, ``ref_latency``, ``kernel``, ``libcode``, ``func``).
* ``with set_autotune_inputs(a, b): kernel = factory(...)`` tunes on those tensors.

Accepted with no effect here (documented in docs/compat.md): ``timeout`` (no per-config time limit),
``cache_input_tensors``, ``do_not_specialize``, ``early_stop``; ``max_mismatched_ratio`` (every element is
checked); ``manual_check_prog`` is refused with an error saying so.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .autotune.tuner import AutoTuner as _DecoratorTuner
from .autotune.tuner import tune

_local = threading.local()


class AutotuneInputsCapture:
    """The context manager :func:`set_autotune_inputs` returns: while it is open, tuning uses its tensors."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list[Any]):
        self.tensors = tensors

    def __enter__(self) -> AutotuneInputsCapture:
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().pop()


def _stack() -> list[AutotuneInputsCapture]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def set_autotune_inputs(*args: Any) -> AutotuneInputsCapture:
    """``with set_autotune_inputs(a, b, c):`` (or a single list) — tune on these input tensors (per thread)."""
    tensors = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    return AutotuneInputsCapture(tensors)


def get_autotune_inputs() -> list[Any] | None:
    """The tensors of the innermost open :func:`set_autotune_inputs`, or None."""
    stack = _stack()
    return stack[-1].tensors if stack else None


def _inputs_option(supply_type: Any, supply_prog: Callable[..., Any] | None) -> Any:
    """How to make the tuning inputs: captured tensors, ``supply_prog(params)``, or the ``supply_type``."""
    captured = get_autotune_inputs()
    if captured is not None:
        return captured
    if supply_prog is not None:
        return lambda kernel: supply_prog([kernel.params[i] for i in kernel.in_idx])
    if supply_type is not None:
        return lambda kernel: kernel.get_profiler(tensor_supply_type=supply_type).inputs()
    return None


_NO_EFFECT = ("timeout", "cache_input_tensors", "do_not_specialize", "early_stop", "early_stop_factor",
              "max_mismatched_ratio")


def _check_options(options: dict[str, Any]) -> None:
    if options.pop("manual_check_prog", None) is not None:
        raise NotImplementedError("autotune: manual_check_prog is not supported; give ref_prog (checked with rtol/"
                                  "atol) or skip_check=True (see docs/compat.md#modules-and-top-level-api)")
    for key in _NO_EFFECT:
        options.pop(key, None)


class _TileLangDecoratorTuner(_DecoratorTuner):
    """Our decorator tuner, with TileLang's callable configs and captured / supplied inputs."""

    def __init__(self, factory: Any, configs: Any, supply_type: Any, supply_prog: Any, **options: Any):
        super().__init__(factory, configs, **options)
        self._configs_spec = configs
        self._supply = (supply_type, supply_prog)

    def _resolve(self, args: tuple, kwargs: dict) -> None:
        spec = self._configs_spec
        if callable(spec) and not isinstance(spec, (list, dict, str)):
            takes_args = bool(inspect.signature(spec).parameters)
            self.configs = spec(*args, **kwargs) if takes_args else spec()

    def tune(self, *args: Any, **kwargs: Any) -> Any:
        self._resolve(args, kwargs)
        given = self._given(args, kwargs)
        inputs = _inputs_option(*self._supply)
        result = tune(self.factory, self.configs, args=given, inputs=inputs, **self.options)
        self.results[repr(sorted(given.items()))] = result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._resolve(args, kwargs)
        return super().__call__(*args, **kwargs)


def autotune(func: Any = None, *, configs: Any = None, warmup: float = 25, rep: float = 100,
             supply_type: Any = None, ref_prog: Callable[..., Any] | None = None,
             supply_prog: Callable[..., Any] | None = None, rtol: float | None = None, atol: float | None = None,
             skip_check: bool = False, ref: Callable[..., Any] | None = None, **options: Any) -> Any:
    """TileLang's ``@tilelang.autotune(configs=..., ...)`` over a ``@tilelang.jit`` factory (see the module
    docstring); ``tilelang_core.autotune(...)`` is this same decorator. Our own options (``workers``, ``db``,
    ``progress``, ``from_db`` ...) pass through; ``ref`` is our name for ``ref_prog``. ``rtol``/``atol`` default
    by the output dtype (TileLang: 1e-2 for both)."""
    if func is not None and configs is None:
        raise TypeError("autotune: configs= is required (use @autotune(configs=...), as in TileLang)")
    if configs is None:
        raise TypeError("autotune: configs= is required (a list of dicts, a dict of value lists, or a function "
                        "of the call's arguments returning one)")
    _check_options(options)
    ref = None if skip_check else (ref_prog if ref_prog is not None else ref)

    def wrap(f: Any) -> Any:
        return _TileLangDecoratorTuner(f, configs, supply_type, supply_prog, ref=ref, rtol=rtol, atol=atol,
                                       warmup=float(warmup), rep=float(rep), **options)

    return wrap(func) if func is not None else wrap


@dataclass
class AutotuneResult:
    """TileLang's tuning result: the best ``latency`` (ms), its ``config``, the reference's ``ref_latency``, the
    compiled ``kernel``, its generated code (``libcode``) and program (``func``); ``result``: our full
    :class:`~tilelang_core.autotune.TuneResult` (every measurement)."""

    latency: float | None = None
    config: dict[str, Any] | None = None
    ref_latency: float | None = None
    libcode: str | None = None
    func: Any = None
    kernel: Any = None
    result: Any = None


class AutoTuner:
    """TileLang's builder: ``AutoTuner.from_kernel(kernel=fn, configs=...)``, then ``set_compile_args``,
    ``set_profile_args`` and ``run``. ``fn(**config)`` returns the ``@T.prim_func`` for one configuration."""

    def __init__(self, fn: Callable[..., Any], configs: Any):
        if not callable(fn):
            raise TypeError(f"AutoTuner: kernel must be a function returning a prim_func, got {type(fn).__name__}")
        self.fn = fn
        self.configs = configs
        self.compile_args: dict[str, Any] = {"out_idx": None, "target": "auto", "pass_configs": None}
        self.profile_args: dict[str, Any] = {"supply_type": None, "ref_prog": None, "supply_prog": None,
                                             "rtol": 1e-2, "atol": 1e-2, "skip_check": False}
        self.options: dict[str, Any] = {}

    @classmethod
    def from_kernel(cls, kernel: Callable[..., Any], configs: Any) -> AutoTuner:
        return cls(kernel, configs)

    def set_compile_args(self, out_idx: Any = None, target: Any = "auto", execution_backend: Any = None,
                         target_host: Any = None, verbose: bool = False, pass_configs: Any = None,
                         **_ignored: Any) -> AutoTuner:
        """Where and how each configuration compiles (``execution_backend``, ``target_host`` and ``verbose`` have
        no counterpart here and are accepted)."""
        self.compile_args = {"out_idx": out_idx, "target": target, "pass_configs": pass_configs}
        return self

    def set_profile_args(self, warmup: float = 25, rep: float = 100, timeout: float = 30, supply_type: Any = None,
                         ref_prog: Callable[..., Any] | None = None, supply_prog: Callable[..., Any] | None = None,
                         rtol: float = 1e-2, atol: float = 1e-2, max_mismatched_ratio: float = 0.01,
                         skip_check: bool = False, manual_check_prog: Callable[..., Any] | None = None,
                         cache_input_tensors: bool = False, **ours: Any) -> AutoTuner:
        """How each configuration is checked and timed (TileLang's arguments; see the module docstring)."""
        _check_options({"manual_check_prog": manual_check_prog})
        self.profile_args = {"supply_type": supply_type, "ref_prog": ref_prog, "supply_prog": supply_prog,
                             "rtol": rtol, "atol": atol, "skip_check": skip_check}
        self.options = dict(ours)
        return self

    def run(self, warmup: float = 25, rep: float = 100, timeout: float = 30, **_ignored: Any) -> AutotuneResult:
        """Compile and time every configuration; the best as an :class:`AutotuneResult` (``kernel`` None when
        none compiled and passed its check)."""
        from .jit import jit

        ca, pa = self.compile_args, self.profile_args
        out_idx = ca["out_idx"] if ca["out_idx"] is not None else -1
        factory = jit(out_idx=out_idx, target=ca["target"], pass_configs=ca["pass_configs"])(self.fn)
        configs = self.configs() if callable(self.configs) else self.configs
        result = tune(factory, configs, ref=None if pa["skip_check"] else pa["ref_prog"], rtol=pa["rtol"],
                      atol=pa["atol"], warmup=float(warmup), rep=float(rep),
                      inputs=_inputs_option(pa["supply_type"], pa["supply_prog"]),
                      name=getattr(self.fn, "__name__", None), **self.options)
        best = result.best
        if best is None:
            return AutotuneResult(result=result)
        kernel = result.best_kernel
        return AutotuneResult(latency=best.latency_ms, config=dict(result.best_config or {}),
                              ref_latency=result.reference_ms, libcode=kernel.get_kernel_source(),
                              func=getattr(kernel, "program", None), kernel=kernel, result=result)

    def __call__(self) -> AutotuneResult:
        return self.run()


__all__ = ["autotune", "AutoTuner", "AutotuneResult", "set_autotune_inputs", "get_autotune_inputs"]

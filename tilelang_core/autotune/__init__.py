"""Autotuning: sweep kernel configurations, keep every measurement, answer "what is best here?" across sessions.

Why this package exists: a tile kernel's speed depends on its tile sizes, stages and threads, and the best choice
depends on the shapes and the machine. This package tries configurations and remembers the results::

    import tilelang_core
    from tilelang_core.autotune import tune, best, grid

    result = tune(matmul, {"block_M": [64, 128], "block_N": [64, 128]}, args=dict(M=512, N=512, K=512),
                  ref=lambda A, B: A @ B)          # compiles in worker processes, times one by one, progress bar
    result.best.config, result.best_kernel, print(result.table())
    best("matmul", {"M": 512, "N": 512, "K": 512}, "cpu")   # from the tuning database, any earlier session

    @tilelang_core.autotune(configs=grid(block_M=[64, 128], block_N=[64, 128]), ref=lambda A, B: A @ B)
    @tilelang_core.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=64, block_N=64, block_K=32): ...
    kernel = matmul(512, 512, 512)                  # tuned once per shape, the best kernel returned

``tilelang_core.autotune(...)`` is the decorator while ``tilelang_core.autotune`` stays this package. Importing it
imports neither TVM nor torch. Modules: :mod:`.space` (tunable arguments, grids), :mod:`.record` (a measurement),
:mod:`.measure` (check + time one kernel), :mod:`.workers` (parallel compiles), :mod:`.tuner` (the sweep and the
decorator), :mod:`.db` (the SQLite tuning database), :mod:`.progress` (the tqdm bar); spreading a sweep:
:mod:`.executors` (the interface), :mod:`.local_executor`, :mod:`.ray_executor`, :mod:`.scheduler` (the driver
loop: retries, early stopping, finalists), :mod:`.tasks` (what workers do), :mod:`.shipping` (compiled kernels as
bytes), :mod:`.device_info` (GPU name, driver, clocks); :mod:`.spaces` (the sm_90a / sm_80 GEMM tuning spaces),
:mod:`.attention_space` and :mod:`.dequant_space` (the flash-attention forward's and the dequantising GEMM's),
:mod:`.defaults` (the shipped best configurations per problem and device, ``data/defaults.json``). Ray is imported
only when a Ray executor is used.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .attention_space import attention_space
from .db import TuningDB, best, default_path
from .defaults import Default, ShippedDefaultsError, compile_default, default_config
from .dequant_space import dequant_space
from .executors import Executor
from .local_executor import LocalExecutor
from .measure import MeasurementCancelledError, measure
from .ray_executor import RayExecutor
from .record import Measurement, kernel_identity
from .space import default_space, grid, parse_space
from .spaces import gemm_space
from .tasks import EarlyStop
from .tuner import AutoTuner, TuneResult, autotune, tune


class _CallableModule(types.ModuleType):
    """Lets ``tilelang_core.autotune(configs=...)`` decorate while ``tilelang_core.autotune`` stays a package."""

    def __call__(self, func: Any = None, **kwargs: Any) -> Any:
        from ..autotuner import autotune as tilelang_autotune  # TileLang's options, over ours

        return tilelang_autotune(func, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["autotune", "tune", "best", "grid", "parse_space", "default_space", "TuningDB", "TuneResult",
           "AutoTuner", "Measurement", "measure", "kernel_identity", "default_path", "MeasurementCancelledError",
           "Executor", "LocalExecutor", "RayExecutor", "EarlyStop", "gemm_space", "attention_space", "dequant_space",
           "default_config", "compile_default", "Default", "ShippedDefaultsError"]

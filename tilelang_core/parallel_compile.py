"""TileLang's ``tilelang.par_compile``: compile several programs at once, one kernel per program, in order.

Threads suffice: most of a compile is TVM's C++ passes, LLVM and nvcc, which run outside the GIL, and the kernel
cache lets one thread build a key while the others wait for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def par_compile(funcs: Iterable[Any], out_idx: Any = None, target: Any = "auto", target_host: Any = None,
                execution_backend: Any = None, verbose: Any = None, pass_configs: Any = None,
                num_workers: int | None = None, ignore_error: bool = False, **compile_kwargs: Any) -> list[Any]:
    """``[tilelang_core.compile(f, ...) for f in funcs]`` on ``num_workers`` threads (default: the CPU count).
    With ``ignore_error=True`` a program that fails to compile gives None in its place instead of raising."""
    from .jit import compile as compile_one

    programs = list(funcs)
    if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
        raise ValueError(f"par_compile num_workers: expected an int >= 1, got {num_workers!r}")
    workers = min(len(programs), num_workers or os.cpu_count() or 1) or 1

    def one(func: Any) -> Any:
        try:
            return compile_one(func, out_idx=out_idx, target=target, target_host=target_host,
                               execution_backend=execution_backend, verbose=verbose, pass_configs=pass_configs,
                               **compile_kwargs)
        except Exception:
            if ignore_error:
                return None
            raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, programs))

"""TileLang's ``tilelang.testing``: the helpers its test files use, so they run under ``tilelang_core``.

``main()`` runs pytest on the calling file; ``requires_cuda`` and ``requires_cuda_compute_version_ge(9, 0)`` (and
``_gt``/``_le``/``_lt``/``_eq``) skip a test, with the reason, unless a CUDA GPU (of that compute capability) is
visible; ``requires_package("x")`` skips without an importable package; ``requires_llvm`` never skips (the CPU
backend is LLVM); ``requires_rocm``/``requires_metal``/``requires_cdna``/``requires_gfx950`` always skip (this
compiler has no such backend). ``set_random_seed``, TileLang's mismatch-tolerant ``torch_assert_close`` and
numpy-style ``assert_allclose``. Importing this module imports neither pytest, torch nor TVM: each is imported
when a decorator or helper runs.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

from ..utils.tensor import torch_assert_close

__all__ = ["main", "requires_cuda", "requires_cuda_or_cdna", "requires_package", "requires_llvm", "requires_metal",
           "requires_rocm", "requires_cdna", "requires_gfx950", "requires_cuda_compute_version",
           "requires_cuda_compute_version_ge", "requires_cuda_compute_version_gt",
           "requires_cuda_compute_version_le", "requires_cuda_compute_version_lt",
           "requires_cuda_compute_version_eq", "set_random_seed", "torch_assert_close", "assert_allclose"]

UNSUPPORTED = {
    "process_func": "TileLang's performance-regression harness is not ported; time with tilelang_core.profiler."
                    "do_bench or kernel.get_profiler().do_bench()",
    "regression": "TileLang's performance-regression harness is not ported; see bench/ for this project's "
                  "benchmarks",
}


def main() -> None:
    """Run pytest on the file that calls this (``if __name__ == "__main__": tilelang.testing.main()``), passing
    the command line's arguments on; exits with pytest's status."""
    import pytest

    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([test_file, *sys.argv[1:]]))


def _skip_unless(condition: Callable[[], bool], reason: str) -> Callable[[Any], Any]:
    def decorate(func: Any) -> Any:
        import pytest

        return pytest.mark.skipif(not condition(), reason=reason)(func)

    return decorate


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (the tests' tensors live there)."""
    import torch

    return bool(torch.cuda.is_available())


def cuda_compute_version() -> tuple[int, int]:
    """The visible GPU's compute capability, (0, 0) without one."""
    if not cuda_available():
        return (0, 0)
    import torch

    return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]


def requires_cuda(func: Any) -> Any:
    """Skip unless a CUDA GPU is visible."""
    return _skip_unless(cuda_available, "requires a CUDA GPU (none visible)")(func)


requires_cuda_or_cdna = requires_cuda  # no ROCm backend here: CUDA or nothing


def requires_llvm(func: Any) -> Any:
    """Never skips: the CPU backend is TVM's LLVM codegen, always present."""
    return func


def _never(backend: str) -> Callable[[Any], Any]:
    def decorate(func: Any) -> Any:
        import pytest

        return pytest.mark.skip(reason=f"requires {backend}, which tilelang_core does not target")(func)

    return decorate


requires_rocm = _never("ROCm")
requires_cdna = _never("a CDNA GPU (ROCm)")
requires_gfx950 = _never("a gfx950 GPU (ROCm)")
requires_metal = _never("Metal")


def requires_package(*packages: str) -> Callable[[Any], Any]:
    """Skip unless every one of ``packages`` can be imported."""
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    return _skip_unless(lambda: not missing, f"requires package(s) {', '.join(missing)}")


_COMPARE = {"ge": tuple.__ge__, "gt": tuple.__gt__, "le": tuple.__le__, "lt": tuple.__lt__, "eq": tuple.__eq__}


def requires_cuda_compute_version(major_version: int, minor_version: int = 0,
                                  mode: str = "ge") -> Callable[[Any], Any]:
    """Skip unless a CUDA GPU is visible and its compute capability compares with (major, minor) as ``mode``
    (``"ge"``, ``"gt"``, ``"le"``, ``"lt"``, ``"eq"``) says."""
    if mode not in _COMPARE:
        raise ValueError(f"mode: expected one of {', '.join(map(repr, _COMPARE))}, got {mode!r}")
    wanted = (int(major_version), int(minor_version))

    def ok() -> bool:
        return cuda_available() and _COMPARE[mode](cuda_compute_version(), wanted)

    return _skip_unless(ok, f"requires a CUDA GPU with compute capability {mode} {wanted[0]}.{wanted[1]}")


def requires_cuda_compute_version_ge(major_version: int, minor_version: int = 0) -> Callable[[Any], Any]:
    return requires_cuda_compute_version(major_version, minor_version, "ge")


def requires_cuda_compute_version_gt(major_version: int, minor_version: int = 0) -> Callable[[Any], Any]:
    return requires_cuda_compute_version(major_version, minor_version, "gt")


def requires_cuda_compute_version_le(major_version: int, minor_version: int = 0) -> Callable[[Any], Any]:
    return requires_cuda_compute_version(major_version, minor_version, "le")


def requires_cuda_compute_version_lt(major_version: int, minor_version: int = 0) -> Callable[[Any], Any]:
    return requires_cuda_compute_version(major_version, minor_version, "lt")


def requires_cuda_compute_version_eq(major_version: int, minor_version: int = 0) -> Callable[[Any], Any]:
    return requires_cuda_compute_version(major_version, minor_version, "eq")


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's ``random``, numpy and torch (every CUDA device too, when present)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 0.0) -> None:
    """numpy's ``assert_allclose`` (as ``tvm.testing.assert_allclose``): every element within
    ``atol + rtol * |desired|``, shapes equal; torch tensors are accepted (copied to the host)."""
    import numpy as np

    def host(x: Any) -> Any:
        if hasattr(x, "detach"):
            x = x.detach().cpu()
            if str(x.dtype) in ("torch.bfloat16",) or "float8" in str(x.dtype):
                x = x.float()
            return x.numpy()
        return np.asarray(x)

    a, d = host(actual), host(desired)
    if a.shape != d.shape:
        raise AssertionError(f"shapes differ: actual {a.shape}, desired {d.shape}")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, verbose=True)


def __getattr__(name: str) -> Any:
    if name in UNSUPPORTED:
        raise AttributeError(f"tilelang_core.testing.{name} is not supported: {UNSUPPORTED[name]} "
                             "(see docs/compat.md#modules-and-top-level-api)")
    raise AttributeError(f"module 'tilelang_core.testing' has no attribute {name!r}")

"""TileLang's ``tilelang.utils``: tensor supply (:class:`TensorSupplyType`), the mismatch-tolerant
:func:`torch_assert_close`, float8 helpers and buffer predicates. Imports neither TVM nor torch.

Names of TileLang's ``utils`` that are compiler internals here (``array_reduce``, ``retrieve_stride`` ...) raise
an ``AttributeError`` that says so and points to docs/compat.md.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from .language import is_fragment, is_global, is_local, is_shared, is_shared_dynamic
from .tensor import (
    TensorSupplyType,
    fp8_remove_negative_zeros_,
    get_tensor_supply,
    is_float8_dtype,
    torch_assert_close,
)


def deprecated(reason: str = "", alternative: str | None = None) -> Callable[[Any], Any]:
    """Mark a function deprecated: calling it warns (``DeprecationWarning``) with ``reason``/``alternative``."""

    def wrap(func: Any) -> Any:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            msg = f"{func.__name__} is deprecated" + (f": {reason}" if reason else "")
            if alternative:
                msg += f"; use {alternative}"
            warnings.warn(msg, DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return inner

    return wrap


_INTERNAL = "a helper of TileLang's own compiler internals, with no counterpart in tilelang_core"
UNSUPPORTED = {name: _INTERNAL for name in (
    "is_tensor_memory", "array_reduce", "retrieve_stride", "retrieve_shape", "retrive_ptr_from_buffer_region",
    "is_full_region", "to_buffer_region", "get_buffer_region_from_load", "get_prim_func_name", "side_effect")}
UNSUPPORTED["build_date"] = "TileLang's build stamp; tilelang_core has no native build (see tilelang_core.__version__)"

__all__ = ["TensorSupplyType", "torch_assert_close", "get_tensor_supply", "is_float8_dtype",
           "fp8_remove_negative_zeros_", "is_global", "is_shared", "is_shared_dynamic", "is_fragment", "is_local",
           "deprecated"]


def __getattr__(name: str) -> Any:
    if name in UNSUPPORTED:
        raise AttributeError(f"tilelang_core.utils.{name} is not supported: {UNSUPPORTED[name]} "
                             "(see docs/compat.md#modules-and-top-level-api)")
    raise AttributeError(f"module 'tilelang_core.utils' has no attribute {name!r}")

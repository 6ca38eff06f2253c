"""``T.import_source``: a user's own device code (a lop3 int4 decoder, an inline-PTX helper) for ``T.call_extern``.

TileLang's fast dequantising kernels call hand-written ``__device__`` functions through ``T.call_extern(dtype,
"name", *args)`` (TVMScript's own, reached through ``T``) after giving their text to ``T.import_source``. The text
travels in the program as a ``tl.import_source`` statement (so it is part of the cache key like any other
statement); ``tl.CollectImportedSources`` lifts it into the function attribute ``tl.import_source`` and the CUDA
code generator places it after our headers, before the kernel. It is CUDA code: on the CPU a ``T.call_extern`` of
a function the process cannot resolve is an error at the user's line (docs/compat.md).
"""

from __future__ import annotations

from typing import Any

import tvm

from ._ir import emit


def import_source(source: Any = None) -> None:
    """Include ``source`` (CUDA C: ``__device__`` functions, macros) in the generated CUDA source."""
    if source is None:
        return None  # TileLang's default: nothing to import
    if not isinstance(source, str):
        raise TypeError(f"T.import_source source: expected a str of CUDA code, got {type(source).__name__}")
    if not source.strip():
        raise ValueError("T.import_source source: expected CUDA code, got an empty string")
    emit("tl.import_source", [tvm.ir.StringImm(source)])
    return None

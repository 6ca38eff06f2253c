"""Keep TVM from compiling our CUDA source: a scoped override of its ``tvm_callback_cuda_compile``.

TVM's CUDA code generator (``target.build.cuda``) ends by compiling the source it wrote whenever the CUDA runtime
is enabled in the process, that is on any machine with a GPU driver: it calls the global function
``tvm_callback_cuda_compile`` (registered by ``tvm.support.nvcc`` at import; NVRTC by default) and would fail on
our ``tl::`` templates, which it cannot find without our include path. On a machine without a driver it keeps the
source only. We want the source in both cases, and to compile it ourselves (nvcc or NVRTC, our flags, recorded).

While :func:`source_only` is active the callback is replaced by one that records the source and returns a
placeholder image (a comment, as bytes: TVM's runtime takes the compiled image as bytes), which TVM wraps into a
module we never load; on exit the previous callback is put back, so other users of TVM in the process keep theirs.
A lock serialises the override: the global function table is process-wide.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CALLBACK = "tvm_callback_cuda_compile"
PLACEHOLDER = b"// tilelang_core compiles this source itself (nvcc or NVRTC); TVM's module is never loaded\n"

_lock = threading.Lock()


@dataclass
class CapturedSource:
    """What TVM handed to the compile callback while :func:`source_only` was active (empty if it never called)."""

    sources: list[str] = field(default_factory=list)

    @property
    def called(self) -> bool:
        return bool(self.sources)


@contextmanager
def source_only() -> Iterator[CapturedSource]:
    """Within this block TVM's CUDA codegen records its source instead of compiling it."""
    import tvm  # noqa: F401 - registers TVM's own callback first, so ours replaces it and theirs is restored
    import tvm_ffi

    captured = CapturedSource()

    def record(code: Any, *_target: Any) -> bytes:
        captured.sources.append(code.decode() if isinstance(code, (bytes, bytearray)) else str(code))
        return PLACEHOLDER

    with _lock:
        previous = tvm_ffi.get_global_func(CALLBACK, allow_missing=True)
        tvm_ffi.register_global_func(CALLBACK, record, override=True)
        try:
            yield captured
        finally:
            if previous is not None:
                tvm_ffi.register_global_func(CALLBACK, previous, override=True)
            else:
                tvm_ffi.registry.remove_global_func(CALLBACK)

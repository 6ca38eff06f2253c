"""The compiled-kernel object users hold: call it, read its code, profile it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..runtime.artifact import Artifact, ParamSpec
from ..runtime.cuda_launcher import make_callable

if TYPE_CHECKING:
    from ..trace import GeneratedCode, Trace


class JITKernel:
    """A kernel compiled for one target and one set of shapes.

    Call it with the input tensors (outputs named by ``out_idx`` are allocated and returned), or with all
    tensors including preallocated outputs.
    """

    def __init__(self, artifact: Artifact, program: Any = None, config: dict[str, Any] | None = None,
                 cache_status: str = "compiled", compile_seconds: float = 0.0, name: str | None = None):
        self.artifact = artifact
        self.program = program  # the PrimFunc as written (TIR with tile ops), when compiled in this process
        self.config = dict(config or {})
        self.cache_status = cache_status  # "compiled" | "disk" | "memory"
        self.compile_seconds = compile_seconds
        self.name = name or artifact.extra.get("name", artifact.entry)
        self._callable = make_callable(artifact)
        self.factory: Any = None  # the @jit factory (JITFactory) that built it, when it came through one
        self._trace: Trace | None = None
        self._trace_lock = threading.Lock()

    # -- calling -------------------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        return self._callable(*args)

    @property
    def params(self) -> list[ParamSpec]:
        """Every parameter, inputs and outputs, in signature order."""
        return list(self.artifact.params)

    @property
    def out_idx(self) -> list[int]:
        return list(self._callable.out_idx)

    @property
    def in_idx(self) -> list[int]:
        return list(self._callable.in_idx)

    @property
    def target(self) -> dict[str, Any]:
        return dict(self.artifact.target)

    # -- code ----------------------------------------------------------------------------------------------
    def get_kernel_source(self, kind: str = "llvm") -> str:
        """Generated code: ``"llvm"`` (LLVM IR) or ``"asm"`` on CPU; ``"tir"`` for the lowered TIR."""
        return self.artifact.source(kind)

    @property
    def source_kinds(self) -> list[str]:
        return sorted(self.artifact.sources)

    @property
    def sources(self) -> dict[str, GeneratedCode]:
        """Generated code by kind, each labelled and with the exact command that produced it: on CPU ``"llvm"``
        (LLVM IR) and ``"asm"`` (assembly). Read from the artifact, so a disk-cache hit has them too."""
        from ..trace import sources_of

        return sources_of(self.artifact)

    @property
    def trace(self) -> Trace:
        """The compile trace: the program after every pass (ours and TVM's), with timings. Computed on first
        access by re-running the lowering with instrumentation (compiling pays nothing for it), then cached."""
        with self._trace_lock:
            if self._trace is None:
                if self.program is None:
                    from ..errors import TileLangError

                    raise TileLangError(f"kernel {self.name}: no program to trace (loaded from an artifact); "
                                        "compile it from its factory to see its trace")
                from ..trace import capture

                self._trace = capture(self.program, target=self.artifact.target, name=self.name,
                                      config=self.config)
            return self._trace

    def get_profiler(self, tensor_supply: str = "randn") -> Any:
        from ..profiler import Profiler

        return Profiler(self, tensor_supply=tensor_supply)

    def export(self, path: Any, *, source: str | None = None, reference: str | None = None) -> Any:
        """Write this kernel as a standalone Python module (see :func:`tilelang_core.export.export_kernel`);
        ``import m; m.kernel(a, b)`` then works with torch and apache-tvm-ffi alone. Returns the path."""
        from ..export import export_kernel

        return export_kernel(self, path, source=source, reference=reference)

    def __repr__(self) -> str:
        ins = ", ".join(str(self.params[i]) for i in self.in_idx)
        outs = ", ".join(str(self.params[i]) for i in self.out_idx) or "none"
        cfg = ", ".join(f"{k}={v}" for k, v in self.config.items())
        how = {"compiled": f"compiled in {self.compile_seconds:.2f}s", "disk": "from disk cache",
               "memory": "from memory cache"}.get(self.cache_status, self.cache_status)
        tgt = self.artifact.target
        tdesc = f"{tgt.get('kind')} ({tgt.get('mcpu', tgt.get('arch', ''))})"
        return (f"<JITKernel {self.name}({cfg}) target={tdesc} inputs=[{ins}] outputs=[{outs}] {how}>")

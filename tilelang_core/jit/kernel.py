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
                 cache_status: str = "compiled", compile_seconds: float = 0.0, name: str | None = None,
                 pass_configs: Any = None):
        from ..pass_config import resolve

        self.artifact = artifact
        try:  # the generated sources stay readable if the cache folder is deleted later
            artifact.keep_sources()
        except OSError:
            pass
        self.pass_configs = resolve(pass_configs)  # the options in force (a PassConfig; .explicit(): those set)
        self.program = program  # the PrimFunc as written (TIR with tile ops), when compiled in this process
        self.config = dict(config or {})
        self.cache_status = cache_status  # "compiled" | "disk" | "memory"
        self.compile_seconds = compile_seconds
        self.name = name or artifact.extra.get("name", artifact.entry)
        self._callable = make_callable(artifact)
        self.factory: Any = None  # the @jit factory (JITFactory) that built it, when it came through one
        self._trace: Trace | None = None
        self._trace_lock = threading.Lock()
        self._derived_sources: dict[str, str] = {}  # CUDA PTX / SASS, made on first request

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

    @property
    def notes(self) -> list[str]:
        """Fast paths the compiler did not take for this kernel and why, one line each, at the user's line where
        known (e.g. ``"line 12: T.gemm 16x64x256 is not fused with the dequantisation before it ...: the scale
        changes within a lane's 32-wide k chunk ..."``); empty when every fast path the program asked for applied.
        Stored in the artifact, so a disk-cache hit has them too."""
        return [str(n) for n in self.artifact.extra.get("notes") or []]

    def resources(self) -> Any:
        """CUDA: a :class:`~tilelang_core.backend.cuda.resources.KernelResources` — registers per thread, spill
        bytes, stack/local memory, static and dynamic shared memory, barriers, and the theoretical occupancy
        (blocks and warps per SM, what limits it) — from the cubin (cuobjdump) and ptxas's report; None for a CPU
        kernel or a CUDA build without a cubin. Computed once."""
        if "_resources" not in self.__dict__:
            from ..backend.cuda.resources import artifact_resources

            self.__dict__["_resources"] = artifact_resources(self.artifact)
        return self.__dict__["_resources"]

    def code_by_line(self, kind: str = "sass") -> Any:
        """CUDA, a source-line build (``pass_configs={"tl.cuda.lineinfo": True}``): the ``"sass"`` (needs nvdisasm)
        or ``"ptx"`` split by the user's lines, a
        :class:`~tilelang_core.backend.cuda.source_lines.LineListing` (``.instructions``, ``.by_line[(file,
        line)]``, ``.of(line)``). A clear error for other kernels or kinds, or when nvdisasm is missing."""
        from ..backend.cuda import source_lines
        from ..errors import TileLangError

        if kind not in ("sass", "ptx"):
            raise ValueError(f"code_by_line: kind must be 'sass' or 'ptx', got {kind!r}")
        if self.artifact.target.get("kind") != "cuda":
            raise TileLangError(f"kernel {self.name}: code_by_line needs a CUDA kernel (this one is for "
                                f"{self.artifact.target.get('kind')})")
        if not self.pass_configs.get("tl.cuda.lineinfo"):
            raise TileLangError(f"kernel {self.name}: not a source-line build; compile it with "
                                "pass_configs={'tl.cuda.lineinfo': True} to map its SASS and PTX to your lines")
        cuda = self.get_kernel_source("cuda")
        if kind == "ptx":
            return source_lines.ptx_by_line(self.get_kernel_source("ptx"), cuda)
        text = source_lines.sass_with_lines(self.artifact.library_path)
        if text is None:
            raise TileLangError(f"kernel {self.name}: no SASS with line info: nvdisasm was not found (pip install "
                                "nvidia-cuda-nvdisasm, or put the CUDA toolkit's bin on PATH) or there is no cubin")
        return source_lines.sass_by_line(text, cuda)

    # -- code ----------------------------------------------------------------------------------------------
    def get_kernel_source(self, kind: str | None = None) -> str:
        """Generated code. CPU: ``"llvm"`` (LLVM IR, the default) or ``"asm"``; CUDA: ``"cuda"`` (CUDA C, the
        default, as in TileLang), ``"ptx"`` (made on first request with the build's compiler and flags) or
        ``"sass"`` (needs ``cuobjdump`` or ``nvdisasm``); any target: ``"tir"``, the lowered TIR."""
        kind = self._source_kind(kind)
        if kind in self.artifact.sources:
            return self.artifact.source(kind)
        with self._trace_lock:
            if kind not in self._derived_sources and self.artifact.target.get("kind") == "cuda":
                text = _derived_cuda_source(self.artifact, kind)
                if text is not None:
                    self._derived_sources[kind] = text
        if kind in self._derived_sources:
            return self._derived_sources[kind]
        return self.artifact.source(kind)  # raises KeyError naming the kinds this artifact has

    def _source_kind(self, kind: str | None) -> str:
        cuda = self.artifact.target.get("kind") == "cuda"
        if kind is None:
            return "cuda" if cuda else "llvm"
        if not isinstance(kind, str):
            raise TypeError(f"get_kernel_source: kind must be a str, got {type(kind).__name__}")
        return {"cu": "cuda", "c": "cuda", "source": "cuda"}.get(kind, kind) if cuda else kind

    @property
    def source_kinds(self) -> list[str]:
        """The kinds :meth:`get_kernel_source` can return for this kernel (on CUDA, ``ptx`` where nvcc or NVRTC
        is there and ``sass`` where a disassembler is)."""
        kinds = set(self.artifact.sources) | set(self._derived_sources)
        if self.artifact.target.get("kind") == "cuda":
            from ..backend.cuda.nvcc import find_nvcc, nvrtc_available
            from ..trace.model import find_disassembler

            if "cuda" in kinds and (find_nvcc() is not None or nvrtc_available()):
                kinds.add("ptx")
            if find_disassembler() is not None and self.artifact.library_path.is_file():
                kinds.add("sass")
        return sorted(kinds)

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
                                      config=self.config, pass_configs=self.pass_configs)
            return self._trace

    def get_profiler(self, tensor_supply: Any = "randn", tensor_supply_type: Any = None) -> Any:
        """A :class:`~tilelang_core.profiler.Profiler`; ``tensor_supply_type`` (TileLang's name) takes a
        :class:`~tilelang_core.utils.TensorSupplyType`."""
        from ..profiler import Profiler

        return Profiler(self, tensor_supply=tensor_supply if tensor_supply_type is None else tensor_supply_type)

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
        opts = self.pass_configs.explicit()
        odesc = (" pass_configs={" + ", ".join(f"{k!r}: {v!r}" for k, v in opts.items()) + "}") if opts else ""
        notes = self.notes
        ndesc = f" notes={len(notes)} (kernel.notes: fast paths not taken)" if notes else ""
        return (f"<JITKernel {self.name}({cfg}) target={tdesc}{odesc} inputs=[{ins}] outputs=[{outs}] {how}{ndesc}>")

    # -- copying and pickling ------------------------------------------------------------------------------
    # Serialising the kernel's TVM program and loaded library used to segfault the interpreter; refuse instead.
    _NOT_SERIALISABLE = ("a JITKernel cannot be {what}: it holds a loaded native library and the TVM program. "
                         "Keep using the same object (a kernel is not changed by calls), call the @jit factory "
                         "again with the same arguments (served from the cache), or use kernel.export(path) for "
                         "a standalone module")

    def __reduce__(self) -> Any:  # pickle, copy.copy
        raise TypeError(self._NOT_SERIALISABLE.format(what="pickled or copied"))

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError(self._NOT_SERIALISABLE.format(what="deep-copied"))


def _derived_cuda_source(artifact: Artifact, kind: str) -> str | None:
    """PTX (recompiled from the stored CUDA C with the build's compiler) or SASS (disassembled from the cubin) of a
    CUDA artifact; None for other kinds or when the tool is missing."""
    if kind == "ptx" and "cuda" in artifact.sources:
        from ..backend.cuda.nvcc import compile_ptx

        meta = artifact.extra.get("cuda") or {}
        compiler = "nvrtc" if (meta.get("nvcc_command") or [""])[0] == "nvrtc" else "auto"
        flags = list(artifact.extra.get("compile_flags") or [])
        if (artifact.extra.get("pass_configs") or {}).get("tl.cuda.lineinfo"):
            flags.append("-lineinfo")  # a source-line build's PTX carries .loc lines too
        text, _ = compile_ptx(artifact.path / artifact.sources["cuda"], str(meta.get("arch", "sm_90")), compiler,
                              flags)
        return text
    if kind == "sass":
        from ..trace import sources_of

        code = sources_of(artifact).get("sass")
        return code.text if code is not None else None
    return None

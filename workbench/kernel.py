"""The object ``%%tilekernel NAME`` binds to ``NAME``: a compiled kernel plus what the workbench learned about it.

Why this module exists: after the cell runs, the user keeps working with the kernel — calls it on their own
tensors, reads its trace, compiles a variant to compare, exports it. :class:`WorkbenchKernel` holds the cell, the
configuration, the compiled ``JITKernel`` and the check and benchmark results, and displays itself as the summary
(widgets in Jupyter, plain text in a terminal).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from .build import BuildCache, BuildResult
from .cell import PRIM_FUNC, CellProgram, CellSource
from .check import CheckResult, Timing
from .ir import config_label
from .options import Options


class WorkbenchKernel:
    """A kernel compiled from a ``%%tilekernel`` cell; call it like the kernel itself."""

    def __init__(self, *, cell: CellSource, program: CellProgram, options: Options, kwargs: dict[str, Any],
                 out_idx: list[int], target: Any, build: BuildResult, cache: BuildCache,
                 check: CheckResult | None = None, timing: Timing | None = None,
                 previous: WorkbenchKernel | None = None, sizes: dict[str, Any] | None = None):
        self.name = options.name
        self.cell = cell
        self.program = program
        self.options = options
        self.kwargs = dict(kwargs)
        self.out_idx = list(out_idx)
        self.sizes = dict(sizes or {})  # values of the kernel's symbolic sizes for its inputs (--shapes n=1024)
        self.target_request = target
        self.build = build
        self.check = check
        self.timing = timing
        self.previous = previous
        self.variants: dict[str, WorkbenchKernel] = {}
        self.not_run: str | None = None  # why the kernel was compiled but not run (e.g. no GPU here)
        self.last_panel: Any = None  # the tuning panel opened last (NAME.panel(), --panel)
        self._cache = cache

    # -- the kernel ------------------------------------------------------------------------------------------
    @property
    def kernel(self) -> Any:
        """The compiled ``tilelang_core.JITKernel``."""
        return self.build.kernel

    def __call__(self, *args: Any) -> Any:
        try:
            return self.kernel(*args)
        except (TypeError, ValueError) as e:
            from .errors import argument_error, is_argument_error

            if not is_argument_error(e):
                raise
            params = self.params
            err = argument_error(self.name, e, sys._getframe(1), [params[i] for i in self.kernel.in_idx],
                                 [params[i] for i in self.out_idx])
            if err is e:
                raise
            raise err from e

    @property
    def config(self) -> dict[str, Any]:
        """Every factory argument, defaults applied (empty for a cell that defines a ``@T.prim_func``)."""
        return dict(getattr(self.kernel, "config", None) or self.kwargs)

    @property
    def params(self) -> list[Any]:
        return self.kernel.params

    @property
    def source(self) -> str:
        """The cell as written (without the ``%%tilekernel`` line)."""
        return self.cell.text

    @property
    def target(self) -> dict[str, Any]:
        return self.kernel.target

    @property
    def trace(self) -> Any:
        """The compile trace: IR after every stage (``tilelang_core.trace.Trace``)."""
        return self.kernel.trace

    @property
    def sources(self) -> dict[str, Any]:
        """Generated code by kind (``"llvm"``, ``"asm"`` on the CPU; ``"cuda"``, and ``"ptx"``/``"sass"`` where stored,
        on CUDA), each with its compiler command; ``kernel.source_kinds`` lists every kind, the lowered TIR too."""
        return self.kernel.sources

    @property
    def status(self) -> str:
        """How the kernel was obtained: ``compiled``, ``cached`` (this session) or ``disk`` (earlier session)."""
        return self.build.status

    @property
    def passed(self) -> bool | None:
        """Whether the outputs matched ``--ref`` (None when there was no reference)."""
        return None if self.check is None else self.check.passed

    # -- variants and comparison -----------------------------------------------------------------------------
    def variant(self, **overrides: Any) -> WorkbenchKernel:
        """The same cell compiled with some factory arguments changed, e.g. ``k.variant(block_M=128)``.

        Not checked or timed; used by the Compare view and :meth:`compare`. Compiled once per configuration.
        """
        if self.program.kind == PRIM_FUNC:
            raise ValueError(f"{self.name}: the cell defines a @T.prim_func with fixed shapes; write a factory to "
                             "compile variants")
        params = inspect.signature(self.program.function).parameters
        unknown = [k for k in overrides if k not in params]
        if unknown:
            raise ValueError(f"{self.name}: the factory has no parameter(s) {', '.join(unknown)}; it takes "
                             f"{', '.join(params)}")
        label = config_label(overrides)
        if label in self.variants:
            return self.variants[label]
        kwargs = {**self.kwargs, **overrides}
        build = self.build_config(**overrides)
        shapes = {**self.options.shapes, **overrides}
        other = WorkbenchKernel(cell=self.cell, program=self.program, options=replace(self.options, shapes=shapes),
                                kwargs=kwargs, out_idx=self.out_idx, target=self.target_request, build=build,
                                cache=self._cache, sizes=self.sizes)
        self.variants[label] = other
        return other

    def build_config(self, **overrides: Any) -> BuildResult:
        """Compile the cell's factory with some arguments changed, through the session cache (no checks, no
        bookkeeping: the tuning panel's compile step)."""
        if self.program.kind == PRIM_FUNC:
            raise ValueError(f"{self.name}: the cell defines a @T.prim_func with fixed shapes; write a factory to "
                             "compile other configurations")
        return self._cache.build(self.program, self.cell.text, {**self.kwargs, **overrides}, self.out_idx,
                                 self.target_request, self.name)

    def panel(self, tune: Any = None, **axes: Any) -> Any:
        """The tuning panel: sliders over the tunable arguments that recompile, check and time live, with plots of
        throughput, error and the roofline, and a Sweep button (see :mod:`workbench.panel`).

        ``tune`` overrides the offered values as text (``"block_M=32,64,128 num_stages=1:4"``); keyword axes do the
        same as lists (``block_M=[32, 64, 128]``).
        """
        from .panel import TuningPanel
        from .tunables import parse_tune

        space = parse_tune(tune) if tune else {}
        space.update({k: list(v) for k, v in axes.items()})
        self.last_panel = TuningPanel(self, space)
        return self.last_panel

    def compare(self, other: Any, stage: str | int = "input", context: int = 3) -> str:
        """Unified diff of one stage between this kernel and ``other`` (a kernel, or overrides as a dict)."""
        from tilelang_core.trace import diff_kernels

        if isinstance(other, dict):
            other = self.variant(**other)
        return diff_kernels(self.kernel, getattr(other, "kernel", other), stage=stage, context=context)

    # -- export ----------------------------------------------------------------------------------------------
    def export(self, path: str | Path) -> Path:
        """Write a standalone Python module holding the compiled kernel (see ``tilelang_core.export``).

        ``import <module>; <module>.kernel(a, b)`` then works without TVM (torch and apache-tvm-ffi only).
        """
        from tilelang_core.export import export_kernel

        return export_kernel(self.kernel, path, source=self.source, reference=self.options.ref, name=self.name)

    # -- display ---------------------------------------------------------------------------------------------
    def summary(self, widgets: bool | None = None) -> Any:
        """The summary: a widget in Jupyter (``widgets=None`` decides), else the plain-text summary string."""
        from .display import use_widgets

        if widgets if widgets is not None else use_widgets():
            from .summary import SummaryView

            return SummaryView(self)
        from .text_views import summary_text

        return summary_text(self)

    def _ipython_display_(self) -> None:
        from .display import show

        show(self)

    def __repr__(self) -> str:
        from .text_views import status_line

        return f"<WorkbenchKernel {self.name}({config_label(self.config)}): {status_line(self)}>"

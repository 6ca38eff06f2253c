"""The ``%%tilekernel`` cell magic: compile a kernel factory, check it, time it, bind it, show it.

Why this module exists: it is the workbench's front door and the only place that talks to IPython's magic
machinery. Arguments are declared with ``IPython.core.magic_arguments`` (so ``%tilekernel?`` prints the full help
and a bad argument raises ``UsageError``); ``{var}`` expansion of the magic line stays on, so papermill parameters
work. The steps themselves live in small modules: :mod:`.cell` (run the cell), :mod:`.build` (compile, cached),
:mod:`.check` (reference and timing), :mod:`.kernel` (the bound object), :mod:`.display` (the summary).

A failure raises :class:`~workbench.errors.TileKernelError` — "Run All" and nbclient stop on it — and never leaves
the magic in a broken state: the next cell works.
"""

from __future__ import annotations

import inspect
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import cell as cellmod
from . import options as optmod
from .build import BuildCache, effective_out_idx, effective_target, jit_decorator
from .check import Reference, ReferenceCheckError, benchmark, check
from .errors import check_error, compile_error
from .kernel import WorkbenchKernel
from .status import criterion_text, margin_text


def _injected() -> dict[str, Any]:
    """What every cell sees besides the user namespace: ``T``, ``tilelang_core`` (alias ``tilelang``), ``torch``."""
    import torch

    import tilelang_core
    import tilelang_core.language as T

    return {"T": T, "tilelang_core": tilelang_core, "tilelang": tilelang_core, "torch": torch}


def _check_message(wk: WorkbenchKernel) -> str:
    c = wk.check
    assert c is not None
    lines = [f"--ref {c.reference!r} ({criterion_text(c.rtol, c.atol)}):"]
    for o in c.outputs:
        verdict = "ok" if o.mismatched == 0 else f"{o.mismatched} of {o.total} elements out of tolerance"
        lines.append(f"  output {o.name}: max abs err {o.max_abs:.3e}, max rel err {o.max_rel:.3e}, worst element "
                     f"at {margin_text(o.margin)} of its allowance -> {verdict}")
    return "\n".join(lines)


def can_run(kernel: Any) -> bool:
    """Whether this machine can run the kernel (CUDA kernels compile without a GPU, but do not run)."""
    if kernel.target.get("kind") != "cuda":
        return True
    import torch

    return bool(torch.cuda.is_available())


@magics_class
class TileKernelMagics(Magics):
    """Holds the session's compile cache and the last kernel bound under each name."""

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell, **kwargs)
        self.cache = BuildCache()
        self.history: dict[str, WorkbenchKernel] = {}

    @magic_arguments()
    @argument("name", help="the name to bind the kernel to in the notebook (also the factory the cell defines, "
                           "when the cell defines more than one function)")
    @argument("--shapes", "-s", default=None, metavar="K=V,...",
              help="factory arguments, e.g. M=512,N=512,K=512 (any factory parameter; values are Python literals)")
    @argument("--dtype", default=None, help="passed as the factory's `dtype` argument (the factory must have one)")
    @argument("--ref", "-r", default=None, metavar="EXPR",
              help='reference expression over the input names, evaluated in the notebook namespace, e.g. '
                   '"torch.relu(A @ B)"; every output is compared with it')
    @argument("--target", "-t", default="auto",
              help="auto (default), cpu (alias llvm) or cuda (compiled only when no GPU is visible)")
    @argument("--rtol", type=float, default=None,
              help="relative tolerance (default 1e-4 for float32 outputs, 1e-2 for float16/bfloat16)")
    @argument("--atol", type=float, default=None, help="absolute tolerance (defaults as for --rtol)")
    @argument("--out-idx", default=None, metavar="I,...",
              help="which parameters are outputs (default: what @tilelang.jit says, else -1: the last)")
    @argument("--no-bench", action="store_true", help="skip timing kernel and reference")
    @argument("-f", "--force", action="store_true", help="recompile even if this cell was compiled before")
    @argument("-q", "--quiet", action="store_true", help="bind the kernel but display nothing")
    @argument("--panel", action="store_true",
              help="show the tuning panel (sliders over tile sizes, stages, threads that recompile and re-measure "
                   "live; plots; sweeps) instead of the summary; NAME.panel() shows it later")
    @argument("--tune", nargs="+", default=None, metavar="NAME=VALUES",
              help="the panel's knobs and their values, e.g. --tune block_M=32,64,128 num_stages=1:4 (lists, or "
                   "inclusive lo:hi ranges); implies --panel")
    @cell_magic
    def tilekernel(self, line: str, cell: str) -> None:
        """Compile the kernel factory defined in this cell, check it against a reference, time it, and bind it.

        The cell defines a factory (a function taking sizes and tile options and returning a ``@T.prim_func``),
        a ``@tilelang.jit`` factory, or a ``@T.prim_func``; ``T``, ``tilelang_core`` (also as ``tilelang``) and
        ``torch`` are available in it. The factory is called with its defaults and ``--shapes``; random inputs are
        made from the kernel's signature; ``--ref`` is evaluated with the inputs bound by parameter name. NAME is
        bound to a workbench kernel: call it like the kernel, read ``NAME.trace`` / ``NAME.sources``, compile
        ``NAME.variant(block_M=128)``, ``NAME.export("my_kernels/name.py")``.

        Re-running an unchanged cell reuses the compiled kernel ("cached"); a change to the cell, its arguments,
        the variables it reads, or the library versions recompiles. A compile error or a failed check raises.

        Example::

            %%tilekernel matmul_relu --shapes M=512,N=512,K=512 --ref "torch.relu(A @ B)"
            def matmul_relu(M, N, K, block_M=64, block_N=64, block_K=32):
                @T.prim_func
                def main(A: T.Tensor((M, K), "float32"), ...):
                    ...
                return main
        """
        try:
            args = parse_argstring(self.tilekernel, line)
        except UsageError as e:
            raise UsageError(optmod.unrecognized_hint(str(e))) from None
        opts = optmod.parse(args)
        opts.line = line
        if not cell.strip():
            raise UsageError(f"%%tilekernel {opts.name}: the cell is empty; define the kernel factory in it")
        wk = self.run(opts, cell)
        failed = wk.check is not None and not wk.check.passed
        if not opts.quiet:
            from IPython.display import display

            if opts.panel and not failed:
                display(self._panel(wk))
            else:
                display(wk)
        if failed:
            raise check_error(_check_message(wk), wk.name,
                              hint=f"the kernel is bound to {wk.name} anyway: inspect {wk.name}.trace, or call "
                                   f"{wk.name}(...) on your own inputs")

    @line_magic("tilekernel")
    def tilekernel_line(self, line: str) -> None:
        """``%%tilekernel`` is a cell magic; the line form only explains that (``%tilekernel?`` shows the help)."""
        raise UsageError("%%tilekernel is a cell magic: put `%%tilekernel NAME [options]` on the first line of a cell "
                         "that defines the kernel factory (%%tilekernel? shows the options)")

    tilekernel_line.__doc__ = tilekernel.__doc__

    # -- the steps -------------------------------------------------------------------------------------------
    def run(self, opts: optmod.Options, text: str) -> WorkbenchKernel:
        """Run the cell, compile, check and time; bind and return the workbench kernel (raises on failure)."""
        ns = self.shell.user_ns
        cell = cellmod.CellSource.register(opts.name, text)
        injected = _injected()
        try:
            program = cellmod.run(cell, ns, injected)
        except Exception as e:  # noqa: BLE001 - whatever the user's cell raised becomes one diagnostic
            raise compile_error(e, cell, opts.name) from e
        symbols: dict[str, Any] = {}  # --shapes values of the kernel's symbolic sizes (T.symbolic / T.dynamic)
        if program.kind == cellmod.PRIM_FUNC:
            if opts.dtype:
                raise UsageError("--dtype: the cell defines a @T.prim_func with fixed shapes; define a factory "
                                 "function to pass arguments")
            kwargs: dict[str, Any] = {}
            symbols.update(opts.shapes)
        else:
            kwargs = optmod.factory_kwargs(program.function, opts, eager=program.eager, symbols=symbols)
        out_idx = effective_out_idx(program, opts.out_idx)
        target = effective_target(program, opts.target)
        self._check_target(target)
        try:
            build = self.cache.build(program, cell.text, kwargs, out_idx, target, opts.name, force=opts.force)
        except ValueError as e:
            if str(e).startswith("out_idx"):
                raise UsageError(f"--out-idx: {e}") from None
            raise compile_error(e, cell, opts.name) from e
        except Exception as e:  # noqa: BLE001
            raise compile_error(e, cell, opts.name) from e
        if program.eager is not None:
            out_idx = list(build.kernel.out_idx)
        self._check_symbols(build.kernel, program, symbols, opts)
        prev = self.history.get(opts.name)
        wk = WorkbenchKernel(cell=cell, program=program, options=opts, kwargs=kwargs, out_idx=out_idx,
                             target=target, build=build, cache=self.cache,
                             previous=self._previous(prev, build.key), sizes=symbols)
        self._check_and_time(wk, prev, ns, injected)
        self._bind(wk)
        return wk

    @staticmethod
    def _previous(prev: WorkbenchKernel | None, key: str) -> WorkbenchKernel | None:
        """The last *different* build under this name (a re-run of the same cell keeps the older one)."""
        if prev is None:
            return None
        return prev.previous if prev.build.key == key else prev

    @staticmethod
    def _check_symbols(kernel: Any, program: Any, symbols: dict[str, Any], opts: optmod.Options) -> None:
        """``--shapes`` names that are not factory arguments must be the kernel's symbolic sizes; a symbolic size
        of an input needs a value when the magic draws inputs (to check or time)."""
        have = sorted({d for p in kernel.params for d in p.shape if isinstance(d, str) and d.isidentifier()})
        unknown = [k for k in symbols if k not in have]
        if unknown:
            sizes = f"; the kernel's symbolic sizes are {', '.join(have)}" if have else ""
            if program.kind == cellmod.PRIM_FUNC:
                raise UsageError(f"--shapes: the cell defines a @T.prim_func with fixed shapes and no symbolic size "
                                 f"{', '.join(unknown)}{sizes}; define a factory function to pass arguments")
            what = f"the factory {program.function.__name__}{inspect.signature(program.function)}"
            raise UsageError(f"--shapes: {what} has no parameter(s) {', '.join(unknown)}{sizes}")
        for k, v in symbols.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise UsageError(f"--shapes: {k}={v!r}: the symbolic size {k} takes an int >= 0")
        needed = sorted({d for i in kernel.in_idx for d in kernel.params[i].shape
                         if isinstance(d, str) and d.isidentifier()} - set(symbols))
        if needed and (opts.ref is not None or opts.bench) and can_run(kernel):
            raise UsageError(f"--shapes: the kernel has the symbolic size(s) {', '.join(needed)}: give a value for "
                             f"each to size the inputs it is checked and timed on "
                             f"(--shapes {','.join(f'{n}=1024' for n in needed)})")

    @staticmethod
    def _check_target(target: Any) -> None:
        from tilelang_core import TileLangError

        try:
            jit_decorator()(target=target)
        except (TileLangError, ValueError, TypeError) as e:
            raise UsageError(f"--target: {e}") from None

    def _check_and_time(self, wk: WorkbenchKernel, prev: WorkbenchKernel | None, ns: dict[str, Any],
                        injected: dict[str, Any]) -> None:
        opts = wk.options
        if not can_run(wk.kernel):
            wk.not_run = "no CUDA GPU here: compiled only (the IR and Code tabs show the result)"
            return
        reference = None
        if opts.ref is not None:
            names = [wk.params[i].name for i in wk.kernel.in_idx]
            reference = Reference(opts.ref, names, {**ns, "torch": injected["torch"]})
            try:
                wk.check = check(wk.kernel, reference, opts.rtol, opts.atol, sizes=wk.sizes)
            except ReferenceCheckError as e:
                self._bind(wk)  # keep the kernel reachable for inspection
                raise check_error(str(e), wk.name, cause=e.__cause__ or e,
                                  hint=f"inputs are bound by parameter name: {', '.join(names)}") from None
            except Exception as e:  # noqa: BLE001 - the kernel itself failed to run
                self._bind(wk)
                raise check_error(f"{type(e).__name__}: {e}", wk.name, cause=e,
                                  headline=f"{wk.name}: the kernel failed to run") from None
        if not opts.bench or (wk.check is not None and not wk.check.passed):
            return
        reuse = (prev is not None and prev.timing is not None and wk.build.status == "cached"
                 and prev.build.key == wk.build.key and prev.options.check_key() == opts.check_key())
        try:
            wk.timing = prev.timing if reuse else benchmark(wk.kernel, reference, wk.config, sizes=wk.sizes)
        except Exception as e:  # noqa: BLE001
            self._bind(wk)
            raise check_error(f"{type(e).__name__}: {e}", wk.name, cause=e, hint="--no-bench skips timing",
                              headline=f"{wk.name}: timing kernel or reference failed") from None

    @staticmethod
    def _panel(wk: WorkbenchKernel) -> Any:
        """The tuning panel for ``--panel`` / ``--tune`` (a usage error when there is nothing to tune)."""
        try:
            return wk.panel(**wk.options.tune)
        except ValueError as e:
            raise UsageError(f"--panel: {e}") from None

    def _bind(self, wk: WorkbenchKernel) -> None:
        self.shell.user_ns[wk.name] = wk
        self.history[wk.name] = wk


__all__ = ["TileKernelMagics"]

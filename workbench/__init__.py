"""The tilelang_core workbench: an IPython extension for writing, checking, timing and reading tile kernels.

Why this module exists: ``%load_ext workbench`` imports it and calls :func:`load_ipython_extension`, which
registers the ``%%tilekernel`` cell magic (see :mod:`workbench.magic`). Importing this package is cheap: IPython,
ipywidgets, TVM and torch are imported only when the magic runs, so loading the extension costs nothing until a
kernel is compiled.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%%tilekernel`` magic on ``ipython`` (called by ``%load_ext workbench``)."""
    from .magic import TileKernelMagics

    ipython.register_magics(TileKernelMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magic again (``%unload_ext workbench``); kernels already bound stay usable."""
    magics = ipython.magics_manager.magics
    magics.get("cell", {}).pop("tilekernel", None)
    magics.get("line", {}).pop("tilekernel", None)
    ipython.magics_manager.registry.pop("TileKernelMagics", None)

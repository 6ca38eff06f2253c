"""Choosing and emitting the summary display: widgets in a Jupyter kernel, text elsewhere.

Why this module exists: widgets only render where a Jupyter frontend is attached (an ipykernel shell), and even
there a saved notebook viewed statically has only the ``text/plain`` of an output. So the summary is emitted as
one output whose bundle holds the widget view *and* the plain-text summary; in terminal IPython (no kernel) the
text alone is shown. ``WORKBENCH_WIDGETS=0`` / ``1`` forces the choice.
"""

from __future__ import annotations

import os
from typing import Any


def widget_bundle(widget: Any, text: str) -> dict[str, Any]:
    """The output bundle for ``widget`` with our own ``text/plain``. Built directly rather than through
    ``widget._repr_mimebundle_()``, which computes the widget's repr recursively — for a plotly FigureWidget that
    deep-copies the figure, wasted work that can also race a background thread updating it ("dictionary changed
    size during iteration")."""
    return {"text/plain": text,
            "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                         "model_id": widget.model_id}}


def widgets_installed() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def in_kernel() -> bool:
    """True inside an ipykernel (Jupyter, nbclient), False in terminal IPython or plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def use_widgets() -> bool:
    forced = os.environ.get("WORKBENCH_WIDGETS", "").strip().lower()
    if forced in ("0", "false", "no", "off"):
        return False
    if forced in ("1", "true", "yes", "on"):
        return widgets_installed()
    return widgets_installed() and in_kernel()


def show(wk: Any) -> None:
    """Display the summary of ``wk`` (a :class:`~workbench.kernel.WorkbenchKernel`)."""
    from IPython.display import display

    from .text_views import summary_text

    text = summary_text(wk)
    if not use_widgets():
        display({"text/plain": text}, raw=True)
        return
    from .summary import SummaryView

    view = SummaryView(wk)
    display(widget_bundle(view.widget, text), raw=True)

"""Displaying a panel or summary must not compute the widgets' recursive repr.

ipywidgets' own ``_repr_mimebundle_`` builds ``repr(widget)`` over all children; for a plotly FigureWidget that
deep-copies the figure, which raced the panel's background thread in a real browser run ("dictionary changed size
during iteration"). Our bundle names the widget's model and carries our own text instead.
"""

from __future__ import annotations

import pytest

W = pytest.importorskip("ipywidgets")

from workbench.display import widget_bundle  # noqa: E402


class ExplodingRepr(W.VBox):
    def __repr__(self) -> str:
        raise AssertionError("the widget's recursive repr was computed")


def test_widget_bundle_names_the_model_without_computing_the_repr():
    box = ExplodingRepr(children=[W.HTML("x")])
    with pytest.raises(AssertionError):
        box._repr_mimebundle_()  # what ipywidgets would have done
    bundle = widget_bundle(box, "<summary text>")
    assert bundle["text/plain"] == "<summary text>"
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == box.model_id and view["version_major"] == 2

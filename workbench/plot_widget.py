"""A plotly figure as a widget whose browser views always draw the figure's whole current state.

Why not plotly's ``FigureWidget``: its views are kept current by incremental messages (restyle, relayout, update,
each with an edit id) and by replies from every view (trace and layout "deltas" that make the Python side drop
properties the view reports as defaults); a view created later draws a synchronised state that plotly refreshes
only when the figure is displayed by itself. The tuning panel edits its figures from background threads while a
browser, possibly a slow one, creates the views inside boxes, and on a loaded CI machine the panel's plots were seen
short of points after a sweep had finished (tests/test_browser.py). Here the figure's JSON is one synchronised
trait, replaced after each batch of edits: a view draws it with ``Plotly.react`` when it is created and again on
every change, always reading the latest state, so whatever order views and updates arrive in, each view ends on
what the figure holds. plotly.js comes from the plotly package (``plotly.offline.get_plotlyjs``): nothing is
fetched.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import anywidget
import plotly.graph_objects as go
import plotly.io as pio
import traitlets

_ESM = """
const SRC = %s;
function plotly() {
  if (!globalThis.__wb_plotly) {  // evaluated once per page, whatever number of views
    const module = { exports: {} };
    new Function("module", "exports", SRC)(module, module.exports);
    globalThis.__wb_plotly = module.exports;
  }
  return globalThis.__wb_plotly;
}
export default {
  render({ model, el }) {
    const P = plotly();
    const config = { displaylogo: false, responsive: false };
    let chain = Promise.resolve();
    // each draw reads the model when it runs, so the last one always draws the latest figure
    const draw = () => {
      chain = chain.then(() => {
        const f = model.get("figure") || {};
        return P.react(el, f.data || [], f.layout || {}, config);
      }).catch((e) => console.error("workbench plot:", e));
    };
    draw();
    model.on("change:figure", draw);
    return () => { model.off("change:figure", draw); P.purge(el); };
  },
};
"""


@cache
def _esm() -> str:
    from plotly.offline import get_plotlyjs

    return _ESM % json.dumps(get_plotlyjs())


class PlotWidget(anywidget.AnyWidget):
    """A ``go.Figure`` (``.fig``, with ``.data`` and ``.layout`` as on any figure) shown as a widget. Edit it inside
    :meth:`batch_update`, which sends the whole figure to the browser once at the end; :meth:`push` sends it after
    edits made outside one."""

    figure = traitlets.Dict().tag(sync=True)

    def __init__(self, data: Any = None, layout: Any = None) -> None:
        super().__init__(_esm=_esm())
        self.fig = go.Figure(data=data, layout=layout)
        self._lock = threading.RLock()
        self._depth = 0
        self.push()

    @property
    def data(self) -> Any:
        return self.fig.data

    @property
    def layout(self) -> Any:
        return self.fig.layout

    @contextmanager
    def batch_update(self) -> Iterator[None]:
        """Edits inside are applied to the figure together, then the figure goes to the browser (nested calls: at
        the outermost one's end)."""
        with self._lock:
            self._depth += 1
            try:
                with self.fig.batch_update():
                    yield
            finally:
                self._depth -= 1
            if self._depth == 0:
                self.push()

    def push(self) -> None:
        """Send the figure's current state (unchanged state sends nothing: traitlets compares the values)."""
        with self._lock:
            self.figure = json.loads(pio.to_json(self.fig, validate=False))

    def __repr__(self) -> str:
        title = self.fig.layout.title.text or "untitled"
        return f"PlotWidget({title!r}, {len(self.fig.data)} traces)"


__all__ = ["PlotWidget"]

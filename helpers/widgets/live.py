"""Live charts that redraw in place (JupyterLab, Colab, VS Code) and what every explorer
shares: a message in place of the charts, and a static copy of the charts for readers without a
kernel.
"""

from __future__ import annotations

import os

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import clear_output, display

from helpers.device import backend
from helpers.figures import style


def figurewidget_supported() -> bool:
    """Whether plotly's ``FigureWidget`` can be expected to render here.

    It needs anywidget, and front ends where its model registers: not Google Colab
    (plotly#2202) and not VS Code (plotly#5027).
    """
    if backend.in_colab() or "VSCODE_PID" in os.environ:
        return False
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return False
    return True


class LiveChart:
    """A chart that can be redrawn in place.

    Uses a plotly ``FigureWidget`` where it renders (JupyterLab, Notebook 7); elsewhere it
    re-renders a static figure into an ``Output`` widget (``clear_output(wait=True)``), which
    also works in Colab.

    Attributes:
        widget: the ipywidgets object to place in a layout.
        figure: the figure currently shown (a ``go.Figure`` snapshot).
    """

    def __init__(self, figure: go.Figure | None = None, use_figurewidget: bool | None = None):
        self.use_figurewidget = (figurewidget_supported() if use_figurewidget is None
                                 else use_figurewidget)
        figure = figure or go.Figure()
        if self.use_figurewidget:
            self._fw = go.FigureWidget(figure)
            self.widget = W.VBox([self._fw])
        else:
            self._fw = None
            self._out = W.Output()
            self.widget = self._out
        self._figure = go.Figure(figure)
        if not self.use_figurewidget:
            self._render()

    @property
    def figure(self) -> go.Figure:
        return self._figure

    def update(self, figure: go.Figure) -> None:
        """Show ``figure`` instead of the current one."""
        self._figure = go.Figure(figure)
        if self._fw is not None:
            with self._fw.batch_update():
                self._fw.data = ()
                self._fw.add_traces(list(figure.data))
                self._fw.layout = figure.layout
        else:
            self._render()

    def _render(self) -> None:
        with self._out:
            clear_output(wait=True)
            display(self._figure)


class _Explorer:
    """What the explorers share: displaying ``self.widget``, and a message shown in ``self.body``
    in place of the charts. A subclass sets ``widget``, ``body`` and ``message`` (an HTML
    widget), and may have a ``status`` line, cleared with the charts."""

    _message_text = ""
    #: Where the charts shown were made ("measured on ...", "calculated for ..."), set by update.
    made_on = ""

    def _ipython_display_(self) -> None:
        display(self.widget)
        self.show_snapshot()

    def live_charts(self) -> list[LiveChart]:
        """The explorer's charts, in the order they are shown."""
        return [getattr(self, name) for name in ("runtime_chart", "throughput_chart",
                                                 "memory_chart", "chart") if hasattr(self, name)]

    def snapshot_figures(self) -> list[go.Figure]:
        """Static copies of what the explorer shows now: each chart, or the message in place
        of the charts, titled as a copy (the live charts above keep following the controls)."""
        if self.body.children and self.body.children[0] is self.message:
            return [style.message_figure(self.message_text)]
        copies = []
        for chart in self.live_charts():
            fig = go.Figure(chart.figure)
            title = fig.layout.title.text or ""
            fig.update_layout(title_text=f"Static copy: {title}" if title else "Static copy")
            copies.append(fig)
        return copies

    def show_snapshot(self) -> None:
        """Display :meth:`snapshot_figures` below the widget, so that a page read without a
        kernel (the book, a notebook viewer) still shows what the explorer measured at the
        settings it was created with."""
        where = f" ({self.made_on})" if self.made_on else ""
        note = ("Below: a static copy of the charts at the settings the explorer started with"
                f"{where}, for readers without a running kernel; only the live charts above "
                "follow the controls.")
        display({"text/html": style.message_html(note, "info"), "text/plain": note}, raw=True)
        for fig in self.snapshot_figures():
            display(fig)

    @property
    def message_text(self) -> str:
        """Plain text of the message (in place of the charts) or notes shown ("" if none)."""
        return self._message_text

    def show_message(self, text: str) -> None:
        """Show ``text`` in place of the charts."""
        self._message_text = text
        self.message.value = style.message_html(text)
        self.body.children = [self.message]
        if hasattr(self, "status"):
            self.status.value = ""

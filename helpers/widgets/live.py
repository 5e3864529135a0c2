"""Live charts that redraw in place (JupyterLab, Colab, VS Code) and what every explorer
shares: a message in place of the charts, measuring in the background (one measuring process
for the kernel, :class:`helpers.device.worker.Worker`), and a static copy of its charts as the
widget's own fallback for front ends without widgets (the book, notebook viewers).
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
import time
import uuid

import ipywidgets as W
import plotly.graph_objects as go
import plotly.io as pio
from IPython import get_ipython
from IPython.display import clear_output, display

from helpers.device import backend
from helpers.device.worker import Worker
from helpers.figures import style

#: MIME type of the plotly figures embedded (as JSON) in an explorer's static fallback.
PLOTLY_MIME = "application/vnd.plotly.v1+json"


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


def figure_bundle(figure: go.Figure) -> dict:
    """``figure`` as the mime bundle of plotly's default renderers (``pio.renderers.default``,
    e.g. the plotly mime type and HTML), for an ``Output`` widget's outputs.

    Built from each renderer's ``to_mimebundle``: IPython's display formatter would call the
    figure's ``_ipython_display_``, which shows it in the running cell and returns nothing,
    and the figure's ``_repr_mimebundle_`` shows the renderers' set-up script again each call.
    """
    spec = figure.to_dict()
    data: dict = {}
    for name in (pio.renderers.default or "").split("+"):
        to_bundle = getattr(pio.renderers[name], "to_mimebundle", None) if (
            name in pio.renderers) else None
        if to_bundle is not None:
            data.update(to_bundle(spec))
    if not data:   # no renderer that makes a bundle: the mime type JupyterLab draws
        data[PLOTLY_MIME] = json.loads(pio.to_json(figure))
    data["text/plain"] = f"<plotly figure: {figure.layout.title.text or 'untitled'}>"
    return data


class LiveChart:
    """A chart that can be redrawn in place.

    By default it re-renders the whole figure into an ``Output`` widget, drawn by the front
    end's own plotly renderer (JupyterLab, Notebook 7, VS Code, Colab).
    ``use_figurewidget=True`` asks for a plotly ``FigureWidget`` where one renders
    (:func:`figurewidget_supported`): it edits the chart in place, but each one sends plotly's
    5 MB of code to the page, and its front end drops every later edit if that code took
    over 2 s to load (anywidget's limit), so on a busy machine it can stay as first drawn.

    Attributes:
        widget: the ipywidgets object to place in a layout.
        figure: the figure currently shown (a ``go.Figure`` snapshot).
    """

    def __init__(self, figure: go.Figure | None = None, use_figurewidget: bool | None = None):
        self.use_figurewidget = bool(use_figurewidget) and figurewidget_supported()
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
        # Setting the Output's outputs works from any thread (an explorer draws from its
        # measuring thread); ``with out: display(...)`` only captures on the kernel's own.
        shell = get_ipython()
        if shell is not None and hasattr(shell, "display_formatter"):
            self._out.outputs = ({"output_type": "display_data",
                                  "data": figure_bundle(self._figure), "metadata": {}},)
            return
        with self._out:
            clear_output(wait=True)
            display(self._figure)


_WORKER: Worker | None = None


def measuring_worker() -> Worker:
    """The measuring process the explorers of this kernel share: started on first use, its
    warm-up runs every strategy and backend once (:func:`helpers.experiments.live.warm_up`);
    once it is ready a warm spare is started, to take the place of one that has to be
    killed (a call that ignored a request to stop)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = Worker(warm_up=("helpers.experiments.live", "warm_up"), spare=True)
    return _WORKER


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (where a slider's callback must not block)."""
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def static_html(note: str, figures: list[go.Figure]) -> str:
    """``note`` and ``figures`` as HTML that draws without a kernel: each figure's JSON in a
    ``<script type="application/vnd.plotly.v1+json">`` beside an empty div, drawn there by
    plotly.js where the page has it (the book re-draws them with its own copy)."""
    parts = [style.message_html(note, "info")]
    for fig in figures:
        div = f"workbook-static-{uuid.uuid4().hex[:12]}"
        spec = fig.to_json().replace("</", "<\\/")
        parts.append(
            f'<div id="{div}" class="workbook-static-chart"></div>'
            f'<script type="{PLOTLY_MIME}" data-for="{div}">{spec}</script>'
            f'<script>(function () {{ var el = document.getElementById("{div}");'
            f' var spec = JSON.parse(el.nextElementSibling.textContent);'
            f' if (window.Plotly) {{ Plotly.newPlot(el, spec.data, spec.layout); }}'
            f' else {{ el.textContent = {json.dumps(html.escape(_chart_text(fig)))}; }}'
            f' }})();</script>')
    return "\n".join(parts)


def _chart_text(fig: go.Figure) -> str:
    """``[chart: its title]``, the title's HTML tags (line breaks, subtitles) as spaces."""
    title = " ".join(re.sub(r"<[^>]*>", " ", fig.layout.title.text or "untitled").split())
    return f"[chart: {title}]"


class _Explorer:
    """What the explorers share: displaying ``self.widget`` with a static copy as its fallback,
    a message shown in ``self.body`` in place of the charts, and measuring in the background.

    A subclass sets ``widget``, ``body`` and ``message`` (an HTML widget), may have a
    ``status`` line (cleared with the charts), and implements ``_measure(generation, plan)``;
    :meth:`_start` runs it at once (``background`` False) or in a thread, so that in a kernel
    a slider's callback returns at once and a later move can stop a measurement in progress.
    """

    _message_text = ""
    #: Where the charts shown were made ("measured on ...", "calculated for ..."), set by update.
    made_on = ""
    _generation = 0
    _thread: threading.Thread | None = None
    _pending: threading.Timer | None = None
    background = False
    #: Seconds a control must rest before a background update begins: a burst of moves (key
    #: presses on a slider) is one update, of the last value.
    debounce_s = 0.15

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The widget, and for front ends without widgets (the book, notebook viewers) a
        static copy of what it shows now (:meth:`snapshot_figures`) in HTML and plain text."""
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        where = f" ({self.made_on})" if self.made_on else ""
        note = (f"A static copy of what the explorer showed when this output was made{where}: "
                "run the notebook to move its controls.")
        figures = self.snapshot_figures()
        bundle["text/html"] = static_html(note, figures)
        bundle["text/plain"] = "\n".join(
            [note] + [_chart_text(fig) for fig in figures]
            + ([self.message_text] if self.message_text else []))
        return bundle

    def live_charts(self) -> list[LiveChart]:
        """The explorer's charts, in the order they are shown."""
        return [getattr(self, name) for name in ("runtime_chart", "throughput_chart",
                                                 "memory_chart", "chart") if hasattr(self, name)]

    def snapshot_figures(self) -> list[go.Figure]:
        """Static copies of what the explorer shows now: each chart, or the message in place
        of the charts."""
        if self.body.children and self.body.children[0] is self.message:
            return [style.message_figure(self.message_text)]
        return [go.Figure(chart.figure) for chart in self.live_charts()]

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

    # ------------------------------------------------------------- measuring in the background

    @staticmethod
    def worker_cores() -> int:
        """The cores the measuring process may run on."""
        return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else (os.cpu_count() or 1))

    def _next_generation(self) -> int:
        """A new update begins: whatever an earlier one still measures is no longer wanted."""
        self._generation += 1
        return self._generation

    def _stale(self, generation: int) -> bool:
        return generation != self._generation

    def _start(self, generation: int, plan) -> None:
        """Run ``self._measure(generation, plan)`` now, or, when ``background``, in a thread
        that begins once no newer update has come for :attr:`debounce_s` seconds (a newer
        update makes this one stale at once, which stops a measurement in progress)."""
        if not self.background:
            self._measure(generation, plan)
            return

        def begin() -> None:
            if not self._stale(generation):
                self._measure(generation, plan)

        thread = threading.Thread(target=begin, daemon=True, name="workbook-explorer")
        if self._pending is not None:
            self._pending.cancel()
        self._thread = thread
        pending = threading.Timer(self.debounce_s, thread.start)
        pending.daemon = True
        self._pending = pending
        pending.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the latest update has been measured and drawn (at most ``timeout``
        seconds); whether it has."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            pending, thread = self._pending, self._thread
            if thread is None:
                return True
            left = None if end is None else max(0.0, end - time.monotonic())
            if pending is not None:
                pending.join(left)  # then its thread has started, or a newer update replaced it
            if thread.ident is not None:
                thread.join(None if end is None else max(0.0, end - time.monotonic()))
            if self._thread is thread:
                return thread.ident is not None and not thread.is_alive()
            if end is not None and time.monotonic() >= end:
                return False

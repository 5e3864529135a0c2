"""Interactive controls: live charts that work in JupyterLab, Colab and VS Code, and the
throughput explorer of notebook 01.

A widget never shows a traceback: a bad value or a configuration too large for the device
shows a message in place of the chart, and the controls stay as the learner left them.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import clear_output, display

from . import backend, plots, results, throughput

__all__ = ["LiveChart", "ThroughputExplorer", "figurewidget_supported"]


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


def _message_html(text: str, kind: str = "error") -> str:
    color = {"error": "#a40000", "info": "#333333"}[kind]
    return (f"<div style='padding:0.6em;border-left:4px solid {color};color:{color}'>"
            f"{html.escape(text)}</div>")


class ThroughputExplorer:
    """Choose an operation, a size range and a dtype; runtime and throughput charts update live.

    Operations: ReLU and SAXPY (elementwise, sizes in elements, throughput in GB/s) and GEMM
    (n x n matrices, sizes are n, throughput in GFLOP/s). Measures every backend on this
    machine's CPU, and on the GPU if there is one; GPU curves from ``results/`` are drawn dotted
    and labelled with the GPU that made them. Sizes are spaced logarithmically, two per decade.

    Invalid input (a size below 1, smallest above largest, operands larger than the memory
    the device can spare, a dtype a backend lacks) shows a message instead of the charts.
    Sizes estimated to take more than ``point_budget_s`` are skipped with the estimate.

    Attributes:
        op, dtype: dropdowns. size_min, size_max: integer boxes. message: the message area.
        runtime_chart, throughput_chart: :class:`LiveChart` objects.
        rows: the rows last measured.
        widget: the whole explorer, for ``display``.
    """

    OPS = {"ReLU (elementwise)": "relu", "SAXPY (elementwise)": "saxpy", "GEMM (n x n)": "gemm"}
    DEFAULT_RANGES = {"relu": (1_000, 1_000_000), "saxpy": (1_000, 1_000_000), "gemm": (64, 512)}

    def __init__(self, op: str = "relu", dtype: str = "float32",
                 size_range: tuple[int, int] | None = None, point_budget_s: float = 1.0,
                 min_run_time: float = 0.02, use_figurewidget: bool | None = None,
                 reference_prefix: str = "01_throughput", measure: bool = True):
        self.point_budget_s = point_budget_s
        self.min_run_time = min_run_time
        self.devices = ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
        self.references = [] if backend.MODE == "gpu" else results.find(reference_prefix)
        lo, hi = size_range or self.DEFAULT_RANGES[op]
        style = {"description_width": "initial"}
        self.op = W.Dropdown(options=list(self.OPS.items()), value=op, description="operation",
                             style=style)
        self.size_min = W.IntText(value=lo, description="smallest size", style=style,
                                  layout=W.Layout(width="220px"))
        self.size_max = W.IntText(value=hi, description="largest size", style=style,
                                  layout=W.Layout(width="220px"))
        self.dtype = W.Dropdown(options=list(throughput.DTYPES), value=dtype,
                                description="dtype", style=style)
        self.status = W.HTML()
        self.message = W.HTML()
        self.runtime_chart = LiveChart(use_figurewidget=use_figurewidget)
        self.throughput_chart = LiveChart(use_figurewidget=use_figurewidget)
        self.charts = W.VBox([self.runtime_chart.widget, self.throughput_chart.widget])
        self.body = W.VBox([self.charts])
        self.rows: list[dict] = []
        where = ", ".join(throughput.device_label(d) for d in self.devices)
        note = "" if backend.MODE == "gpu" else (
            " No GPU here: GPU curves come only from results/ (dotted), when present.")
        self.header = W.HTML(_message_html(f"Measuring on {where}.{note}", "info"))
        self.widget = W.VBox([
            self.header,
            W.HBox([self.op, self.dtype]),
            W.HBox([self.size_min, self.size_max]),
            self.status,
            self.body,
        ])
        self.op.observe(self._on_op, names="value")
        for control in (self.size_min, self.size_max, self.dtype):
            control.observe(self.update, names="value")
        if measure:
            self.update()

    def _ipython_display_(self) -> None:
        display(self.widget)

    def _on_op(self, change) -> None:
        # A new operation gets its own sensible range; set both sizes, then measure once.
        lo, hi = self.DEFAULT_RANGES[change["new"]]
        with self._paused():
            self.size_min.value, self.size_max.value = lo, hi
        self.update()

    def _paused(self):
        explorer = self

        class _Pause:
            def __enter__(self):
                explorer.size_min.unobserve(explorer.update, names="value")
                explorer.size_max.unobserve(explorer.update, names="value")

            def __exit__(self, *exc):
                explorer.size_min.observe(explorer.update, names="value")
                explorer.size_max.observe(explorer.update, names="value")

        return _Pause()

    def show_message(self, text: str) -> None:
        """Show ``text`` in place of the charts."""
        self.message.value = _message_html(text)
        self.body.children = [self.message]
        self.status.value = ""

    def update(self, *_: object) -> None:
        """Re-measure with the current controls and redraw both charts (or show why not)."""
        op, dtype = self.op.value, self.dtype.value
        lo, hi = self.size_min.value, self.size_max.value
        experiment = "gemm" if op == "gemm" else "elementwise"
        try:
            for device in self.devices:
                throughput.check_sizes(experiment, op, lo, hi, dtype, device)
            sizes = throughput.log_sizes(lo, hi, per_decade=2)
            sweep: Callable = (throughput.gemm_sweep if op == "gemm" else
                               lambda *a, **k: throughput.elementwise_sweep(op, *a, **k))
            self.status.value = _message_html("measuring...", "info")
            rows = sweep(sizes, self.devices, dtype=dtype, min_run_time=self.min_run_time,
                         point_budget_s=self.point_budget_s, progress=False)
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
            return
        self.rows = rows
        shown = rows + self._reference_rows(op, dtype, lo, hi)
        measured = [r for r in rows if r["status"] == "ok"]
        if not measured:
            reasons = sorted({r["status"] for r in rows})
            self.show_message("Nothing could be measured: " + "; ".join(reasons))
            return
        unit = "elements" if experiment == "elementwise" else "matrix size n"
        self.runtime_chart.update(plots.runtime_figure(
            shown, x_title=unit, title=f"{op}: median time per call ({dtype})"))
        if experiment == "gemm":
            fig = plots.gemm_figure(shown, title=f"GEMM throughput ({dtype})")
        else:
            fig = plots.throughput_figure(shown, peaks=throughput.bandwidth_peaks(self.references),
                                          title=f"{op}: memory throughput ({dtype})")
        self.throughput_chart.update(fig)
        skipped = [r for r in rows if r["status"] != "ok"]
        note = f"; {len(skipped)} point(s) not measured: {skipped[0]['status']}" if skipped else ""
        self.status.value = _message_html(f"{len(measured)} points measured{note}", "info")
        self.body.children = [self.charts]

    def _reference_rows(self, op: str, dtype: str, lo: int, hi: int) -> list[dict]:
        return [r for r in results.gpu_rows(self.references, op=op, dtype=dtype)
                if lo <= r["size"] <= hi]

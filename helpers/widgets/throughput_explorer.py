"""Notebook 01's throughput explorer: runtime and GB/s or GFLOP/s over a size range, live.
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

from helpers import results
from helpers.device import backend
from helpers.experiments import throughput
from helpers.figures import nb01_throughput, style
from helpers.widgets.live import LiveChart, _Explorer


class ThroughputExplorer(_Explorer):
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
                 reference_prefix: str = throughput.PREFIX, measure: bool = True):
        self.point_budget_s = point_budget_s
        self.min_run_time = min_run_time
        self.devices = ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
        self.references = (results.Recorded([], [], throughput.COMMAND) if backend.MODE == "gpu"
                           else throughput.recorded(reference_prefix))
        lo, hi = size_range or self.DEFAULT_RANGES[op]
        wide = {"description_width": "initial"}
        self.op = W.Dropdown(options=list(self.OPS.items()), value=op, description="operation",
                             style=wide)
        self.size_min = W.IntText(value=lo, description="smallest size", style=wide,
                                  layout=W.Layout(width="220px"))
        self.size_max = W.IntText(value=hi, description="largest size", style=wide,
                                  layout=W.Layout(width="220px"))
        self.dtype = W.Dropdown(options=list(throughput.DTYPES), value=dtype,
                                description="dtype", style=wide)
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
        self.header = W.HTML(style.message_html(f"Measuring on {where}.{note}", "info"))
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
            self.status.value = style.message_html("measuring...", "info")
            rows = sweep(sizes, self.devices, dtype=dtype, min_run_time=self.min_run_time,
                         point_budget_s=self.point_budget_s, progress=False)
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
            return
        self.rows = rows
        self.made_on = "measured on " + ", ".join(throughput.device_label(d) for d in self.devices)
        shown = rows + self._reference_rows(op, dtype, lo, hi)
        measured = [r for r in rows if r["status"] == "ok"]
        if not measured:
            reasons = sorted({r["status"] for r in rows})
            self.show_message("Nothing could be measured: " + "; ".join(reasons))
            return
        unit = "elements" if experiment == "elementwise" else "matrix size n"
        self.runtime_chart.update(nb01_throughput.runtime_figure(
            shown, x_title=unit, title=f"{op}: median time per call ({dtype})"))
        if experiment == "gemm":
            fig = nb01_throughput.gemm_figure(shown, title=f"GEMM throughput ({dtype})")
        else:
            fig = nb01_throughput.throughput_figure(
                shown, peaks=throughput.bandwidth_peaks(self.references),
                title=f"{op}: memory throughput ({dtype})")
        self.throughput_chart.update(fig)
        skipped = [r for r in rows if r["status"] != "ok"]
        note = f"; {len(skipped)} point(s) not measured: {skipped[0]['status']}" if skipped else ""
        self.status.value = style.message_html(f"{len(measured)} points measured{note}", "info")
        self._message_text = ""
        self.body.children = [self.charts]

    def _reference_rows(self, op: str, dtype: str, lo: int, hi: int) -> list[dict]:
        return [r for r in self.references.rows
                if (r.get("op"), r.get("dtype")) == (op, dtype) and lo <= r["size"] <= hi]

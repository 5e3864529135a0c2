"""Notebook 01's throughput explorer: runtime and GB/s or GFLOP/s over a size range, live.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import ipywidgets as W

from helpers import results
from helpers.device import backend
from helpers.device.timing import device_label
from helpers.device.worker import Worker
from helpers.experiments import throughput
from helpers.experiments.throughput.calls import SUPPORTED, row
from helpers.figures import nb01_throughput, style
from helpers.widgets import arguments
from helpers.widgets.live import LiveChart, _Explorer, in_kernel, measuring_worker


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One update's settings."""

    op: str
    dtype: str
    experiment: str
    sizes: list
    lo: int
    hi: int


class ThroughputExplorer(_Explorer):
    """Choose an operation, a size range and a dtype; runtime and throughput charts update live.

    Operations: ReLU and SAXPY (elementwise, sizes in elements, throughput in GB/s) and GEMM
    (n x n matrices, sizes are n, throughput in GFLOP/s). Measures every backend on this
    machine's CPU, and on the GPU if there is one; GPU curves from ``results/`` are drawn dotted
    and labelled with the GPU that made them. Sizes are spaced logarithmically, two per decade.

    Invalid input (a size below 1, smallest above largest, operands larger than the memory
    the device can spare) shows a message instead of the charts. Nothing is estimated: each
    backend's sizes are measured in increasing order in a measuring process
    (:func:`helpers.widgets.live.measuring_worker`), after a warm-up call, and each backend's
    line is drawn as it is done. A point still running after ``point_budget_s`` seconds, or
    when the update has used ``update_budget_s`` seconds of measuring, is stopped and listed
    as "did not finish in N s", and that backend's larger sizes are not run; a dtype a backend
    lacks is listed too. In a kernel, measuring runs in the background: changing a control
    again stops the measurement in progress and starts over.

    Args:
        op: ``"relu"``, ``"saxpy"`` or ``"gemm"``. dtype: ``"float32"``, ``"float16"`` or
            ``"bfloat16"``.
        size_range: (smallest, largest) size, integers >= 1 (default by operation:
            :data:`DEFAULT_RANGES`); the largest must fit in memory.
        point_budget_s: seconds one point may be measured before it is stopped (0 < s <= 600).
        min_run_time: seconds of timed calls per point (0 < s <= 10).
        update_budget_s: seconds of measuring one update may take in all (0 < s <= 3600).
        use_figurewidget: True for plotly's ``FigureWidget`` where it renders; False or None
            (the default) for an ``Output`` widget (:class:`~helpers.widgets.live.LiveChart`).
        reference_prefix: file-name prefix of the recorded GPU runs in ``results/``.
        measure: measure once now, and wait for it (False: empty charts until the controls
            change).
        background: measure in a thread, so that a control's callback returns at once; None
            (default): in a Jupyter kernel only.
        worker: the measuring process (default: the kernel's shared one).

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range (the message
            names it), before any widget is built or anything measured.

    Attributes:
        op, dtype: dropdowns. size_min, size_max: integer boxes. message: the message area.
        runtime_chart, throughput_chart: :class:`LiveChart` objects.
        rows: the rows last measured. seconds: how long the last update took.
        widget: the whole explorer, for ``display``.
    """

    OPS = {"ReLU (elementwise)": "relu", "SAXPY (elementwise)": "saxpy", "GEMM (n x n)": "gemm"}
    DEFAULT_RANGES = {"relu": (1_000, 1_000_000), "saxpy": (1_000, 1_000_000), "gemm": (64, 512)}
    #: Largest size accepted (the largest integer a browser's number box holds exactly).
    MAX_SIZE = 2**53

    def __init__(self, op: str = "relu", dtype: str = "float32",
                 size_range: tuple[int, int] | None = None, point_budget_s: float = 1.0,
                 min_run_time: float = 0.02, use_figurewidget: bool | None = None,
                 reference_prefix: str = throughput.PREFIX, measure: bool = True,
                 update_budget_s: float = 10.0, background: bool | None = None,
                 worker: Worker | None = None):
        op = arguments.choice("op", op, self.OPS.values())
        dtype = arguments.choice("dtype", dtype, throughput.DTYPES)
        self.point_budget_s = arguments.seconds("point_budget_s", point_budget_s, 600)
        self.min_run_time = arguments.seconds("min_run_time", min_run_time, 10)
        self.update_budget_s = arguments.seconds("update_budget_s", update_budget_s, 3600)
        use_figurewidget = arguments.optional_flag("use_figurewidget", use_figurewidget)
        measure = arguments.flag("measure", measure)
        background = arguments.optional_flag("background", background)
        if worker is not None and not callable(getattr(worker, "run", None)):
            raise TypeError(f"worker must be a helpers.device.worker.Worker, got "
                            f"{arguments.shown(worker)}")
        if not isinstance(reference_prefix, str):
            raise TypeError("reference_prefix must be a file-name prefix (a str), got "
                            f"{arguments.shown(reference_prefix)}")
        if len(reference_prefix) > 200 or any(c in reference_prefix for c in "/\\\0"):
            raise ValueError("reference_prefix must be a file-name prefix without a folder, "
                             f"got {arguments.shown(reference_prefix)}")
        self.devices = ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
        lo, hi = self._size_range(size_range, op, dtype)
        self.references = (results.Recorded([], [], throughput.COMMAND) if backend.MODE == "gpu"
                           else throughput.recorded(reference_prefix))
        self.background = in_kernel() if background is None else background
        self.worker = worker or measuring_worker()
        if measure and callable(getattr(self.worker, "start", None)):
            self.worker.start()  # it imports and warms up while the widgets are built
        self._draw_lock = threading.Lock()
        self.seconds = 0.0
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
        where = ", ".join(device_label(d) for d in self.devices)
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
            self.wait()

    def _size_range(self, size_range, op: str, dtype: str) -> tuple[int, int]:
        """The constructor's ``size_range`` checked: two integers, smallest <= largest, the
        largest within the memory a sweep may use on each device."""
        if size_range is None:
            return self.DEFAULT_RANGES[op]
        if not isinstance(size_range, (tuple, list)):
            raise TypeError("size_range must be a pair (smallest, largest) of sizes, got "
                            f"{arguments.shown(size_range)}")
        if len(size_range) != 2:
            raise ValueError("size_range must be a pair (smallest, largest) of sizes, got "
                             f"{len(size_range)} values")
        lo = arguments.whole("size_range[0]", size_range[0], 1, self.MAX_SIZE, "smallest size")
        hi = arguments.whole("size_range[1]", size_range[1], 1, self.MAX_SIZE, "largest size")
        experiment = "gemm" if op == "gemm" else "elementwise"
        try:
            for device in self.devices:
                throughput.check_sizes(experiment, op, lo, hi, dtype, device)
        except ValueError as exc:
            raise ValueError(f"size_range: {exc}") from None
        return lo, hi

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
        """Measure with the current controls and redraw both charts as each backend's line is
        done (or show why not); an update still measuring is stopped first."""
        generation = self._next_generation()
        self._started = time.monotonic()
        op, dtype = self.op.value, self.dtype.value
        lo, hi = self.size_min.value, self.size_max.value
        experiment = "gemm" if op == "gemm" else "elementwise"
        try:
            for device in self.devices:
                throughput.check_sizes(experiment, op, lo, hi, dtype, device)
            sizes = throughput.log_sizes(lo, hi, per_decade=2)
        except ValueError as exc:
            self.show_message(str(exc))
            self.seconds = time.monotonic() - self._started
            return
        self.status.value = style.message_html("measuring...", "info")
        self._start(generation, _Plan(op, dtype, experiment, sizes, lo, hi))

    def _jobs(self, experiment: str) -> list[tuple[str, str]]:
        """(device, backend) in the order they are measured: on each device torch before
        NumPy, whose BLAS threads keep spinning for about half a second after a GEMM and slow
        the torch calls that follow."""
        jobs = [(device, name) for device in self.devices
                for name in throughput.backends_for(device, experiment)]
        return sorted(jobs, key=lambda job: (self.devices.index(job[0]), job[1] == "numpy"))

    def _measure(self, generation: int, plan: _Plan) -> None:
        rows: list[dict] = []
        spent = 0.0
        try:
            for device, name in self._jobs(plan.experiment):
                unfinished = None
                for n in plan.sizes:
                    if self._stale(generation):
                        return
                    args = (plan.experiment, plan.op, name, device, plan.dtype, n)
                    if plan.dtype not in SUPPORTED[(name, plan.experiment)]:
                        rows.append(row(*args, status=f"unsupported: {name} has no "
                                                       f"{plan.dtype} {plan.experiment}"))
                        continue
                    if unfinished is not None:
                        rows.append(row(*args, status=f"not measured: size {unfinished:,} did "
                                                       "not finish"))
                        continue
                    left = self.update_budget_s - spent
                    if left <= 0:
                        rows.append(row(*args, status=f"not measured: this update's "
                                                       f"{self.update_budget_s:g} s of "
                                                       "measuring were used up"))
                        continue
                    limit = min(self.point_budget_s, left)
                    outcome = self.worker.run(
                        "helpers.experiments.live", "throughput_point", *args,
                        self.min_run_time, limit, timeout_s=limit,
                        cancelled=lambda: self._stale(generation))
                    spent += outcome.seconds
                    if outcome.status == "stopped":
                        return
                    if outcome.status == "ok":
                        rows.append(outcome.value)
                    elif outcome.status == "did not finish":
                        unfinished = n
                        rows.append(row(*args, status=f"did not finish in {limit:.2g} s: "
                                                       "stopped"))
                    else:
                        rows.append(row(*args, status=f"failed: {outcome.error}"))
                self._draw(generation, plan, rows, done=False)
            self._draw(generation, plan, rows, done=True)
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            with self._draw_lock:
                if not self._stale(generation):
                    self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
                    self.seconds = time.monotonic() - self._started

    def _draw(self, generation: int, plan: _Plan, rows: list[dict], done: bool) -> None:
        with self._draw_lock:
            if self._stale(generation):
                return
            self.seconds = time.monotonic() - self._started
            self.rows = list(rows)
            self.made_on = "measured on " + ", ".join(device_label(d)
                                                      for d in self.devices)
            shown = rows + self._reference_rows(plan.op, plan.dtype, plan.lo, plan.hi)
            measured = [r for r in rows if r["status"] == "ok"]
            skipped = [f"{r['backend']} on {r['device_kind']}, size {r['size']:,}: "
                       f"{r['status']}" for r in rows if r["status"] != "ok"]
            if not measured:
                if done:
                    title = "Nothing could be measured:"
                    self.show_message("\n".join([title, *skipped]))
                    self.message.value = style.list_html(title, skipped, "error")
                return
            unit = "elements" if plan.experiment == "elementwise" else "matrix size n"
            self.runtime_chart.update(nb01_throughput.runtime_figure(
                shown, x_title=unit, title=f"{plan.op}: median time per call ({plan.dtype})"))
            if plan.experiment == "gemm":
                fig = nb01_throughput.gemm_figure(shown, title=f"GEMM throughput ({plan.dtype})")
            else:
                fig = nb01_throughput.throughput_figure(
                    shown, peaks=throughput.bandwidth_peaks(self.references),
                    title=f"{plan.op}: memory throughput ({plan.dtype})")
            self.throughput_chart.update(fig)
            done_text = (f"{len(measured)} points measured in {self.seconds:.1f} s"
                         + ("" if done else "; measuring..."))
            if skipped:
                title = f"{done_text}; {len(skipped)} point(s) not measured:"
                self.status.value = style.list_html(title, skipped)
                self._message_text = "\n".join([title, *skipped])
            else:
                self.status.value = style.message_html(done_text, "info")
                self._message_text = ""
            self.body.children = [self.charts]

    def _reference_rows(self, op: str, dtype: str, lo: int, hi: int) -> list[dict]:
        return [r for r in self.references.rows
                if (r.get("op"), r.get("dtype")) == (op, dtype) and lo <= r["size"] <= hi]

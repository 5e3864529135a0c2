"""Interactive controls: live charts that work in JupyterLab, Colab and VS Code, the
throughput explorer of notebook 01 and the convolution explorer (:class:`ConvExplorer`).

A widget never shows a traceback: a bad value or a configuration too large for the device
shows a message in place of the chart, and the controls stay as the learner left them.
"""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Callable

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import clear_output, display

from helpers import occupancy as occ
from helpers import results
from helpers.conv import STRATEGIES, config_for
from helpers.device import backend, timing
from helpers.experiments import sweep, throughput
from helpers.figures import nb01_throughput, nb06_head_to_head, nb07_inside_the_gpu, style

__all__ = ["ConvExplorer", "LiveChart", "OccupancyExplorer", "ThroughputExplorer",
           "figurewidget_supported"]


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

    def _ipython_display_(self) -> None:
        display(self.widget)

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
            fig = nb01_throughput.throughput_figure(shown, peaks=throughput.bandwidth_peaks(self.references),
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


# ------------------------------------------------------------------------ ConvExplorer

class ConvExplorer(_Explorer):
    """Set one convolution layer with sliders; every strategy's runtime and memory update live.

    Shows, for the layer (b, i, f, k, s) with c input channels and zero padding, the strategies
    ticked below the sliders measured on one device (:func:`helpers.experiments.sweep.measure`):

    * runtime: one bar per strategy, the median milliseconds of one forward (or forward +
      backward) pass on random float32 data, the error bar spanning the interquartile range
      (median +/- IQR/2);
    * memory: per strategy, the measured peak (MiB above the baseline; on the CPU the growth of
      the process's resident memory, which can show less than was allocated) beside the
      analytic workspace (MiB beyond x, w, y; "unknown" where the library picks its algorithm
      at run time).

    Symbols (the study's 5-tuple): b batch, i input height = width, f filters, k kernel height
    = width, s stride; c input channels, padding zero padding on each side. In the cuDNN
    paper's terms x: (N, C, H, W) = (b, c, i, i), w: (K, C, R, S) = (f, c, k, k).

    An invalid layer (e.g. a kernel larger than the padded input) shows the reason in place of
    the charts and leaves the controls as they are. Strategies that were not measured (no code
    for the device, an unsupported configuration, the CUDA simulator, over the time or memory
    budget) are listed below the charts with their reasons; the others are still drawn.

    Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
    ICPP 2016, Figure 3 (runtime against each of b, i, f, k, s) and Figure 5 (memory).

    Attributes:
        b, i, f, k, s, c, padding: integer sliders (also in ``sliders``, keyed by symbol).
        strategy_boxes: one checkbox per name of :data:`helpers.conv.STRATEGIES`.
        backward: toggle, False for forward only, True for forward + backward.
        device: dropdown, ``"cpu"`` or ``"cuda"``.
        runtime_chart, memory_chart: :class:`LiveChart` objects (``.figure`` is the chart).
        message: the message shown in place of the charts. notes: the list below the charts.
        message_text: plain text of the message or notes currently shown ("" if none).
        rows: the rows of :func:`helpers.experiments.sweep.measure` last measured, one per strategy.
        widget: the whole explorer, for ``display``.
    """

    #: Slider ranges (min, max) by symbol: wide enough to reach invalid layers (k > i + 2p)
    #: and layers over the time budget.
    RANGES = {"b": (1, 128), "i": (1, 256), "f": (1, 256), "k": (1, 15), "s": (1, 8),
              "c": (1, 64), "padding": (0, 7)}
    LABELS = {"b": "batch b", "i": "input size i", "f": "filters f", "k": "kernel size k",
              "s": "stride s", "c": "input channels c", "padding": "padding"}

    def __init__(self, b: int = 2, i: int = 32, f: int = 16, k: int = 5, s: int = 1, c: int = 3,
                 padding: int = 0, strategies: list[str] | None = None, backward: bool = True,
                 device: str | None = None, min_run_time: float = 0.02, budget_s: float = 0.25,
                 measure_memory: bool = True, use_figurewidget: bool | None = None,
                 measure: bool = True):
        gpu = backend.MODE == "gpu"
        device = device or ("cuda" if gpu else "cpu")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if strategies is None:
            strategies = [n for n, st in STRATEGIES.items() if gpu or "cpu" in st.devices]
        unknown = sorted(set(strategies) - set(STRATEGIES))
        if unknown:
            raise ValueError(f"unknown strategies {unknown}; choose from {sorted(STRATEGIES)}")
        self.min_run_time = min_run_time
        self.budget_s = budget_s
        self.measure_memory = measure_memory
        self.rows: list[dict] = []
        self._held = False

        wide = {"description_width": "initial"}
        values = dict(b=b, i=i, f=f, k=k, s=s, c=c, padding=padding)
        self.sliders: dict[str, W.IntSlider] = {}
        for symbol, (lo, hi) in self.RANGES.items():
            value = values[symbol]
            if not lo <= value <= hi:
                raise ValueError(f"{self.LABELS[symbol]} must be in [{lo}, {hi}], got {value}")
            self.sliders[symbol] = W.IntSlider(
                value=value, min=lo, max=hi, step=1, description=self.LABELS[symbol],
                continuous_update=False, style=wide, layout=W.Layout(width="320px"))
        sl = self.sliders
        self.b, self.i, self.f, self.k, self.s = sl["b"], sl["i"], sl["f"], sl["k"], sl["s"]
        self.c, self.padding = sl["c"], sl["padding"]
        self.strategy_boxes = {
            name: W.Checkbox(value=name in strategies, description=name, indent=False,
                             tooltip=st.description, layout=W.Layout(width="130px"))
            for name, st in STRATEGIES.items()}
        self.backward = W.ToggleButtons(
            options=[("forward", False), ("forward + backward", True)], value=backward,
            description="pass", style={**wide, "button_width": "150px"})
        self.device = W.Dropdown(options=["cpu", "cuda"], value=device, description="device",
                                 style=wide, layout=W.Layout(width="180px"))

        self.status = W.HTML()
        self.message = W.HTML()
        self.notes = W.HTML()
        self.runtime_chart = LiveChart(use_figurewidget=use_figurewidget)
        self.memory_chart = LiveChart(use_figurewidget=use_figurewidget)
        self.charts = W.VBox([self.runtime_chart.widget, self.memory_chart.widget])
        self.body = W.VBox([self.charts, self.notes])
        note = "" if gpu else (" No GPU here: the cuda device runs in the Numba CUDA simulator, "
                               "which cannot time anything; its rows say so.")
        self.header = W.HTML(style.message_html(
            f"Measuring on {timing.device_label('cpu')}"
            + (f" and {timing.device_label('cuda')}" if gpu else "") + "." + note, "info"))
        self.widget = W.VBox([
            self.header,
            W.HBox([W.VBox([sl["b"], sl["i"], sl["f"], sl["c"]]),
                    W.VBox([sl["k"], sl["s"], sl["padding"]])]),
            W.HBox(list(self.strategy_boxes.values())),
            W.HBox([self.backward, self.device]),
            self.status,
            self.body,
        ])
        for control in [*self.sliders.values(), *self.strategy_boxes.values(), self.backward,
                        self.device]:
            control.observe(self.update, names="value")
        if measure:
            self.update()

    @property
    def strategies(self) -> list[str]:
        """The ticked strategies, in :data:`helpers.conv.STRATEGIES` order."""
        return [name for name, box in self.strategy_boxes.items() if box.value]

    def set(self, **values: int) -> None:
        """Set several sliders at once (by symbol: ``b, i, f, k, s, c, padding``) and measure
        once. Raises ValueError for an unknown symbol."""
        unknown = sorted(set(values) - set(self.sliders))
        if unknown:
            raise ValueError(f"unknown sliders {unknown}; choose from {list(self.sliders)}")
        self._held = True
        try:
            for symbol, value in values.items():
                self.sliders[symbol].value = value
        finally:
            self._held = False
        self.update()

    def update(self, *_: object) -> None:
        """Re-measure with the current controls and redraw both charts (or show why not)."""
        if self._held:
            return

        v = {symbol: slider.value for symbol, slider in self.sliders.items()}
        device, backward = self.device.value, self.backward.value
        try:
            cfg = config_for((v["b"], v["c"], v["i"], v["i"]), (v["f"], v["c"], v["k"], v["k"]),
                             v["s"], v["padding"])
            names = self.strategies
            if not names:
                raise ValueError("tick at least one strategy to measure")
            self.status.value = style.message_html("measuring...", "info")
            start = time.perf_counter()
            rows = [sweep.measure(cfg, name, device, backward=backward,
                                  min_run_time=self.min_run_time,
                                  measure_memory=self.measure_memory, budget_s=self.budget_s)
                    for name in names]
            seconds = time.perf_counter() - start
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
            return
        self.rows = rows
        measured = [r for r in rows if r["status"] == "ok"]
        where = rows[0]["device"]
        layer = (f"(b, i, f, k, s) = ({v['b']}, {v['i']}, {v['f']}, {v['k']}, {v['s']}), "
                 f"c = {v['c']}, padding {v['padding']}")
        what = "forward + backward" if backward else "forward"
        if measured:
            self.runtime_chart.update(nb06_head_to_head.layer_runtime_figure(measured, what, layer, where))
            self.memory_chart.update(nb06_head_to_head.layer_memory_figure(measured, what, layer, where))
        else:
            text = f"Nothing measured on {where}: the reasons are listed below."
            self.runtime_chart.update(style.message_figure(text))
            self.memory_chart.update(style.message_figure(text))
        skipped = [f"{r['strategy']}: {r['status']}" for r in rows if r["status"] != "ok"]
        if skipped:
            title = f"Not measured on {where}:"
            self.notes.value = style.list_html(title, skipped)
            self._message_text = "\n".join([title, *skipped])
        else:
            self.notes.value = ""
            self._message_text = ""
        self.status.value = style.message_html(
            f"y: (N, K, P, Q) = {cfg.y_shape}; {len(measured)} of {len(rows)} strategies "
            f"measured on {where} in {seconds:.1f} s.", "info")
        self.body.children = [self.charts, self.notes]


# ------------------------------------------------------------------------ OccupancyExplorer


class OccupancyExplorer(_Explorer):
    """Choose a GPU and a kernel's resources; see how many warps an SM keeps resident.

    Sliders set threads per block, registers per thread and shared memory per block (bytes);
    a dropdown picks the study's K40c or one of today's GPUs (:data:`helpers.occupancy.GPU_ARCH`,
    plus this machine's GPU where there is one). The summary gives the active blocks and warps,
    the theoretical occupancy, the resource that limits it, what each resource alone allows,
    and the warps the register file alone holds (the study's "116 registers: 17 warps"). The
    chart draws occupancy against registers per thread (or threads per block) with the current
    configuration marked. Everything is calculated by :func:`helpers.occupancy.occupancy`;
    nothing here is measured.

    A configuration that cannot launch (a block over the GPU's registers or shared memory per
    block) or any other error shows a message in place of the chart, never a traceback, and
    the controls stay as left.

    Source: study Section V-C, Figure 6 (achieved occupancy mostly under 30 %) and Table II;
    the CUDA Occupancy Calculator.

    Attributes:
        gpu: dropdown (values: a GPU name or a compute capability).
        threads, regs, smem: the sliders (threads per block, registers per thread, bytes of
            shared memory per block). vary: toggle for the chart's x axis.
        result: the :class:`helpers.occupancy.Occupancy` shown, or None while a message is.
        register_warps: warps the register file alone allows (None while a message is shown).
        chart: a :class:`LiveChart`. summary: the HTML summary. message_text: the message shown
            ("" if none). widget: the whole explorer, for ``display``.
    """

    RANGES = {"threads_per_block": (32, 1024, 32), "regs_per_thread": (1, 255, 1),
              "smem_per_block": (0, 228 * 1024, 256)}

    def __init__(self, gpu: str = "K40c", threads_per_block: int = 128,
                 regs_per_thread: int = 116, smem_per_block: int = 0, vary: str = "registers",
                 use_figurewidget: bool | None = None):

        self._occ = occ
        options = [(f"{name} (cc {cc}, {occ.SM_LIMITS[cc].arch})", name)
                   for name, cc in occ.GPU_ARCH.items()]
        if backend.MODE == "gpu":
            info = backend.info()
            cc = info.gpu_compute_capability
            if cc in occ.SM_LIMITS:
                options.insert(0, (f"this GPU: {info.gpu_name} (cc {cc})", cc))
        values = [v for _, v in options]
        if gpu not in values:
            raise ValueError(f"gpu must be one of {values}, got {gpu!r}")
        args = dict(threads_per_block=threads_per_block, regs_per_thread=regs_per_thread,
                    smem_per_block=smem_per_block)
        for name, (lo, hi, _step) in self.RANGES.items():
            if isinstance(args[name], bool) or not isinstance(args[name], int) or not (
                    lo <= args[name] <= hi):
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {args[name]!r}")
        if vary not in ("registers", "threads"):
            raise ValueError(f"vary must be 'registers' or 'threads', got {vary!r}")
        wide = {"description_width": "initial"}
        self.gpu = W.Dropdown(options=options, value=gpu, description="GPU", style=wide,
                              layout=W.Layout(width="360px"))

        def slider(name: str, description: str) -> W.IntSlider:
            lo, hi, step = self.RANGES[name]
            return W.IntSlider(value=args[name], min=lo, max=hi, step=step,
                               description=description, continuous_update=False, style=wide,
                               layout=W.Layout(width="460px"))

        self.threads = slider("threads_per_block", "threads per block")
        self.regs = slider("regs_per_thread", "registers per thread")
        self.smem = slider("smem_per_block", "shared memory per block (bytes)")
        self.vary = W.ToggleButtons(options=[("registers per thread", "registers"),
                                             ("threads per block", "threads")],
                                    value=vary, description="chart against", style=wide)
        self.summary = W.HTML()
        self.message = W.HTML()
        self.chart = LiveChart(use_figurewidget=use_figurewidget)
        self.body = W.VBox([self.summary, self.chart.widget])
        self.result = None
        self.register_warps: int | None = None
        self._held = False
        self.widget = W.VBox([
            W.HTML(style.message_html("Calculated from the CUDA occupancy rules "
                                 "(helpers.occupancy), not measured.", "info")),
            self.gpu, self.threads, self.regs, self.smem, self.vary, self.body])
        for control in (self.gpu, self.threads, self.regs, self.smem, self.vary):
            control.observe(self.update, names="value")
        self.update()

    def set(self, **values) -> None:
        """Set several controls at once and update once. Keys: ``gpu``, ``threads_per_block``,
        ``regs_per_thread``, ``smem_per_block``, ``vary``. Raises ValueError for an unknown
        key (values outside a slider's range are clamped by the slider)."""
        controls = {"gpu": self.gpu, "threads_per_block": self.threads,
                    "regs_per_thread": self.regs, "smem_per_block": self.smem, "vary": self.vary}
        unknown = sorted(set(values) - set(controls))
        if unknown:
            raise ValueError(f"unknown controls {unknown}; choose from {list(controls)}")
        self._held = True
        try:
            for key, value in values.items():
                controls[key].value = value
        finally:
            self._held = False
        self.update()

    def show_message(self, text: str) -> None:
        """Show ``text`` in place of the summary and chart."""
        super().show_message(text)
        self.result = None
        self.register_warps = None

    def update(self, *_: object) -> None:
        """Recalculate with the current controls and redraw (or show why not)."""
        if self._held:
            return
        gpu, t, regs, smem = (self.gpu.value, self.threads.value, self.regs.value,
                              self.smem.value)
        try:
            r = self._occ.occupancy(gpu, t, regs, smem)
            if r.active_blocks == 0:
                self.show_message(self._occ.launch_refusal(r, self.gpu.label.split(" (")[0]))
                return
            reg_warps = self._occ.warps_limited_by_registers(gpu, regs)
            fig = nb07_inside_the_gpu.occupancy_curve_figure(gpu, t, regs, smem, vary=self.vary.value)
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not calculate ({type(exc).__name__}): {exc}")
            return
        lim = r.limits
        per_warp = math.ceil(regs * 32 / lim.reg_alloc_unit) * lim.reg_alloc_unit
        allows = ", ".join(f"{k} {v}" for k, v in r.blocks_by.items())
        lines = [
            f"<b>{r.active_blocks} blocks x {r.warps_per_block} warps = {r.active_warps} of "
            f"{lim.max_warps} warps: occupancy {r.occupancy:.1%}</b>, limited by "
            f"<b>{html.escape(r.limiter)}</b>.",
            f"Blocks per SM each resource allows: {html.escape(allows)}.",
            f"Register file alone: {regs} registers x 32 threads = {regs * 32:,}, allocated as "
            f"{per_warp:,} a warp; {lim.regs_per_sm:,} // {per_warp:,} = "
            f"{lim.regs_per_sm // per_warp} warps, at most {lim.max_warps}: "
            f"<b>{reg_warps} warps</b>.",
        ]
        self.summary.value = ("<div style='padding:0.4em 0.6em;line-height:1.5'>"
                              + "<br>".join(lines) + "</div>")
        self.chart.update(fig)
        self.result = r
        self.register_warps = reg_warps
        self._message_text = ""
        self.body.children = [self.summary, self.chart.widget]

"""Notebook 06's convolution explorer: one layer's runtime and memory for every strategy, live
(the study's Figures 3 and 5).
"""

from __future__ import annotations

import time

import ipywidgets as W

from helpers.conv import STRATEGIES, config_for
from helpers.device import backend, timing
from helpers.experiments import sweep
from helpers.figures import nb06_head_to_head, style
from helpers.widgets.live import LiveChart, _Explorer


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
        self.made_on = f"measured on {where}"
        layer = (f"(b, i, f, k, s) = ({v['b']}, {v['i']}, {v['f']}, {v['k']}, {v['s']}), "
                 f"c = {v['c']}, padding {v['padding']}")
        what = "forward + backward" if backward else "forward"
        if measured:
            figures = nb06_head_to_head
            self.runtime_chart.update(figures.layer_runtime_figure(measured, what, layer, where))
            self.memory_chart.update(figures.layer_memory_figure(measured, what, layer, where))
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

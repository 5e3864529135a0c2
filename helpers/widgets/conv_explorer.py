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
from helpers.widgets import arguments, conv_budget
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

    Time budgets: before a strategy is measured, its measurement is estimated, first from the
    assumed FLOP rates (:func:`helpers.experiments.sweep.refusal`), then from one call on a
    reduced copy of the layer (:func:`helpers.widgets.conv_budget.probe`); a strategy
    estimated over ``budget_s`` is refused with the estimate, the first update included, and
    one estimated to end after ``update_budget_s`` from the start of the update is skipped.
    The library (``reference``) is measured first, so that it is drawn whenever it fits.
    The first explorer of a process runs every strategy once on a tiny layer (compiling and
    initialising them: a few seconds), so that no update pays for it.

    Args:
        b, i, f, k, s, c, padding: the layer, integers within :data:`RANGES`.
        strategies: names from :data:`helpers.conv.STRATEGIES` to tick (default: those with
            code for the device); the list passed in is not changed.
        backward: True for forward + backward, False for forward only.
        device: ``"cpu"``, ``"cuda"``, or None (the GPU if there is one, else the CPU).
        min_run_time: seconds of timed calls per strategy (0 < s <= 10).
        budget_s: seconds the measurement of one strategy may take (0 < s <= 600).
        update_budget_s: seconds one update may take, measuring and drawing (0 < s <= 3600).
        measure_memory: also measure each strategy's peak memory.
        use_figurewidget: True, False, or None to decide from the front end.
        measure: measure once now (False: empty charts until the controls change).

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range (the message
            names it), before any widget is built or anything measured.

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
        seconds: how long the last update took. widget: the whole explorer, for ``display``.
    """

    #: Slider ranges (min, max) by symbol: wide enough to reach invalid layers (k > i + 2p)
    #: and layers over the time budget.
    RANGES = {"b": (1, 128), "i": (1, 256), "f": (1, 256), "k": (1, 15), "s": (1, 8),
              "c": (1, 64), "padding": (0, 7)}
    LABELS = {"b": "batch b", "i": "input size i", "f": "filters f", "k": "kernel size k",
              "s": "stride s", "c": "input channels c", "padding": "padding"}

    #: Seconds of each update kept for drawing the charts (at most a quarter of the budget).
    DRAW_RESERVE_S = 0.3
    #: A strategy is not probed with less than this many seconds left in the update.
    PROBE_RESERVE_S = 0.1

    def __init__(self, b: int = 2, i: int = 32, f: int = 16, k: int = 5, s: int = 1, c: int = 3,
                 padding: int = 0, strategies: list[str] | None = None, backward: bool = True,
                 device: str | None = None, min_run_time: float = 0.02, budget_s: float = 1.0,
                 measure_memory: bool = True, use_figurewidget: bool | None = None,
                 measure: bool = True, update_budget_s: float = 10.0):
        values = {}
        for symbol, value in dict(b=b, i=i, f=f, k=k, s=s, c=c, padding=padding).items():
            lo, hi = self.RANGES[symbol]
            values[symbol] = arguments.whole(symbol, value, lo, hi, self.LABELS[symbol])
        gpu = backend.MODE == "gpu"
        if device is not None:
            device = arguments.choice("device", device, ["cpu", "cuda"])
        device = device or ("cuda" if gpu else "cpu")
        if strategies is None:
            strategies = [n for n, st in STRATEGIES.items() if gpu or "cpu" in st.devices]
        else:
            strategies = arguments.names("strategies", strategies, STRATEGIES)
        backward = arguments.flag("backward", backward)
        self.min_run_time = arguments.seconds("min_run_time", min_run_time, 10)
        self.budget_s = arguments.seconds("budget_s", budget_s, 600)
        self.update_budget_s = arguments.seconds("update_budget_s", update_budget_s, 3600)
        self.measure_memory = arguments.flag("measure_memory", measure_memory)
        use_figurewidget = arguments.optional_flag("use_figurewidget", use_figurewidget)
        measure = arguments.flag("measure", measure)
        conv_budget.warm_up(["cpu", "cuda"] if gpu else ["cpu"])
        self.rows: list[dict] = []
        self.seconds = 0.0
        self._held = False

        wide = {"description_width": "initial"}
        self.sliders: dict[str, W.IntSlider] = {}
        for symbol, (lo, hi) in self.RANGES.items():
            value = values[symbol]
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
        once. Raises ValueError for an unknown symbol or a value outside :data:`RANGES`,
        TypeError for a value that is not an integer (nothing is changed then)."""
        unknown = sorted(set(values) - set(self.sliders))
        if unknown:
            raise ValueError(f"unknown sliders {unknown}; choose from {list(self.sliders)}")
        values = {symbol: arguments.whole(symbol, v, *self.RANGES[symbol], self.LABELS[symbol])
                  for symbol, v in values.items()}
        self._held = True
        try:
            for symbol, value in values.items():
                self.sliders[symbol].value = value
        finally:
            self._held = False
        self.update()

    def update(self, *_: object) -> None:
        """Re-measure with the current controls and redraw both charts (or show why not),
        within ``update_budget_s`` seconds: strategies that would end later are listed."""
        if self._held:
            return

        start = time.monotonic()
        v = {symbol: slider.value for symbol, slider in self.sliders.items()}
        device, backward = self.device.value, self.backward.value
        try:
            cfg = config_for((v["b"], v["c"], v["i"], v["i"]), (v["f"], v["c"], v["k"], v["k"]),
                             v["s"], v["padding"])
            names = self.strategies
            if not names:
                raise ValueError("tick at least one strategy to measure")
            self.status.value = style.message_html("measuring...", "info")
            deadline = start + self.update_budget_s - min(self.DRAW_RESERVE_S,
                                                           self.update_budget_s / 4)
            # the library to beat first: no slower strategy's time can leave it out
            first = sorted(names, key=lambda name: name != "reference")
            found = {name: self._measure(cfg, name, device, backward, deadline)
                     for name in first}
            rows = [found[name] for name in names]
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
            return
        finally:
            self.seconds = time.monotonic() - start
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
        self.seconds = time.monotonic() - start
        self.status.value = style.message_html(
            f"y: (N, K, P, Q) = {cfg.y_shape}; {len(measured)} of {len(rows)} strategies "
            f"measured on {where} in {self.seconds:.1f} s.", "info")
        self.body.children = [self.charts, self.notes]

    def _measure(self, cfg, name: str, device: str, backward: bool, deadline: float) -> dict:
        """One strategy's row: measured, or refused or skipped with the estimate that refused
        it (see the class's time budgets)."""
        kwargs = dict(backward=backward, min_run_time=self.min_run_time,
                      measure_memory=self.measure_memory, budget_s=self.budget_s)
        try:
            reason = sweep.refusal(cfg, name, device, backward, self.budget_s)
        except Exception:  # noqa: BLE001  (measure reports it in the row)
            reason = "failed"
        if reason is not None or device == "cuda" and backend.MODE != "gpu":
            return sweep.measure(cfg, name, device, **kwargs)  # the reason, nothing run

        def not_run(status: str) -> dict:  # measure does nothing once its deadline has passed
            return dict(sweep.measure(cfg, name, device, **kwargs, deadline=0.0), status=status)

        left = deadline - time.monotonic()
        budget = f"this update's {self.update_budget_s:g} s budget"
        optimistic, pessimistic = conv_budget.bounds(cfg, name, device, backward,
                                                     self.min_run_time, self.measure_memory)
        if optimistic > left:
            return not_run(f"skipped: measuring it takes at least about {optimistic:.2g} s "
                           f"(at the assumed FLOP rate), more than the {max(left, 0):.2g} s "
                           f"left of {budget}")
        if pessimistic <= min(self.budget_s, left):
            return sweep.measure(cfg, name, device, **kwargs, deadline=deadline,
                                 time_limit=self.update_budget_s)
        if left < self.PROBE_RESERVE_S:
            return not_run(f"skipped: no time left of {budget}")
        calls = conv_budget.calls(self.measure_memory)
        # a call at most this long is measured within both budgets: the probe may stop there
        enough = (min(self.budget_s, left) - conv_budget.measure_seconds(
            cfg, 0.0, self.min_run_time, backward, self.measure_memory)) / calls
        try:
            found = conv_budget.probe(cfg, name, device, backward, deadline, enough)
        except Exception as exc:  # noqa: BLE001  (the strategy's own error, as measure gives it)
            return not_run(f"failed: {type(exc).__name__}: {exc}")
        need = conv_budget.measure_seconds(cfg, found.seconds, self.min_run_time, backward,
                                           self.measure_memory)
        estimate = f"{found.text}; measuring it ({calls} calls) takes about {need:.2g} s"
        if need > self.budget_s:
            return not_run(f"refused: {estimate}, over the {self.budget_s:g} s budget per "
                           "strategy")
        left = deadline - time.monotonic()
        if need > left:
            return not_run(f"skipped: {estimate}, more than the {max(left, 0):.2g} s left of "
                           f"{budget}")
        return sweep.measure(cfg, name, device, **kwargs, deadline=deadline,
                             time_limit=self.update_budget_s)

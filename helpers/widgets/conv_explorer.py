"""Notebook 06's convolution explorer: one layer's runtime and memory for every strategy, live
(the study's Figures 3 and 5).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import ipywidgets as W

from helpers.conv import STRATEGIES, ConvConfig, config_for
from helpers.device import backend, timing
from helpers.device.worker import Worker
from helpers.experiments import sweep
from helpers.figures import nb06_head_to_head, style
from helpers.widgets import arguments
from helpers.widgets.live import LiveChart, _Explorer, in_kernel, measuring_worker


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One update's settings: the layer, the ticked strategies (drawing order), the pass."""

    cfg: ConvConfig
    names: list
    device: str
    backward: bool
    layer: str
    #: measurements per strategy, the last one kept
    passes: int = 1


class ConvExplorer(_Explorer):
    """Set one convolution layer with sliders; every strategy's runtime and memory update live.

    Shows, for the layer (b, i, f, k, s) with c input channels and zero padding, the strategies
    ticked below the sliders measured on one device (:func:`helpers.experiments.live.conv_point`):

    * runtime: one bar per strategy, the median milliseconds of one forward (or forward +
      backward) pass on random float32 data, the error bar from the first to the third
      quartile of the timed calls;
    * memory: per strategy, the measured peak (MiB above the baseline; on the CPU the growth of
      the measuring process's resident memory, which can show less than was allocated) beside
      the analytic workspace (MiB beyond x, w, y; "unknown" where the library picks its
      algorithm at run time).

    Symbols (the study's 5-tuple): b batch, i input height = width, f filters, k kernel height
    = width, s stride; c input channels, padding zero padding on each side. In the cuDNN
    paper's terms x: (N, C, H, W) = (b, c, i, i), w: (K, C/groups, R, S) = (f, c/groups, k, k);
    groups and dilation go beyond the study's layers (depthwise and dilated convolutions).

    Nothing is estimated: each ticked strategy is measured in turn (the library first) in a
    measuring process (:func:`helpers.widgets.live.measuring_worker`: started when the
    explorer is built, it reports ready once torch's convolution is warm and warms the other
    strategies while it waits), after a warm-up call, and drawn as its result arrives. Each
    bar is the median of at least five timed blocks where the budget allows (fewer: no
    quartile bar, and the hover says so), which also keeps the slow first calls at a new size
    out of it. A strategy still running after ``budget_s`` seconds, or when this update has
    used ``update_budget_s`` seconds of measuring, is asked to stop at its next timed block
    (killed after the worker's grace if it does not; a warm spare takes over) and listed as
    "did not finish in N s". In a kernel, measuring runs in the background, a burst of moves
    is one update, and moving a control again stops the measurement in progress and starts
    over with the new settings.

    An invalid layer (e.g. a kernel larger than the padded input) shows the reason in place of
    the charts and leaves the controls as they are. Strategies that were not measured (no code
    for the device, an unsupported configuration, the CUDA simulator, more memory than half of
    what the device has free, did not finish) are listed below the charts with their reasons;
    the others are still drawn.

    Args:
        b, i, f, k, s, c, padding: the layer, integers within :data:`RANGES`.
        groups: filters see c/groups channels each (groups = c: depthwise); it must divide c
            and f, else the explorer shows why in place of the charts.
        dilation: the filter's taps are this many pixels apart (1: none).
        strategies: names from :data:`helpers.conv.STRATEGIES` to tick (default: those with
            code for the device); the list passed in is not changed.
        backward: True for forward + backward, False for forward only.
        device: ``"cpu"``, ``"cuda"``, or None (the GPU if there is one, else the CPU).
        min_run_time: seconds of timed calls per strategy (0 < s <= 10).
        budget_s: seconds one strategy may be measured before it is stopped (0 < s <= 600).
        update_budget_s: seconds of measuring one update may take in all (0 < s <= 3600).
        measure_memory: also measure each strategy's peak memory.
        use_figurewidget: True for plotly's ``FigureWidget`` where it renders; False or None
            (the default) for an ``Output`` widget (:class:`~helpers.widgets.live.LiveChart`).
        measure: measure once now, and wait for it (False: empty charts until the controls
            change).
        background: measure in a thread, so that a control's callback returns at once; None
            (default): in a Jupyter kernel only.
        worker: the measuring process (default: the kernel's shared one).

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range (the message
            names it), before any widget is built or anything measured.

    Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
    ICPP 2016, Figure 3 (runtime against each of b, i, f, k, s) and Figure 5 (memory).

    Attributes:
        b, i, f, k, s, c, padding, groups, dilation: integer sliders (also in ``sliders``,
            keyed by symbol).
        strategy_boxes: one checkbox per name of :data:`helpers.conv.STRATEGIES`.
        backward: toggle, False for forward only, True for forward + backward.
        device: dropdown, ``"cpu"`` or ``"cuda"``.
        runtime_chart, memory_chart: :class:`LiveChart` objects (``.figure`` is the chart).
        message: the message shown in place of the charts. notes: the list below the charts.
        message_text: plain text of the message or notes currently shown ("" if none).
        rows: the rows last measured, one per ticked strategy
            (:func:`helpers.experiments.live.conv_point`; a row not measured has ``status``
            other than ``"ok"``).
        seconds: how long the last update took. widget: the whole explorer, for ``display``.
    """

    #: Slider ranges (min, max) by symbol: wide enough to reach invalid layers (k > i + 2p)
    #: and layers over the time budget.
    RANGES = {"b": (1, 128), "i": (1, 256), "f": (1, 256), "k": (1, 15), "s": (1, 8),
              "c": (1, 64), "padding": (0, 7), "groups": (1, 64), "dilation": (1, 4)}
    LABELS = {"b": "batch b", "i": "input size i", "f": "filters f", "k": "kernel size k",
              "s": "stride s", "c": "input channels c", "padding": "padding",
              "groups": "groups", "dilation": "dilation"}

    def __init__(self, b: int = 2, i: int = 32, f: int = 16, k: int = 5, s: int = 1, c: int = 3,
                 padding: int = 0, groups: int = 1, dilation: int = 1,
                 strategies: list[str] | None = None, backward: bool = True,
                 device: str | None = None, min_run_time: float = 0.02, budget_s: float = 2.0,
                 measure_memory: bool = True, use_figurewidget: bool | None = None,
                 measure: bool = True, update_budget_s: float = 10.0,
                 background: bool | None = None, worker: Worker | None = None):
        values = {}
        for symbol, value in dict(b=b, i=i, f=f, k=k, s=s, c=c, padding=padding, groups=groups,
                                  dilation=dilation).items():
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
        background = arguments.optional_flag("background", background)
        self.background = in_kernel() if background is None else background
        if worker is not None and not callable(getattr(worker, "run", None)):
            raise TypeError(f"worker must be a helpers.device.worker.Worker, got "
                            f"{arguments.shown(worker)}")
        self.worker = worker or measuring_worker()
        if measure and callable(getattr(self.worker, "start", None)):
            self.worker.start()  # it imports and warms up while the widgets are built
        self._draw_lock = threading.Lock()
        self._drawn = False
        self.rows: list[dict] = []
        self.seconds = 0.0
        self._held = False
        #: A strategy killed since the last status line (it ignored a request to stop), or "".
        self.killed_note = ""

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
        self.groups, self.dilation = sl["groups"], sl["dilation"]
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
            W.HBox([W.VBox([sl["b"], sl["i"], sl["f"], sl["c"], sl["groups"]]),
                    W.VBox([sl["k"], sl["s"], sl["padding"], sl["dilation"]])]),
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
            self.wait()

    @property
    def strategies(self) -> list[str]:
        """The ticked strategies, in :data:`helpers.conv.STRATEGIES` order."""
        return [name for name, box in self.strategy_boxes.items() if box.value]

    def set(self, **values: int) -> None:
        """Set several sliders at once (by symbol: ``b, i, f, k, s, c, padding, groups,
        dilation``), measure
        once and wait for it. Raises ValueError for an unknown symbol or a value outside
        :data:`RANGES`, TypeError for a value that is not an integer (nothing is changed
        then)."""
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
        self.wait()

    def update(self, *_: object) -> None:
        """Measure with the current controls and redraw both charts as each strategy's result
        arrives (or show why not); an update still measuring is stopped first."""
        if self._held:
            return
        generation = self._next_generation()
        self._started = time.monotonic()
        v = {symbol: slider.value for symbol, slider in self.sliders.items()}
        try:
            g = v["groups"]
            cfg = config_for((v["b"], v["c"], v["i"], v["i"]),
                             (v["f"], v["c"] // g if v["c"] % g == 0 else v["c"], v["k"], v["k"]),
                             v["s"], v["padding"], v["dilation"], g)
            names = self.strategies
            if not names:
                raise ValueError("tick at least one strategy to measure")
        except ValueError as exc:
            self.show_message(str(exc))
            self.seconds = time.monotonic() - self._started
            return
        layer = (f"(b, i, f, k, s) = ({v['b']}, {v['i']}, {v['f']}, {v['k']}, {v['s']}), "
                 f"c = {v['c']}, padding {v['padding']}"
                 + (f", groups {g}" if g > 1 else "")
                 + (f", dilation {v['dilation']}" if v["dilation"] > 1 else ""))
        plan = _Plan(cfg, names, self.device.value, self.backward.value, layer,
                     passes=1)
        self.status.value = style.message_html("measuring...", "info")
        self._start(generation, plan)

    def _measure(self, generation: int, plan: _Plan) -> None:
        """Measure the plan's strategies one by one (the library first: the one to beat),
        drawing after each; stop as soon as a newer update began."""
        rows: dict[str, dict] = {}
        spent = 0.0
        try:
            for name in sorted(plan.names, key=lambda name: name != "reference"):
                if self._stale(generation):
                    return
                row, seconds = self._measure_one(generation, plan, name,
                                                 self.update_budget_s - spent)
                if row is None:  # stopped: a newer update has begun
                    return
                spent += seconds
                rows[name] = row
                self._draw(generation, plan, rows)
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            with self._draw_lock:
                if not self._stale(generation):
                    self.show_message(f"Could not measure ({type(exc).__name__}): {exc}")
                    self.seconds = time.monotonic() - self._started

    def _measure_one(self, generation: int, plan: _Plan, name: str,
                     left: float) -> tuple[dict | None, float]:
        """One strategy's row and the seconds spent measuring it; (None, s) once stopped."""
        cfg, device = plan.cfg, plan.device

        def row(status: str) -> dict:  # the row's fields, nothing run (measure's own refusal)
            return dict(sweep.measure(cfg, name, device, plan.backward, deadline=0.0),
                        status=status, q1_ms=None, q3_ms=None)

        # what needs no measuring: no code for the device or layer, the simulator, memory
        reason = sweep.refusal(cfg, name, device, plan.backward, budget_s=math.inf)
        if reason:
            return row(reason), 0.0
        if left <= 0:
            return row(f"not measured: this update's {self.update_budget_s:g} s of measuring "
                       "were used up by the strategies before it"), 0.0
        limit = min(self.budget_s, left)
        outcome = self.worker.run(
            "helpers.experiments.live", "conv_point", cfg, name, device, plan.backward,
            self.min_run_time, self.measure_memory, plan.passes, limit, timeout_s=limit,
            cancelled=lambda: self._stale(generation))
        killed = getattr(outcome, "killed", False)
        if killed:
            self.killed_note = (f"{name} did not stop when asked, so its measuring process was "
                                "killed; a warm spare took its place.")
        if outcome.status == "ok":
            return outcome.value, outcome.seconds
        if outcome.status == "did not finish":
            why = ("its budget" if limit == self.budget_s
                   else f"what was left of this update's {self.update_budget_s:g} s")
            how = (" (it ignored the request to stop: killed after "
                   f"{getattr(self.worker, 'grace_s', 0):g} s more)" if killed else "")
            return row(f"did not finish in {limit:.2g} s ({why}): stopped{how}"), outcome.seconds
        if outcome.status == "stopped":
            return None, outcome.seconds
        return row(f"failed: {outcome.error}"), outcome.seconds

    def _draw(self, generation: int, plan: _Plan, found: dict[str, dict]) -> None:
        """Draw the rows found so far (in the ticked order); the rest are listed as waiting."""
        with self._draw_lock:
            if self._stale(generation):
                return
            rows = [found[name] for name in plan.names if name in found]
            waiting = [name for name in plan.names if name not in found]
            measured = [r for r in rows if r["status"] == "ok"]
            where = rows[0]["device"]
            self.made_on = f"measured on {where}"
            what = "forward + backward" if plan.backward else "forward"
            if measured:
                figures = nb06_head_to_head
                self.runtime_chart.update(
                    figures.layer_runtime_figure(measured, what, plan.layer, where))
                self.memory_chart.update(
                    figures.layer_memory_figure(measured, what, plan.layer, where))
            elif not waiting:
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
            self.seconds = time.monotonic() - self._started
            self._drawn = self._drawn or bool(measured)
            if waiting:
                self.rows = rows
                text = (f"measured {len(rows)} of {len(plan.names)}; measuring "
                        f"{waiting[0]}...")
            else:
                self.rows = rows
                threads = sorted({r["threads"] for r in measured if r.get("threads")})
                cores = (f" Measured with {'/'.join(map(str, threads))} of "
                         f"{self.worker_cores()} cores (the others were busy)."
                         if threads and max(threads) < self.worker_cores()
                         else f" Measured with {threads[0]} cores." if len(threads) == 1
                         else "")
                noisy = [r["strategy"] for r in measured if style.noisy(r, "q1_ms", "q3_ms")]
                text = (f"y: (N, K, P, Q) = {plan.cfg.y_shape}; {len(measured)} of {len(rows)} "
                        f"strategies measured on {where} in {self.seconds:.1f} s.{cores}"
                        + (f" Noisy (quartiles more than 2x apart: the machine is busy): "
                           f"{', '.join(noisy)}." if noisy else "")
                        + (f" Earlier: {self.killed_note}" if self.killed_note else ""))
                self.killed_note = ""
            self.status.value = style.message_html(text, "info")
            self.body.children = [self.charts, self.notes]

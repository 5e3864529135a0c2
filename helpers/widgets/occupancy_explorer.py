"""Notebook 07's occupancy explorer: a GPU and a kernel's resources; resident warps per SM.
"""

from __future__ import annotations

import html
import math

import ipywidgets as W

from helpers import occupancy as occ
from helpers.device import backend
from helpers.figures import nb07_inside_the_gpu, style
from helpers.widgets import arguments
from helpers.widgets.live import LiveChart, _Explorer


class OccupancyExplorer(_Explorer):
    """Choose a GPU and a kernel's resources; see how many warps an SM keeps resident.

    Sliders set threads per block, registers per thread and shared memory per block (bytes);
    a dropdown picks the study's K40c or one of today's GPUs (:data:`helpers.occupancy.GPU_ARCH`,
    plus this machine's GPU where there is one). The summary gives the active blocks and warps,
    the theoretical occupancy, the resource that limits it, what each resource alone allows,
    and the warps the register file alone holds (the study's "116 registers: 17 warps"; 16 by the
    hardware's per-sub-partition rule). The
    chart draws occupancy against registers per thread (or threads per block) with the current
    configuration marked. Everything is calculated by :func:`helpers.occupancy.occupancy`;
    nothing here is measured.

    A configuration that cannot launch (a block over the GPU's registers or shared memory per
    block) or any other error shows a message in place of the chart, never a traceback, and
    the controls stay as left.

    Source: study Section V-C, Figure 6 (achieved occupancy mostly under 30 %) and Table II;
    the CUDA Occupancy Calculator.

    Args:
        gpu: a name of :data:`helpers.occupancy.GPU_ARCH` (or this GPU's compute capability).
        threads_per_block, regs_per_thread, smem_per_block: integers within :data:`RANGES`.
        vary: ``"registers"`` or ``"threads"``, the chart's x axis.
        use_figurewidget: True for plotly's ``FigureWidget`` where it renders; False or None
            (the default) for an ``Output`` widget (:class:`~helpers.widgets.live.LiveChart`).

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range (the message
            names it), before any widget is built.

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
        gpu = arguments.choice("gpu", gpu, values)
        args = {name: arguments.whole(name, value, lo, hi) for (name, (lo, hi, _step)), value
                in zip(self.RANGES.items(), (threads_per_block, regs_per_thread, smem_per_block))}
        vary = arguments.choice("vary", vary, ("registers", "threads"))
        use_figurewidget = arguments.optional_flag("use_figurewidget", use_figurewidget)
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
        ``regs_per_thread``, ``smem_per_block``, ``vary``, with the values the constructor
        takes. Raises ValueError for an unknown key or a value out of range, TypeError for a
        value of the wrong type (nothing is changed then)."""
        controls = {"gpu": self.gpu, "threads_per_block": self.threads,
                    "regs_per_thread": self.regs, "smem_per_block": self.smem, "vary": self.vary}
        unknown = sorted(set(values) - set(controls))
        if unknown:
            raise ValueError(f"unknown controls {unknown}; choose from {list(controls)}")
        checked = {}
        for key, value in values.items():
            if key in self.RANGES:
                checked[key] = arguments.whole(key, value, *self.RANGES[key][:2])
            else:
                checked[key] = arguments.choice(
                    key, value, [v for _, v in controls[key].options])
        values = checked
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
            fig = nb07_inside_the_gpu.occupancy_curve_figure(gpu, t, regs, smem,
                                                             vary=self.vary.value)
        except ValueError as exc:
            self.show_message(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a widget shows a message, never a traceback
            self.show_message(f"Could not calculate ({type(exc).__name__}): {exc}")
            return
        lim = r.limits
        per_warp = math.ceil(regs * 32 / lim.reg_alloc_unit) * lim.reg_alloc_unit
        part = lim.regs_per_sm // lim.reg_sub_partitions
        allows = ", ".join(f"{k} {v}" for k, v in r.blocks_by.items())
        lines = [
            f"<b>{r.active_blocks} blocks x {r.warps_per_block} warps = {r.active_warps} of "
            f"{lim.max_warps} warps: occupancy {r.occupancy:.1%}</b>, limited by "
            f"<b>{html.escape(r.limiter)}</b>.",
            f"Blocks per SM each resource allows: {html.escape(allows)}.",
            f"Register file alone: {regs} registers x 32 threads = {regs * 32:,}, allocated as "
            f"{per_warp:,} a warp; each of its {lim.reg_sub_partitions} sub-partitions of "
            f"{part:,} holds {part // per_warp}, so {part // per_warp} x "
            f"{lim.reg_sub_partitions} = {part // per_warp * lim.reg_sub_partitions} warps, at "
            f"most {lim.max_warps}: <b>{reg_warps} warps</b>.",
        ]
        self.summary.value = ("<div style='padding:0.4em 0.6em;line-height:1.5'>"
                              + "<br>".join(lines) + "</div>")
        self.chart.update(fig)
        self.result = r
        self.register_warps = reg_warps
        self.made_on = f"calculated for the {self.gpu.label.split(' (')[0]}, not measured"
        self._message_text = ""
        self.body.children = [self.summary, self.chart.widget]

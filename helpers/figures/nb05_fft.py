"""Charts of notebook 05: FFT planes, FFT cost against kernel size, runtime and steps."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from helpers.figures.style import COLORS, DASHES, color_for, layout

#: Colours of the FFT strategy's steps (``helpers.conv.phases`` names), by kind: forward
#: transforms blue, Cgemms orange, inverse transforms green, bookkeeping grey.
FFT_PHASE_COLORS = {
    "FFT (x)": "#0072B2", "FFT (w)": "#56B4E9", "FFT (dy)": "#9ECAE1",
    "Cgemm": "#E69F00", "Cgemm (dw)": "#E69F00", "Cgemm (dx)": "#F5C16C",
    "inverse FFT (y)": "#009E73", "inverse FFT (dw)": "#009E73", "inverse FFT (dx)": "#7FD1B9",
    "crop": "#999999", "other": "#DDDDDD",
}


def fft_planes_figure(panels: Sequence[tuple[str, np.ndarray]], title: str, cols: int = 4,
                      max_side: int = 160) -> go.Figure:
    """Greyscale pictures side by side: images, spectra, results of FFT convolution.

    Args:
        panels: (subtitle, 2-D real array) pairs, e.g. an image (H, W) or a log-magnitude
            spectrum (Hf, Wf//2+1). Each is scaled to its own min..max and stored as 8-bit grey
            levels (a picture, not data: the hover shows the pixel, not the value), and
            subsampled by striding to at most ``max_side`` pixels a side to keep the figure
            small.
        title: figure title.
        cols: panels per row (>= 1).
        max_side: longest side of a stored panel in pixels (>= 8).

    Returns:
        a plotly Figure, one heatmap per panel, y axis downwards, equal aspect.

    Raises:
        ValueError: no panels, a panel that is not 2-D, cols < 1 or max_side < 8.

    Source: the steps of FFT convolution (study Section II-B).
    """
    from plotly.subplots import make_subplots

    if not panels:
        raise ValueError("panels must not be empty")
    if cols < 1 or max_side < 8:
        raise ValueError(f"cols must be >= 1 and max_side >= 8, got {cols} and {max_side}")
    arrays = []
    for name, a in panels:
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 2:
            raise ValueError(f"panel {name!r} must be 2-D, got shape {a.shape}")
        step = max(1, math.ceil(max(a.shape) / max_side))
        a = a[::step, ::step]
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
        scaled = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
        arrays.append(np.round(scaled * 255).astype(np.uint8))
    cols = min(cols, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[name for name, _ in panels],
                        horizontal_spacing=0.03, vertical_spacing=0.12 / rows)
    for j, a in enumerate(arrays):
        row, col = j // cols + 1, j % cols + 1
        fig.add_trace(go.Heatmap(z=a, colorscale="gray", showscale=False, zmin=0, zmax=255,
                                 hovertemplate="row %{y}, column %{x}<extra></extra>"),
                      row=row, col=col)
        axis = "" if j == 0 else str(j + 1)
        fig.update_xaxes(showticklabels=False, constrain="domain", row=row, col=col)
        fig.update_yaxes(showticklabels=False, autorange="reversed", scaleanchor=f"x{axis}",
                         scaleratio=1, constrain="domain", row=row, col=col)
    fig.update_annotations(font_size=11)
    fig.update_layout(title=title, template="plotly_white", height=60 + 260 * rows,
                      margin=dict(l=10, r=10, t=70, b=10))
    return fig


def fft_cost_figure(kernels: Sequence[int], series: Sequence[tuple[str, Sequence[float], str, str]],
                    y_title: str, title: str, mark: tuple[float, str] | None = None) -> go.Figure:
    """Analytic cost (FLOPs or bytes) against kernel size, one line per series.

    Args:
        kernels: kernel sizes R = S on the x axis.
        series: (name, values, colour key for :func:`color_for`, dash) per line; values
            in the unit ``y_title`` names, one per kernel size.
        y_title: the y axis title, with its unit (the axis is logarithmic).
        title: figure title.
        mark: optional (kernel size, label): a dotted vertical line, e.g. where FFT's FLOPs
            cross direct convolution's.

    Raises:
        ValueError: a series whose length differs from ``kernels``.

    Source: the study's Section II-B cost argument; its Figure 5 for memory.
    """
    fig = go.Figure()
    for name, values, key, dash in series:
        if len(values) != len(kernels):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(kernels)} kernels")
        fig.add_trace(go.Scatter(
            x=list(kernels), y=list(values), mode="lines+markers", name=name,
            line=dict(color=color_for(key), dash=dash, width=2.5 if key == "fft" else 2),
            hovertemplate=f"{name}<br>kernel %{{x}}: %{{y:.3g}}<extra></extra>"))
    if mark is not None:
        ys = [v for _, values, _, _ in series for v in values if v and v > 0]
        fig.add_trace(go.Scatter(
            x=[mark[0], mark[0]], y=[min(ys), max(ys)] if ys else [1, 10], mode="lines",
            name=mark[1], line=dict(color=COLORS["peak"], dash="dot", width=1),
            hovertemplate=f"{mark[1]}<extra></extra>"))
    fig = layout(fig, title, "kernel size R = S", y_title, log_x=False, log_y=True)
    fig.update_xaxes(dtick=2 if len(kernels) < 20 else 4)
    return fig


def fft_runtime_figure(rows: Sequence[dict], x_key: str, x_title: str, title: str) -> go.Figure:
    """Measured time per call against one swept parameter, one line per (strategy, device).

    Args:
        rows: dicts from :func:`helpers.experiments.sweep.measure` with the swept value under ``x_key``;
            rows without a measurement (``status`` not ``"ok"``) are left out.
        x_key: the key holding the x value (e.g. ``"k"`` for kernel size, ``"s"`` for stride).
        x_title: the x axis title. title: figure title.

    Returns:
        a plotly Figure: median ms (log axis) with the interquartile range as error bars; the
        legend names the strategy and the device that measured it.

    Source: the study's Figure 3 (runtime over kernel size and stride).
    """
    fig = go.Figure()
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("median_ms") is not None:
            groups.setdefault((r["strategy"], r["device"]), []).append(r)
    for (strategy, device), g in groups.items():
        g = sorted(g, key=lambda r: r[x_key])
        fig.add_trace(go.Scatter(
            x=[r[x_key] for r in g], y=[r["median_ms"] for r in g], mode="lines+markers",
            error_y=dict(type="data", array=[r["iqr_ms"] or 0 for r in g], visible=True,
                         thickness=1),
            name=f"{strategy}, {device}",
            line=dict(color=color_for(strategy),
                      dash="solid" if device.startswith("CPU") else DASHES["cuda"],
                      width=3 if strategy == "fft" else 2),
            hovertemplate=f"{strategy}<br>{x_title} %{{x}}: %{{y:.3g}} ms<extra></extra>"))
    fig = layout(fig, title, x_title, "median time, forward + backward (ms)", log_x=False)
    fig.update_xaxes(dtick=1 if len({r[x_key] for r in rows}) <= 5 else 2)
    return fig


def fft_phase_figure(bars: Sequence[tuple[str, Sequence[dict]]], device: str,
                     title: str = "Where FFT convolution's time goes") -> go.Figure:
    """Share of each step in a call, one horizontal stacked bar per (layer, pass).

    Args:
        bars: (label, rows of :func:`helpers.experiments.phases.phase_times`) per bar.
        device: the device that measured them (shown in the title).
        title: figure title.

    Returns:
        a plotly Figure: x = percent of the call's median time; hover gives milliseconds.
        Colours: forward transforms blue, Cgemms orange, inverse transforms green
        (:data:`FFT_PHASE_COLORS`).

    Source: the study's Figure 4 (fbfft: FFT, transpose, Cgemm, inverse FFT).
    """
    fig = go.Figure()
    labels = [label for label, _ in bars]
    names: list[str] = []
    for _, rows in bars:
        for r in rows:
            if r["phase"] not in names:
                names.append(r["phase"])
    names = [n for n in names if n != "other"] + (["other"] if "other" in names else [])
    for name in names:
        share = [next((100 * r["share"] for r in rows if r["phase"] == name), 0.0)
                 for _, rows in bars]
        ms = [next((r["ms"] for r in rows if r["phase"] == name), 0.0) for _, rows in bars]
        fig.add_trace(go.Bar(
            y=labels, x=share, orientation="h", name=name, customdata=ms,
            marker=dict(color=FFT_PHASE_COLORS.get(name, "#BBBBBB"),
                        line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate=f"{name}: %{{x:.0f}} %% (%{{customdata:.3g}} ms)<extra></extra>"))
    fig = layout(fig, f"{title}<br><sup>measured on {device}</sup>",
                  "share of the call's median time (%)", "", log_x=False, log_y=False)
    fig.update_layout(barmode="stack", height=140 + 55 * len(bars))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig

"""Plotly charts for the workbook: one colour per backend/strategy everywhere, units on every
axis, log axes where sizes span decades, and the measuring device in every legend.

Only :mod:`helpers.widgets` and the notebooks import this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

__all__ = [
    "COLORS",
    "DASHES",
    "color_for",
    "setup_notebook",
    "throughput_figure",
    "runtime_figure",
    "gemm_figure",
    "roofline_figure",
    "thread_map_figure",
    "message_figure",
    "sweep_figure",
    "fastest_map_figure",
    "findings_table",
    "UNROLL_PHASE_COLORS",
    "FFT_PHASE_COLORS",
    "SWEEP_AXES",
    "LAYER_COLORS",
    "TRANSFER_COLORS",
    "TRAINING_COLORS",
    "filtered_images_figure",
    "conv_window_figure",
    "direct_runtime_figure",
    "direct_phases_figure",
    "tile_reuse_figure",
    "im2col_picture_figure",
    "im2col_memory_figure",
    "unroll_layers_figure",
    "unroll_phase_figure",
    "fft_planes_figure",
    "fft_cost_figure",
    "fft_runtime_figure",
    "fft_phase_figure",
    "hotspot_figure",
    "table2_figure",
    "occupancy_curve_figure",
    "coalescing_figure",
    "banks_figure",
    "divergence_figure",
    "gpu_experiments_figure",
    "transfer_bandwidth_figure",
    "transfer_share_figure",
    "overlap_timeline_figure",
    "overlap_times_figure",
    "labelled_images_figure",
    "training_loss_figure",
    "images_per_s_figure",
    "wait_compute_figure",
    "utilisation_figure",
    "depth_figure",
]

#: One colour per backend or strategy, kept across the whole workbook (colour-blind-safe
#: Okabe-Ito palette).
COLORS = {
    "numpy": "#E69F00",
    "torch": "#0072B2",
    "numba": "#009E73",
    "cublas": "#0072B2",
    "reference": "#0072B2",
    "direct-naive": "#D55E00",
    "direct-tiled": "#CC79A7",
    "im2col-gemm": "#56B4E9",
    "im2col-tiled": "#009E73",
    "fft": "#000000",
    "peak": "#555555",
}

#: Line style by device kind: measured on this machine's CPU, on a GPU, or from results/.
DASHES = {"cpu": "solid", "cuda": "dash", "reference": "dot"}


def color_for(name: str) -> str:
    """The workbook's colour for a backend or strategy name (grey if unknown)."""
    return COLORS.get(name, "#999999")


def setup_notebook() -> str:
    """Choose the plotly renderer: Colab's where running in Colab, else the notebook mimetype
    (rendered by JupyterLab) plus a light HTML fallback. Returns the renderer name."""
    from . import backend

    pio.templates.default = "plotly_white"
    renderer = "colab" if backend.in_colab() else "plotly_mimetype+notebook_connected"
    pio.renderers.default = renderer
    return renderer


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, log_x=True, log_y=True):
    fig.update_layout(
        title=title, template="plotly_white", height=430,
        legend=dict(orientation="v", x=1.02, y=1, font=dict(size=11)),
        margin=dict(l=70, r=20, t=60, b=60),
    )
    fig.update_xaxes(title_text=x_title, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return fig


def _groups(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status", "ok").startswith("ok") and math.isfinite(float(r.get("median_s", "nan"))):
            groups.setdefault((r["backend"], r["device"], r.get("source", r["device_kind"]),
                               r.get("dtype", "float32"), r.get("op", "")), []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: r["size"])
    return groups


def _trace_name(backend: str, device: str, source: str, dtype: str) -> str:
    origin = " (results/)" if source == "reference" else ""
    return f"{backend} {dtype}, {device}{origin}"


def throughput_figure(rows: Sequence[dict], peaks: Iterable[tuple[str, float]] = (),
                      title: str = "Elementwise throughput") -> go.Figure:
    """GB/s against elements, one line per (backend, device), with bandwidth peaks dashed.

    Args:
        rows: rows from :func:`helpers.throughput.elementwise_sweep` (or results/, with
            ``source="reference"``); rows whose status is not ``ok`` are left out.
        peaks: (label, bytes/s) horizontal lines, e.g. a GPU's datasheet bandwidth.
    """
    fig = go.Figure()
    for (backend, device, source, dtype, op), g in _groups(rows).items():
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in g], y=[r["gb_s"] for r in g], mode="lines+markers",
            name=_trace_name(backend, device, source, dtype) + (f" {op}" if op else ""),
            line=dict(color=color_for(backend), dash=DASHES.get(source, "solid")),
            hovertemplate="%{x:,} elements: %{y:.3g} GB/s<extra></extra>"))
    sizes = [r["size"] for r in rows if r.get("status", "ok").startswith("ok")] or [1, 10]
    for (label, bw), dash in zip(peaks, ["dot", "dashdot", "longdash", "longdashdot"] * 4):
        # Drawn as a trace, not add_hline: hline annotations misplace themselves on log axes.
        fig.add_trace(go.Scatter(
            x=[min(sizes), max(sizes)], y=[bw / 1e9] * 2, mode="lines",
            name=f"{label}: {bw / 1e9:,.0f} GB/s",
            line=dict(color=COLORS["peak"], dash=dash, width=1),
            hovertemplate=f"{label}: {bw / 1e9:,.0f} GB/s<extra></extra>"))
    return _layout(fig, title, "elements (n)", "memory throughput (GB/s)")


def runtime_figure(rows: Sequence[dict], x_title: str = "size",
                   title: str = "Runtime per call") -> go.Figure:
    """Median milliseconds per call against size, one line per (backend, device, dtype), with
    the interquartile range as error bars."""
    fig = go.Figure()
    for (backend, device, source, dtype, _op), g in _groups(rows).items():
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in g], y=[r["median_s"] * 1e3 for r in g], mode="lines+markers",
            error_y=dict(type="data", array=[r["iqr_s"] * 1e3 for r in g], visible=True,
                         thickness=1),
            name=_trace_name(backend, device, source, dtype),
            line=dict(color=color_for(backend), dash=DASHES.get(source, "solid")),
            hovertemplate="%{x:,}: %{y:.3g} ms<extra></extra>"))
    return _layout(fig, title, x_title, "median time per call (ms)")


def gemm_figure(rows: Sequence[dict], title: str = "Matrix multiplication (n x n)") -> go.Figure:
    """GFLOP/s against matrix size n, one line per (backend, device, dtype)."""
    fig = go.Figure()
    for (backend, device, source, dtype, _op), g in _groups(rows).items():
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in g], y=[r["gflop_s"] for r in g], mode="lines+markers",
            name=_trace_name(backend, device, source, dtype),
            line=dict(color=color_for(backend), dash=DASHES.get(source, "solid")),
            hovertemplate="n = %{x}: %{y:,.1f} GFLOP/s<extra></extra>"))
    return _layout(fig, title, "matrix size n", "throughput (GFLOP/s)")


def roofline_figure(roofs: Sequence[tuple[str, float, float, str]],
                    gemm_rows: Sequence[dict] = (),
                    marks: Sequence[tuple[str, float]] = (),
                    title: str = "Roofline: GEMM throughput against arithmetic intensity"
                    ) -> go.Figure:
    """The roofline model: attainable FLOP/s = min(peak FLOP/s, intensity x bandwidth).

    Args:
        roofs: (label, peak FLOP/s, bandwidth bytes/s, colour) per device; the label says
            whether the peaks are datasheet figures, estimates or measurements.
        gemm_rows: measured square-GEMM rows; each point sits at its intensity
            ``2n^3 / (3 n^2 * itemsize)`` FLOP/byte.
        marks: (label, intensity FLOP/byte) of other GEMMs (e.g. the study's Table I layers under
            im2col), drawn as markers on the first roof with their labels.
    """
    fig = go.Figure()
    intensities = [0.1, 1e4]
    x = np.logspace(math.log10(intensities[0]), math.log10(intensities[1]), 200)
    for label, peak, bw, color in roofs:
        fig.add_trace(go.Scatter(
            x=x, y=np.minimum(peak, x * bw) / 1e9, mode="lines", name=label,
            line=dict(color=color, width=2),
            hovertemplate="%{x:.3g} FLOP/B: at most %{y:,.0f} GFLOP/s<extra></extra>"))
    for (backend, device, source, dtype, _op), g in _groups(gemm_rows).items():
        fig.add_trace(go.Scatter(
            x=[r["flops"] / r["bytes"] for r in g], y=[r["gflop_s"] for r in g],
            mode="markers", marker=dict(color=color_for(backend), size=8,
                                        symbol="circle" if source != "reference" else "diamond"),
            name=f"measured GEMM: {_trace_name(backend, device, source, dtype)}",
            text=[f"n = {r['size']}" for r in g],
            hovertemplate="%{text}: %{y:,.1f} GFLOP/s<extra></extra>"))
    if marks and roofs:
        _, peak, bw, _ = roofs[0]
        marks = sorted(marks, key=lambda m: m[1])  # alternate label sides along the x axis
        xs = [m[1] for m in marks]
        fig.add_trace(go.Scatter(
            x=xs, y=[min(peak, v * bw) / 1e9 for v in xs], mode="markers+text",
            text=[m[0] for m in marks],
            textposition=["bottom right" if j % 2 == 0 else "top left" for j in range(len(marks))],
            marker=dict(symbol="x", size=10, color="#000000"),
            name=f"Table I layers as im2col GEMMs (bound on {roofs[0][0]})",
            hovertemplate="%{text}: %{x:.3g} FLOP/B<extra></extra>"))
    return _layout(fig, title, "arithmetic intensity (FLOP per byte moved)",
                   "attainable throughput (GFLOP/s)")


def thread_map_figure(block_of: np.ndarray, thread_of: np.ndarray, threads_per_block: int,
                      device: str) -> go.Figure:
    """Which block and thread wrote each array element: one cell per element.

    Cells are coloured by block; the text is the thread index inside the block. Empty slots
    of the last block (threads with no element: the ``i < n`` check) are drawn hatched grey.
    """
    n = len(block_of)
    blocks = int(math.ceil(n / threads_per_block))
    z = np.full((blocks, threads_per_block), np.nan)
    text = np.full((blocks, threads_per_block), "idle", dtype=object)
    for i in range(n):
        z[i // threads_per_block, i % threads_per_block] = block_of[i]
        text[i // threads_per_block, i % threads_per_block] = f"x[{i}]<br>t{thread_of[i]}"
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", colorscale="Viridis", showscale=False,
        xgap=2, ygap=2, hovertemplate="block %{y}, thread %{x}: %{text}<extra></extra>"))
    fig.update_layout(
        title=(f"{n} elements, {threads_per_block} threads per block, {blocks} blocks "
               f"(grid rounded up; grey = idle threads)<br><sup>ran on {device}</sup>"),
        height=120 + 60 * blocks, template="plotly_white", plot_bgcolor="#dddddd",
        margin=dict(l=70, r=20, t=60, b=50))
    fig.update_xaxes(title_text="threadIdx.x", dtick=1)
    fig.update_yaxes(title_text="blockIdx.x", dtick=1, autorange="reversed")
    return fig


def message_figure(message: str) -> go.Figure:
    """An empty chart carrying a message (used where a chart cannot be drawn)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(template="plotly_white", height=200)
    return fig


# ------------------------------------------------------ notebook 03: direct convolution


def _grey_uint8(img: np.ndarray, max_px: int) -> np.ndarray:
    """Subsample to at most ``max_px`` per side and stretch the 0.5th..99.5th percentiles to
    0..255 (uint8 keeps the figure's JSON small; a few extreme pixels do not wash it out)."""
    img = np.asarray(img, dtype=np.float64)
    step = max(1, int(math.ceil(max(img.shape) / max_px)))
    img = img[::step, ::step]
    lo, hi = (float(v) for v in np.percentile(img, [0.5, 99.5]))
    img = np.clip(img, lo, hi)
    scaled = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
    return np.round(scaled * 255).astype(np.uint8)


def filtered_images_figure(panels: Sequence[tuple[str, np.ndarray]], device: str,
                           cols: int = 3, max_px: int = 128,
                           title: str = "One photograph, several filters") -> go.Figure:
    """A grid of greyscale images, e.g. a photograph and its convolutions with classic filters.

    Args:
        panels: (title, image) pairs; each image a 2-D float array (H, W) in any units. Each
            panel's contrast is stretched to its own range (0.5th..99.5th percentile = black..
            white), so a signed response (Sobel, Laplacian) shows zero as mid-grey when its
            range is symmetric.
        device: what computed the convolutions (shown in the title).
        cols: panels per row (>= 1).
        max_px: images are subsampled to at most this many pixels per side.

    Raises:
        ValueError: no panels, a panel that is not 2-D, or cols < 1.
    """
    from plotly.subplots import make_subplots

    if not panels:
        raise ValueError("panels must not be empty")
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    for name, img in panels:
        if np.ndim(img) != 2:
            raise ValueError(f"panel {name!r} must be a 2-D image (H, W), "
                             f"got shape {np.shape(img)}")
    rows = int(math.ceil(len(panels) / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[name for name, _ in panels],
                        horizontal_spacing=0.02, vertical_spacing=0.08)
    for j, (name, img) in enumerate(panels):
        row, col = j // cols + 1, j % cols + 1
        fig.add_trace(go.Heatmap(z=_grey_uint8(img, max_px), colorscale="gray", showscale=False,
                                 zmin=0, zmax=255, name=name,
                                 hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}<extra></extra>"),
                      row=row, col=col)
        axis = "" if j == 0 else str(j + 1)
        fig.update_xaxes(visible=False, scaleanchor=f"y{axis}", constrain="domain",
                         row=row, col=col)
        fig.update_yaxes(visible=False, autorange="reversed", constrain="domain", row=row, col=col)
    fig.update_layout(title=f"{title}<br><sup>computed by {device}; each panel's contrast "
                            f"stretched to its own range</sup>",
                      template="plotly_white", height=60 + 270 * rows, width=820,
                      margin=dict(l=10, r=10, t=80, b=10))
    return fig


def conv_window_figure(x: np.ndarray, w: np.ndarray, y: np.ndarray,
                       reads: Sequence[tuple[int, ...]], p: int, q: int, stride: int = 1,
                       padding: int = 0, device: str = "") -> go.Figure:
    """One output element's window: which inputs and weights its thread reads (one channel).

    Three grids side by side: the input x (H, W) with its zero padding drawn grey, the filter
    w (R, S), and the output y (P, Q). The window of ``y[p, q]`` is outlined on the input, the
    inputs it reads are highlighted, and ``y[p, q]`` is highlighted on the output; cells show
    their values.

    Args:
        x, w, y: 2-D arrays (one channel, one filter, one image).
        reads: ``(c, hi, wi, r, s)`` tuples from :func:`helpers.conv.direct.window_reads`.
        p, q: the output element; stride, padding: the convolution's (ints).
        device: what computed y (shown in the title).

    Raises:
        ValueError: x, w or y not 2-D.
    """
    from plotly.subplots import make_subplots

    for name, a in (("x", x), ("w", w), ("y", y)):
        if np.ndim(a) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {np.shape(a)}")
    x, w, y = (np.asarray(a, dtype=np.float64) for a in (x, w, y))
    h, wd = x.shape
    r_, s_ = w.shape
    pad = padding
    xp = np.full((h + 2 * pad, wd + 2 * pad), np.nan)
    xp[pad:pad + h, pad:pad + wd] = x
    read = np.zeros_like(xp)
    for _c, hi, wi, _r, _s in reads:
        read[hi + pad, wi + pad] = 1.0
    xtext = np.where(np.isnan(xp), "0", np.vectorize(lambda v: f"{v:g}")(np.nan_to_num(xp)))
    wtext = np.vectorize(lambda v: f"{v:g}")(w)
    ytext = np.vectorize(lambda v: f"{v:g}")(y)
    pad_z = np.where(np.isnan(xp), -1.0, read)  # -1 padding, 0 input, 1 read by the thread
    scale = [[0.0, "#bbbbbb"], [0.33, "#bbbbbb"], [0.34, "#ffffff"], [0.66, "#ffffff"],
             [0.67, "#f4b183"], [1.0, "#f4b183"]]
    ymask = np.zeros_like(y)
    ymask[p, q] = 1.0
    fig = make_subplots(rows=1, cols=3, column_widths=[0.45, 0.2, 0.35], horizontal_spacing=0.06,
                        subplot_titles=[f"input x ({h} x {wd}, padding {pad} in grey)",
                                        f"filter w ({r_} x {s_})",
                                        f"output y, element y[{p}, {q}]"])
    fig.add_trace(go.Heatmap(z=pad_z, text=xtext, texttemplate="%{text}", colorscale=scale,
                             zmin=-1, zmax=1, showscale=False, xgap=1, ygap=1,
                             hovertemplate="padded row %{y}, col %{x}: %{text}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Heatmap(z=np.ones_like(w), text=wtext, texttemplate="%{text}",
                             colorscale=[[0, "#9dc3e6"], [1, "#9dc3e6"]], showscale=False,
                             xgap=1, ygap=1,
                             hovertemplate="w[%{y}, %{x}] = %{text}<extra></extra>"),
                  row=1, col=2)
    fig.add_trace(go.Heatmap(z=ymask, text=ytext, texttemplate="%{text}",
                             colorscale=[[0, "#ffffff"], [1, color_for("direct-naive")]],
                             showscale=False, xgap=1, ygap=1,
                             hovertemplate="y[%{y}, %{x}] = %{text}<extra></extra>"),
                  row=1, col=3)
    top, left = p * stride, q * stride  # window corner in padded coordinates
    fig.add_shape(type="rect", x0=left - 0.5, x1=left + s_ - 0.5, y0=top - 0.5, y1=top + r_ - 0.5,
                  line=dict(color=color_for("direct-naive"), width=3), row=1, col=1)
    for j in (1, 2, 3):
        axis = "" if j == 1 else str(j)
        fig.update_xaxes(scaleanchor=f"y{axis}", constrain="domain", showticklabels=False,
                         showgrid=False, zeroline=False, row=1, col=j)
        fig.update_yaxes(autorange="reversed", constrain="domain", showticklabels=False,
                         showgrid=False, zeroline=False, row=1, col=j)
    terms = len(reads)
    fig.update_layout(
        title=(f"The thread for y[{p}, {q}] reads {terms} inputs (orange) and {terms} weights: "
               f"y[{p}, {q}] = sum of x * w over its window (stride {stride})"
               + (f"<br><sup>computed by {device}</sup>" if device else "")),
        template="plotly_white", height=380, width=900, margin=dict(l=10, r=10, t=90, b=10))
    return fig


def direct_runtime_figure(rows: Sequence[dict], title: str = "Direct convolution vs torch"
                          ) -> go.Figure:
    """Median time per call and GFLOP/s per layer, one bar group per (strategy, pass).

    Args:
        rows: dicts with ``layer``, ``strategy``, ``pass`` (``forward`` or
            ``forward+backward``), ``median_ms``, ``iqr_ms``, ``gflop_per_s`` and ``device``
            (rows from :func:`helpers.sweep.measure` with ``layer`` added, or from
            ``results/conv_table1_*``); rows without a median are left out.
        title: chart title; the devices that measured the rows are added below it.

    Raises:
        ValueError: no row has a measurement.
    """
    from plotly.subplots import make_subplots

    ok = [r for r in rows if r.get("median_ms") not in (None, "")]
    if not ok:
        raise ValueError("no measured rows to draw (every row's median_ms is empty)")
    layers = list(dict.fromkeys(r["layer"] for r in ok))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=["median time per call (ms, log scale)",
                                        "throughput (GFLOP/s of the layer's FLOPs)"])
    keys = list(dict.fromkeys((r["strategy"], r["pass"]) for r in ok))
    for strategy, pss in keys:
        g = {r["layer"]: r for r in ok if r["strategy"] == strategy and r["pass"] == pss}
        name = f"{strategy}, {pss}"
        pattern = "" if pss == "forward" else "/"
        common = dict(x=layers, name=name, legendgroup=name,
                      marker=dict(color=color_for(strategy), pattern_shape=pattern))
        fig.add_trace(go.Bar(
            y=[g[L]["median_ms"] if L in g else None for L in layers],
            error_y=dict(type="data", array=[g[L]["iqr_ms"] if L in g else 0 for L in layers],
                         thickness=1),
            hovertemplate="%{x}: %{y:.3g} ms<extra>" + name + "</extra>", **common),
            row=1, col=1)
        fig.add_trace(go.Bar(
            y=[g[L]["gflop_per_s"] if L in g else None for L in layers], showlegend=False,
            hovertemplate="%{x}: %{y:.3g} GFLOP/s<extra>" + name + "</extra>", **common),
            row=1, col=2)
    devices = ", ".join(dict.fromkeys(str(r["device"]) for r in ok))
    fig.update_layout(title=f"{title}<br><sup>measured on {devices}</sup>", barmode="group",
                      template="plotly_white", height=450,
                      legend=dict(orientation="h", y=-0.15), margin=dict(l=70, r=20, t=80, b=60))
    fig.update_yaxes(type="log", title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="GFLOP/s", row=1, col=2)
    fig.update_xaxes(title_text="layer", row=1, col=1)
    fig.update_xaxes(title_text="layer", row=1, col=2)
    return fig


def direct_phases_figure(groups: Sequence[tuple[str, Sequence[dict]]], device: str,
                 title: str = "Where the time goes (the study's Figure 4)") -> go.Figure:
    """Horizontal stacked bars: each step's milliseconds inside a strategy's call.

    Args:
        groups: (bar label, rows) pairs; rows from :func:`helpers.conv.phases.phase_times`
            (``phase``, ``ms``, ``share``).
        device: what measured them (shown in the title).
    """
    palette = ["#D55E00", "#E69F00", "#CC79A7", "#0072B2", "#56B4E9", "#009E73", "#F0E442"]
    labels = [label for label, _ in groups]
    phases = list(dict.fromkeys(r["phase"] for _, rows in groups for r in rows))
    fig = go.Figure()
    for j, ph in enumerate(phases):
        ms, text = [], []
        for _, rows in groups:
            hit = [r for r in rows if r["phase"] == ph]
            ms.append(hit[0]["ms"] if hit else 0.0)
            text.append(f"{hit[0]['share']:.0%}" if hit and hit[0]["share"] >= 0.08 else "")
        fig.add_trace(go.Bar(
            y=labels, x=ms, orientation="h", name=ph, text=text, textposition="inside",
            marker=dict(color=COLORS["peak"] if ph == "other" else palette[j % len(palette)]),
            hovertemplate=ph + ": %{x:.3g} ms<extra>%{y}</extra>"))
    fig.update_layout(barmode="stack", title=f"{title}<br><sup>measured on {device}</sup>",
                      template="plotly_white", height=140 + 60 * len(groups),
                      legend=dict(orientation="h", y=-0.3), margin=dict(l=230, r=20, t=70, b=60))
    fig.update_xaxes(title_text="time per call (ms, median)")
    return fig


def tile_reuse_figure(curves: Sequence[tuple[str, Sequence[int], Sequence]],
                      mark_tile: int | None = None) -> go.Figure:
    """Input reuse and arithmetic intensity of a shared-memory tile against its size.

    Args:
        curves: (label, tile edges, :class:`helpers.conv.direct.TileTraffic` per edge) per
            filter size and stride.
        mark_tile: a tile edge to mark with a vertical line (our kernel's TILE).
    """
    from plotly.subplots import make_subplots

    palette = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=["multiply-adds per input element loaded",
                                        "FLOP per byte loaded from global memory"])
    for j, (label, tiles, traffic) in enumerate(curves):
        color = palette[j % len(palette)]
        fig.add_trace(go.Scatter(x=list(tiles), y=[t.input_reuse for t in traffic],
                                 mode="lines+markers", name=label, legendgroup=label,
                                 line=dict(color=color),
                                 hovertemplate="tile %{x}: reuse %{y:.2f}<extra>" + label
                                 + "</extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=list(tiles), y=[t.tiled_intensity for t in traffic],
                                 mode="lines+markers", name=label, legendgroup=label,
                                 showlegend=False, line=dict(color=color),
                                 hovertemplate="tile %{x}: %{y:.2f} FLOP/B<extra>" + label
                                 + "</extra>"),
                      row=1, col=2)
    all_tiles = [t for _, tiles, _ in curves for t in tiles] or [1, 2]
    fig.add_trace(go.Scatter(x=[min(all_tiles), max(all_tiles)], y=[0.25, 0.25], mode="lines",
                             name="direct-naive: 0.25 FLOP/B (any size)",
                             line=dict(color=color_for("direct-naive"), dash="dot", width=2),
                             hovertemplate="naive: 0.25 FLOP/B<extra></extra>"), row=1, col=2)
    if mark_tile is not None:
        # A vertical line drawn as a trace (shapes misplace themselves on log axes).
        for col, attr in ((1, "input_reuse"), (2, "tiled_intensity")):
            values = [getattr(t, attr) for _, _, traffic in curves for t in traffic] + [0.25]
            fig.add_trace(go.Scatter(
                x=[mark_tile, mark_tile], y=[min(values), max(values)], mode="lines",
                name=f"our kernel's tile: {mark_tile} x {mark_tile}", legendgroup="mark",
                showlegend=col == 1, line=dict(color=COLORS["peak"], dash="dash", width=1),
                hoverinfo="skip"), row=1, col=col)
    fig.update_layout(title="What a shared-memory tile saves (counted, not measured)",
                      template="plotly_white", height=430, legend=dict(orientation="h", y=-0.2),
                      margin=dict(l=70, r=20, t=70, b=60))
    fig.update_xaxes(title_text="output tile edge (threads per side)", type="log")
    fig.update_yaxes(type="log", title_text="reuse (x)", row=1, col=1)
    fig.update_yaxes(type="log", title_text="FLOP/byte", row=1, col=2)
    return fig


# ---------------------------------------------- notebook 04: unrolling (im2col + GEMM)


#: Colours of the unrolling strategy's steps (``helpers.conv.phases`` names): copies orange
#: (im2col) and vermilion (col2im), GEMMs in blues, bookkeeping grey.
UNROLL_PHASE_COLORS = {
    "im2col": "#E69F00", "GEMM": "#0072B2", "GEMM (dw)": "#0072B2", "GEMM (dcols)": "#56B4E9",
    "col2im": "#D55E00", "other": "#DDDDDD",
}


def _value(v):
    """A number from a measurement row (live, or parsed from a results/ CSV), or None."""
    return None if v in (None, "") else float(v)


def im2col_picture_figure(patch: np.ndarray, cols: np.ndarray, sources: np.ndarray,
                          pixel: tuple[int, int], kernel: tuple[int, int] = (3, 3),
                          device: str = "") -> go.Figure:
    """An image patch above its im2col matrix, one input pixel and every copy of it outlined.

    Args:
        patch: (H, W) float grey image in [0, 1]: one image, one channel (N = C = 1).
        cols: its im2col matrix, (R*S, P*Q) float (:func:`helpers.conv.unroll.im2col_cpu` or
            the CUDA path's :func:`helpers.conv.unroll.im2col`).
        sources: (R*S, P*Q) int, :func:`helpers.conv.unroll.im2col_sources`: the flat index into
            ``patch`` that each entry copies, -1 for the zero padding.
        pixel: (h, w) of the input pixel to follow.
        kernel: (R, S), to label the matrix's rows with their offset (r, s) in the window.
        device: what computed ``cols`` (shown in the title).

    Returns:
        a plotly Figure: the patch (each pixel labelled with how many matrix entries copy it,
        at most R*S) and the matrix on the same grey scale, so the duplicated values are visibly
        the same; the pixel and its copies are outlined in red.

    Raises:
        ValueError: patch not 2-D, cols and sources of different shapes, rows other than R*S,
            or a pixel outside the patch.

    Source: Li et al., ICPP 2016, Section II-C (unrolling's k*k-times larger buffer).
    """
    from plotly.subplots import make_subplots

    patch = np.asarray(patch, dtype=np.float32)
    cols = np.asarray(cols, dtype=np.float32)
    sources = np.asarray(sources)
    if patch.ndim != 2:
        raise ValueError(f"patch must be 2-D (H, W), got shape {patch.shape}")
    if cols.shape != sources.shape or cols.ndim != 2:
        raise ValueError(f"cols and sources must be 2-D of one shape, got {cols.shape} and "
                         f"{sources.shape}")
    r_, s_ = kernel
    if cols.shape[0] != r_ * s_:
        raise ValueError(f"cols must have R*S = {r_ * s_} rows for kernel {kernel}, got "
                         f"{cols.shape[0]}")
    h, w = patch.shape
    ph, pw = pixel
    if not (0 <= ph < h and 0 <= pw < w):
        raise ValueError(f"pixel must lie inside the {h} x {w} patch, got {pixel}")
    target = ph * w + pw
    counts = np.bincount(sources[sources >= 0].ravel(), minlength=h * w).reshape(h, w)
    rows_, ncols = cols.shape
    fig = make_subplots(rows=2, cols=1, row_heights=[0.62, 0.38], vertical_spacing=0.14,
                        subplot_titles=[
                            f"input patch x ({h} x {w}); number = its copies in the matrix",
                            f"im2col matrix cols ({rows_} x {ncols}): column = output position "
                            f"(p, q), row = offset (r, s)"])
    fig.add_trace(go.Heatmap(
        z=patch, text=counts, texttemplate="%{text}", textfont=dict(color="#E69F00", size=12),
        colorscale="gray", zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
        hovertemplate="x[%{y}, %{x}] = %{z:.3f}, copied %{text} times<extra></extra>"),
        row=1, col=1)
    where = np.where(sources >= 0, sources, -1)
    hover = np.where(where >= 0,
                     np.char.add(np.char.add("copies x[", (where // w).astype(str)),
                                 np.char.add(", ", np.char.add((where % w).astype(str), "]"))),
                     "zero padding")
    fig.add_trace(go.Heatmap(
        z=cols, colorscale="gray", zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
        customdata=hover,
        hovertemplate="row %{y}, column %{x}: %{z:.3f}, %{customdata}<extra></extra>"),
        row=2, col=1)
    fig.add_shape(type="rect", x0=pw - 0.5, x1=pw + 0.5, y0=ph - 0.5, y1=ph + 0.5,
                  line=dict(color="#FF2020", width=3), row=1, col=1)
    hit_r, hit_c = np.nonzero(sources == target)
    fig.add_trace(go.Scatter(
        x=hit_c, y=hit_r, mode="markers", showlegend=False,
        marker=dict(symbol="square-open", size=11, color="#FF2020", line=dict(width=2)),
        hovertemplate=f"a copy of x[{ph}, {pw}]<extra></extra>"), row=2, col=1)
    fig.update_xaxes(scaleanchor="y", constrain="domain", showgrid=False, dtick=1,
                     title_text="w", row=1, col=1)
    fig.update_yaxes(autorange="reversed", constrain="domain", showgrid=False, dtick=1,
                     title_text="h", row=1, col=1)
    fig.update_xaxes(scaleanchor="y2", constrain="domain", showgrid=False,
                     title_text="column = output position (p, q)", row=2, col=1)
    fig.update_yaxes(autorange="reversed", constrain="domain", showgrid=False, dtick=1,
                     ticktext=[f"({r}, {s})" for r in range(r_) for s in range(s_)],
                     tickvals=list(range(rows_)), title_text="(r, s)", row=2, col=1)
    fig.update_layout(
        title=(f"im2col of a real image: pixel x[{ph}, {pw}] (red) appears in "
               f"{int(counts[ph, pw])} columns<br><sup>matrix computed by {device}</sup>"),
        template="plotly_white", height=720, width=900, margin=dict(l=70, r=20, t=110, b=50))
    return fig


def im2col_memory_figure(rows: Sequence[dict]) -> go.Figure:
    """Input size against im2col buffer size per layer, for one or more batch sizes (log axis).

    Args:
        rows: dicts with ``layer``, ``b`` (batch), ``input_bytes`` (N*C*H*W*4) and
            ``cols_bytes`` (C*R*S*N*P*Q*4): analytic sizes, computed from the shapes.

    Returns:
        a plotly Figure: grouped bars in MiB (2**20 bytes), input grey and buffer in
        im2col-gemm's colour, batches told apart by hatching; hover gives the ratio.

    Raises:
        ValueError: no rows.

    Source: Li et al., ICPP 2016, Section II-C and Table I.
    """
    if not rows:
        raise ValueError("rows must not be empty")
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    batches = list(dict.fromkeys(r["b"] for r in rows))
    patterns = ["", "/", ".", "x"]
    fig = go.Figure()
    for j, b in enumerate(batches):
        g = {r["layer"]: r for r in rows if r["b"] == b}
        ratio = [g[L]["cols_bytes"] / g[L]["input_bytes"] if L in g else None for L in layers]
        for key, label, color in (("input_bytes", "input x", COLORS["peak"]),
                                  ("cols_bytes", "im2col buffer", color_for("im2col-gemm"))):
            fig.add_trace(go.Bar(
                x=layers, y=[g[L][key] / 2**20 if L in g else None for L in layers],
                name=f"{label}, batch {b}", customdata=ratio,
                marker=dict(color=color, pattern_shape=patterns[j % len(patterns)]),
                hovertemplate=(f"%{{x}}, batch {b}: {label} %{{y:,.3g}} MiB"
                               "<br>buffer / input = %{customdata:.1f}<extra></extra>")))
    fig = _layout(fig, "The memory price of unrolling: input vs im2col buffer (float32)"
                  "<br><sup>analytic sizes, computed from the layer shapes (not measured)</sup>",
                  "layer (Table I)", "size (MiB, log scale)", log_x=False, log_y=True)
    fig.update_layout(barmode="group")
    return fig


def unroll_layers_figure(rows: Sequence[dict], title: str = "Unrolling vs torch's convolution"
                         ) -> go.Figure:
    """Time, GFLOP/s and memory per layer: one bar per (strategy, pass[, device]).

    Args:
        rows: dicts with ``layer``, ``strategy``, ``pass`` (``forward`` or
            ``forward+backward``), ``device`` (its name), ``median_ms``, ``iqr_ms``,
            ``gflop_per_s``, ``workspace_bytes`` (analytic) and ``peak_bytes`` (measured);
            rows from :func:`helpers.sweep.measure` with ``layer`` added, or from
            ``results/conv_table1_*``. Rows without a median are left out; missing values may
            be None or "".
        title: figure title; the devices that measured the rows are named below it.

    Returns:
        a plotly Figure of three panels: median ms (log, IQR as error bars), GFLOP/s of the
        layer's FLOPs, and measured peak memory (MiB) with the analytic workspace as black
        diamonds. Colours by strategy, hatching for forward + backward; with rows from more
        than one device, the device's kind is in the legend and CPU bars are paler.

    Raises:
        ValueError: no row has a measurement.

    Source: Li et al., ICPP 2016, Figures 3 and 5 (runtime and memory of each library).
    """
    from plotly.subplots import make_subplots

    ok = [r for r in rows if _value(r.get("median_ms")) is not None]
    if not ok:
        raise ValueError("no measured rows to draw (every row's median_ms is empty)")
    layers = list(dict.fromkeys(r["layer"] for r in ok))
    devices = list(dict.fromkeys(str(r["device"]) for r in ok))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=[
        "median time per call (ms, log)", "throughput (GFLOP/s)",
        "peak memory (MiB; diamonds: analytic workspace)"])
    keys = list(dict.fromkeys((r["strategy"], r["pass"], str(r["device"])) for r in ok))
    for strategy, pss, device in keys:
        g = {r["layer"]: r for r in ok
             if (r["strategy"], r["pass"], str(r["device"])) == (strategy, pss, device)}
        kind = "cpu" if device.startswith("CPU") else "gpu"
        name = f"{strategy}, {pss}" + (f" ({kind})" if len(devices) > 1 else "")
        marker = dict(color=color_for(strategy), pattern_shape="" if pss == "forward" else "/",
                      opacity=0.55 if len(devices) > 1 and kind == "cpu" else 1.0)
        common = dict(x=layers, name=name, legendgroup=name, marker=marker)

        def col(key):
            return [_value(g[L].get(key)) if L in g else None for L in layers]

        fig.add_trace(go.Bar(
            y=col("median_ms"), error_y=dict(type="data", array=[v or 0 for v in col("iqr_ms")],
                                             thickness=1),
            hovertemplate="%{x}: %{y:.3g} ms<extra>" + name + "</extra>", **common), row=1, col=1)
        fig.add_trace(go.Bar(
            y=col("gflop_per_s"), showlegend=False,
            hovertemplate="%{x}: %{y:.3g} GFLOP/s<extra>" + name + "</extra>", **common),
            row=1, col=2)
        peak = col("peak_bytes")
        if any(v is not None for v in peak):
            fig.add_trace(go.Bar(
                y=[v / 2**20 if v is not None else None for v in peak], showlegend=False,
                hovertemplate="%{x}: measured peak %{y:.3g} MiB<extra>" + name + "</extra>",
                **common), row=1, col=3)
    ws_rows = {}
    for r in ok:  # the analytic workspace of the unrolling strategies, forward + backward
        ws = _value(r.get("workspace_bytes"))
        if ws is not None and r["pass"] == "forward+backward":
            ws_rows.setdefault(r["strategy"], {})[r["layer"]] = ws
    for strategy, g in ws_rows.items():
        fig.add_trace(go.Scatter(
            x=layers, y=[g[L] / 2**20 if L in g else None for L in layers], mode="markers",
            name=f"{strategy}: analytic workspace (cols + dcols)",
            marker=dict(symbol="diamond", size=10, color="#000000"),
            hovertemplate="%{x}: analytic %{y:.3g} MiB<extra>" + strategy + "</extra>"),
            row=1, col=3)
    fig.update_layout(title=f"{title}<br><sup>measured on {', '.join(devices)}</sup>",
                      barmode="group", template="plotly_white", height=520,
                      legend=dict(orientation="h", y=-0.22), margin=dict(l=60, r=20, t=90, b=110))
    fig.update_yaxes(type="log", title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="GFLOP/s", row=1, col=2)
    fig.update_yaxes(title_text="MiB", row=1, col=3)
    for c in (1, 2, 3):
        fig.update_xaxes(title_text="layer", row=1, col=c)
    return fig


def unroll_phase_figure(bars: Sequence[tuple[str, Sequence[dict]]], device: str,
                        study: Sequence[tuple[str, float]] = (),
                        title: str = "Where unrolling's time goes (the study's Figure 4)"
                        ) -> go.Figure:
    """Share of each step of a call, one horizontal stacked bar per pass, beside the study's.

    Args:
        bars: (label, rows of :func:`helpers.conv.phases.phase_times`) per bar; rows have
            ``phase``, ``ms`` and ``share``.
        device: the device that measured them (shown in the title).
        study: (label, GEMM share in [0, 1]) per library *as reported by the study*; drawn
            hatched, as GEMM and "rest" (the study: mostly im2col and col2im).
        title: figure title.

    Returns:
        a plotly Figure: x = percent of the call's median time; hover gives milliseconds;
        colours from :data:`UNROLL_PHASE_COLORS`.

    Raises:
        ValueError: no bars and no study shares.

    Source: Li et al., ICPP 2016, Figure 4 (GEMM 87 / 83 / 80 % of Caffe / Torch-cunn /
    Theano-CorrMM at (64, 128, 64, 11, 1)).
    """
    if not bars and not study:
        raise ValueError("nothing to draw: give bars or study shares")
    labels = [label for label, _ in bars] + [label for label, _ in study]
    names: list[str] = []
    for _, rows in bars:
        for r in rows:
            if r["phase"] not in names:
                names.append(r["phase"])
    names = [n for n in names if n != "other"] + (["other"] if "other" in names else [])
    pad = [None] * len(study)
    fig = go.Figure()
    for name in names:
        share = [next((100 * r["share"] for r in rows if r["phase"] == name), 0.0)
                 for _, rows in bars]
        ms = [next((r["ms"] for r in rows if r["phase"] == name), 0.0) for _, rows in bars]
        fig.add_trace(go.Bar(
            y=labels, x=share + pad, orientation="h", name=name, customdata=ms + pad,
            text=[f"{v:.0f} %" if v >= 8 else "" for v in share] + [""] * len(study),
            textposition="inside",
            marker=dict(color=UNROLL_PHASE_COLORS.get(name, "#BBBBBB"),
                        pattern_shape="." if name == "GEMM (dcols)" else "",
                        line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate=f"{name}: %{{x:.0f}} %% (%{{customdata:.3g}} ms)<extra></extra>"))
    if study:
        gemm = [100 * s for _, s in study]
        lead = [None] * len(bars)
        fig.add_trace(go.Bar(
            y=labels, x=lead + gemm, orientation="h", name="GEMM (reported by the study, K40c)",
            text=[""] * len(bars) + [f"{v:.0f} %" for v in gemm], textposition="inside",
            marker=dict(color=UNROLL_PHASE_COLORS["GEMM"], pattern_shape="/",
                        line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate="GEMM: %{x:.0f} % (reported by the study)<extra></extra>"))
        fig.add_trace(go.Bar(
            y=labels, x=lead + [100 - v for v in gemm], orientation="h",
            name="rest (reported by the study: mostly im2col and col2im)",
            marker=dict(color="#BBBBBB", pattern_shape="/", line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate="not GEMM: %{x:.0f} % (reported by the study)<extra></extra>"))
    fig = _layout(fig, f"{title}<br><sup>our bars measured on {device}; hatched bars are the "
                       f"study's (K40c)</sup>",
                  "share of the call's median time (%)", "", log_x=False, log_y=False)
    fig.update_layout(barmode="stack", height=170 + 50 * len(labels),
                      legend=dict(orientation="h", y=-0.25), margin=dict(l=260, r=20, t=80, b=60))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig


# ------------------------------------------------------- notebook 05: FFT convolution

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

    Source: the steps of FFT convolution (study Section II-C).
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

    Source: the study's Section II-C cost argument; its Figure 5 for memory.
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
    fig = _layout(fig, title, "kernel size R = S", y_title, log_x=False, log_y=True)
    fig.update_xaxes(dtick=2 if len(kernels) < 20 else 4)
    return fig


def fft_runtime_figure(rows: Sequence[dict], x_key: str, x_title: str, title: str) -> go.Figure:
    """Measured time per call against one swept parameter, one line per (strategy, device).

    Args:
        rows: dicts from :func:`helpers.sweep.measure` with the swept value under ``x_key``;
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
    fig = _layout(fig, title, x_title, "median time, forward + backward (ms)", log_x=False)
    fig.update_xaxes(dtick=1 if len({r[x_key] for r in rows}) <= 5 else 2)
    return fig


def fft_phase_figure(bars: Sequence[tuple[str, Sequence[dict]]], device: str,
                     title: str = "Where FFT convolution's time goes") -> go.Figure:
    """Share of each step in a call, one horizontal stacked bar per (layer, pass).

    Args:
        bars: (label, rows of :func:`helpers.conv.phases.phase_times`) per bar.
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
    fig = _layout(fig, f"{title}<br><sup>measured on {device}</sup>",
                  "share of the call's median time (%)", "", log_x=False, log_y=False)
    fig.update_layout(barmode="stack", height=140 + 55 * len(bars))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig


# ---------------------------------------------------------- notebook 06: head to head


SWEEP_AXES = {"batch": "batch b", "input": "input size i (pixels)", "filters": "filters f",
              "kernel": "kernel size k (pixels)", "stride": "stride s", "table1": "Table I layer"}


def _num(v):
    return None if v in (None, "") else float(v)


def sweep_figure(rows: Sequence[dict], metric: str = "median_ms", title: str = "",
                 device: str | None = None) -> go.Figure:
    """The study's Figure 3 (runtime) or Figure 5 (memory): one panel per sweep, one line per
    strategy, from :func:`helpers.sweep.run_preset` rows (or their CSV).

    Args:
        rows: sweep rows; only those with a value for ``metric`` are drawn.
        metric: ``"median_ms"`` (runtime, ms), ``"peak_bytes"`` (measured peak, MiB) or
            ``"workspace_bytes"`` (analytic workspace, MiB).
        title: figure title (the device is appended). device: keep only rows of this device.
    """
    from plotly.subplots import make_subplots

    sweeps = [s for s in SWEEP_AXES if any(r["sweep"] == s for r in rows)]
    fig = make_subplots(rows=2, cols=3, subplot_titles=[SWEEP_AXES[s] for s in sweeps],
                        horizontal_spacing=0.07, vertical_spacing=0.16)
    scale, unit = (1.0, "ms") if metric == "median_ms" else (1 / 2**20, "MiB")
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    shown: set[str] = set()
    for n, sweep in enumerate(sweeps):
        row, col = divmod(n, 3)
        for name in strategies:
            pts = [r for r in rows if r["sweep"] == sweep and r["strategy"] == name
                   and _num(r.get(metric)) is not None and (device is None or r["device"] == device)]
            if not pts:
                continue
            x = [r["layer"] for r in pts] if sweep == "table1" else [r["x"] for r in pts]
            y = [_num(r[metric]) * scale for r in pts]
            style = dict(name=name, legendgroup=name, showlegend=name not in shown)
            shown.add(name)
            if sweep == "table1":
                trace = go.Bar(x=x, y=y, marker_color=color_for(name), **style)
            else:
                trace = go.Scatter(x=x, y=y, mode="lines+markers",
                                   line=dict(color=color_for(name)), **style)
            fig.add_trace(trace, row=row + 1, col=col + 1)
        fig.update_xaxes(title_text=SWEEP_AXES[sweep], row=row + 1, col=col + 1)
        fig.update_yaxes(type="log", title_text=unit if col == 0 else None, row=row + 1,
                         col=col + 1)
    devices = sorted({r["device"] for r in rows if device is None or r["device"] == device})
    fig.update_layout(template="plotly_white", height=620, barmode="group",
                      title=f"{title}<br><sup>measured on {', '.join(devices)}</sup>",
                      legend=dict(orientation="h", y=-0.12))
    return fig


def fastest_map_figure(kernels: Sequence[int], inputs: Sequence[int],
                       winners: Sequence[Sequence[str | None]], device: str) -> go.Figure:
    """Which strategy was fastest at each (kernel size, input size): a categorical heat map
    coloured by strategy (the workbook's colours); blank where the kernel does not fit."""
    names = sorted({w for line in winners for w in line if w})
    index = {n: i for i, n in enumerate(names)}
    z = [[index[w] if w else None for w in line] for line in winners]
    text = [[w or "" for w in line] for line in winners]
    if names:
        steps = len(names)
        colorscale = []
        for i, n in enumerate(names):
            colorscale += [[i / steps, color_for(n)], [(i + 1) / steps, color_for(n)]]
    else:
        colorscale = [[0, "#ffffff"], [1, "#ffffff"]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(i) for i in inputs], y=[str(k) for k in kernels], text=text,
        texttemplate="%{text}", colorscale=colorscale, zmin=-0.5, zmax=len(names) - 0.5,
        showscale=False, hovertemplate="k=%{y}, i=%{x}: %{text}<extra></extra>"))
    fig.update_layout(template="plotly_white", height=380,
                      title=f"Fastest strategy, forward + backward<br><sup>measured on {device}</sup>",
                      xaxis_title="input size i (pixels)", yaxis_title="kernel size k (pixels)")
    return fig


def findings_table(rows: Sequence[dict], device: str) -> str:
    """HTML table of :func:`helpers.sweep.findings`: the study's finding beside ours."""
    import html as _html

    mark = {True: "agrees", False: "differs", None: "cannot tell"}
    body = "".join(
        f"<tr><td>{_html.escape(r['finding'])}</td><td>{_html.escape(r['study'])}</td>"
        f"<td>{_html.escape(r['here'])}</td><td><b>{mark[r['agrees']]}</b></td></tr>" for r in rows)
    return ("<table><tr><th>finding</th><th>the study (K40c, 2016)</th>"
            f"<th>here ({_html.escape(device)})</th><th></th></tr>{body}</table>")


# ---------------------------------------------------------- notebook 02: hotspot layers


#: One colour per layer type in notebook 02 (Okabe-Ito), the same in every chart.
LAYER_COLORS = {
    "convolution": "#D55E00",
    "pooling": "#56B4E9",
    "activation": "#009E73",
    "fully connected": "#E69F00",
    "other": "#999999",
    "weight update": "#CC79A7",
    "not convolution (not split)": "#DDDDDD",
}


def hotspot_figure(bars: Sequence[tuple[str, str, dict[str, float]]],
                   title: str = "Share of training time by layer type",
                   subtitle: str = "") -> go.Figure:
    """The study's Figure 2 as stacked bars: for each network, one bar per source (the study's
    reported share, a measurement here, a GPU reference from results/, analytic FLOPs), each
    stacked by layer type in :data:`LAYER_COLORS`.

    Args:
        bars: ``(network, bar label, {layer type: share})`` triples, in drawing order; shares
            are fractions (0..1) and each bar's should sum to 1. The bar label names the
            source briefly (``"study, K40c"``, ``"here, CPU"``, ``"FLOPs"``).
        title: figure title. subtitle: a second, smaller title line that names the measuring
            devices in full, the batch and the input size.

    Returns:
        A plotly figure (x: network and source, y: share of time in %).

    Raises:
        ValueError: ``bars`` is empty.

    Source: Li et al., ICPP 2016, Figure 2.
    """
    if not bars:
        raise ValueError("bars must not be empty")
    kinds = [k for k in LAYER_COLORS if any(s.get(k, 0) > 0 for _, _, s in bars)]
    x = [[net for net, _, _ in bars], [label for _, label, _ in bars]]
    fig = go.Figure()
    for kind in kinds:
        y = [100 * s.get(kind, 0.0) for _, _, s in bars]
        fig.add_trace(go.Bar(
            x=x, y=y, name=kind, marker_color=LAYER_COLORS[kind],
            text=[f"{v:.0f}%" if v >= 4 else "" for v in y], textposition="inside",
            hovertemplate=f"{kind}: %{{y:.1f}} %<extra>%{{x}}</extra>"))
    fig.update_layout(
        barmode="stack", template="plotly_white", height=500,
        title=title + (f"<br><sup>{subtitle}</sup>" if subtitle else ""),
        legend=dict(orientation="h", y=-0.32, title_text="layer type"),
        margin=dict(l=70, r=20, t=80, b=60))
    fig.update_yaxes(title_text="share of training time (%)", range=[0, 100])
    fig.update_xaxes(tickfont=dict(size=10))
    return fig


# ------------------------------------------------------- notebook 07: inside the GPU


def _num07(v):
    """None for a missing value (None or "" from a CSV), else a float."""
    return None if v in (None, "") else float(v)


#: Colours of the study's strategy families in notebook 07 (its Table II).
_FAMILY_COLOR = {"unrolling": "im2col-gemm", "direct": "direct-naive", "FFT": "fft"}


def table2_figure(study_rows: Sequence[dict], our_rows: Sequence[dict] = (), device: str = "",
                  note: str = "") -> go.Figure:
    """The study's Table II beside our kernels: registers per thread and shared memory per
    block (KB), one bar per kernel, in two panels.

    Args:
        study_rows: :data:`helpers.gpu_experiments.STUDY_TABLE_II` (``implementation``,
            ``strategy``, ``regs_per_thread``, ``smem_kb``): the study's K40c figures.
        our_rows: rows of :func:`helpers.gpu_experiments.kernel_resources` (``kernel``,
            ``family``, ``regs_per_thread``, ``smem_per_block`` in bytes), live or recorded;
            empty: only the study's bars and ``note`` in the title.
        device: the GPU our rows were compiled for (shown in the legend).

    Source: study Table II (K40c, CUDA 7.5).
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("registers per thread", "shared memory per block (KB)"))
    names = [r["implementation"] for r in study_rows]
    colors = [color_for(_FAMILY_COLOR.get(r["strategy"], "")) for r in study_rows]
    for col, key in ((1, "regs_per_thread"), (2, "smem_kb")):
        fig.add_trace(go.Bar(
            x=names, y=[r[key] for r in study_rows], marker_color=colors, opacity=0.55,
            name="the study's libraries (K40c, CUDA 7.5, as reported)", legendgroup="study",
            showlegend=col == 1, marker_pattern_shape="/",
            hovertemplate="%{x}: %{y} (reported by the study)<extra></extra>"), row=1, col=col)
    if our_rows:
        ours = [r["kernel"].replace("_kernel", "") for r in our_rows]
        ocolors = [color_for(r.get("family", "")) for r in our_rows]
        fig.add_trace(go.Bar(
            x=ours, y=[r["regs_per_thread"] for r in our_rows], marker_color=ocolors,
            name=f"our kernels ({device})", legendgroup="ours",
            hovertemplate="%{x}: %{y} registers per thread<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(
            x=ours, y=[r["smem_per_block"] / 1024 for r in our_rows], marker_color=ocolors,
            name=f"our kernels ({device})", legendgroup="ours", showlegend=False,
            hovertemplate="%{x}: %{y:.2f} KB per block<extra></extra>"), row=1, col=2)
    sub = note or (f"ours: compiled for {device}" if our_rows else "")
    fig.update_layout(title=f"Registers and shared memory per kernel (the study's Table II)"
                            f"<br><sup>{sub}</sup>", template="plotly_white", height=470,
                      legend=dict(orientation="h", y=-0.45), margin=dict(l=60, r=20, t=80, b=40))
    fig.update_xaxes(tickangle=-45)
    fig.update_yaxes(title_text="registers per thread", row=1, col=1)
    fig.update_yaxes(title_text="KB per block", row=1, col=2)
    return fig


def occupancy_curve_figure(gpu: str, threads_per_block: int, regs_per_thread: int,
                           smem_per_block: int = 0, vary: str = "registers") -> go.Figure:
    """Theoretical occupancy as registers per thread (or threads per block) vary, the others
    fixed, with the given configuration marked.

    Args:
        gpu: a name of :data:`helpers.occupancy.GPU_ARCH` or a compute capability.
        threads_per_block, regs_per_thread, smem_per_block: the configuration (bytes for
            shared memory), as :func:`helpers.occupancy.occupancy` takes them.
        vary: ``"registers"`` (x = 1..255 registers per thread) or ``"threads"`` (x = 32..1024
            threads per block, in warps).

    Raises:
        ValueError: an unknown GPU or ``vary``, or a configuration outside the ranges of
            :func:`helpers.occupancy.occupancy`.

    Source: the CUDA Occupancy Calculator's charts; study Figure 6 and Section V-C.
    """
    from . import occupancy as occ_mod

    if vary not in ("registers", "threads"):
        raise ValueError(f"vary must be 'registers' or 'threads', got {vary!r}")
    current = occ_mod.occupancy(gpu, threads_per_block, regs_per_thread, smem_per_block)
    lim = current.limits
    if vary == "registers":
        xs = list(range(1, lim.max_regs_per_thread + 1))
        calc = [occ_mod.occupancy(gpu, threads_per_block, r, smem_per_block) for r in xs]
        x_now, x_title = regs_per_thread, "registers per thread"
        fixed = f"{threads_per_block} threads per block, {smem_per_block:,} B shared per block"
    else:
        xs = list(range(32, lim.max_threads_per_block + 1, 32))
        calc = [occ_mod.occupancy(gpu, t, regs_per_thread, smem_per_block) for t in xs]
        x_now, x_title = threads_per_block, "threads per block"
        fixed = f"{regs_per_thread} registers per thread, {smem_per_block:,} B shared per block"
    fig = go.Figure(go.Scatter(
        x=xs, y=[100 * c.occupancy for c in calc], mode="lines", line_shape="hv",
        name="theoretical occupancy", line=dict(color=COLORS["torch"], width=2),
        customdata=[[c.active_warps, c.limiter] for c in calc],
        hovertemplate=(f"{x_title} %{{x}}: %{{y:.1f}} %% (%{{customdata[0]}} warps), "
                       "limited by %{customdata[1]}<extra></extra>")))
    fig.add_trace(go.Scatter(
        x=[x_now], y=[100 * current.occupancy], mode="markers+text",
        marker=dict(size=13, color=COLORS["direct-naive"], symbol="circle"),
        text=[f"{current.active_warps} of {lim.max_warps} warps"], textposition="top right",
        name="this configuration",
        hovertemplate=f"{current}<extra></extra>"))
    fig.update_layout(title=f"Occupancy on {gpu} (compute capability {lim.cc}, {lim.arch})"
                            f"<br><sup>{fixed}; calculated, not measured</sup>",
                      template="plotly_white", height=400, margin=dict(l=70, r=20, t=80, b=60),
                      legend=dict(orientation="h", y=-0.25))
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text="occupancy (% of the SM's warps)", range=[0, 105])
    return fig


def coalescing_figure(explanation) -> go.Figure:
    """Which 32-byte sectors the first warp's 32 loads touch, one row per stride.

    Args:
        explanation: a :class:`helpers.gpu_experiments.CoalescingExplanation` (addresses
            recorded by the kernel itself).

    Source: study Figure 6 (global load efficiency); CUDA C Best Practices Guide.
    """
    from .gpu_experiments import SECTOR_BYTES, WARP

    strides = list(explanation.strides)
    width = max(int(explanation.addresses[s][:WARP].max()) * 4 // SECTOR_BYTES + 1
                for s in strides)
    z = np.full((len(strides), width), np.nan)
    for j, s in enumerate(strides):
        sectors = explanation.addresses[s][:WARP] * 4 // SECTOR_BYTES
        counts = np.bincount(sectors, minlength=width)
        z[j, counts > 0] = counts[counts > 0]
    labels = [f"stride {r['stride']}: {r['sectors']} sectors, {r['load_efficiency_pct']:.1f} %"
              for r in explanation.rows]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(width)), y=labels, colorscale="Blues", zmin=0, zmax=8, xgap=1, ygap=3,
        colorbar=dict(title="lanes in<br>the sector"),
        hovertemplate="%{y}<br>sector %{x} (bytes %{x}*32..): %{z} lanes<extra></extra>"))
    fig.update_layout(
        title=(f"One warp's 32 float32 loads: the 32-byte sectors they touch<br><sup>addresses "
               f"recorded by the kernel on {explanation.device}; load efficiency = 128 bytes "
               f"asked / bytes moved</sup>"),
        template="plotly_white", height=170 + 45 * len(strides), plot_bgcolor="#f4f4f4",
        margin=dict(l=250, r=20, t=80, b=60))
    fig.update_xaxes(title_text="32-byte sector of the source array (from its start)")
    fig.update_yaxes(autorange="reversed")
    return fig


def banks_figure(explanation, access: str = "read") -> go.Figure:
    """The bank each lane of one warp hits in the transpose's shared tile, for the tile of 32
    columns and of 33 (padded): one cell per (lane, bank) the lane uses.

    Args:
        explanation: a :class:`helpers.gpu_experiments.BankExplanation`.
        access: ``"read"`` (a column of the tile) or ``"write"`` (a row).

    Raises:
        ValueError: unknown access.

    Source: CUDA C Best Practices Guide, "Shared memory and memory banks".
    """
    from plotly.subplots import make_subplots

    from .gpu_experiments import BANKS, WARP, conflict_degree

    if access not in ("read", "write"):
        raise ValueError(f"access must be 'read' or 'write', got {access!r}")
    pitches = sorted(explanation.words)
    titles = []
    for p in pitches:
        words = explanation.warp_words(p, access)
        titles.append(f"tile of 32 x {p}: {len(np.unique(words % BANKS))} banks, "
                      f"{conflict_degree(words)}-way")
    fig = make_subplots(rows=1, cols=len(pitches), subplot_titles=titles,
                        horizontal_spacing=0.08)
    for j, p in enumerate(pitches):
        words = explanation.warp_words(p, access)
        z = np.full((WARP, BANKS), np.nan)
        text = np.full((WARP, BANKS), "", dtype=object)
        for lane, word in enumerate(words):
            if word >= 0:
                z[lane, word % BANKS] = 1
                text[lane, word % BANKS] = f"word {word}"
        fig.add_trace(go.Heatmap(
            z=z, text=text, colorscale=[[0, COLORS["direct-naive"]], [1, COLORS["direct-naive"]]],
            showscale=False, xgap=1, ygap=1,
            hovertemplate="lane %{y} -> bank %{x} (%{text})<extra></extra>"), row=1, col=j + 1)
        fig.update_xaxes(title_text="bank (word % 32)", range=[-0.5, BANKS - 0.5], row=1,
                         col=j + 1)
        fig.update_yaxes(title_text="lane of warp 0" if j == 0 else None, autorange="reversed",
                         row=1, col=j + 1)
    what = "reads a column" if access == "read" else "writes a row"
    fig.update_layout(title=(f"Shared-memory banks: warp 0 {what} of the transpose tile"
                             f"<br><sup>words recorded by the kernel on {explanation.device}"
                             f"</sup>"),
                      template="plotly_white", height=470, plot_bgcolor="#f4f4f4",
                      margin=dict(l=70, r=20, t=90, b=60))
    return fig


def divergence_figure(explanation) -> go.Figure:
    """The path every thread took in :func:`helpers.gpu_experiments.branch_kernel`: one row
    per warp, one cell per lane, for the branch on thread parity and on the warp index.

    Args:
        explanation: a :class:`helpers.gpu_experiments.DivergenceExplanation`.
    """
    from plotly.subplots import make_subplots

    from .gpu_experiments import WARP

    variants = list(explanation.paths)
    titles = [f"branch on {r['branch_on']}: {r['efficiency_pct']:.0f} % efficiency"
              for r in explanation.rows]
    fig = make_subplots(rows=1, cols=len(variants), subplot_titles=titles,
                        horizontal_spacing=0.08)
    colorscale = [[0, COLORS["im2col-gemm"]], [0.5, COLORS["im2col-gemm"]],
                  [0.5, COLORS["numpy"]], [1, COLORS["numpy"]]]
    for j, v in enumerate(variants):
        p = explanation.paths[v].astype(float)
        p = np.concatenate([p, np.full((-len(p)) % WARP, np.nan)]).reshape(-1, WARP)
        p[p < 0] = np.nan
        fig.add_trace(go.Heatmap(
            z=p, colorscale=colorscale, zmin=0, zmax=1, showscale=False, xgap=1, ygap=2,
            hovertemplate="warp %{y}, lane %{x}: path %{z}<extra></extra>"), row=1, col=j + 1)
        fig.update_xaxes(title_text="lane", row=1, col=j + 1)
        fig.update_yaxes(title_text="warp" if j == 0 else None, autorange="reversed",
                         dtick=1, row=1, col=j + 1)
    fig.update_layout(
        title=(f"Which path each thread took (blue: multiply-adds, orange: square roots)"
               f"<br><sup>{explanation.n} threads, {explanation.threads_per_block} a block; "
               f"paths recorded by the kernel on {explanation.device}</sup>"),
        template="plotly_white", height=150 + 40 * int(math.ceil(explanation.n / WARP)),
        plot_bgcolor="#f4f4f4", margin=dict(l=70, r=20, t=90, b=60))
    return fig


def gpu_experiments_figure(rows: Sequence[dict], source: str) -> go.Figure:
    """GPU timings of the three experiments, three panels: effective bandwidth against the
    load stride, transpose bandwidth per variant, and the branch kernel's time per variant.

    Args:
        rows: rows of :func:`helpers.gpu_experiments.measure_all` (live or from results/).
        source: where they were measured (GPU and date), shown in the title.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=(
        "coalescing: effective bandwidth", "transpose: bandwidth", "divergence: time"))
    co = sorted((r for r in rows if r["experiment"] == "coalescing"), key=lambda r: r["x"])
    fig.add_trace(go.Scatter(
        x=[r["x"] for r in co], y=[_num07(r["gb_s"]) for r in co], mode="lines+markers",
        line=dict(color=COLORS["torch"]), name="strided load", showlegend=False,
        hovertemplate="stride %{x}: %{y:,.0f} GB/s<extra></extra>"), row=1, col=1)
    tr = [r for r in rows if r["experiment"] == "transpose"]
    fig.add_trace(go.Bar(
        x=[r["variant"] for r in tr], y=[_num07(r["gb_s"]) for r in tr], showlegend=False,
        marker_color=[COLORS["direct-naive"], COLORS["numpy"], COLORS["numba"]][:len(tr)],
        hovertemplate="%{x}: %{y:,.0f} GB/s<extra></extra>"), row=1, col=2)
    dv = [r for r in rows if r["experiment"] == "divergence"]
    fig.add_trace(go.Bar(
        x=[f"branch on {r['variant']}" for r in dv], y=[_num07(r["median_ms"]) for r in dv],
        error_y=dict(type="data", array=[_num07(r["iqr_ms"]) / 2 for r in dv], visible=True),
        marker_color=[COLORS["numpy"], COLORS["im2col-gemm"]][:len(dv)], showlegend=False,
        hovertemplate="%{x}: %{y:.3g} ms<extra></extra>"), row=1, col=3)
    fig.update_xaxes(title_text="stride (elements)", type="log", dtick=math.log10(2), row=1,
                     col=1)
    fig.update_yaxes(title_text="GB/s (useful bytes)", row=1, col=1)
    fig.update_yaxes(title_text="GB/s", row=1, col=2)
    fig.update_yaxes(title_text="median time (ms)", row=1, col=3)
    fig.update_layout(title=f"The three experiments on a GPU<br><sup>{source}</sup>",
                      template="plotly_white", height=430, margin=dict(l=60, r=20, t=90, b=60))
    return fig


# ------------------------------------------------------- notebook 08: data transfers

#: Colours of notebook 08: host memory kinds, and the three pipeline stages.
TRANSFER_COLORS = {"pageable": "#E69F00", "pinned": "#0072B2", "h2d": "#56B4E9",
                   "compute": "#009E73", "d2h": "#CC79A7", "copy": "#D55E00"}
_SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000"]
_STAGE_NAMES = {"h2d": "copy in (host to device)", "compute": "compute (convolution)",
                "d2h": "copy out (device to host)"}


def _ok(rows: Iterable[dict], key: str) -> list[dict]:
    return [r for r in rows if str(r.get("status", "ok")).startswith("ok")
            and _num(r.get(key)) is not None]


def transfer_bandwidth_figure(rows: Sequence[dict], links: Iterable[tuple[str, float]] = (),
                              title: str = "CPU-GPU copy bandwidth") -> go.Figure:
    """Copy bandwidth (GB/s) against copy size (bytes), pageable vs pinned, h2d vs d2h.

    Args:
        rows: :func:`helpers.transfers.copy_bandwidth` rows, live or from results/
            (``source="reference"``, drawn with diamonds and named "(results/)"); rows whose
            status is not ``ok`` are left out.
        links: (label, bytes/s) horizontal lines, e.g. a link's estimated bandwidth; the label
            should say "estimate".
        title: the figure title.

    Returns:
        The figure; a message figure when no row was measured.

    Source: the study's remedy of pinned memory (Section IV-D).
    """
    ok = _ok(rows, "gb_s")
    if not ok:
        return message_figure("No copy was measured here (no GPU) and no GPU reference "
                              "is saved in results/ yet")
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault((r["direction"], r["memory"], r["device"], r.get("source", "")),
                          []).append(r)
    fig = go.Figure()
    for (direction, mem, device, source), g in groups.items():
        g.sort(key=lambda r: float(r["size_bytes"]))
        ref = source == "reference"
        fig.add_trace(go.Scatter(
            x=[float(r["size_bytes"]) for r in g], y=[float(r["gb_s"]) for r in g],
            mode="lines+markers",
            name=f"{direction} {mem}, {device}" + (" (results/)" if ref else ""),
            line=dict(color=TRANSFER_COLORS.get(mem, "#999999"),
                      dash="solid" if direction == "h2d" else "dash", width=1.5 if ref else 2),
            marker=dict(symbol="diamond" if ref else "circle", size=7),
            hovertemplate="%{x:,.0f} bytes: %{y:.3g} GB/s<extra></extra>"))
    sizes = [float(r["size_bytes"]) for r in ok]
    for (label, bw), dash in zip(links, ["dot", "dashdot", "longdash", "longdashdot"] * 4):
        fig.add_trace(go.Scatter(
            x=[min(sizes), max(sizes)], y=[bw / 1e9] * 2, mode="lines",
            name=f"{label}: {bw / 1e9:,.1f} GB/s",
            line=dict(color=COLORS["peak"], dash=dash, width=1),
            hovertemplate=f"{label}: {bw / 1e9:,.1f} GB/s<extra></extra>"))
    devices = sorted({r["device"] for r in ok})
    return _layout(fig, f"{title}<br><sup>measured on {'; '.join(devices)}</sup>",
                   "bytes per copy", "bandwidth (GB/s)")


def transfer_share_figure(rows: Sequence[dict], series_key: str = "scenario",
                          title: str = "Share of time in CPU-GPU copies",
                          note: str = "") -> go.Figure:
    """Copy share of each layer's time (%), grouped bars: one bar per series per layer.

    Args:
        rows: :func:`helpers.transfers.estimate_table` rows (estimates) or
            :func:`helpers.transfers.transfer_share` rows (measured); each needs ``layer``,
            ``copy_share`` (0..1), ``copy_ms``, ``compute_ms`` and ``series_key``; rows whose
            status is not ``ok`` are left out.
        series_key: the field that names a bar series (``"scenario"``, ``"strategy"``).
        title: the figure title. note: a second line under it (say "estimate" or the device).

    Returns:
        The figure; a message figure when no row has a share.

    Source: the study's Figure 7.
    """
    ok = _ok(rows, "copy_share")
    if not ok:
        return message_figure("No copy share to show: nothing measured here (no GPU) and no "
                              "GPU reference in results/ yet")
    series = list(dict.fromkeys(str(r[series_key]) for r in ok))
    fig = go.Figure()
    for n, name in enumerate(series):
        g = [r for r in ok if str(r[series_key]) == name]
        fig.add_trace(go.Bar(
            x=[r["layer"] for r in g], y=[100 * float(r["copy_share"]) for r in g], name=name,
            marker_color=_SERIES_COLORS[n % len(_SERIES_COLORS)],
            customdata=[[_num(r.get("copy_ms")) or 0.0, _num(r.get("compute_ms")) or 0.0]
                        for r in g],
            hovertemplate=("%{x}: copies %{y:.1f} % (copies %{customdata[0]:.3g} ms, "
                           "compute %{customdata[1]:.3g} ms)<extra>" + name + "</extra>")))
    fig.update_layout(barmode="group", title=f"{title}<br><sup>{note}</sup>" if note else title,
                      template="plotly_white", height=430,
                      legend=dict(orientation="h", y=-0.18),
                      margin=dict(l=70, r=20, t=70, b=60))
    fig.update_xaxes(title_text="the study's Table I layer")
    fig.update_yaxes(title_text="copies, % of copy + compute time", range=[0, 100])
    return fig


def overlap_timeline_figure(timeline: Sequence[dict], title: str, note: str) -> go.Figure:
    """A timeline of copies and computation per stream: sequential run above, overlapped below.

    Args:
        timeline: dicts with ``run`` (``"sequential"``/``"overlapped"``), ``stream``, ``kind``
            (``h2d``, ``compute``, ``d2h``), ``chunk``, ``start_ms``, ``end_ms``: from
            :func:`helpers.transfers.overlap_experiment` (measured with CUDA events) or
            :func:`helpers.transfers.estimated_timeline` (an estimate).
        title: the figure title. note: a second line (say whether measured, and where, or
            estimated).

    Returns:
        Two panels sharing the time axis (ms); one bar per stage, labelled with its chunk; a
        message figure when the timeline is empty.
    """
    from plotly.subplots import make_subplots

    if not timeline:
        return message_figure("No timeline to draw")
    runs = [r for r in ("sequential", "overlapped") if any(t["run"] == r for t in timeline)]
    streams = {"sequential": "one stream", "overlapped": "three streams"}
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{r}: {streams[r]}" for r in runs])
    shown: set[str] = set()
    for n, run in enumerate(runs):
        for kind in ("h2d", "compute", "d2h"):
            bars = [t for t in timeline if t["run"] == run and t["kind"] == kind]
            if not bars:
                continue
            fig.add_trace(go.Bar(
                y=[t["stream"] for t in bars],
                x=[float(t["end_ms"]) - float(t["start_ms"]) for t in bars],
                base=[float(t["start_ms"]) for t in bars], orientation="h",
                text=[f"{t['chunk']}" if run == "overlapped" else "" for t in bars],
                textposition="inside", insidetextanchor="middle",
                marker=dict(color=TRANSFER_COLORS[kind], line=dict(color="#ffffff", width=1)),
                name=_STAGE_NAMES[kind], legendgroup=kind, showlegend=kind not in shown,
                customdata=[[float(t["start_ms"]), float(t["end_ms"]),
                             f"chunk {t['chunk']}" if run == "overlapped" else "whole batch"]
                            for t in bars],
                hovertemplate=(f"{_STAGE_NAMES[kind]}, %{{customdata[2]}}: "
                               "%{customdata[0]:.3g} to %{customdata[1]:.3g} ms<extra></extra>")),
                row=n + 1, col=1)
            shown.add(kind)
        fig.update_yaxes(autorange="reversed", row=n + 1, col=1)
    fig.update_xaxes(title_text="time since the start of the run (ms)", row=len(runs), col=1)
    fig.update_layout(title=f"{title}<br><sup>{note}</sup>", template="plotly_white",
                      height=200 + 110 * len(runs), barmode="overlay",
                      legend=dict(orientation="h", y=-0.25),
                      margin=dict(l=130, r=20, t=80, b=60))
    return fig


def overlap_times_figure(rows: Sequence[dict],
                         title: str = "Sequential vs overlapped copies") -> go.Figure:
    """Per layer: sequential from pageable memory, sequential from pinned memory, and
    overlapped (chunks on streams), in ms, from :func:`helpers.transfers.overlap_experiment`
    rows (live or from results/); rows whose status is not ``ok`` are left out."""
    ok = _ok(rows, "overlapped_ms")
    if not ok:
        return message_figure("No overlap measurement here (no GPU) or in results/ yet")
    fig = go.Figure()
    for key, label, color in (("sequential_pageable_ms", "sequential, pageable", "pageable"),
                              ("sequential_pinned_ms", "sequential, pinned", "pinned"),
                              ("overlapped_ms", "overlapped, pinned", "compute")):
        fig.add_trace(go.Bar(
            x=[f"{r['layer']} (b={r['b']})" for r in ok], y=[float(r[key]) for r in ok],
            name=label, marker_color=TRANSFER_COLORS[color],
            hovertemplate="%{x}: %{y:.3g} ms<extra>" + label + "</extra>"))
    devices = sorted({r["device"] for r in ok})
    fig.update_layout(barmode="group", template="plotly_white", height=420,
                      title=f"{title}<br><sup>measured on {'; '.join(devices)}</sup>",
                      legend=dict(orientation="h", y=-0.18), margin=dict(l=70, r=20, t=70, b=60))
    fig.update_xaxes(title_text="the study's Table I layer")
    fig.update_yaxes(title_text="copy in + forward + copy out (ms)", type="log")
    return fig


# ------------------------------------------------- notebook 09: training throughput


#: Colours of the training notebook: one per model (kept across its charts) and per time share.
TRAINING_COLORS = {"small": "#56B4E9", "resnet20": "#009E73", "vgg": "#D55E00",
                   "wait": "#E69F00", "compute": "#0072B2", "cpu_util": "#E69F00",
                   "gpu_util": "#0072B2"}


def _is_on(v) -> bool:
    """A flag from a live row (bool) or a results/ CSV (the strings "True"/"False")."""
    return v is True or str(v).lower() in ("true", "1", "on", "yes")


def _training_ok(r: dict) -> bool:
    return str(r.get("status", "")) == "ok" and math.isfinite(float(r.get("images_per_s", "nan")))


def labelled_images_figure(images: np.ndarray, labels: Sequence[int], classes: Sequence[str],
                           title: str, cols: int = 8) -> go.Figure:
    """A mosaic of small greyscale images with their class names (e.g. lfw_subset faces).

    Args:
        images: (n, H, W) float array, any range (each image stretched to its own min..max);
            H and W at most 128 (the figure's JSON stays small).
        labels: n class indices. classes: name per class index.
        title: figure title (say which dataset). cols: images per row (>= 1).

    Raises:
        ValueError: images not 3-D, more than 128 pixels per side, labels of another length,
            or cols < 1.
    """
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3 or images.shape[1] > 128 or images.shape[2] > 128:
        raise ValueError(f"images must be (n, H, W) with H, W <= 128, got {images.shape}")
    if len(labels) != len(images):
        raise ValueError(f"labels must have {len(images)} entries, got {len(labels)}")
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    n, h, w = images.shape
    rows = int(math.ceil(n / cols))
    gap = 2
    mosaic = np.full((rows * (h + gap), cols * (w + gap)), 255, np.uint8)  # white gaps
    fig = go.Figure()
    for j, img in enumerate(images):
        lo, hi = img.min(), img.max()
        img = np.round((img - lo) / (hi - lo) * 255) if hi > lo else np.zeros_like(img)
        img = img.astype(np.uint8)
        r, c = divmod(j, cols)
        mosaic[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = img
        fig.add_annotation(x=c * (w + gap) + w / 2, y=r * (h + gap) - 0.5, text=classes[labels[j]],
                           showarrow=False, yanchor="bottom", font=dict(size=10))
    fig.add_trace(go.Heatmap(z=mosaic, colorscale="gray", showscale=False, zmin=0, zmax=255,
                             hoverinfo="skip"))
    fig.update_xaxes(visible=False, scaleanchor="y", constrain="domain")
    fig.update_yaxes(visible=False, autorange="reversed", constrain="domain")
    fig.update_layout(title=title, template="plotly_white", height=110 + 95 * rows, width=820,
                      margin=dict(l=10, r=10, t=70, b=10), plot_bgcolor="#ffffff")
    return fig


def training_loss_figure(result, threshold: float | None = None) -> go.Figure:
    """Training loss per step (thin) and per epoch (markers) of a training run.

    Args:
        result: a :class:`helpers.training.TrainResult`.
        threshold: the accuracy it was meant to reach (shown in the title), or None.

    The title names the model, dataset, device and the test accuracy reached (against
    ``threshold`` if given). Axes: step (linear), cross-entropy loss in nats (log).
    """
    steps_per_epoch = max(1, len(result.losses) // max(1, len(result.epoch_losses)))
    fig = go.Figure()
    fig.add_trace(go.Scatter(y=result.losses, mode="lines", name="loss per step",
                             line=dict(color=TRAINING_COLORS.get(result.model, "#999999"),
                                       width=1),
                             hovertemplate="step %{x}: %{y:.3g}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[(e + 1) * steps_per_epoch - 1 for e in range(len(result.epoch_losses))],
        y=result.epoch_losses, mode="markers", name="mean over the epoch",
        marker=dict(color="#000000", size=6),
        hovertemplate="epoch end, step %{x}: %{y:.3g}<extra></extra>"))
    goal = f" (threshold {threshold:.0%})" if threshold is not None else ""
    title = (f"Training {result.model} on {result.dataset}: test accuracy "
             f"{result.test_accuracy:.0%}{goal} after {result.epochs} epochs, "
             f"{result.seconds:.1f} s<br><sup>trained on {result.device}</sup>")
    return _layout(fig, title, "training step", "cross-entropy loss (nats)", log_x=False)


def images_per_s_figure(rows: Sequence[dict], title: str = "Training throughput against batch size"
                        ) -> go.Figure:
    """Training images/s against batch size: one line per (model, device, source).

    Args:
        rows: :func:`helpers.training.batch_size_sweep` rows, live or from results/ (rows with
            ``source`` other than live are drawn dotted); rows not measured are left out.
        title: the measuring devices are appended.

    Returns:
        Log-log chart (batch size, images/s); a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault((r["model"], r["device"], r.get("source", "live")), []).append(r)
    fig = go.Figure()
    for (model, device, source), g in groups.items():
        g.sort(key=lambda r: int(r["batch_size"]))
        kind = "reference" if source != "live" else g[0]["device_kind"]
        fig.add_trace(go.Scatter(
            x=[int(r["batch_size"]) for r in g], y=[float(r["images_per_s"]) for r in g],
            mode="lines+markers", name=f"{model}, {device}" + (" (results/)" if source != "live"
                                                               else ""),
            line=dict(color=TRAINING_COLORS.get(model, "#999999"), dash=DASHES.get(kind)),
            hovertemplate="batch %{x}: %{y:,.0f} images/s<extra></extra>"))
    datasets = ", ".join(sorted({str(r["dataset"]) for r in ok}))
    fig = _layout(fig, f"{title}<br><sup>dataset: {datasets}; "
                       f"{ok[0]['channels']}x{ok[0]['image_size']}x{ok[0]['image_size']} images; "
                       "legend: model, measuring device</sup>",
                  "batch size (images per step)", "training throughput (images/s)")
    fig.update_layout(showlegend=True)
    return fig


def wait_compute_figure(rows: Sequence[dict], title: str = "Where a training step's time goes"
                        ) -> go.Figure:
    """Stacked bars per (augmentation, workers): milliseconds per step waiting for data
    (``next(iterator)``) and computing (forward, backward, optimiser step), with images/s on top.

    Args:
        rows: :func:`helpers.training.workers_sweep` rows of one device (live or results/).
        title: the device and dataset are appended.

    Returns:
        A bar chart; a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    x = [["augmentation on" if _is_on(r["augment"]) else "augmentation off" for r in ok],
         [f"{int(r['workers'])} worker" + ("" if int(r["workers"]) == 1 else "s") for r in ok]]
    per_step = [1e3 / float(r["steps"]) for r in ok]
    fig = go.Figure()
    for part, name in (("wait_s", "waiting for data"), ("compute_s", "computing")):
        fig.add_trace(go.Bar(
            x=x, y=[float(r[part]) * k for r, k in zip(ok, per_step)], name=name,
            marker_color=TRAINING_COLORS["wait" if part == "wait_s" else "compute"],
            hovertemplate="%{x}: %{y:.3g} ms per step<extra>" + name + "</extra>"))
    fig.add_trace(go.Scatter(
        x=x, y=[float(r["total_s"]) * k for r, k in zip(ok, per_step)], mode="text",
        text=[f"{float(r['images_per_s']):,.0f}/s" for r in ok], textposition="top center",
        showlegend=False, hoverinfo="skip"))
    devices = ", ".join(sorted({str(r["device"]) for r in ok}))
    fig = _layout(fig, f"{title}<br><sup>{ok[0]['model']}, batch {ok[0]['batch_size']}, "
                       f"{ok[0]['dataset']}; measured on {devices}; images/s on top</sup>",
                  "", "time per training step (ms)", log_x=False, log_y=False)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="multicategory")
    return fig


def utilisation_figure(samples: Sequence[dict], device: str, gpu_reason: str | None = None,
                       title: str = "Utilisation while training") -> go.Figure:
    """GPU utilisation (NVML) and CPU utilisation (psutil) over time, in percent.

    Args:
        samples: :class:`helpers.training.UtilisationSampler` samples (``t_s``, ``gpu_util``,
            ``cpu_util``), live or from results/.
        device: what was training (shown in the title).
        gpu_reason: why there is no GPU curve, shown in the title when given.

    Returns:
        A line chart (seconds, percent 0-100); a message figure when there are no samples.
    """
    if not samples:
        return message_figure(gpu_reason or "No utilisation samples")
    t = [float(s["t_s"]) for s in samples]
    fig = go.Figure()
    for key, name in (("gpu_util", "GPU utilisation (NVML)"),
                      ("cpu_util", "CPU utilisation, all cores (psutil)")):
        y = [float(s[key]) for s in samples]
        if all(math.isnan(v) for v in y):
            continue
        fig.add_trace(go.Scatter(x=t, y=y, mode="lines", name=name,
                                 line=dict(color=TRAINING_COLORS[key]),
                                 hovertemplate="%{x:.1f} s: %{y:.0f} %<extra></extra>"))
    note = f"<br><sup>{gpu_reason}</sup>" if gpu_reason else ""
    fig = _layout(fig, f"{title}: {device}{note}", "time since start (s)", "utilisation (%)",
                  log_x=False, log_y=False)
    fig.update_yaxes(range=[0, 105])
    return fig


def depth_figure(rows: Sequence[dict], title: str = "Training throughput by model depth"
                 ) -> go.Figure:
    """Images/s per model (shallow to deep), one bar group per device (live or results/).

    Args:
        rows: :func:`helpers.training.depth_sweep` rows; results/ rows carry ``source``.

    Returns:
        Grouped bars on a log axis; a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    order = sorted({(int(r["depth"]), str(r["model"])) for r in ok})
    names = [f"{m} ({d} layers)" for d, m in order]
    fig = go.Figure()
    patterns = ["", "/", ".", "x", "\\", "+"]
    for j, device in enumerate(dict.fromkeys(str(r["device"]) for r in ok)):
        by_model = {r["model"]: r for r in ok if str(r["device"]) == device}
        fig.add_trace(go.Bar(
            x=[n for (d, m), n in zip(order, names) if m in by_model],
            y=[float(by_model[m]["images_per_s"]) for d, m in order if m in by_model],
            name=device, marker_color=[TRAINING_COLORS.get(m, "#999999")
                                       for d, m in order if m in by_model],
            marker_pattern_shape=patterns[j % len(patterns)],
            hovertemplate="%{x}: %{y:,.0f} images/s<extra>" + device + "</extra>"))
    values = [float(r["images_per_s"]) for r in ok]
    devices = ", ".join(dict.fromkeys(str(r["device"]) for r in ok))
    fig = _layout(fig, f"{title}<br><sup>batch {ok[0]['batch_size']}, {ok[0]['dataset']}; "
                       f"measured on {devices} (bar pattern = device)</sup>",
                  "model (weight layers)", "training throughput (images/s)", log_x=False,
                  log_y=max(values) > 20 * min(values))
    fig.update_layout(barmode="group", showlegend=True)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=names)
    return fig

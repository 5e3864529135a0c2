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
    "fft": "#F0E442",
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


# ---------------------------------------------- notebook 04: unrolling (im2col + GEMM)


# ------------------------------------------------------- notebook 05: FFT convolution


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

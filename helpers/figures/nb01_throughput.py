"""Charts of notebook 01: throughput against size, GEMM, the roofline and the thread map."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go

from helpers.figures.style import (COLORS, DASHES, color_for, layout, quartile_bars,
                                   timing_note, value)


def _groups(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        ok = r.get("status", "ok").startswith("ok")
        if ok and math.isfinite(float(r.get("median_s", "nan"))):
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
        rows: rows from :func:`helpers.experiments.throughput.elementwise_sweep` (or results/, with
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
    return layout(fig, title, "elements (n)", "memory throughput (GB/s)")


def runtime_figure(rows: Sequence[dict], x_title: str = "size",
                   title: str = "Runtime per call") -> go.Figure:
    """Median milliseconds per call against size, one line per (backend, device, dtype), the
    error bars from the first to the third quartile of the timed calls."""
    fig = go.Figure()
    for (backend, device, source, dtype, _op), g in _groups(rows).items():
        up, down = quartile_bars(g, "median_s", "q1_s", "q3_s", "iqr_s", scale=1e3)
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in g], y=[r["median_s"] * 1e3 for r in g], mode="lines+markers",
            error_y=dict(type="data", symmetric=False, array=up, arrayminus=down, visible=True,
                         thickness=1),
            name=_trace_name(backend, device, source, dtype),
            line=dict(color=color_for(backend), dash=DASHES.get(source, "solid")),
            customdata=[timing_note(r, "q1_s", "q3_s") for r in g],
            hovertemplate="%{x:,}: %{y:.3g} ms<br>%{customdata}<extra></extra>"))
    return layout(fig, title, x_title, "median time per call (ms)")


def gemm_figure(rows: Sequence[dict], title: str = "Matrix multiplication (n x n)") -> go.Figure:
    """GFLOP/s against matrix size n, one line per (backend, device, dtype)."""
    fig = go.Figure()
    for (backend, device, source, dtype, _op), g in _groups(rows).items():
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in g], y=[r["gflop_s"] for r in g], mode="lines+markers",
            name=_trace_name(backend, device, source, dtype),
            line=dict(color=color_for(backend), dash=DASHES.get(source, "solid")),
            hovertemplate="n = %{x}: %{y:,.1f} GFLOP/s<extra></extra>"))
    return layout(fig, title, "matrix size n", "throughput (GFLOP/s)")


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
            ``2n^3 / (3 n^2 * itemsize)`` FLOP/byte. Rows with ``experiment ==
            "table1-gemm"`` (the Table I layers' im2col GEMMs timed on a GPU, live or from
            results/) are drawn as stars labelled with their layer, one trace per device.
        marks: (label, intensity FLOP/byte) of other GEMMs (e.g. the study's Table I layers under
            im2col), drawn as markers on the first roof with their labels.

    Each roof's ridge point (peak / bandwidth, FLOP/byte) is marked with a triangle: marks left
    of a roof's ridge sit on its sloped, memory-bound part.
    """
    fig = go.Figure()
    table1 = [r for r in gemm_rows if r.get("experiment") == "table1-gemm"]
    gemm_rows = [r for r in gemm_rows if r.get("experiment") != "table1-gemm"]
    intensities = [0.1, 1e4]
    x = np.logspace(math.log10(intensities[0]), math.log10(intensities[1]), 200)
    for label, peak, bw, color in roofs:
        fig.add_trace(go.Scatter(
            x=x, y=np.minimum(peak, x * bw) / 1e9, mode="lines", name=label,
            line=dict(color=color, width=2),
            hovertemplate="%{x:.3g} FLOP/B: at most %{y:,.0f} GFLOP/s<extra></extra>"))
    if roofs:  # each roof's ridge point: where the sloped (memory) roof meets the flat one
        fig.add_trace(go.Scatter(
            x=[peak / bw for _, peak, bw, _ in roofs], y=[peak / 1e9 for _, peak, _, _ in roofs],
            mode="markers", marker=dict(symbol="triangle-down", size=11,
                                        color=[c for *_, c in roofs],
                                        line=dict(color="#000000", width=1)),
            name="ridge points (peak / bandwidth)", text=[label for label, *_ in roofs],
            hovertemplate="%{text}: ridge at %{x:.3g} FLOP/B<extra></extra>"))
    for (backend, device, source, dtype, _op), g in _groups(gemm_rows).items():
        fig.add_trace(go.Scatter(
            x=[r["flops"] / r["bytes"] for r in g], y=[r["gflop_s"] for r in g],
            mode="markers", marker=dict(color=color_for(backend), size=8,
                                        symbol="circle" if source != "reference" else "diamond"),
            name=f"measured GEMM: {_trace_name(backend, device, source, dtype)}",
            text=[f"n = {r['size']}" for r in g],
            hovertemplate="%{text}: %{y:,.1f} GFLOP/s<extra></extra>"))
    by_device: dict[str, list[dict]] = {}
    for r in table1:
        if str(r.get("status", "ok")).startswith("ok") and value(r.get("gflop_s")):
            by_device.setdefault(str(r["device"]), []).append(r)
    for device, g in by_device.items():
        fig.add_trace(go.Scatter(
            x=[r["flops"] / r["bytes"] for r in g], y=[r["gflop_s"] for r in g],
            mode="markers+text", text=[r["op"] for r in g], textposition="middle left",
            marker=dict(symbol="star", size=11, color=color_for(g[0]["backend"])),
            name=f"Table I layers' GEMMs, measured: {device}"
                 + (" (results/)" if g[0].get("source") == "reference" else ""),
            hovertemplate="%{text} GEMM: %{y:,.0f} GFLOP/s<extra></extra>"))
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
    return layout(fig, title, "arithmetic intensity (FLOP per byte moved)",
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

"""Charts of notebook 03: the direct convolution's window, runtime, phases and tile reuse (the
tiled kernel's halo and thread map: :mod:`helpers.figures.nb03_tiled`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from helpers.figures import nb03_tiled as _tiled
from helpers.figures.style import COLORS, color_for


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
            (rows from :func:`helpers.experiments.sweep.measure` with ``layer`` added, or from
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
        groups: (bar label, rows) pairs; rows from :func:`helpers.experiments.phases.phase_times`
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


#: Charts that moved to :mod:`helpers.figures.nb03_tiled`, still readable here so that a learner's
#: copy of an older notebook 03 keeps running.
MOVED = ("tiled_block_footprint", "tiled_halo_figure", "tiled_thread_map", "thread_map_figure")


def __getattr__(name: str):
    if name in MOVED:
        return getattr(_tiled, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

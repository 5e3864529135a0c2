"""Charts of notebook 12: each layer type's share of the FLOPs against its share of the time,
every layer on its device's roofline, and our strategies beside the library on five layers.

Rows come from :mod:`helpers.experiments.todays_layers` (live or recorded in ``results/``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from helpers.figures.style import COLORS, color_for, layout, message_figure, value

#: One colour per layer type (Okabe-Ito), kept in every chart of notebook 12.
TYPE_COLORS = {"depthwise": "#D55E00", "grouped": "#CC79A7", "1x1": "#0072B2",
               "dilated": "#009E73", "dense kxk": "#E69F00"}
#: One marker per network.
NETWORK_SYMBOLS = {"MobileNet-V2": "circle", "ResNeXt-50 (32x4d)": "square",
                   "ConvNeXt-Tiny": "diamond"}
_ORDER = tuple(TYPE_COLORS)


def _measured(rows: Sequence[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r.get("experiment") == "layer" and r.get("status") == "ok":
            g, i = value(r.get("gflop_s")), value(r.get("intensity"))
            if g and i and math.isfinite(g) and math.isfinite(i):
                out.append(r)
    return out


def shares_figure(share_rows: Sequence[dict], title: str = "Share of FLOPs and of time "
                  "by layer type") -> go.Figure:
    """One panel per network: for each layer type, its share of the network's convolution
    FLOPs beside its share of their measured time (%), the bar of time in the type's colour.

    Args:
        share_rows: rows of :func:`helpers.experiments.todays_layers.shares` for one device
            and batch (``network, layer_type, layers, flop_share, time_share``).
        title: the chart's title; name the device and batch in it.
    """
    nets = list(dict.fromkeys(r["network"] for r in share_rows))
    if not nets:
        return message_figure("no measured layers to draw")
    fig = make_subplots(rows=1, cols=len(nets), subplot_titles=nets, shared_yaxes=True)
    for col, net in enumerate(nets, 1):
        mine = sorted((r for r in share_rows if r["network"] == net),
                      key=lambda r: _ORDER.index(r["layer_type"]))
        types = [f"{r['layer_type']} ({r['layers']})" for r in mine]
        fig.add_trace(go.Bar(
            x=types, y=[100 * r["flop_share"] for r in mine], name="share of FLOPs",
            marker=dict(color="#BBBBBB"), showlegend=col == 1, legendgroup="flops",
            hovertemplate="%{x}: %{y:.1f} % of the FLOPs<extra></extra>"), row=1, col=col)
        fig.add_trace(go.Bar(
            x=types, y=[100 * r["time_share"] for r in mine], name="share of time",
            marker=dict(color=[TYPE_COLORS[r["layer_type"]] for r in mine]),
            showlegend=col == 1, legendgroup="time",
            hovertemplate="%{x}: %{y:.1f} % of the time<extra></extra>"), row=1, col=col)
    fig.update_layout(barmode="group", title=title, template="plotly_white", height=430,
                      margin=dict(l=70, r=20, t=80, b=90),
                      legend=dict(orientation="h", x=0, y=-0.25))
    fig.update_yaxes(title_text="share of the convolutions (%)", range=[0, 100], row=1, col=1)
    fig.update_xaxes(title_text="layer type (layers)")
    return fig


def _roof_traces(fig: go.Figure, roof: dict, x_lo: float, x_hi: float) -> None:
    """The measured roof as two labelled traces, the bandwidth's slope up to the ridge and the
    compute ceiling's flat line from it, and the nominal peak (datasheet or estimate) dotted;
    each legend entry names its number and where it comes from."""
    peak, bw = roof.get("peak_flops"), roof.get("bandwidth")
    ridge = peak / bw if peak and bw else None
    if bw:
        xs = np.logspace(math.log10(x_lo), math.log10(min(x_hi, ridge or x_hi)), 50)
        fig.add_trace(go.Scatter(
            x=xs, y=xs * bw / 1e9, mode="lines", line=dict(color=COLORS["peak"], width=2),
            name=f"memory bandwidth {bw / 1e9:,.1f} GB/s ({roof['bandwidth_source']})",
            hovertemplate="%{x:.3g} FLOP/B: at most %{y:,.1f} GFLOP/s<extra></extra>"))
    if peak:
        fig.add_trace(go.Scatter(
            x=[max(x_lo, ridge or x_lo), x_hi], y=[peak / 1e9] * 2, mode="lines",
            line=dict(color=COLORS["peak"], width=2, dash="dash"),
            name=f"compute ceiling {peak / 1e9:,.0f} GFLOP/s ({roof['peak_source']})",
            hovertemplate=f"{peak / 1e9:,.0f} GFLOP/s<extra></extra>"))
    if ridge:
        fig.add_trace(go.Scatter(
            x=[ridge], y=[peak / 1e9], mode="markers", name=f"ridge point {ridge:.3g} FLOP/B",
            marker=dict(symbol="triangle-down", size=11, color=COLORS["peak"]),
            hovertemplate="ridge at %{x:.3g} FLOP/B<extra></extra>"))
    nominal, nominal_bw = roof.get("nominal_flops"), roof.get("nominal_bandwidth")
    if nominal:
        xs = np.logspace(math.log10(x_lo), math.log10(x_hi), 80)
        ys = np.minimum(nominal, xs * nominal_bw) if nominal_bw else np.full(len(xs), nominal)
        what = (f"peak {nominal / 1e9:,.0f} GFLOP/s" + (f", {nominal_bw / 1e9:,.0f} GB/s"
                                                         if nominal_bw else ""))
        fig.add_trace(go.Scatter(
            x=xs, y=ys / 1e9, mode="lines", line=dict(color="#999999", width=1, dash="dot"),
            name=f"nominal {what} ({roof['nominal_source']})",
            hovertemplate="nominal: %{y:,.0f} GFLOP/s<extra></extra>"))


def roofline_figure(rows: Sequence[dict], roof: dict | None, title: str = "Every convolution "
                    "layer on the roofline") -> go.Figure:
    """Each measured layer at its arithmetic intensity (FLOP per byte of x + w + y) and its
    achieved GFLOP/s, coloured by layer type, one marker per network, under the device's roof.

    Args:
        rows: layer rows of one device and batch from
            :func:`helpers.experiments.todays_layers.time_layers` (live or recorded); rows
            not ``ok`` are left out.
        roof: :func:`helpers.experiments.todays_layers.roof` of the same device (None: no
            roof drawn): the measured ceilings solid and dashed, the nominal peak dotted; its
            labels say which number is measured, which estimated, which from a datasheet.
        title: the chart's title; name the device and batch in it.
    """
    ok = _measured(rows)
    if not ok:
        return message_figure("no measured layers to draw")
    xs = [value(r["intensity"]) for r in ok]
    x_lo, x_hi = min(xs) / 2, max(xs) * 2
    for peak, bw in ((roof or {}).get("peak_flops"), (roof or {}).get("bandwidth")), (
            (roof or {}).get("nominal_flops"), (roof or {}).get("nominal_bandwidth")):
        if peak and bw:
            x_lo, x_hi = min(x_lo, peak / bw / 4), max(x_hi, peak / bw * 4)
    fig = go.Figure()
    if roof:
        _roof_traces(fig, roof, x_lo, x_hi)
    for kind in _ORDER:
        for net, symbol in NETWORK_SYMBOLS.items():
            mine = [r for r in ok if r["layer_type"] == kind and r["network"] == net]
            if not mine:
                continue
            fig.add_trace(go.Scatter(
                x=[value(r["intensity"]) for r in mine], y=[value(r["gflop_s"]) for r in mine],
                mode="markers", name=f"{kind}: {net} ({len(mine)})",
                marker=dict(color=TYPE_COLORS[kind], symbol=symbol, size=9,
                            line=dict(color="#333333", width=0.5)),
                text=[f"{r['name']}: C={r['c']}, K={r['k']}, {r['r']}x{r['s']}, "
                      f"{r['h']}x{r['w']}, groups {r['groups']}, {value(r['median_ms']):.3g} ms"
                      for r in mine],
                hovertemplate="%{text}<br>%{x:.3g} FLOP/B, %{y:,.1f} GFLOP/s<extra></extra>"))
    fig = layout(fig, title, "arithmetic intensity (FLOP per byte of x + w + y, float32)",
                 "achieved (GFLOP/s)")
    fig.update_layout(height=520, legend=dict(font=dict(size=10)))
    return fig


def strategies_figure(rows: Sequence[dict], title: str = "Five layers: our strategies and the "
                      "library") -> go.Figure:
    """Median ms per call of each strategy on each layer (grouped bars, log axis), in the
    workbook's strategy colours; strategies that refused a layer or were not timed have no
    bar (their reason is in the rows' ``status``).

    Args:
        rows: timed strategy rows of one device from
            :func:`helpers.experiments.todays_layers.compare.compare` (``experiment=
            "strategy"``, ``median_ms``).
        title: the chart's title; name the device in it.
    """
    timed = [r for r in rows if r.get("experiment") == "strategy" and value(r.get("median_ms"))]
    if not timed:
        return message_figure("no timed strategy rows (the simulator checks correctness only)")
    layers = list(dict.fromkeys(f"{r['layer_type']}<br>{r['network']}" for r in timed))
    fig = go.Figure()
    for strategy in dict.fromkeys(r["strategy"] for r in timed):
        by = {f"{r['layer_type']}<br>{r['network']}": value(r["median_ms"]) for r in timed
              if r["strategy"] == strategy}
        name = {"reference": "library (torch)",
                "reference-tf32": "library (torch, TF32)"}.get(strategy, strategy)
        fig.add_trace(go.Bar(
            x=layers, y=[by.get(lay) for lay in layers], name=name,
            marker=dict(color=color_for(strategy)),
            hovertemplate=f"{name}: " + "%{y:.3g} ms<extra></extra>"))
    fig = layout(fig, title, "layer", "median time per call (ms)", log_x=False)
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category")
    return fig

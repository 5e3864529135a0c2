"""Charts of notebook 13, the climb: the GEMM ladder against cuBLAS, im2col's bytes per second,
and the direct backward's kernels before and after (rows of :mod:`helpers.experiments.climb`)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from helpers.figures.style import color_for, layout, message_figure, value

__all__ = ["ladder_figure", "bandwidth_figure", "backward_figure", "LIBRARY_COLORS"]

#: The library's two lines: FP32 (TF32 off) in reference's colour, TF32 in a lighter shade.
LIBRARY_COLORS = {"FP32": "#000000", "TF32": "#7f7f7f"}


def _ok(r: dict) -> bool:
    return str(r.get("status", "")).startswith("ok") and value(r.get("median_ms")) is not None


def ladder_figure(rows: Sequence[dict], worklog: dict[str, float] | None = None,
                  names: dict[int, str] | None = None) -> go.Figure:
    """GFLOP/s of each rung (bars, labelled with its fraction of cuBLAS FP32) beside cuBLAS in
    FP32 and TF32 (lines), from the ``gemm`` rows of one device; with ``worklog`` (rung name ->
    fraction of cuBLAS on an A6000) its fractions as markers on a second axis."""
    gemm = [r for r in rows if r.get("experiment") == "gemm" and _ok(r)]
    rungs = sorted((r for r in gemm if value(r.get("rung")) is not None),
                   key=lambda r: int(r["rung"]))
    if not rungs:
        return message_figure("no GEMM ladder recorded: run python -m helpers.experiments.climb "
                              "--save on a GPU")
    device = rungs[0].get("device", "")
    labels = [f"{int(r['rung'])}. {r['item']}" for r in rungs]
    fig = go.Figure(go.Bar(
        x=labels, y=[r["gflop_s"] for r in rungs], name="our rung",
        marker_color=color_for("im2col-tiled"),
        text=[f"{r['vs_fp32']:.2f}" if value(r.get("vs_fp32")) else "" for r in rungs],
        textposition="outside",
        hovertemplate="%{x}<br>%{y:,.0f} GFLOP/s<br>of cuBLAS FP32: %{text}<extra></extra>"))
    for r in gemm:
        if value(r.get("rung")) is None:
            kind = "TF32" if "TF32" in str(r["item"]) else "FP32"
            fig.add_hline(y=r["gflop_s"], line_dash="dot" if kind == "TF32" else "solid",
                          line_color=LIBRARY_COLORS[kind],
                          annotation_text=f"{r['item']}: {r['gflop_s']:,.0f} GFLOP/s",
                          annotation_position="top left")
    if worklog and names:
        fig.add_trace(go.Scatter(
            x=labels, y=[worklog.get(names.get(int(r["rung"]), ""), None) for r in rungs],
            yaxis="y2", mode="markers", marker_symbol="diamond", marker_size=10,
            marker_color="#E69F00", name="Boehm's worklog, A6000 (fraction of cuBLAS)"))
        fig.update_layout(yaxis2=dict(title="fraction of cuBLAS (worklog)", overlaying="y",
                                      side="right", range=[0, 1.1], showgrid=False))
    layout(fig, f"The GEMM ladder at n = {int(rungs[0]['n']):,}, FP32: {device}",
           "rung", "GFLOP/s", log_x=False, log_y=False)
    fig.update_layout(legend=dict(orientation="h", y=-0.35), margin=dict(b=140))
    return fig


def bandwidth_figure(rows: Sequence[dict], peak_gb_s: float | None = None,
                     peak_label: str = "") -> go.Figure:
    """GB/s moved (each array read once plus each written once, over the median time) by each
    im2col and col2im kernel at each layer (grouped bars), with the device's peak bandwidth as a
    line when given."""
    got = [r for r in rows if r.get("experiment") in ("im2col", "col2im") and _ok(r)]
    if not got:
        return message_figure("no im2col timings recorded: run python -m "
                              "helpers.experiments.climb --save on a GPU")
    fig = go.Figure()
    for kernel in dict.fromkeys(r["item"] for r in got):
        mine = [r for r in got if r["item"] == kernel]
        fig.add_trace(go.Bar(
            x=[f"{r['experiment']}, {r['layer']}" for r in mine],
            y=[r["gb_s"] for r in mine], name=kernel,
            hovertemplate="%{x}<br>%{y:,.0f} GB/s moved<extra>" + kernel + "</extra>"))
    if peak_gb_s:
        fig.add_hline(y=peak_gb_s, line_dash="dot", annotation_text=peak_label,
                      annotation_position="top left")
    layout(fig, f"Bytes moved per second: {got[0].get('device', '')}", "kernel and layer",
           "GB/s (read + written)", log_x=False, log_y=False)
    fig.update_layout(barmode="group")
    return fig


def backward_figure(rows: Sequence[dict]) -> go.Figure:
    """Milliseconds of each direct-backward kernel (dx and dW, first and new) per Table I layer,
    log scale."""
    got = [r for r in rows if r.get("experiment") == "direct-backward" and _ok(r)]
    if not got:
        return message_figure("no direct backward timings recorded: run python -m "
                              "helpers.experiments.climb --save on a GPU")
    fig = go.Figure()
    for item in dict.fromkeys(r["item"] for r in got):
        mine = [r for r in got if r["item"] == item]
        fig.add_trace(go.Bar(x=[r["layer"] for r in mine], y=[r["median_ms"] for r in mine],
                             name=item,
                             hovertemplate="%{x}: %{y:.3g} ms<extra>" + item + "</extra>"))
    layout(fig, f"The direct backward, kernel by kernel, batch 128: {got[0].get('device', '')}",
           "Table I layer", "ms (median)", log_x=False, log_y=True)
    fig.update_layout(barmode="group")
    return fig

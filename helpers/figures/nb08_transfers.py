"""Charts of notebook 08: copy bandwidth, transfer share and copy/compute overlap."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from helpers.figures.style import COLORS, layout, message_figure, value

#: Colours of notebook 08: host memory kinds, and the three pipeline stages.
TRANSFER_COLORS = {"pageable": "#E69F00", "pinned": "#0072B2", "h2d": "#56B4E9",
                   "compute": "#009E73", "d2h": "#CC79A7", "copy": "#D55E00"}
_SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000"]
_STAGE_NAMES = {"h2d": "copy in (host to device)", "compute": "compute (convolution)",
                "d2h": "copy out (device to host)"}


def _ok(rows: Iterable[dict], key: str) -> list[dict]:
    return [r for r in rows if str(r.get("status", "ok")).startswith("ok")
            and value(r.get(key)) is not None]


def transfer_bandwidth_figure(rows: Sequence[dict], links: Iterable[tuple[str, float]] = (),
                              title: str = "CPU-GPU copy bandwidth") -> go.Figure:
    """Copy bandwidth (GB/s) against copy size (bytes), pageable vs pinned, h2d vs d2h.

    Args:
        rows: :func:`helpers.experiments.transfers.copy_bandwidth` rows, live or from results/
            (``source="reference"``, drawn with diamonds and named "(results/)"); rows whose
            status is not ``ok`` are left out.
        links: (label, bytes/s) horizontal lines, e.g. a link's estimated bandwidth; the label
            should say "estimate".
        title: the figure title.

    Returns:
        The figure; a message figure when no row was measured.

    Source: the study's remedy of pinned memory (Section V-D).
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
    return layout(fig, f"{title}<br><sup>measured on {'; '.join(devices)}</sup>",
                   "bytes per copy", "bandwidth (GB/s)")


def transfer_share_figure(rows: Sequence[dict], series_key: str = "scenario",
                          title: str = "Share of time in CPU-GPU copies",
                          note: str = "") -> go.Figure:
    """Copy share of each layer's time (%), grouped bars: one bar per series per layer.

    Args:
        rows: :func:`helpers.experiments.transfers.model.estimate` rows (estimates) or
            :func:`helpers.experiments.transfers.transfer_share` rows (measured); each needs
            ``layer``, ``copy_share`` (0..1), ``copy_ms``, ``compute_ms`` and ``series_key``;
            rows whose status is not ``ok`` are left out.
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
            customdata=[[value(r.get("copy_ms")) or 0.0, value(r.get("compute_ms")) or 0.0]
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
            :func:`helpers.experiments.transfers.overlap_experiment` (measured with CUDA events) or
            :func:`helpers.experiments.transfers.model.estimated_timeline` (an estimate).
        title: the figure title. note: a second line (say whether measured, and where, or
            estimated).

    Returns:
        Two panels sharing the time axis (ms); one bar per stage, labelled with its chunk; a
        message figure when the timeline is empty.
    """
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
    overlapped (chunks on streams), in ms, from
    :func:`helpers.experiments.transfers.overlap_experiment` rows (live or from results/); rows
    whose status is not ``ok`` are left out."""
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


def channel_share_figure(series: Sequence[tuple[str, Sequence[dict]]],
                         marks: Iterable[tuple[int, str]] = (),
                         title: str = "Conv2's estimated copy share against its input channels",
                         note: str = "ESTIMATE, not measured") -> go.Figure:
    """Estimated copy share (%) against input channels C (log axis), one line per machine.

    Args:
        series: (label, rows) pairs; rows from
            :func:`helpers.experiments.transfers.model.estimate_channels` (``c`` and
            ``copy_share`` in 0..1), e.g. one pair per (GPU, link).
        marks: (C, label) vertical lines, e.g. the channel count the workbook chose.
        title: the figure title. note: a second line (say "estimate" and the assumptions).

    Returns:
        The figure; a message figure when no series has rows.

    Source: the study's Table I (which gives no channels) and Figure 7.
    """
    series = [(label, list(rows)) for label, rows in series if rows]
    if not series:
        return message_figure("No estimate to draw")
    fig = go.Figure()
    for n, (label, rows) in enumerate(series):
        rows.sort(key=lambda r: r["c"])
        fig.add_trace(go.Scatter(
            x=[r["c"] for r in rows], y=[100 * r["copy_share"] for r in rows],
            mode="lines+markers", name=label,
            line=dict(color=_SERIES_COLORS[n % len(_SERIES_COLORS)], width=2),
            hovertemplate="C = %{x}: copies %{y:.1f} %<extra>" + label + "</extra>"))
    cs = [r["c"] for _, rows in series for r in rows]
    for c, label in marks:  # on a log axis annotations take log10(x), shapes take x itself
        fig.add_vline(x=c, line=dict(color=COLORS["peak"], dash="dot", width=1))
        fig.add_annotation(x=math.log10(c), y=102, text=label, showarrow=False,
                           xanchor="left", font=dict(size=11))
    layout(fig, f"{title}<br><sup>{note}</sup>", "input channels C", "copies, % of step time",
           log_x=True, log_y=False)
    fig.update_xaxes(range=[math.log10(min(cs)) - 0.1, math.log10(max(cs)) + 0.1])
    fig.update_yaxes(range=[0, 108])
    fig.update_layout(margin=dict(l=70, r=20, t=80, b=60))
    return fig

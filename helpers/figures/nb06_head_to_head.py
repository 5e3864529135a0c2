"""Charts of notebook 06: the strategies swept over b, i, f, k and s (Figures 3-5)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from helpers.figures.style import (MIN_TIMED_BLOCKS, color_for, noisy, quartile_bars,
                                   timing_note, value)

SWEEP_AXES = {"batch": "batch b", "input": "input size i (pixels)", "filters": "filters f",
              "kernel": "kernel size k (pixels)", "stride": "stride s", "table1": "Table I layer"}


def sweep_figure(rows: Sequence[dict], metric: str = "median_ms", title: str = "",
                 device: str | None = None) -> go.Figure:
    """The study's Figure 3 (runtime) or Figure 5 (memory): one panel per sweep, one line per
    strategy, from :func:`helpers.experiments.sweep.run_preset` rows (or their CSV).

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
                   and value(r.get(metric)) is not None and (device is None or r["device"] == device)]
            if not pts:
                continue
            x = [r["layer"] for r in pts] if sweep == "table1" else [r["x"] for r in pts]
            y = [value(r[metric]) * scale for r in pts]
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
    """HTML table of :func:`helpers.experiments.sweep.findings`: the study's finding ("then,
    K40c") beside what ``device`` measured ("now, <device>")."""
    import html as _html

    mark = {True: "agrees", False: "differs", None: "cannot tell"}
    body = "".join(
        f"<tr><td>{_html.escape(r['finding'])}</td><td>{_html.escape(r['study'])}</td>"
        f"<td>{_html.escape(r['here'])}</td><td><b>{mark[r['agrees']]}</b></td></tr>" for r in rows)
    return ("<table><tr><th>finding</th><th>then, K40c (the study, 2016)</th>"
            f"<th>now, {_html.escape(device)}</th><th></th></tr>{body}</table>")


# ------------------------------------------------ the layer explorer's charts (ConvExplorer)

MIB = 2**20


def _bar_layout(fig: go.Figure, title: str, y_title: str) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=400, bargap=0.25,
                      legend=dict(orientation="v", x=1.02, y=1, font=dict(size=11)),
                      margin=dict(l=70, r=20, t=70, b=60))
    fig.update_xaxes(title_text="strategy")
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    return fig


def layer_runtime_figure(rows: list[dict], what: str, layer: str, where: str) -> go.Figure:
    """One bar per strategy: median ms of one call on one layer, the error bar from the first
    to the third quartile of the timed calls (the live explorer's chart; rows of
    :func:`helpers.experiments.live.conv_point`)."""
    names = [r["strategy"] for r in rows]
    up, down = quartile_bars(rows, "median_ms", "q1_ms", "q3_ms", "iqr_ms")
    notes = [timing_note(r, "q1_ms", "q3_ms") for r in rows]

    def spread(r: dict, u: float | None, d: float | None) -> str:
        if u is None:
            return "no quartiles"
        return f"quartiles {r['median_ms'] - d:.3g} to {r['median_ms'] + u:.3g} ms"

    fig = go.Figure(go.Bar(
        x=names, y=[r["median_ms"] for r in rows], name="median time",
        marker_color=[color_for(n) for n in names],
        error_y=dict(type="data", symmetric=False, array=up, arrayminus=down, visible=True,
                     thickness=1.5),
        text=[_short_note(r) for r in rows], textposition="outside",
        customdata=[[spread(r, u, d), r["flops"] / 1e9, r["gflop_per_s"], note]
                    for r, u, d, note in zip(rows, up, down, notes)],
        hovertemplate=("%{x}: median %{y:.3g} ms (%{customdata[0]}), %{customdata[1]:.3g} "
                       "GFLOP at %{customdata[2]:.3g} GFLOP/s<br>%{customdata[3]}"
                       "<extra></extra>")))
    fig.update_layout(showlegend=False)
    return _bar_layout(fig, f"Runtime, {what}: {layer}<br><sup>measured on {where}; "
                            f"error bar: first to third quartile of the timed calls</sup>",
                       "median time per call (ms)")

def _short_note(r: dict) -> str:
    """The label over a bar whose statistics are thin: its number of timed blocks, or noisy."""
    if r.get("repeats") is not None and r["repeats"] < MIN_TIMED_BLOCKS:
        return f"{r['repeats']} timed"
    return "noisy" if noisy(r, "q1_ms", "q3_ms") else ""


def layer_memory_figure(rows: list[dict], what: str, layer: str, where: str) -> go.Figure:
    """Measured peak memory beside the analytic workspace (MiB) per strategy on one layer."""
    names = [r["strategy"] for r in rows]
    colors = [color_for(n) for n in names]

    def mib(key: str, missing: str) -> tuple[list[float], list[str]]:
        """Values in MiB (0 where None) and a label saying which ones are missing."""
        values = [r[key] for r in rows]
        return ([0.0 if b is None else b / MIB for b in values],
                [missing if b is None else "" for b in values])

    peak, peak_text = mib("peak_bytes", "not measured")
    workspace, workspace_text = mib("workspace_bytes", "unknown")
    fig = go.Figure([
        go.Bar(x=names, y=peak, name="measured peak", marker_color=colors,
               text=peak_text, textposition="outside",
               hovertemplate="%{x}: measured peak %{y:.3g} MiB<extra></extra>"),
        go.Bar(x=names, y=workspace, name="analytic workspace", text=workspace_text,
               textposition="outside",
               marker=dict(color=colors, pattern=dict(shape="/", fgcolor="#ffffff"),
                           opacity=0.6),
               hovertemplate="%{x}: analytic workspace %{y:.3g} MiB<extra></extra>"),
    ])
    fig.update_layout(barmode="group")
    return _bar_layout(fig, f"Memory, {what}: {layer}<br><sup>measured peak above the "
                            f"baseline on {where}; workspace: analytic, beyond x, w, y</sup>",
                       "memory (MiB)")

"""Charts of notebook 11: data vs model parallelism drawn, a step's parts, the pipeline schedule
and its bubble, all-reduce bandwidth, and speedup against the number of ranks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from helpers.figures.style import layout, message_figure, value

#: Colours of notebook 11: the parts of a step, the two stages, the rank counts.
PARALLEL_COLORS = {"compute": "#0072B2", "wait": "#E69F00", "allreduce": "#D55E00",
                   "forward": "#56B4E9", "backward": "#009E73", "ideal": "#999999",
                   "amdahl": "#CC79A7", "link": "#555555"}


def _num(v) -> bool:
    """A finite number in a live row or a parsed results/ row."""
    try:
        return value(v) is not None and math.isfinite(value(v))
    except (TypeError, ValueError):
        return False


def _ok(rows, experiment: str) -> list[dict]:
    key = "allreduce_s" if experiment == "allreduce" else "step_s"
    return [r for r in rows if r.get("experiment") == experiment
            and str(r.get("status", "")) == "ok" and _num(r.get(key))]


def _box(fig, col, x0, y0, x1, y1, text, color):
    fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, fillcolor=color, opacity=0.85,
                  line=dict(color="#333333", width=1), row=1, col=col)
    fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text, showarrow=False,
                       font=dict(size=11, color="white"), row=1, col=col)


def _arrow(fig, col, x0, y0, x1, y1, text, color="#333333"):
    ref = "" if col == 1 else str(col)
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref=f"x{ref}", yref=f"y{ref}",
                       axref=f"x{ref}", ayref=f"y{ref}", text=text, showarrow=True,
                       arrowhead=3, arrowwidth=2, arrowcolor=color, font=dict(size=10))


def ideas_figure() -> go.Figure:
    """Who holds which weights and which images, and what crosses the wire, for two ranks.

    Left, data parallelism: each rank holds all the weights and half of every batch; after the
    backward pass the gradients are all-reduced (summed, then averaged). Right, model
    parallelism: rank 0 holds the first layers, rank 1 the rest; every image passes through
    both; activations go forward, their gradients come back. Source: the wiki guide's
    "Parallel computing"; Li et al., VLDB 2020; Huang et al., NeurIPS 2019.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "data parallelism: weights copied, images split", "model parallelism: weights split"))
    for r, y in ((0, 3.2), (1, 0.6)):
        _box(fig, 1, 0.2, y, 1.6, y + 1.4, f"images<br>{'1-16' if r == 0 else '17-32'}",
             PARALLEL_COLORS["wait"])
        _box(fig, 1, 2.3, y, 4.6, y + 1.4, f"rank {r}: all<br>weights (copy)",
             PARALLEL_COLORS["compute"])
        _arrow(fig, 1, 1.6, y + 0.7, 2.3, y + 0.7, "")
    _arrow(fig, 1, 3.45, 3.2, 3.45, 2.0, "", PARALLEL_COLORS["allreduce"])
    _arrow(fig, 1, 3.45, 2.0, 3.45, 3.2, "", PARALLEL_COLORS["allreduce"])
    fig.add_annotation(x=3.6, y=2.6, text="gradients: all-reduce<br>(sum, every step)",
                       showarrow=False, xanchor="left", font=dict(size=11), row=1, col=1)
    _box(fig, 2, 0.2, 1.9, 1.6, 3.3, "images<br>1-32", PARALLEL_COLORS["wait"])
    _box(fig, 2, 2.0, 3.2, 4.6, 4.6, "rank 0: layers 1-9<br>(stage 0)", PARALLEL_COLORS["compute"])
    _box(fig, 2, 2.0, 0.4, 4.6, 1.8, "rank 1: layers 10-20<br>(stage 1) + loss",
         PARALLEL_COLORS["compute"])
    _arrow(fig, 2, 1.6, 2.6, 2.0, 3.9, "")
    _arrow(fig, 2, 2.9, 3.2, 2.9, 1.8, "", PARALLEL_COLORS["forward"])
    _arrow(fig, 2, 3.9, 1.8, 3.9, 3.2, "", PARALLEL_COLORS["backward"])
    fig.add_annotation(x=2.8, y=2.5, text="activations", showarrow=False, xanchor="right",
                       font=dict(size=11), row=1, col=2)
    fig.add_annotation(x=4.0, y=2.5, text="their gradients", showarrow=False, xanchor="left",
                       font=dict(size=11), row=1, col=2)
    fig.update_xaxes(visible=False, range=[0, 5])
    fig.update_yaxes(visible=False, range=[0, 5])
    fig.update_layout(template="plotly_white", height=360, margin=dict(l=10, r=10, t=50, b=10),
                      showlegend=False)
    return fig


def step_split_figure(rows: Sequence[dict], title: str = "") -> go.Figure:
    """One bar per DDP row: the step split into compute, waiting for the slowest rank and the
    gradient all-reduce (seconds, nothing overlapped), and a marker at DDP's own step time
    (all-reduce overlapped with the backward pass). ``rows``: ``ddp`` rows of
    :func:`helpers.experiments.parallel.launch` or ``recorded()``; a message if none."""
    ddp = [r for r in _ok(rows, "ddp") if _num(r.get("compute_s"))]
    if not ddp:
        return message_figure("no data-parallel step to show")
    names = [f"{r['ranks']} rank(s), {str(r['device']).split(',')[0][:40]}" for r in ddp]
    fig = go.Figure()
    for part, label in (("compute", "compute (forward, backward, update)"),
                        ("wait", "waiting for the slowest rank"),
                        ("allreduce", "gradient all-reduce")):
        fig.add_trace(go.Bar(y=names, x=[1e3 * r[f"{part}_s"] for r in ddp], name=label,
                             orientation="h", marker_color=PARALLEL_COLORS[part]))
    fig.add_trace(go.Scatter(y=names, x=[1e3 * r["step_s"] for r in ddp], mode="markers",
                             name="DDP step (all-reduce overlapped)",
                             marker=dict(symbol="diamond", size=12, color="black")))
    layout(fig, title or "Where a data-parallel step's time goes", "time per step (ms)", "",
           log_x=False, log_y=False)
    fig.update_layout(barmode="stack", height=220 + 40 * len(ddp))
    return fig


def pipeline_schedule_figure(microbatches: int, forward_s: float = 1.0,
                             backward_s: float = 2.0) -> go.Figure:
    """GPipe's schedule on two stages: every micro-batch's forward on stage 0 then 1, then the
    backward passes in reverse; grey gaps are the bubble, (S - 1) / (M + S - 1) of the step
    when the stages take equal time. Times in units of one micro-batch's forward.

    Raises:
        ValueError: microbatches outside [1, 32] or non-positive times.
    """
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) \
            or not 1 <= microbatches <= 32:
        raise ValueError(f"microbatches must be a whole number in [1, 32], got {microbatches!r}")
    if not (forward_s > 0 and backward_s > 0):
        raise ValueError("forward_s and backward_s must be > 0")
    m, f, b = microbatches, forward_s / microbatches, backward_s / microbatches
    blocks = []   # (stage, start, length, kind, micro-batch)
    for i in range(m):
        blocks += [(0, i * f, f, "forward", i), (1, (i + 1) * f, f, "forward", i)]
    t = (m + 1) * f
    for i in reversed(range(m)):
        k = m - 1 - i
        blocks += [(1, t + k * b, b, "backward", i), (0, t + (k + 1) * b, b, "backward", i)]
    end = t + (m + 1) * b
    fig = go.Figure()
    for kind in ("forward", "backward"):
        sel = [blk for blk in blocks if blk[3] == kind]
        fig.add_trace(go.Bar(x=[blk[2] for blk in sel], base=[blk[1] for blk in sel],
                             y=[f"rank {blk[0]} (stage {blk[0]})" for blk in sel],
                             orientation="h", name=kind, text=[str(blk[4] + 1) for blk in sel],
                             marker=dict(color=PARALLEL_COLORS[kind],
                                         line=dict(color="white", width=1))))
    busy = (forward_s + backward_s)
    layout(fig, f"GPipe on 2 stages, M = {m}: each rank idle {1 - busy / end:.0%} of the step "
           f"(bubble (S-1)/(M+S-1) = {1 / (m + 1):.0%})", "time (one full-batch forward = 1)",
           "", log_x=False, log_y=False)
    fig.update_layout(barmode="overlay", height=260)
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_xaxes(range=[0, end * 1.02])
    return fig


def bubble_figure(rows: Sequence[dict], title: str = "") -> go.Figure:
    """Measured idle share of the two stages (1 - busy / step) against the number of
    micro-batches M, beside GPipe's bubble 1 / (M + 1), and the speedup over the unsplit model
    on one rank (right axis). ``rows``: ``pipeline`` rows; a message if none."""
    pipe = sorted(_ok(rows, "pipeline"), key=lambda r: r["microbatches"])
    if not pipe:
        return message_figure("no pipeline rows to show")
    ms = [r["microbatches"] for r in pipe]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=ms, y=[r["idle_share"] for r in pipe], mode="lines+markers",
                             name="idle share, measured", line=dict(color=PARALLEL_COLORS["wait"])))
    fig.add_trace(go.Scatter(x=ms, y=[1 / (m + 1) for m in ms], mode="lines+markers",
                             name="bubble 1/(M+1), equal stages",
                             line=dict(color=PARALLEL_COLORS["ideal"], dash="dot")))
    fig.add_trace(go.Bar(x=ms, y=[r["speedup"] for r in pipe], name="speedup over unsplit",
                         marker_color=PARALLEL_COLORS["compute"], opacity=0.35), secondary_y=True)
    layout(fig, title or "The pipeline bubble shrinks with micro-batches",
           "micro-batches M", "idle share of the step", log_x=False, log_y=False)
    fig.update_yaxes(range=[0, 1], secondary_y=False)
    fig.update_yaxes(title_text="speedup over one rank", range=[0, 2.2], secondary_y=True)
    fig.update_xaxes(type="category")
    return fig


def allreduce_figure(rows: Sequence[dict], title: str = "") -> go.Figure:
    """Bus bandwidth of all-reduce (GB/s, log) against message size (bytes, log), one line per
    device and rank count, with a dotted line at the link's copy bandwidth; a message if none."""
    red = _ok(rows, "allreduce")
    if not red:
        return message_figure("no all-reduce rows to show")
    fig = go.Figure()
    groups: dict[tuple, list[dict]] = {}
    for r in red:
        groups.setdefault((str(r["device"]), r["ranks"]), []).append(r)
    for (dev, w), rs in groups.items():
        rs.sort(key=lambda r: r["message_bytes"])
        short = dev.split(",")[0][:40]
        fig.add_trace(go.Scatter(x=[r["message_bytes"] for r in rs],
                                 y=[r["busbw_gbps"] for r in rs], mode="lines+markers",
                                 name=f"{w} ranks, {short}"))
        link = rs[-1].get("copy_gbps")
        if _num(link):
            fig.add_trace(go.Scatter(x=[rs[0]["message_bytes"], rs[-1]["message_bytes"]],
                                     y=[link, link], mode="lines",
                                     line=dict(dash="dot", color=PARALLEL_COLORS["link"]),
                                     name=f"one copy, {short}"))
    return layout(fig, title or "All-reduce bandwidth against message size",
                  "message size (bytes)", "bus bandwidth (GB/s)")


def scaling_figure(rows: Sequence[dict], serial_share: float | None = None,
                   title: str = "") -> go.Figure:
    """Speedup of DDP over one rank against the number of ranks W (weak scaling: each rank's
    batch fixed), per device, with the ideal W and, if ``serial_share`` is given, Amdahl's
    1 / (s + (1 - s) / W); a message if no DDP row."""
    ddp = [r for r in _ok(rows, "ddp") if _num(r.get("speedup"))]
    if not ddp:
        return message_figure("no data-parallel rows to show")
    fig = go.Figure()
    groups: dict[str, list[dict]] = {}
    for r in ddp:
        groups.setdefault(str(r["device"]), []).append(r)
    top = max(r["ranks"] for r in ddp)
    ws = sorted({1, *(r["ranks"] for r in ddp)})
    for dev, rs in groups.items():
        rs.sort(key=lambda r: r["ranks"])
        pts = ([(1, 1.0)] if rs[0]["ranks"] > 1 else []) + [(r["ranks"], r["speedup"])
                                                             for r in rs]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts],
                                 mode="lines+markers", name=dev.split(",")[0][:48]))
    fig.add_trace(go.Scatter(x=ws, y=ws, mode="lines", name="ideal: W times",
                             line=dict(dash="dot", color=PARALLEL_COLORS["ideal"])))
    if serial_share is not None and 0 <= serial_share <= 1:
        grid = [1 + (top - 1) * i / 40 for i in range(41)]
        fig.add_trace(go.Scatter(
            x=grid, y=[1 / (serial_share + (1 - serial_share) / w) for w in grid], mode="lines",
            name=f"Amdahl, {serial_share:.0%} serial", line=dict(color=PARALLEL_COLORS["amdahl"])))
    layout(fig, title or "Data parallelism: speedup over one rank", "ranks W",
           "speedup (images/s over one rank's)", log_x=top > 8, log_y=top > 8)
    if not math.isnan(top):
        fig.update_xaxes(tickvals=ws)
    return fig

"""Charts of notebook 07: Table II, occupancy, coalescing, banks and divergence (the GPU itself,
SMs to device memory: :mod:`helpers.figures.nb07_gpu_anatomy`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from helpers import occupancy as occ_mod
from helpers.experiments.memory_access import BANKS, SECTOR_BYTES, WARP, conflict_degree
from helpers.figures import nb07_gpu_anatomy as _gpu_anatomy
from helpers.figures.style import COLORS, color_for, value

#: Colours of the study's strategy families in notebook 07 (its Table II).
_FAMILY_COLOR = {"unrolling": "im2col-gemm", "direct": "direct-naive", "FFT": "fft"}


def table2_figure(study_rows: Sequence[dict], our_rows: Sequence[dict] = (), device: str = "",
                  note: str = "") -> go.Figure:
    """The study's Table II beside our kernels: registers per thread and shared memory per
    block (KB), one bar per kernel, in two panels.

    Args:
        study_rows: :data:`helpers.experiments.kernel_resources.STUDY_TABLE_II`
            (``implementation``, ``strategy``, ``regs_per_thread``, ``smem_kb``): the study's
            K40c figures.
        our_rows: rows of :func:`helpers.experiments.kernel_resources.measure` (``kernel``,
            ``family``, ``regs_per_thread``, ``smem_per_block`` in bytes), live or recorded;
            empty: only the study's bars and ``note`` in the title.
        device: the GPU our rows were compiled for or measured on (the legend says
            "then, K40c" for the study's bars and "now, <device>" for ours).

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
            name="then, K40c: the study's libraries (CUDA 7.5, as reported)", legendgroup="study",
            showlegend=col == 1, marker_pattern_shape="/",
            hovertemplate="%{x}: %{y} (reported by the study)<extra></extra>"), row=1, col=col)
    if our_rows:
        ours = [r["kernel"].replace("_kernel", "") for r in our_rows]
        ocolors = [color_for(r.get("family", "")) for r in our_rows]
        fig.add_trace(go.Bar(
            x=ours, y=[r["regs_per_thread"] for r in our_rows], marker_color=ocolors,
            name=f"now, {device}: our kernels", legendgroup="ours",
            hovertemplate="%{x}: %{y} registers per thread<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(
            x=ours, y=[r["smem_per_block"] / 1024 for r in our_rows], marker_color=ocolors,
            name=f"now, {device}: our kernels", legendgroup="ours", showlegend=False,
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
        explanation: a :class:`helpers.experiments.memory_access.CoalescingExplanation` (addresses
            recorded by the kernel itself).

    Source: study Figure 6 (global load efficiency); CUDA C Best Practices Guide.
    """

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
        explanation: a :class:`helpers.experiments.memory_access.BankExplanation`.
        access: ``"read"`` (a column of the tile) or ``"write"`` (a row).

    Raises:
        ValueError: unknown access.

    Source: CUDA C Best Practices Guide, "Shared memory and memory banks".
    """
    from plotly.subplots import make_subplots

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
    """The path every thread took in :func:`helpers.experiments.memory_access.branch_kernel`:
    one row per warp, one cell per lane, for the branch on thread parity and on the warp index.

    Args:
        explanation: a :class:`helpers.experiments.memory_access.DivergenceExplanation`.
    """
    from plotly.subplots import make_subplots

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
        rows: rows of :func:`helpers.experiments.memory_access.measure` (live or from results/).
        source: where they were measured (GPU, driver and date), shown in the title.
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=(
        "coalescing: effective bandwidth", "transpose: bandwidth", "divergence: time"))
    co = sorted((r for r in rows if r["experiment"] == "coalescing"), key=lambda r: r["x"])
    fig.add_trace(go.Scatter(
        x=[r["x"] for r in co], y=[value(r["gb_s"]) for r in co], mode="lines+markers",
        line=dict(color=COLORS["torch"]), name="strided load", showlegend=False,
        hovertemplate="stride %{x}: %{y:,.0f} GB/s<extra></extra>"), row=1, col=1)
    tr = [r for r in rows if r["experiment"] == "transpose"]
    fig.add_trace(go.Bar(
        x=[r["variant"] for r in tr], y=[value(r["gb_s"]) for r in tr], showlegend=False,
        marker_color=[COLORS["direct-naive"], COLORS["numpy"], COLORS["numba"]][:len(tr)],
        hovertemplate="%{x}: %{y:,.0f} GB/s<extra></extra>"), row=1, col=2)
    dv = [r for r in rows if r["experiment"] == "divergence"]
    fig.add_trace(go.Bar(
        x=[f"branch on {r['variant']}" for r in dv], y=[value(r["median_ms"]) for r in dv],
        error_y=dict(type="data", array=[value(r["iqr_ms"]) / 2 for r in dv], visible=True),
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


#: What moved to :mod:`helpers.figures.nb07_gpu_anatomy`, still readable here so that a learner's
#: copy of an older notebook 07 keeps running.
MOVED = ("PUBLISHED", "GpuAnatomy", "anatomy_from_table", "anatomy_from_properties", "gpu_anatomy",
         "gpu_anatomy_figure")


def __getattr__(name: str):
    if name in MOVED:
        return getattr(_gpu_anatomy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

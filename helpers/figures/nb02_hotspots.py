"""Charts of notebook 02: where the time of the study's four networks goes (Figure 2)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import plotly.graph_objects as go

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
            source briefly (``"then, K40c"``, ``"now, CPU"``, ``"FLOPs"``).
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
        legend={"orientation": "h", "y": -0.32, "title_text": "layer type"},
        margin={"l": 70, "r": 20, "t": 80, "b": 60})
    fig.update_yaxes(title_text="share of training time (%)", range=[0, 100])
    fig.update_xaxes(tickfont={"size": 10})
    return fig


def _gpu_name(label: str) -> str:
    """``"GPU: NAME (driver 550.54.15)"`` -> ``"NAME"``: short enough for an axis label."""
    name = label.removeprefix("GPU: ")
    return re.sub(r" \(driver [^)]*\)$", "", name)


def then_and_now_figure(profiles: Sequence, study: dict[str, float],
                        title: str = "Share of training time by layer type: then and now"
                        ) -> go.Figure:
    """The study's Figure 2 beside GPU profiles (recorded in results/ or measured on a GPU).

    For each network: a ``"then, K40c"`` bar (the study's convolution share; the rest is not
    split) and one ``"now, <GPU>"`` bar per GPU profile, stacked by layer type. The subtitle
    names each GPU in full (with its driver), the date, batch, input sizes and iterations.

    Args:
        profiles: :class:`helpers.experiments.layer_times.HotspotProfile` objects measured on
            GPUs (e.g. :func:`helpers.experiments.hotspots.recorded`'s ``profiles``).
        study: the study's convolution share per model key
            (:data:`helpers.paper.STUDY_FIGURE2`).
        title: figure title.

    Raises:
        ValueError: no profiles.

    Source: Li et al., ICPP 2016, Figure 2 (Tesla K40c).
    """
    if not profiles:
        raise ValueError("profiles must not be empty")
    bars, done = [], set()
    for p in profiles:
        if p.model in study and p.model not in done:
            done.add(p.model)
            bars.append((p.name, "then, K40c", {"convolution": study[p.model],
                                               "not convolution (not split)": 1 - study[p.model]}))
        bars.append((p.name, f"now, {_gpu_name(p.device_label)}", p.shares))
    runs = dict.fromkeys(
        f"{p.device_label}, {p.date or 'measured now'}: batch {p.batch}, {p.iterations} "
        f"iterations" for p in profiles)
    inputs = sorted({p.input_size for p in profiles})
    subtitle = (f"now: {'; '.join(runs)}; inputs {inputs} px<br>"
                "then: Tesla K40c, the study's Figure 2 (reported, convolution share only)")
    fig = hotspot_figure(bars, title=title, subtitle=subtitle)
    fig.update_layout(margin={"t": 110})
    return fig

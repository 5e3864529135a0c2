"""The workbook's chart style: one colour per backend or strategy (Okabe-Ito palette), line
styles per device kind, the common layout, the message figure a widget shows instead of a chart,
and the charts more than one notebook draws.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from helpers.device import backend
from helpers.figures import colab_renderer

#: One colour per backend or strategy, kept across the whole workbook (colour-blind-safe
#: Okabe-Ito palette); ``reference-tf32``, the library in TF32, a lighter shade of
#: ``reference``'s blue, greyer than ``im2col-gemm``'s sky blue.
COLORS = {
    "numpy": "#E69F00",
    "torch": "#0072B2",
    "numba": "#009E73",
    "numba-tiled": "#009E73",
    "numba-naive": "#D55E00",
    "cublas": "#0072B2",
    "reference": "#0072B2",
    "reference-tf32": "#94B8DB",
    "direct-naive": "#D55E00",
    "direct-tiled": "#CC79A7",
    "im2col-gemm": "#56B4E9",
    "im2col-tiled": "#009E73",
    "fft": "#000000",
    "winograd": "#E69F00",
    "peak": "#555555",
}

#: Line style by device kind: measured on this machine's CPU, on a GPU, or from results/.
DASHES = {"cpu": "solid", "cuda": "dash", "reference": "dot"}


def color_for(name: str) -> str:
    """The workbook's colour for a backend or strategy name (grey if unknown)."""
    return COLORS.get(name, "#999999")


def setup_notebook() -> str:
    """Choose the plotly renderer: in Colab, :mod:`helpers.figures.colab_renderer`'s (each
    figure waits for plotly.js, so it also draws inside a widget's output); elsewhere the notebook
    mimetype (rendered by JupyterLab) plus a light HTML fallback. Returns the renderer name."""
    pio.templates.default = "plotly_white"
    renderer = (colab_renderer.register() if backend.in_colab()
                else "plotly_mimetype+notebook_connected")
    pio.renderers.default = renderer
    return renderer


def layout(fig: go.Figure, title: str, x_title: str, y_title: str, log_x=True, log_y=True):
    fig.update_layout(
        title=title, template="plotly_white", height=430,
        legend=dict(orientation="v", x=1.02, y=1, font=dict(size=11)),
        margin=dict(l=70, r=20, t=60, b=60),
    )
    fig.update_xaxes(title_text=x_title, type="log" if log_x else "linear")
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
    return fig


def message_figure(message: str) -> go.Figure:
    """An empty chart carrying a message (used where a chart cannot be drawn)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(template="plotly_white", height=200)
    return fig


def grey_uint8(img: np.ndarray, max_px: int) -> np.ndarray:
    """Subsample to at most ``max_px`` per side and stretch the 0.5th..99.5th percentiles to
    0..255 (uint8 keeps the figure's JSON small; a few extreme pixels do not wash it out)."""
    img = np.asarray(img, dtype=np.float64)
    step = max(1, int(math.ceil(max(img.shape) / max_px)))
    img = img[::step, ::step]
    lo, hi = (float(v) for v in np.percentile(img, [0.5, 99.5]))
    img = np.clip(img, lo, hi)
    scaled = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
    return np.round(scaled * 255).astype(np.uint8)


def filtered_images_figure(panels: Sequence[tuple[str, np.ndarray]], device: str,
                           cols: int = 3, max_px: int = 128,
                           title: str = "One photograph, several filters") -> go.Figure:
    """A grid of greyscale images, e.g. a photograph and its convolutions with classic filters.

    Args:
        panels: (title, image) pairs; each image a 2-D float array (H, W) in any units. Each
            panel's contrast is stretched to its own range (0.5th..99.5th percentile = black..
            white), so a signed response (Sobel, Laplacian) shows zero as mid-grey when its
            range is symmetric.
        device: what computed the convolutions (shown in the title).
        cols: panels per row (>= 1).
        max_px: images are subsampled to at most this many pixels per side.

    Raises:
        ValueError: no panels, a panel that is not 2-D, or cols < 1.
    """
    from plotly.subplots import make_subplots

    if not panels:
        raise ValueError("panels must not be empty")
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    for name, img in panels:
        if np.ndim(img) != 2:
            raise ValueError(f"panel {name!r} must be a 2-D image (H, W), "
                             f"got shape {np.shape(img)}")
    rows = int(math.ceil(len(panels) / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[name for name, _ in panels],
                        horizontal_spacing=0.02, vertical_spacing=0.08)
    for j, (name, img) in enumerate(panels):
        row, col = j // cols + 1, j % cols + 1
        fig.add_trace(go.Heatmap(z=grey_uint8(img, max_px), colorscale="gray", showscale=False,
                                 zmin=0, zmax=255, name=name,
                                 hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}<extra></extra>"),
                      row=row, col=col)
        axis = "" if j == 0 else str(j + 1)
        fig.update_xaxes(visible=False, scaleanchor=f"y{axis}", constrain="domain",
                         row=row, col=col)
        fig.update_yaxes(visible=False, autorange="reversed", constrain="domain", row=row, col=col)
    fig.update_layout(title=f"{title}<br><sup>computed by {device}; each panel's contrast "
                            f"stretched to its own range</sup>",
                      template="plotly_white", height=60 + 270 * rows, width=820,
                      margin=dict(l=10, r=10, t=80, b=10))
    return fig




def value(v):
    """A number from a measurement row (live, or parsed from a results/ CSV), or None."""
    return None if v in (None, "") else float(v)


def is_on(v) -> bool:
    """A flag from a live row (bool) or a results/ CSV (the strings "True"/"False")."""
    return v is True or str(v).lower() in ("true", "1", "on", "yes")


def message_html(text: str, kind: str = "error") -> str:
    """``text`` (escaped) in a box with a coloured left edge: ``kind`` ``"error"`` or ``"info"``."""
    color = {"error": "#a40000", "info": "#333333"}[kind]
    return (f"<div style='padding:0.6em;border-left:4px solid {color};color:{color}'>"
            f"{html.escape(text)}</div>")


def list_html(title: str, items: list[str], kind: str = "info") -> str:
    """A message box with a title line and one escaped line per item."""
    color = {"error": "#a40000", "info": "#333333"}[kind]
    lines = "".join(f"<li>{html.escape(item)}</li>" for item in items)
    return (f"<div style='padding:0.6em;border-left:4px solid {color};color:{color}'>"
            f"{html.escape(title)}<ul style='margin:0.3em 0 0 0'>{lines}</ul></div>")


def quartile_bars(rows: Sequence[dict], median: str, q1: str, q3: str, iqr: str,
                  scale: float = 1.0) -> tuple[list[float | None], list[float | None]]:
    """(up, down) error-bar lengths from each row's ``median`` to its third and first quartile
    (keys ``q3`` and ``q1``), times ``scale``; never below zero. Rows without quartiles
    (recorded runs keep only the interquartile range, key ``iqr``) get half of it each way,
    cut at zero time; rows without either, and live rows with fewer than
    :data:`MIN_TIMED_BLOCKS` timed blocks (key ``repeats``), get None: no bar."""
    up, down = [], []
    for r in rows:
        m = float(r[median])
        if r.get("repeats") is not None and r["repeats"] < MIN_TIMED_BLOCKS:
            up.append(None)
            down.append(None)
        elif r.get(q1) is not None and r.get(q3) is not None:
            up.append(max(0.0, float(r[q3]) - m) * scale)
            down.append(max(0.0, m - float(r[q1])) * scale)
        else:
            spread = float(r[iqr]) if r.get(iqr) not in (None, "") else math.nan
            half = spread / 2 if math.isfinite(spread) else 0.0
            up.append(half * scale)
            down.append(min(half, m) * scale)
    return up, down


#: Timed blocks a live point needs for a quartile bar (helpers.experiments.live.MIN_REPEATS).
MIN_TIMED_BLOCKS = 5
#: A point whose third quartile is more than this many times its first is flagged noisy.
NOISY_RATIO = 2.0


def timing_note(r: dict, q1: str, q3: str) -> str:
    """What a live point's statistics rest on, for its hover text and label: how many blocks
    were timed (and calls in each), "too few for quartiles" under :data:`MIN_TIMED_BLOCKS`,
    "noisy: the machine is busy" when its quartiles differ more than :data:`NOISY_RATIO`
    times, and the threads it ran on. "" for rows that do not say (recorded runs)."""
    blocks = r.get("repeats")
    if blocks is None:
        return ""
    calls = r.get("calls_per_repeat") or 1
    parts = [f"median of {blocks} timed call{'s' if blocks != 1 else ''}" if calls == 1 else
             f"median of {blocks} timed blocks of {calls} calls"]
    if blocks < MIN_TIMED_BLOCKS:
        parts.append(f"too few for quartiles (under {MIN_TIMED_BLOCKS}): no bar")
    elif noisy(r, q1, q3):
        parts.append("noisy: the machine is busy")
    if r.get("threads"):
        parts.append(f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}")
    return "; ".join(parts)


def noisy(r: dict, q1: str, q3: str) -> bool:
    """Whether a row's third quartile exceeds its first by more than :data:`NOISY_RATIO`."""
    lo, hi = r.get(q1), r.get(q3)
    return lo is not None and hi is not None and float(hi) > NOISY_RATIO * float(lo)

"""Charts of notebook 09: training images, loss, throughput, wait/compute and utilisation."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from helpers.figures.style import DASHES, is_on, layout, message_figure

#: Colours of the training notebook: one per model (kept across its charts) and per time share.
TRAINING_COLORS = {"small": "#56B4E9", "resnet20": "#009E73", "vgg": "#D55E00",
                   "wait": "#E69F00", "compute": "#0072B2", "cpu_util": "#E69F00",
                   "gpu_util": "#0072B2"}


def _training_ok(r: dict) -> bool:
    return str(r.get("status", "")) == "ok" and math.isfinite(float(r.get("images_per_s", "nan")))


def labelled_images_figure(images: np.ndarray, labels: Sequence[int], classes: Sequence[str],
                           title: str, cols: int = 8) -> go.Figure:
    """A mosaic of small greyscale images with their class names (e.g. lfw_subset faces).

    Args:
        images: (n, H, W) float array, any range (each image stretched to its own min..max);
            H and W at most 128 (the figure's JSON stays small).
        labels: n class indices. classes: name per class index.
        title: figure title (say which dataset). cols: images per row (>= 1).

    Raises:
        ValueError: images not 3-D, more than 128 pixels per side, labels of another length,
            or cols < 1.
    """
    images = np.asarray(images, dtype=np.float64)
    if images.ndim != 3 or images.shape[1] > 128 or images.shape[2] > 128:
        raise ValueError(f"images must be (n, H, W) with H, W <= 128, got {images.shape}")
    if len(labels) != len(images):
        raise ValueError(f"labels must have {len(images)} entries, got {len(labels)}")
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    n, h, w = images.shape
    rows = int(math.ceil(n / cols))
    gap = 2
    mosaic = np.full((rows * (h + gap), cols * (w + gap)), 255, np.uint8)  # white gaps
    fig = go.Figure()
    for j, img in enumerate(images):
        lo, hi = img.min(), img.max()
        img = np.round((img - lo) / (hi - lo) * 255) if hi > lo else np.zeros_like(img)
        img = img.astype(np.uint8)
        r, c = divmod(j, cols)
        mosaic[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = img
        fig.add_annotation(x=c * (w + gap) + w / 2, y=r * (h + gap) - 0.5, text=classes[labels[j]],
                           showarrow=False, yanchor="bottom", font=dict(size=10))
    fig.add_trace(go.Heatmap(z=mosaic, colorscale="gray", showscale=False, zmin=0, zmax=255,
                             hoverinfo="skip"))
    fig.update_xaxes(visible=False, scaleanchor="y", constrain="domain")
    fig.update_yaxes(visible=False, autorange="reversed", constrain="domain")
    fig.update_layout(title=title, template="plotly_white", height=110 + 95 * rows, width=820,
                      margin=dict(l=10, r=10, t=70, b=10), plot_bgcolor="#ffffff")
    return fig


def training_loss_figure(result, threshold: float | None = None) -> go.Figure:
    """Training loss per step (thin) and per epoch (markers) of a training run.

    Args:
        result: a :class:`helpers.experiments.training.TrainResult`.
        threshold: the accuracy it was meant to reach (shown in the title), or None.

    The title names the model, dataset, device and the test accuracy reached (against
    ``threshold`` if given). Axes: step (linear), cross-entropy loss in nats (log).
    """
    steps_per_epoch = max(1, len(result.losses) // max(1, len(result.epoch_losses)))
    fig = go.Figure()
    fig.add_trace(go.Scatter(y=result.losses, mode="lines", name="loss per step",
                             line=dict(color=TRAINING_COLORS.get(result.model, "#999999"),
                                       width=1),
                             hovertemplate="step %{x}: %{y:.3g}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[(e + 1) * steps_per_epoch - 1 for e in range(len(result.epoch_losses))],
        y=result.epoch_losses, mode="markers", name="mean over the epoch",
        marker=dict(color="#000000", size=6),
        hovertemplate="epoch end, step %{x}: %{y:.3g}<extra></extra>"))
    goal = f" (threshold {threshold:.0%})" if threshold is not None else ""
    title = (f"Training {result.model} on {result.dataset}: test accuracy "
             f"{result.test_accuracy:.0%}{goal} after {result.epochs} epochs, "
             f"{result.seconds:.1f} s<br><sup>trained on {result.device}</sup>")
    return layout(fig, title, "training step", "cross-entropy loss (nats)", log_x=False)


def images_per_s_figure(rows: Sequence[dict], title: str = "Training throughput against batch size"
                        ) -> go.Figure:
    """Training images/s against batch size: one line per (model, device, source).

    Args:
        rows: :func:`helpers.experiments.training.throughput.batch_size_sweep` rows, live or
            from results/ (rows with ``source`` other than live are drawn dotted); rows not
            measured are left out.
        title: the measuring devices are appended.

    Returns:
        Log-log chart (batch size, images/s); a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault((r["model"], r["device"], r.get("source", "live")), []).append(r)
    fig = go.Figure()
    for (model, device, source), g in groups.items():
        g.sort(key=lambda r: int(r["batch_size"]))
        kind = "reference" if source != "live" else g[0]["device_kind"]
        fig.add_trace(go.Scatter(
            x=[int(r["batch_size"]) for r in g], y=[float(r["images_per_s"]) for r in g],
            mode="lines+markers", name=f"{model}, {device}" + (" (results/)" if source != "live"
                                                               else ""),
            line=dict(color=TRAINING_COLORS.get(model, "#999999"), dash=DASHES.get(kind)),
            hovertemplate="batch %{x}: %{y:,.0f} images/s<extra></extra>"))
    datasets = ", ".join(sorted({str(r["dataset"]) for r in ok}))
    fig = layout(fig, f"{title}<br><sup>dataset: {datasets}; "
                       f"{ok[0]['channels']}x{ok[0]['image_size']}x{ok[0]['image_size']} images; "
                       "legend: model, measuring device</sup>",
                  "batch size (images per step)", "training throughput (images/s)")
    fig.update_layout(showlegend=True)
    return fig


def wait_compute_figure(rows: Sequence[dict], title: str = "Where a training step's time goes"
                        ) -> go.Figure:
    """Stacked bars per (augmentation, workers): milliseconds per step waiting for data
    (``next(iterator)``) and computing (forward, backward, optimiser step), with images/s on top.

    Args:
        rows: :func:`helpers.experiments.training.throughput.workers_sweep` rows of one device
            (live or results/).
        title: the device and dataset are appended.

    Returns:
        A bar chart; a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    x = [["augmentation on" if is_on(r["augment"]) else "augmentation off" for r in ok],
         [f"{int(r['workers'])} worker" + ("" if int(r["workers"]) == 1 else "s") for r in ok]]
    per_step = [1e3 / float(r["steps"]) for r in ok]
    fig = go.Figure()
    for part, name in (("wait_s", "waiting for data"), ("compute_s", "computing")):
        fig.add_trace(go.Bar(
            x=x, y=[float(r[part]) * k for r, k in zip(ok, per_step)], name=name,
            marker_color=TRAINING_COLORS["wait" if part == "wait_s" else "compute"],
            hovertemplate="%{x}: %{y:.3g} ms per step<extra>" + name + "</extra>"))
    fig.add_trace(go.Scatter(
        x=x, y=[float(r["total_s"]) * k for r, k in zip(ok, per_step)], mode="text",
        text=[f"{float(r['images_per_s']):,.0f}/s" for r in ok], textposition="top center",
        showlegend=False, hoverinfo="skip"))
    devices = ", ".join(sorted({str(r["device"]) for r in ok}))
    fig = layout(fig, f"{title}<br><sup>{ok[0]['model']}, batch {ok[0]['batch_size']}, "
                       f"{ok[0]['dataset']}; measured on {devices}; images/s on top</sup>",
                  "", "time per training step (ms)", log_x=False, log_y=False)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="multicategory")
    return fig


def utilisation_figure(samples: Sequence[dict], device: str, gpu_reason: str | None = None,
                       title: str = "Utilisation while training") -> go.Figure:
    """GPU utilisation (NVML) and CPU utilisation (psutil) over time, in percent.

    Args:
        samples: :class:`helpers.experiments.training.utilisation.UtilisationSampler` samples
            (``t_s``, ``gpu_util``, ``cpu_util``), live or from results/.
        device: what was training (shown in the title).
        gpu_reason: why there is no GPU curve, shown in the title when given.

    Returns:
        A line chart (seconds, percent 0-100); a message figure when there are no samples.
    """
    if not samples:
        return message_figure(gpu_reason or "No utilisation samples")
    t = [float(s["t_s"]) for s in samples]
    fig = go.Figure()
    for key, name in (("gpu_util", "GPU utilisation (NVML)"),
                      ("cpu_util", "CPU utilisation, all cores (psutil)")):
        y = [float(s[key]) for s in samples]
        if all(math.isnan(v) for v in y):
            continue
        fig.add_trace(go.Scatter(x=t, y=y, mode="lines", name=name,
                                 line=dict(color=TRAINING_COLORS[key]),
                                 hovertemplate="%{x:.1f} s: %{y:.0f} %<extra></extra>"))
    note = f"<br><sup>{gpu_reason}</sup>" if gpu_reason else ""
    fig = layout(fig, f"{title}: {device}{note}", "time since start (s)", "utilisation (%)",
                  log_x=False, log_y=False)
    fig.update_yaxes(range=[0, 105])
    return fig


def depth_figure(rows: Sequence[dict], title: str = "Training throughput by model depth"
                 ) -> go.Figure:
    """Images/s per model (shallow to deep), one bar group per device (live or results/).

    Args:
        rows: :func:`helpers.experiments.training.throughput.depth_sweep` rows; results/ rows
            carry ``source``.

    Returns:
        Grouped bars on a log axis; a message figure when no row was measured.
    """
    ok = [r for r in rows if _training_ok(r)]
    if not ok:
        return message_figure("No measured rows to draw")
    order = sorted({(int(r["depth"]), str(r["model"])) for r in ok})
    names = [f"{m} ({d} layers)" for d, m in order]
    fig = go.Figure()
    patterns = ["", "/", ".", "x", "\\", "+"]
    for j, device in enumerate(dict.fromkeys(str(r["device"]) for r in ok)):
        by_model = {r["model"]: r for r in ok if str(r["device"]) == device}
        fig.add_trace(go.Bar(
            x=[n for (d, m), n in zip(order, names) if m in by_model],
            y=[float(by_model[m]["images_per_s"]) for d, m in order if m in by_model],
            name=device, marker_color=[TRAINING_COLORS.get(m, "#999999")
                                       for d, m in order if m in by_model],
            marker_pattern_shape=patterns[j % len(patterns)],
            hovertemplate="%{x}: %{y:,.0f} images/s<extra>" + device + "</extra>"))
    values = [float(r["images_per_s"]) for r in ok]
    devices = ", ".join(dict.fromkeys(str(r["device"]) for r in ok))
    batches = "/".join(str(b) for b in dict.fromkeys(r["batch_size"] for r in ok))
    datasets = "/".join(dict.fromkeys(str(r["dataset"]) for r in ok))
    fig = layout(fig, f"{title}<br><sup>batch {batches}, {datasets}; "
                       f"measured on {devices} (bar pattern = device)</sup>",
                  "model (weight layers)", "training throughput (images/s)", log_x=False,
                  log_y=max(values) > 20 * min(values))
    fig.update_layout(barmode="group", showlegend=True)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=names)
    return fig

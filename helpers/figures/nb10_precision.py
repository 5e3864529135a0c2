"""Charts of notebook 10: error against float64 and speed per precision, and the roofline with
a GPU's tensor-core ceilings (rows of :mod:`helpers.experiments.precision`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import plotly.graph_objects as go

from helpers.device import backend
from helpers.experiments.precision import PRECISIONS, ceilings
from helpers.figures.nb01_throughput import roofline_figure
from helpers.figures.style import color_for, is_on, layout, message_figure, value

#: How each precision is named on an axis: float32 rows ran with TF32 off.
PRECISION_LABELS = {"float32": "float32 (TF32 off)", "tf32": "TF32", "bfloat16": "bfloat16",
                    "float16": "float16"}
#: One colour per ceiling of the roofline (Okabe-Ito), FP32 in the workbook's GPU blue.
CEILING_COLORS = {"fp32": "#0072B2", "tf32": "#009E73", "bf16": "#E69F00", "fp16": "#D55E00"}
_CEILING_NAMES = {"fp32": "FP32 (CUDA cores)", "tf32": "TF32 tensor cores",
                  "bf16": "BF16 tensor cores", "fp16": "FP16 tensor cores"}
_PATTERNS = ["", "/", "\\", "x", ".", "+", "-", "|"]
_SYMBOLS = ["circle", "square", "diamond", "triangle-up", "star", "hexagon", "cross", "x"]
_ITEMSIZE = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2}


def _ok(rows: Iterable[dict], op: str, key: str) -> list[dict]:
    return [r for r in rows if r.get("op") == op and str(r.get("status", "")) == "ok"
            and value(r.get(key)) is not None]


def _series(rows: Sequence[dict]) -> dict[tuple, list[dict]]:
    """Rows grouped by (layer, strategy, device, source), points in :data:`PRECISIONS` order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (str(r["layer"]), str(r["strategy"]), str(r["device"]), r.get("source", ""))
        groups.setdefault(key, []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: PRECISIONS.index(r["precision"]))
    return groups


def _name(key: tuple, op: str) -> str:
    layer, strategy, device, source = key
    what = layer if op == "gemm" else f"{layer}, {strategy}"
    return f"{what}; {device}" + (" (results/)" if source == "reference" else "")


def _hover(r: dict) -> str:
    native = "native" if is_on(r.get("native")) else "not native"
    return f"{r['precision']}: {r.get('arithmetic') or native}"


def _devices(rows: Sequence[dict]) -> str:
    """The devices, and the precisions a CPU among them only emulates."""
    text = "; ".join(sorted({str(r["device"]) for r in rows}))
    emulated = [p for p in PRECISIONS if any(
        r["precision"] == p and r.get("device_kind") == "cpu" and not is_on(r.get("native"))
        for r in rows)]
    return text + (f" ({', '.join(emulated)} emulated: no native instructions on this CPU)"
                   if emulated else "")


def _categories(fig: go.Figure) -> go.Figure:
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[PRECISION_LABELS[p] for p in PRECISIONS])
    return fig


def _empty(rows: Sequence[dict], op: str) -> go.Figure:
    reasons = sorted({str(r.get("status")) for r in rows if r.get("op") == op})
    return message_figure(f"No {op} row was measured" + (f": {reasons[0]}" if reasons else ""))


def error_figure(rows: Sequence[dict], op: str = "gemm", title: str | None = None) -> go.Figure:
    """Relative error against float64 per precision, log y: the max error (filled markers)
    and the RMS error (open markers) of each (layer, strategy, device).

    Args:
        rows: :func:`helpers.experiments.precision.measure` rows, live or from results/
            (:func:`~helpers.experiments.precision.recorded`); rows whose status is not
            ``"ok"`` (a precision that cannot run, a pair that does not apply) are left out.
        op: ``"gemm"`` or ``"conv"``. title: default names the op; the devices follow it.

    Returns:
        The figure, its title naming the devices that measured it; a message figure when no
        row of ``op`` was measured.

    Source: Micikevicius et al., "Mixed Precision Training", ICLR 2018 (the formats' bits).
    """
    ok = _ok(rows, op, "max_rel_error")
    if not ok:
        return _empty(rows, op)
    fig = go.Figure()
    layers = sorted({str(r["layer"]) for r in ok})
    for key, g in _series(ok).items():
        color = color_for("torch" if op == "gemm" else key[1])
        symbol = _SYMBOLS[layers.index(key[0]) % len(_SYMBOLS)]
        x = [PRECISION_LABELS[r["precision"]] for r in g]
        text = [_hover(r) for r in g]
        for field, what, fill in (("max_rel_error", "max", True), ("rms_rel_error", "RMS", False)):
            fig.add_trace(go.Scatter(
                x=x, y=[value(r.get(field)) for r in g], mode="lines+markers", text=text,
                name=f"{what} error: {_name(key, op)}",
                line=dict(color=color, dash="solid" if fill else "dot", width=1),
                marker=dict(size=10, color=color if fill else "white", symbol=symbol,
                            line=dict(color=color, width=2)),
                hovertemplate=f"%{{text}}<br>{what} relative error %{{y:.2e}}<extra></extra>"))
    what = "GEMM (n x n x n)" if op == "gemm" else "convolution"
    fig = layout(fig, f"{title or f'Error of {what} against float64'}<br>"
                      f"<sup>measured on {_devices(ok)}</sup>",
                 "precision", "relative error (max |y - y64| / max |y64|, and RMS)",
                 log_x=False, log_y=True)
    return _categories(fig)


def speed_figure(rows: Sequence[dict], op: str = "gemm", title: str | None = None,
                 log_y: bool = True) -> go.Figure:
    """Throughput (TFLOP/s) per precision as bars, one bar group per precision and one bar per
    (layer, strategy, device); hover gives the median time and what does the arithmetic
    (native or emulated on a CPU, tensor cores on a GPU).

    Args:
        rows, op: as :func:`error_figure`. title: default names the op.
        log_y: a log axis (an emulated dtype on a CPU can be 30 times slower than float32).

    Returns:
        The figure, its title naming the devices; a message figure when nothing was measured.
    """
    ok = _ok(rows, op, "tflop_s")
    if not ok:
        return _empty(rows, op)
    fig = go.Figure()
    layers = sorted({str(r["layer"]) for r in ok})
    for key, g in _series(ok).items():
        fig.add_trace(go.Bar(
            x=[PRECISION_LABELS[r["precision"]] for r in g],
            y=[value(r["tflop_s"]) for r in g], name=_name(key, op),
            marker=dict(color=color_for("torch" if op == "gemm" else key[1]),
                        pattern_shape=_PATTERNS[layers.index(key[0]) % len(_PATTERNS)]),
            text=[f"{_hover(r)}<br>median {value(r['median_ms']):.3g} ms" for r in g],
            hovertemplate="%{text}<br>%{y:.3g} TFLOP/s<extra></extra>"))
    what = "GEMM (n x n x n)" if op == "gemm" else "convolution (FLOPs of direct convolution)"
    fig = layout(fig, f"{title or f'Speed of {what} by precision'}<br>"
                      f"<sup>measured on {_devices(ok)}</sup>",
                 "precision", "throughput (TFLOP/s)", log_x=False, log_y=log_y)
    fig.update_layout(barmode="group")
    return _categories(fig)


def tensor_core_roofline_figure(gpu, rows: Sequence[dict] = (),
                                title: str | None = None) -> go.Figure:
    """The roofline of one GPU with a ceiling per precision: FP32 (CUDA cores) and the dense
    TF32, BF16 and FP16 tensor-core peaks of its datasheet, all under its memory-bandwidth
    slope (:func:`helpers.figures.nb01_throughput.roofline_figure`, one roof per ceiling).

    Args:
        gpu: a GPU name for :func:`helpers.experiments.precision.ceilings` (``"H100 SXM"``)
            or the dict it returns.
        rows: GEMM rows (``"ok"``); those whose device is this GPU are drawn as points at the
            intensity of an n x n x n GEMM, 2n / (3 * bytes per element) FLOP/byte.
        title: default names the GPU.

    Returns:
        The figure; ceilings the GPU lacks (None in the table) are left out and named in the
        title. Raises ValueError: a GPU not in the table.
    """
    roofs = ceilings(gpu) if not isinstance(gpu, dict) else gpu
    lines = [(f"{roofs['name']} {_CEILING_NAMES[k]}: {roofs[k] / 1e12:,.4g} TFLOP/s "
              "(datasheet)", roofs[k], roofs["bandwidth"], CEILING_COLORS[k])
             for k in _CEILING_NAMES if roofs.get(k)]
    absent = [_CEILING_NAMES[k] for k in _CEILING_NAMES if not roofs.get(k)]
    head = title or f"Roofline of the {roofs['name']} with its tensor-core ceilings"
    sub = f"datasheet peaks, dense; {roofs['bandwidth'] / 1e12:.3g} TB/s memory bandwidth"
    if absent:
        sub += f"; none on this GPU: {', '.join(absent)}"
    fig = roofline_figure(lines, title=f"{head}<br><sup>{sub}</sup>")
    ok = [r for r in _ok(rows, "gemm", "tflop_s") if r.get("device_kind") == "cuda"
          and getattr(backend.lookup_gpu(str(r["device"])), "name", None) == roofs["name"]]
    for precision in PRECISIONS:
        g = [r for r in ok if r["precision"] == precision]
        if not g:
            continue
        n = [int(str(r["layer"]).removeprefix("n=")) for r in g]
        fig.add_trace(go.Scatter(
            x=[2 * k / (3 * _ITEMSIZE[precision]) for k in n],
            y=[value(r["tflop_s"]) * 1e3 for r in g], mode="markers",
            marker=dict(size=10, symbol="circle",
                        color=CEILING_COLORS[{"float32": "fp32", "tf32": "tf32",
                                              "bfloat16": "bf16", "float16": "fp16"}[precision]],
                        line=dict(color="#000000", width=1)),
            text=[f"n = {k}, {r['device']}" for k, r in zip(n, g)],
            name=f"measured GEMM, {PRECISION_LABELS[precision]}",
            hovertemplate="%{text}: %{y:,.0f} GFLOP/s<extra></extra>"))
    return fig

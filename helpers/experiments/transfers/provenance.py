"""Which arithmetic a measured convolution of the transfer experiments ran in: float32 or TF32.

The overlap and share experiments run torch's own convolution on float32 tensors and leave
torch's flags as they are, so on a GPU of compute capability 8.0 or newer cuDNN may compute in
TF32 (``torch.backends.cudnn.allow_tf32``, True by default). :func:`compute_precision` reads a
row's provenance (the recording's environment in ``results/``, or this machine for a live row)
and checks the achieved rate against the GPU's FP32 peak recorded with it: a rate above that
peak cannot be float32 arithmetic. :func:`fp32_compute` finds the same convolution's FP32 time
(TF32 off) on the same GPU in ``results/precision_*``; :func:`precision_lines` says both for a
table of rows. Times in ms, rates in TFLOP/s (10^12 FLOP/s).

Source: torch's notes "TensorFloat-32 (TF32) on Ampere (and later) devices"; NVIDIA A100
Tensor Core GPU Architecture (2020), "TF32".
"""

from __future__ import annotations

import torch

from helpers import results
from helpers.device import backend
from helpers.device.precision import TF32_CAPABILITY
from helpers.experiments import precision
from helpers.experiments.transfers.measured import PREFIX
from helpers.experiments.transfers.model import layer_for

__all__ = ["PRECISIONS", "compute_precision", "fp32_compute", "precision_lines"]

#: What :func:`compute_precision` can say: TF32 shown by the rate, TF32 allowed but not shown,
#: float32, or unknown (no GPU named in the provenance).
PRECISIONS = ("tf32", "tf32 allowed", "float32", "unknown")


def _environment(row: dict, directory) -> tuple[dict, bool]:
    """(environment, recorded): the recording's for a ``results/`` row, this machine's for a
    live one."""
    if row.get("source") != "reference":
        return backend.info().as_dict(), False
    for ds in results.find(PREFIX, directory):
        if row.get("device") == f"{ds.device}, {ds.date[:10]}":
            return ds.meta.get("environment", {}), True
    return {}, True


def compute_precision(row: dict, directory=None) -> dict:
    """The arithmetic of the convolution behind a row's ``compute_ms``, from its provenance.

    Args:
        row: an overlap or share row (live from
            :func:`helpers.experiments.transfers.overlap_experiment`, or read from
            ``results/`` by :func:`helpers.experiments.transfers.recorded`) with ``layer``,
            ``b``, ``compute_ms`` and ``device``; a share row's ``pass`` says whether the
            time includes the backward pass (3x the forward's FLOPs).
        directory: where recorded rows come from (default ``results/``).

    Returns:
        dict: ``precision`` (one of :data:`PRECISIONS`); ``tflop_s`` (FLOPs / compute_ms, None
        without a time); ``fp32_peak_tflop_s`` (the GPU's datasheet FP32 peak stored with the
        run, or None); ``compute_capability`` (e.g. ``"9.0"``, or None); ``short``
        (``"TF32"``, ``"TF32 allowed"``, ``"FP32"`` or ``"unknown"``), ``basis`` (what the
        provenance says: GPU, flags) and ``label`` (one line saying which and why).

    Raises:
        ValueError: a row whose ``layer`` is not a Table I name.
    """
    env, recorded = _environment(row, directory)
    lay = layer_for(row["layer"], int(row["b"]) if row.get("b") else None)
    flops = lay.flops * (3 if row.get("pass") == "forward+backward" else 1)
    ms = row.get("compute_ms")
    rate = flops / (float(ms) * 1e-3) / 1e12 if ms else None
    peak = env.get("gpu_peak_fp32_flops")
    peak = float(peak) / 1e12 if peak else None
    cc = env.get("gpu_compute_capability")
    out = dict(tflop_s=rate, fp32_peak_tflop_s=peak, compute_capability=cc, basis="")
    if not cc:
        return dict(out, precision="unknown", short="unknown",
                    label="unknown: the provenance names no GPU, so no precision can be told")
    allowed = True if recorded else bool(torch.backends.cudnn.allow_tf32)
    major, minor = (int(v) for v in str(cc).split(".")[:2])
    if (major, minor) < TF32_CAPABILITY or not allowed:
        why = f"compute capability {cc} has no TF32" if allowed else "TF32 switched off"
        return dict(out, precision="float32", short="FP32", basis=why,
                    label=f"FP32 (float32 arithmetic: {why})")
    basis = ("cuDNN on float32 tensors, compute capability " + str(cc) + ", "
             + ("cudnn.allow_tf32 left at torch's default, True" if recorded
                else "cudnn.allow_tf32 = True in this session"))
    out["basis"] = basis
    if rate and peak and rate > peak:
        return dict(out, precision="tf32", short="TF32",
                    label=f"TF32: {rate:.0f} TFLOP/s, above the GPU's FP32 peak of {peak:.0f} "
                          f"TFLOP/s, which float32 arithmetic cannot pass ({basis})")
    shown = (f": {rate:.0f} TFLOP/s, within the FP32 peak of {peak:.0f} TFLOP/s, does not "
             "show which" if rate and peak else "")
    return dict(out, precision="tf32 allowed", short="TF32 allowed",
                label=f"TF32 allowed{shown} ({basis})")


def _gpu(label: str) -> str:
    """``"GPU: NVIDIA H100 80GB HBM3"`` from a device label (driver and date dropped)."""
    return str(label).split(" (")[0].rsplit(", ", 1)[0]


def fp32_compute(row: dict, directory=None) -> dict | None:
    """The recorded FP32 (float32 arithmetic, TF32 off) forward time of torch's convolution of
    a row's layer at its batch on the same GPU, from ``results/precision_*`` (strategy
    ``reference``): ``{"compute_ms", "device"}`` (the recording's GPU and date), or None.

    Raises:
        ValueError: a row whose ``layer`` is not a Table I name.
    """
    lay = layer_for(row["layer"], int(row["b"]) if row.get("b") else None)
    found = [r for r in precision.recorded("conv", directory, layer=lay.name,
                                           strategy="reference", precision="float32").rows
             if _gpu(r["device"]) == _gpu(row.get("device", ""))
             and str(r["shape"]).startswith(f"b={lay.n} ")
             and isinstance(r.get("median_ms"), (int, float))]
    return {"compute_ms": float(found[0]["median_ms"]), "device": found[0]["device"]} \
        if found else None


def precision_lines(rows, directory=None) -> list[str]:
    """Lines for a table of overlap rows (forward only): each run's compute precision and rate
    (:func:`compute_precision`), the basis, and, where recorded, the FP32 time of the same
    convolution on the same GPU with the stage that is then longest. Rows of several devices
    (recordings of two GPUs, say) get a block each, headed by the device. Empty without timed
    rows.
    """
    timed = [r for r in rows if r.get("compute_ms") and r.get("h2d_ms") is not None]
    devices = list(dict.fromkeys(str(r.get("device", "")) for r in timed))
    if len(devices) <= 1:
        return _device_lines(timed, directory)
    return [line for device in devices for line in (
        [f"{device}:"] + ["  " + ln for ln in _device_lines(
            [r for r in timed if str(r.get("device", "")) == device], directory)])]


def _device_lines(timed: list[dict], directory) -> list[str]:
    """:func:`precision_lines` for the timed rows of one device."""
    if not timed:
        return []
    found = {r["layer"]: compute_precision(r, directory) for r in timed}
    lines = ["compute precision, read from each run's provenance: " + ", ".join(
        f"{name} {p['short']}" + (f" ({p['tflop_s']:.0f} TFLOP/s)" if p["tflop_s"] else "")
        for name, p in found.items())]
    peaks = {p["fp32_peak_tflop_s"] for p in found.values() if p["fp32_peak_tflop_s"]}
    for basis in dict.fromkeys(p["basis"] for p in found.values() if p["basis"]):
        lines.append(f"  ({basis}" + "".join(
            f"; the GPU's FP32 peak: {peak:.0f} TFLOP/s, which float32 arithmetic cannot pass"
            for peak in sorted(peaks)) + ")")
    fp32 = {r["layer"]: fp32_compute(r, directory) for r in timed}
    if any(fp32.values()):
        lines.append("compute ms of each run and of the same convolution in FP32 (TF32 off, "
                     "results/precision_*), and the longest stage beside the pinned copies:")
        for r in timed:
            if fp32[r["layer"]]:
                for name, ms in ((found[r["layer"]]["short"], float(r["compute_ms"])),
                                 ("FP32", fp32[r["layer"]]["compute_ms"])):
                    stage = {"copy in": r["h2d_ms"], "compute": ms, "copy out": r["d2h_ms"]}
                    longest = max(stage, key=stage.get)
                    lines.append(f"  {r['layer']} {name:<13}{ms:>8.3f} ms  " + (
                        "compute-bound" if longest == "compute" else f"copy-bound ({longest})"))
    return lines

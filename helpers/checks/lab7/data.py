"""Lab 7's inputs and pictures: a Table I layer's copy and compute times per chunk, and a text
timeline of a schedule.

:func:`layer_stages` gives a layer's ``(h2d_ms, compute_ms, d2h_ms)`` per chunk: copies from the
pinned-memory bandwidth recorded in ``results/`` at the chunk's size, compute from the recorded
forward convolution (its precision, TF32 or FP32, read from its provenance, and the FP32 time
of the same layer on the same GPU beside it where recorded), labelled with the GPU that
measured them; without recorded rows, the analytic FP32 estimate of
:mod:`helpers.experiments.transfers.model` (H100 PCIe, PCIe 5.0), labelled as an estimate.
:func:`timeline_text` draws a schedule (:mod:`helpers.checks.lab7`'s format) as text, one row
per engine. Times in ms, sizes in bytes, float32 NCHW tensors.

Source: Li et al., ICPP 2016, Table I and Figure 7; the recordings of
:mod:`helpers.experiments.transfers`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from helpers.checks.lab7.model import engine_of
from helpers.device import backend
from helpers.experiments import transfers
from helpers.experiments.transfers.model import LINKS, chunk_bounds, layer_bytes, layer_for
from helpers.experiments.transfers.provenance import compute_precision, fp32_compute

__all__ = ["ESTIMATE_GPU", "ESTIMATE_LINK", "layer_stages", "timeline_text"]

#: The GPU and link of the estimate used when ``results/`` holds no recording.
ESTIMATE_GPU, ESTIMATE_LINK = "H100 PCIe", "PCIe 5.0 x16"


def _nearest(rows: Sequence[dict], nbytes: float) -> dict:
    """The bandwidth row whose copy size is nearest ``nbytes`` on a log scale."""
    return min(rows, key=lambda r: abs(math.log(float(r["size_bytes"]) / nbytes)))


def layer_stages(layer="Conv5", chunks: int = 4, directory=None) -> dict:
    """Copy and compute times of a Table I layer's batch (N = 128), whole and per chunk.

    Recorded (``results/`` has an overlap row for the layer and bandwidth rows from the same
    GPU): a copy of B bytes takes B / the pinned (or pageable) bandwidth recorded at the copy
    size nearest B (log scale); a chunk of m images computes for m / N of the recorded forward
    convolution of the whole batch. Otherwise the estimate: copies at :data:`ESTIMATE_LINK`'s
    stated rate, compute at :data:`ESTIMATE_GPU`'s datasheet FP32 peak. The recorded
    convolution is torch's own, with torch's flags as they were: on a GPU with TF32 it may run
    in TF32 (:func:`helpers.experiments.transfers.provenance.compute_precision` says which);
    the FP32 time of the same layer, where ``results/precision_*`` holds one for that GPU
    (:func:`~helpers.experiments.transfers.provenance.fp32_compute`), gives the same chunks
    with float32 arithmetic.

    Args:
        layer: a Table I name (``"Conv1"`` .. ``"Conv5"``) or a ConvConfig of one.
        chunks: 1..N, split by :func:`helpers.experiments.transfers.model.chunk_bounds`.
        directory: where the recordings are (default ``results/``).

    Returns:
        dict: ``layer``, ``n``, ``chunks``, ``bounds``; ``durations`` (per chunk, pinned),
        ``whole`` (the batch in one piece, pinned) and ``whole_pageable`` (None for the
        estimate), each ``(h2d_ms, compute_ms, d2h_ms)``; ``precision`` (the dict of
        :func:`~helpers.experiments.transfers.provenance.compute_precision` for the recorded
        compute, or an FP32 label for the estimate); ``fp32`` (None, or a dict with
        ``compute_ms`` of the whole batch in float32, ``durations``, ``whole`` and ``label``,
        the GPU and date of that recording); ``measured_stages`` (the overlap row's
        own pinned stage times, or None); ``fixed_copy_ms`` (the recorded time of the smallest
        pinned h2d copy, a copy's fixed cost, or None); ``source`` (``"recorded"`` or
        ``"estimate"``), ``label`` (the GPU and date, or the estimate's basis), ``basis`` (how
        the copy times were found), ``overlap`` (the recorded overlap row, None for the
        estimate) and ``timeline`` (its recorded overlapped timeline rows, or []).

    Raises:
        ValueError: an unknown layer or ``chunks`` outside 1..N.
    """
    lay = layer_for(layer)
    bounds = chunk_bounds(lay.n, chunks)
    x_bytes, y_bytes = layer_bytes(lay)
    per_x, per_y = x_bytes / lay.n, y_bytes / lay.n
    overlap = transfers.recorded("overlap", directory, layer=lay.name).rows
    row = overlap[0] if overlap else None
    bw = [r for r in transfers.recorded("bandwidth", directory).rows
          if row is not None and r["device"] == row["device"]]
    kinds = {(d, m): [r for r in bw if r["direction"] == d and r["memory"] == m]
             for d in transfers.DIRECTIONS for m in transfers.MEMORY_KINDS}
    out = dict(layer=lay.name, n=lay.n, chunks=chunks, bounds=bounds, overlap=row, timeline=[],
               measured_stages=None, fixed_copy_ms=None, whole_pageable=None, fp32=None)
    if row is not None and all(kinds.values()):
        def copy_ms(nbytes, direction, memory="pinned"):
            return nbytes / float(_nearest(kinds[(direction, memory)], nbytes)["gb_s"]) / 1e6

        compute = float(row["compute_ms"])
        out.update(
            source="recorded", label=row["device"],
            basis="copies: bytes / the pinned bandwidth recorded at the nearest copy size; "
                  "compute: the recorded forward convolution of the batch, shared by images",
            durations=[(copy_ms((b - a) * per_x, "h2d"), compute * (b - a) / lay.n,
                        copy_ms((b - a) * per_y, "d2h")) for a, b in bounds],
            whole=(copy_ms(x_bytes, "h2d"), compute, copy_ms(y_bytes, "d2h")),
            whole_pageable=(copy_ms(x_bytes, "h2d", "pageable"), compute,
                            copy_ms(y_bytes, "d2h", "pageable")),
            measured_stages=(float(row["h2d_ms"]), compute, float(row["d2h_ms"])),
            fixed_copy_ms=float(min(kinds[("h2d", "pinned")],
                                    key=lambda r: float(r["size_bytes"]))["median_ms"]),
            timeline=[t for t in transfers.recorded("timeline", directory, layer=lay.name).rows
                      if t["device"] == row["device"] and t["run"] == "overlapped"],
            precision=compute_precision(row, directory))
        fp32 = fp32_compute(row, directory)
        if fp32 is not None:
            ms = fp32["compute_ms"]
            out["fp32"] = dict(
                compute_ms=ms, label=fp32["device"],
                durations=[(h, ms * (b - a) / lay.n, d)
                           for (a, b), (h, _, d) in zip(bounds, out["durations"])],
                whole=(out["whole"][0], ms, out["whole"][2]))
        return out
    spec, link = backend.lookup_gpu(ESTIMATE_GPU), LINKS[ESTIMATE_LINK]
    flop_ms = lay.flops / lay.n / spec.fp32_flops * 1e3
    out.update(
        source="estimate", overlap=None,
        precision=dict(precision="float32", tflop_s=spec.fp32_flops / 1e12,
                       fp32_peak_tflop_s=spec.fp32_flops / 1e12, compute_capability=None,
                       short="FP32",
                       label="FP32: the estimate computes at the datasheet FP32 peak"),
        label=(f"ESTIMATE, not measured: {spec.name} datasheet FP32 peak, {link.name} at "
               f"{link.bytes_s / 1e9:.1f} GB/s per direction"),
        basis="copies: bytes / the link's stated rate; compute: forward FLOPs / the peak",
        durations=[((b - a) * per_x / link.bytes_s * 1e3, (b - a) * flop_ms,
                    (b - a) * per_y / link.bytes_s * 1e3) for a, b in bounds],
        whole=(x_bytes / link.bytes_s * 1e3, lay.n * flop_ms, y_bytes / link.bytes_s * 1e3))
    return out


def _label(key: tuple[int, str]) -> str:
    return {"h2d": "h", "compute": "c", "d2h": "d"}[key[1]] + str(key[0])


def timeline_text(ops: Sequence[dict], copy_engines: int, width: int = 64) -> str:
    """A schedule drawn as text: one row per engine, each operation a bar ``[h0]`` (h2d of chunk
    0), ``[c0]`` (compute), ``[d0]`` (d2h) placed at its start and end, then the time axis.

    Args:
        ops: dicts with ``chunk``, ``op``, ``start_ms``, ``end_ms`` (a valid schedule: one
            operation at a time per engine). copy_engines: 1 or 2 (which rows).
        width: characters for the whole makespan (>= 10).

    Returns:
        The lines joined by newlines; bars shorter than their label show what fits.

    Raises:
        ValueError: ``width < 10``, no operations, or a makespan <= 0.
    """
    if width < 10:
        raise ValueError(f"width must be >= 10, got {width}")
    if not ops:
        raise ValueError("ops must hold at least one operation")
    span = max(float(o["end_ms"]) for o in ops)
    if not span > 0:
        raise ValueError(f"the makespan must be > 0 ms, got {span}")
    rows = (["copy engine (in)", "compute engine", "copy engine (out)"] if copy_engines == 2
            else ["copy engine", "compute engine"])
    lines = {name: [" "] * width for name in rows}
    for o in sorted(ops, key=lambda o: float(o["start_ms"])):
        a = min(width - 1, round(float(o["start_ms"]) / span * width))
        b = min(width, max(a + 1, round(float(o["end_ms"]) / span * width)))
        text = _label((o["chunk"], o["op"]))
        bar = (f"[{text.center(b - a - 2, '-')}]" if b - a >= len(text) + 2
               else text[: b - a].ljust(b - a, "-"))
        lines[engine_of(o["op"], copy_engines)][a:b] = bar
    pad = max(len(name) for name in rows) + 2
    axis = "0 ms".ljust(width - len(f"{span:.3g} ms")) + f"{span:.3g} ms"
    return "\n".join([f"{name:<{pad}}{''.join(lines[name]).rstrip()}" for name in rows]
                     + [" " * pad + axis])

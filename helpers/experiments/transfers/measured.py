"""Measured CPU-GPU copies: bandwidth, copies overlapped with compute, and their share of a layer.

:func:`copy_bandwidth`: host-to-device (``h2d``) and device-to-host (``d2h``) GB/s over copy
sizes, from pageable or pinned host memory. :func:`overlap_experiment`: a layer's batch in
chunks, each copied in on a copy stream while the one before computes, against everything on one
stream. :func:`transfer_share`: copy in + forward (+ backward) + copy out of a Table I layer and
the copies' share, for each of :data:`TRANSFER_STRATEGIES` (the study's remedies).
:func:`estimate` is the analytic model's prediction (:mod:`helpers.experiments.transfers.model`),
:func:`recorded` reads ``results/transfers_*`` (run all by :mod:`.command`). Without a
CUDA GPU nothing is measured: numbers stay None and ``status`` says why. Rows name layers in the
study's (b, i, f, k, s) plus input channels c; sizes in bytes, times in ms, GB/s = 10^9 bytes/s.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
Figure 7 and its discussion of transfer overheads.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import torch

from helpers import results
from helpers.conv.config import ConvConfig
from helpers.device import backend
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments.transfers import streams
from helpers.experiments.transfers.model import (
    SEQUENTIAL_STREAM,
    chunk_bounds,
    estimate,
    layer_bytes,
    layer_for,
    overlap_achieved,
)

__all__ = [
    "DIRECTIONS", "MEMORY_KINDS", "TRANSFER_STRATEGIES", "DEFAULT_SIZES", "PREFIX", "COMMAND",
    "EXPERIMENTS", "OUTPUT_TOLERANCE", "BANDWIDTH_FIELDS", "OVERLAP_FIELDS", "SHARE_FIELDS",
    "TIMELINE_FIELDS", "gpu_reason", "copy_bandwidth", "overlap_experiment", "transfer_share",
    "estimate", "recorded",
]

DIRECTIONS = ("h2d", "d2h")
MEMORY_KINDS = ("pageable", "pinned")

#: How the input and output cross between host and GPU in :func:`transfer_share`.
TRANSFER_STRATEGIES: dict[str, str] = {
    "pageable": "one copy each way from ordinary (pageable) host memory: the driver stages it "
                "through its own pinned buffer",
    "pinned": "one copy each way from pinned (page-locked) host memory: DMA straight from it "
              "(remedy 1)",
    "small-copies": "many small copies (default: one per image) from pageable memory: what "
                    "remedy 3, fewer and larger transfers, avoids",
    "overlapped": "pinned memory, the batch in chunks: chunk j+1 is copied on a copy stream "
                  "while chunk j is computed (remedy 2, asynchronous copies)",
}

#: 4 KiB, 16 KiB, ... 256 MiB: copy sizes in bytes for :func:`copy_bandwidth`.
DEFAULT_SIZES: tuple[int, ...] = tuple(1024 * 4**j for j in range(1, 10))

#: File-name prefix of this module's recorded results in ``results/``.
PREFIX = "transfers_"
#: The command that records them, on a machine with a CUDA GPU.
COMMAND = "python -m helpers.experiments.transfers --save"
#: The experiments :func:`measure` runs and :func:`recorded` reads, by their rows' ``experiment``.
EXPERIMENTS = ("bandwidth", "overlap", "share", "timeline")

#: Largest relative difference (max |a - b| / max |b|) allowed between the overlapped and the
#: sequential outputs. Loose on purpose: on Ampere and later GPUs cuDNN may use TF32 for float32
#: convolutions, and a chunk and the whole batch may get different algorithms; a wrong or stale
#: chunk differs by order 1.
OUTPUT_TOLERANCE = 1e-2

BANDWIDTH_FIELDS = ("experiment", "direction", "memory", "size_bytes", "repeats", "median_ms",
                    "iqr_ms", "gb_s", "device", "device_kind", "source", "status")
OVERLAP_FIELDS = ("experiment", "layer", "b", "c", "i", "f", "k", "s", "chunks", "bytes_in",
                  "bytes_out", "sequential_pageable_ms", "sequential_pinned_ms", "overlapped_ms",
                  "h2d_ms", "compute_ms", "d2h_ms", "speedup", "overlap", "max_rel_error",
                  "matches", "repeats", "device", "device_kind", "source", "status")
SHARE_FIELDS = ("experiment", "layer", "b", "c", "i", "f", "k", "s", "strategy", "pass",
                "pieces", "bytes_in", "bytes_out", "h2d_ms", "compute_ms", "d2h_ms", "copy_ms",
                "total_ms", "copy_share", "repeats", "device", "device_kind", "source", "status")
TIMELINE_FIELDS = ("experiment", "layer", "b", "chunks", "run", "stream", "kind", "chunk",
                   "start_ms", "end_ms", "device", "device_kind", "source", "status")


def gpu_reason() -> str | None:
    """Why CPU-GPU copies cannot be measured here, or None on a usable CUDA GPU.

    Returns:
        None in ``gpu`` mode with a CUDA build of torch; otherwise a sentence starting with
        ``"not measured: "``.
    """
    if backend.MODE != "gpu":
        return (f"not measured: no CUDA GPU here ({backend.MODE_REASON}); copies between host "
                f"and GPU memory need one")
    if not torch.cuda.is_available():
        return ("not measured: a GPU is present but torch cannot use it (a CPU-only build of "
                "torch?)")
    return None


def _check_repeats(repeats: int, warmup: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")


def _iqr(values: Sequence[float]) -> float:
    if len(values) < 4:
        return 0.0
    q = statistics.quantiles(sorted(values), n=4, method="inclusive")
    return q[2] - q[0]


def _device_label() -> str:
    return backend.info().device_label if backend.MODE == "gpu" else "no CUDA GPU"


def _not_measured(fields: Sequence[str], base: dict, status: str) -> dict:
    row = {k: None for k in fields}
    row.update(base)
    row.update(device=_device_label(), device_kind="cuda", source="none", status=status)
    return row


def _layer_fields(lay: ConvConfig) -> dict:
    """The layer in the study's symbols (b, i, f, k, s) plus c, and its bytes of x and y."""
    b, i, f, k, s = lay.study
    x_bytes, y_bytes = layer_bytes(lay)
    return {"layer": lay.name, "b": b, "c": lay.c, "i": i, "f": f, "k": k, "s": s,
            "bytes_in": x_bytes, "bytes_out": y_bytes}


def copy_bandwidth(sizes: Iterable[int] = DEFAULT_SIZES, direction: str = "h2d",
                   pinned: bool = True, *, repeats: int = 20, warmup: int = 3,
                   references: bool = True, deadline: float | None = None,
                   time_limit: float | None = None) -> list[dict]:
    """Host-to-device or device-to-host copy bandwidth, from pageable or pinned host memory.

    Each size is copied ``warmup`` times untimed, then ``repeats`` times, each copy between two
    CUDA events on the current stream (:func:`helpers.experiments.transfers.streams.event_times`);
    the row reports the median and interquartile range. Host buffers are ``torch.uint8``
    tensors, touched once before timing so that first-touch page faults are not timed; pinned
    ones come from ``torch.empty(..., pin_memory=True)`` and are copied with
    ``non_blocking=True``.

    Args:
        sizes: bytes per copy, each an int >= 1 (default :data:`DEFAULT_SIZES`, 4 KiB..256 MiB).
        direction: ``"h2d"`` (host to device) or ``"d2h"`` (device to host).
        pinned: page-locked host memory (True) or ordinary pageable memory (False).
        repeats: timed copies per size, >= 1. warmup: untimed copies first, >= 0.
        references: without a GPU, append the matching rows recorded in ``results/``
            (:func:`recorded`: labelled with their GPU and date, ``source="reference"``).
        deadline: a :func:`time.monotonic` value; sizes not started before it are not timed
            (None: no deadline). time_limit: the seconds it came from, for the status text.

    Returns:
        One dict per size with the keys of :data:`BANDWIDTH_FIELDS`: ``median_ms``, ``iqr_ms``
        and ``gb_s`` (size / median time, 10^9 bytes/s); ``source="measured"`` and
        ``status="ok"``. Without a GPU the numbers are None and ``status`` says why (then any
        recorded rows follow); a size that does not fit is refused with the reason; one after
        the deadline has ``status`` ``"skipped: time limit of T s reached"``.

    Raises:
        ValueError: an unknown direction, a non-bool ``pinned``, an empty ``sizes`` or a size
            < 1, ``repeats < 1`` or ``warmup < 0``.

    Source: the study's first remedy, pinned memory (Figure 7).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not isinstance(pinned, bool):
        raise ValueError(f"pinned must be True or False, got {pinned!r}")
    sizes = list(sizes)
    if not sizes:
        raise ValueError("sizes must hold at least one size in bytes")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"sizes must be ints >= 1 (bytes), got {s!r}")
    _check_repeats(repeats, warmup)
    memory = "pinned" if pinned else "pageable"
    reason = gpu_reason()
    device = _device_label()

    def row(size, times=None, status="ok"):
        med = statistics.median(times) if times else None
        return {"experiment": "bandwidth", "direction": direction, "memory": memory,
                "size_bytes": size, "repeats": len(times) if times else 0,
                "median_ms": med, "iqr_ms": _iqr(times) if times else None,
                "gb_s": size / (med / 1e3) / 1e9 if med else None, "device": device,
                "device_kind": "cuda", "source": "measured" if times else "none",
                "status": status}

    rows = []
    for size in sizes:
        skip = time_limit_status(time_limit) if time_up(deadline) else reason
        if skip:
            rows.append(row(size, status=skip))
            continue
        refused = streams.refusal(size, size)
        if refused:
            rows.append(row(size, status=refused))
            continue
        host = streams.host_empty(size, torch.uint8, pinned)
        host.fill_(1)
        dev = torch.empty(size, dtype=torch.uint8, device=streams.DEVICE)
        if direction == "h2d":
            def copy(dev=dev, host=host):
                dev.copy_(host, non_blocking=pinned)
        else:
            def copy(dev=dev, host=host):
                host.copy_(dev, non_blocking=pinned)
        rows.append(row(size, streams.event_times(copy, repeats, warmup)))
        del host, dev
    if reason and references:
        rows += [{k: r.get(k) for k in BANDWIDTH_FIELDS}
                 for r in recorded("bandwidth", direction=direction, memory=memory).rows]
    return rows


def overlap_experiment(layer: ConvConfig | str, chunks: int = 4, *, batch: int | None = None,
                       repeats: int = 10, warmup: int = 2, seed: int = 0,
                       deadline: float | None = None, time_limit: float | None = None) -> dict:
    """Overlap copies with computation: a layer's batch in chunks on separate CUDA streams.

    Three runs of the same forward convolution (torch's own: cuDNN), each timed with CUDA
    events, medians over ``repeats`` after ``warmup`` runs:

    * **sequential, pageable**: x copied from pageable memory, convolution, y copied back, all
      on one stream (what ``x.to("cuda")`` and ``y.cpu()`` do);
    * **sequential, pinned**: the same from pinned memory; its three stages, timed separately,
      give ``h2d_ms``, ``compute_ms``, ``d2h_ms``;
    * **overlapped**: pinned memory, the batch split into ``chunks``; chunk j+1 is copied in on a
      copy stream while chunk j computes on a compute stream, and outputs are copied back on a
      third stream (:func:`helpers.experiments.transfers.streams.pipelined_run`).

    Args:
        layer: a :class:`helpers.conv.config.ConvConfig` or a Table I name.
        chunks: chunks of the batch, 1..batch (1: no overlap possible).
        batch: replaces the layer's batch size (None: Table I's 128). >= 1.
        repeats: timed runs, >= 1. warmup: untimed runs first, >= 0. seed: of the random data.
        deadline, time_limit: as :func:`copy_bandwidth` (past the deadline nothing is run).

    Returns:
        dict with the keys of :data:`OVERLAP_FIELDS` plus ``timeline``: times in ms;
        ``speedup`` = sequential pageable / overlapped; ``overlap`` =
        :func:`~helpers.experiments.transfers.model.overlap_achieved` (share of the hideable time
        that was hidden, 0..1); ``max_rel_error`` = max |overlapped y - sequential y| / max
        |sequential y| and ``matches`` (below :data:`OUTPUT_TOLERANCE`); ``timeline`` lists
        every stage of the last sequential-pageable and overlapped runs as measured by events
        (fields as :func:`~helpers.experiments.transfers.model.estimated_timeline`). Without a
        GPU or past the deadline: numbers None, ``timeline`` empty, ``status`` says why.

    Raises:
        ValueError: an unknown layer, ``batch < 1``, ``chunks`` outside 1..batch,
            ``repeats < 1`` or ``warmup < 0``.

    Source: the study's second remedy, asynchronous copies (Figure 7).
    """
    lay = layer_for(layer, batch)
    bounds = chunk_bounds(lay.n, chunks)
    _check_repeats(repeats, warmup)
    base = dict(experiment="overlap", chunks=chunks, repeats=repeats, **_layer_fields(lay))
    reason = time_limit_status(time_limit) if time_up(deadline) else gpu_reason()
    if reason:
        return dict(_not_measured(OVERLAP_FIELDS, base, reason), timeline=[])
    x_bytes, y_bytes = layer_bytes(lay)
    refused = streams.refusal(streams.gpu_bytes_needed(lay, False), 2 * (x_bytes + y_bytes))
    if refused:
        return dict(_not_measured(OVERLAP_FIELDS, base, refused), timeline=[])

    x, w = streams.random_inputs(lay, seed)
    compute = streams.compute_fn(w, lay, backward=False)
    xd = torch.empty_like(x, device=streams.DEVICE)
    x_pin = x.pin_memory()
    y_page = torch.empty(lay.y_shape)
    y_pin = streams.host_empty(lay.y_shape, torch.float32, True)
    three = (torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream())

    seq_page, seq_pin, stages, piped = [], [], [], []
    for rep in range(warmup + repeats):
        a = streams.sequential_run(x, xd, y_page, compute, pinned=False)
        b = streams.sequential_run(x_pin, xd, y_pin, compute, pinned=True)
        c, timeline = streams.pipelined_run(x_pin, xd, y_pin, compute, bounds, three)
        if rep >= warmup:
            seq_page.append(a)
            seq_pin.append(b[3])
            stages.append(b[:3])
            piped.append(c)
    h2d, comp, d2h = (statistics.median(s[k] for s in stages) for k in range(3))
    t_page, t_pin, t_pipe = (statistics.median(v) for v in
                             ([s[3] for s in seq_page], seq_pin, piped))
    # correctness: the last pipelined output (y_pin) against the last sequential one (y_page)
    scale = float(y_page.abs().max()) or 1.0
    err = float((y_pin - y_page).abs().max()) / scale
    last = seq_page[-1]
    seq_timeline = [dict(run="sequential", stream=SEQUENTIAL_STREAM, kind=kind, chunk=0,
                         start_ms=s, end_ms=s + d)
                    for kind, s, d in (("h2d", 0.0, last[0]), ("compute", last[0], last[1]),
                                       ("d2h", last[0] + last[1], last[2]))]
    row = dict(base, sequential_pageable_ms=t_page, sequential_pinned_ms=t_pin,
               overlapped_ms=t_pipe, h2d_ms=h2d, compute_ms=comp, d2h_ms=d2h,
               speedup=t_page / t_pipe, overlap=overlap_achieved(h2d, comp, d2h, t_pipe),
               max_rel_error=err, matches=err < OUTPUT_TOLERANCE, device=_device_label(),
               device_kind="cuda", source="measured", status="ok")
    row = {k: row[k] for k in OVERLAP_FIELDS}
    row["timeline"] = [dict(t, source="measured") for t in seq_timeline + timeline]
    return row


def transfer_share(layer: ConvConfig | str, strategy: str = "pageable", *,
                   batch: int | None = None, backward: bool = True, pieces: int | None = None,
                   chunks: int = 4, repeats: int = 10, warmup: int = 2, seed: int = 0,
                   deadline: float | None = None, time_limit: float | None = None) -> dict:
    """Measured share of CPU-GPU copies in copy x in + forward (+ backward) + copy y out.

    Every run is timed with CUDA events on the GPU; medians over ``repeats`` after ``warmup``
    runs. The convolution is torch's own (cuDNN); with ``backward`` it also computes the data
    and filter gradients for a ``dy`` made on the GPU (the filters and gradients stay there).

    Args:
        layer: a :class:`helpers.conv.config.ConvConfig` or a Table I name.
        strategy: a key of :data:`TRANSFER_STRATEGIES`: ``"pageable"``, ``"pinned"``,
            ``"small-copies"`` or ``"overlapped"``.
        batch: replaces the layer's batch size (None: Table I's 128). >= 1.
        backward: forward + backward (as the study timed) instead of forward only.
        pieces: copies per direction for ``"small-copies"``, 1..batch (default: one per image).
        chunks: chunks for ``"overlapped"``, 1..batch.
        repeats: timed runs, >= 1. warmup: untimed runs, >= 0. seed: of the random data.
        deadline, time_limit: as :func:`copy_bandwidth` (past the deadline nothing is run).

    Returns:
        dict with the keys of :data:`SHARE_FIELDS` (``pieces``: copies per direction, the
        chunks for ``"overlapped"``). For the sequential strategies ``h2d_ms``,
        ``compute_ms``, ``d2h_ms`` are the medians of each stage, ``total_ms`` the median of the
        whole run, ``copy_ms = h2d_ms + d2h_ms`` and ``copy_share`` the median over runs of
        copies / total. For ``"overlapped"``, ``h2d_ms`` and ``d2h_ms`` are None and
        ``copy_ms`` = total - compute alone: the copy time left exposed. Without a GPU or past
        the deadline: the numbers are None and ``status`` says why.

    Raises:
        ValueError: an unknown layer or strategy, ``batch < 1``, ``pieces`` or ``chunks``
            outside 1..batch, ``repeats < 1`` or ``warmup < 0``.

    Source: the study's Figure 7 and its three remedies.
    """
    lay = layer_for(layer, batch)
    if strategy not in TRANSFER_STRATEGIES:
        raise ValueError(f"strategy must be one of {list(TRANSFER_STRATEGIES)}, got {strategy!r}")
    if strategy == "small-copies":
        pieces = lay.n if pieces is None else pieces
        bounds = chunk_bounds(lay.n, pieces)
    elif strategy == "overlapped":
        bounds = chunk_bounds(lay.n, chunks)
    else:
        bounds = None
    if pieces is not None and strategy != "small-copies":
        chunk_bounds(lay.n, pieces)  # validate it anyway
    _check_repeats(repeats, warmup)
    base = {"experiment": "share", "strategy": strategy,
            "pass": "forward+backward" if backward else "forward",
            "pieces": len(bounds) if bounds else 1, "repeats": repeats, **_layer_fields(lay)}
    reason = time_limit_status(time_limit) if time_up(deadline) else gpu_reason()
    if reason:
        return _not_measured(SHARE_FIELDS, base, reason)
    x_bytes, y_bytes = layer_bytes(lay)
    refused = streams.refusal(streams.gpu_bytes_needed(lay, backward), 2 * (x_bytes + y_bytes))
    if refused:
        return _not_measured(SHARE_FIELDS, base, refused)

    x, w = streams.random_inputs(lay, seed)
    compute = streams.compute_fn(w, lay, backward)
    xd = torch.empty_like(x, device=streams.DEVICE)
    pinned = strategy in ("pinned", "overlapped")
    x_host = x.pin_memory() if pinned else x
    y_host = streams.host_empty(lay.y_shape, torch.float32, pinned)
    row = dict(base)
    if strategy == "overlapped":
        three = (torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream())
        totals, alone = [], []
        for rep in range(warmup + repeats):
            t, _ = streams.pipelined_run(x_host, xd, y_host, compute, bounds, three)
            c = streams.event_times(lambda: compute(xd), 1, 0)[0]
            if rep >= warmup:
                totals.append(t)
                alone.append(c)
        total, comp = statistics.median(totals), statistics.median(alone)
        row.update(h2d_ms=None, compute_ms=comp, d2h_ms=None, copy_ms=max(total - comp, 0.0),
                   total_ms=total, copy_share=max(total - comp, 0.0) / total)
    else:
        runs = []
        for rep in range(warmup + repeats):
            r = streams.sequential_run(x_host, xd, y_host, compute, pinned=pinned,
                                       pieces=bounds if strategy == "small-copies" else None)
            if rep >= warmup:
                runs.append(r)
        h2d, comp, d2h, total = (statistics.median(r[k] for r in runs) for k in range(4))
        row.update(h2d_ms=h2d, compute_ms=comp, d2h_ms=d2h, copy_ms=h2d + d2h, total_ms=total,
                   copy_share=statistics.median((r[0] + r[2]) / r[3] for r in runs))
    row.update(device=_device_label(), device_kind="cuda", source="measured", status="ok")
    return {k: row.get(k) for k in SHARE_FIELDS}


def recorded(experiment: str, directory=None, **match) -> results.Recorded:
    """The rows of one experiment measured on GPUs and recorded in ``results/transfers_*``.

    Args:
        experiment: one of :data:`EXPERIMENTS`: ``"bandwidth"``, ``"overlap"``, ``"share"`` or
            ``"timeline"``.
        directory: where to look (default ``results/``).
        match: keep only rows whose fields equal these values (e.g. ``direction="h2d"``).

    Returns:
        A :class:`helpers.results.Recorded`: the measured rows (status ``"ok"``), each with
        ``source="reference"`` and ``device`` = "<GPU>, <date>"; its ``note`` names the GPUs,
        or, with no rows, says to run :data:`COMMAND` on a GPU machine. Never invents a number.

    Raises:
        ValueError: an unknown experiment.
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {experiment!r}")
    return results.recorded(PREFIX, COMMAND, directory=directory,
                            **{"experiment": experiment, "status": "ok", **match})

"""Copies between CPU and GPU memory: bandwidth, overlap, and their share of a layer's time.

Data that a GPU computes on must first cross the link between host and device (PCIe, or
NVLink-C2C on a Grace Hopper superchip), and results must cross back. That link is one to two
orders of magnitude slower than the GPU's own memory, so for a layer with little arithmetic per
byte the copies can cost more than the convolution. The study measured the share of runtime spent
in CPU-GPU copies on its Table I layers (its Figure 7): near 0 % for cuDNN, Caffe and fbfft, 1-15 %
for the others, and over 60 % for Theano-CorrMM on Conv2. Its remedies: pinned (page-locked) host
memory, asynchronous copies that overlap computation, and fewer, larger transfers.

What this module measures (on a real GPU only; without one every function returns rows whose
``status`` says why, never a number):

* :func:`copy_bandwidth`: host-to-device (``h2d``) and device-to-host (``d2h``) GB/s over copy
  sizes, from pageable or pinned host memory, timed with CUDA events;
* :func:`overlap_experiment`: a convolution layer's batch split into chunks, chunk ``j + 1``
  copied on a copy stream while chunk ``j`` is computed on a compute stream (pinned memory),
  against everything in sequence on one stream from pageable memory;
* :func:`transfer_share`: copy in + forward (+ backward) + copy out for a Table I layer, and the
  share of the copies, for each of :data:`TRANSFER_STRATEGIES` (the study's three remedies).

What it estimates everywhere (labelled ``"estimate"``, never ``"measured"``):
:func:`estimate_share` = bytes moved / a stated link bandwidth (:data:`LINKS`) beside the layer's
FLOPs / a GPU's datasheet FP32 peak (:data:`helpers.backend.KNOWN_GPUS`), and
:func:`estimated_timeline`, the copy/compute schedule that estimate implies.

Reference measurements: ``python -m helpers.transfers --save`` on a GPU writes
``results/transfers_*`` (via :func:`helpers.results.save`); :func:`reference_rows` reads them back,
labelled with the GPU and date, on machines without one.

Symbols: the study's (b, i, f, k, s) for layers, plus input channels c (:mod:`helpers.paper`);
tensors are NCHW float32: x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q). Sizes in bytes, times in
ms, bandwidths in GB/s (10^9 bytes per second).

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
Figure 7 and its discussion of transfer overheads.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Callable, Iterable, Sequence

from . import backend, results
from .paper import TABLE_I, ConvLayer

__all__ = [
    "Link", "LINKS", "SCENARIOS", "DIRECTIONS", "MEMORY_KINDS", "TRANSFER_STRATEGIES",
    "DEFAULT_SIZES", "PREFIX", "OUTPUT_TOLERANCE", "BANDWIDTH_FIELDS", "OVERLAP_FIELDS",
    "SHARE_FIELDS", "TIMELINE_FIELDS", "ESTIMATE_FIELDS",
    "gpu_reason", "layer_for", "chunk_bounds", "overlap_achieved", "copy_bandwidth",
    "overlap_experiment", "transfer_share", "estimate_share", "estimate_table",
    "estimated_timeline", "reference_rows", "format_table", "main",
]

# --------------------------------------------------------------------------------------------
# Links between host and GPU: stated bandwidths, labelled as estimates.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Link:
    """A host-GPU link and the bandwidth the estimates assume for it.

    Attributes:
        name: e.g. ``"PCIe 3.0 x16"``.
        raw_bytes_s: the raw rate per direction in bytes/s (after line encoding), from the
            specification.
        bytes_s: the rate the estimates use, bytes/s per direction (see ``basis``).
        basis: why ``bytes_s`` has that value (an assumption, stated as one).
        source: where ``raw_bytes_s`` comes from.
    """

    name: str
    raw_bytes_s: float
    bytes_s: float
    basis: str
    source: str


def _pcie_x16(gt_per_s: float) -> float:
    """Raw bytes/s per direction of a x16 PCIe link with 128b/130b encoding (PCIe 3.0 and later)."""
    return gt_per_s * 1e9 * 16 * (128 / 130) / 8


_PRACTICAL = 0.75  # ~12 of 15.75 GB/s on PCIe 3.0 x16: the K40c era's pinned-memory copies
_PCIE_BASIS = ("assumed 3/4 of the raw rate: about what pinned-memory copies reached in CUDA's "
               "bandwidthTest on PCIe 3.0 x16 machines of the K40c era (about 12 of 15.75 GB/s); "
               "an assumption, not a measurement")

#: The links the estimates know, by name. Every figure is per direction.
LINKS: dict[str, Link] = {
    "PCIe 3.0 x16": Link(
        "PCIe 3.0 x16", _pcie_x16(8), 12e9, _PCIE_BASIS,
        "PCI Express Base Specification 3.0 (PCI-SIG): 8 GT/s per lane, 128b/130b encoding; "
        "the Tesla K40's board specification lists PCI Express Gen3 x16"),
    "PCIe 4.0 x16": Link(
        "PCIe 4.0 x16", _pcie_x16(16), _PRACTICAL * _pcie_x16(16), _PCIE_BASIS,
        "PCI Express Base Specification 4.0 (PCI-SIG): 16 GT/s per lane, 128b/130b encoding"),
    "PCIe 5.0 x16": Link(
        "PCIe 5.0 x16", _pcie_x16(32), _PRACTICAL * _pcie_x16(32), _PCIE_BASIS,
        "PCI Express Base Specification 5.0 (PCI-SIG): 32 GT/s per lane, 128b/130b encoding; "
        "the NVIDIA H100 PCIe datasheet lists PCIe Gen5 at 128 GB/s (both directions together)"),
    "NVLink-C2C": Link(
        "NVLink-C2C", 450e9, 450e9,
        "the datasheet peak, no practical fraction assumed: copy times from it are lower bounds",
        "NVIDIA GH200 Grace Hopper Superchip datasheet: NVLink-C2C, 900 GB/s total "
        "(450 GB/s per direction) between the Grace CPU and the Hopper GPU"),
}

#: (label, GPU name for :func:`helpers.backend.lookup_gpu`, link name): the machines the
#: notebook compares. The third pairs the H100 SXM datasheet's FP32 peak with the Grace Hopper
#: link, standing in for a GH200.
SCENARIOS: tuple[tuple[str, str, str], ...] = (
    ("K40c + PCIe 3.0 (the study)", "K40c", "PCIe 3.0 x16"),
    ("H100 PCIe + PCIe 5.0", "H100 PCIe", "PCIe 5.0 x16"),
    ("H100 SXM peak + NVLink-C2C (GH200-like)", "H100 SXM", "NVLink-C2C"),
)

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

#: File-name prefix of this module's reference results in ``results/``.
PREFIX = "transfers_"

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
ESTIMATE_FIELDS = ("layer", "b", "gpu", "link", "pass", "copies", "bytes_in", "bytes_out",
                   "gflop", "flop_per_byte", "copy_ms", "compute_ms", "copy_share", "kind")

_STREAMS = {"h2d": "copy stream (in)", "compute": "compute stream", "d2h": "copy stream (out)"}
_SEQUENTIAL_STREAM = "one stream"

# --------------------------------------------------------------------------------------------
# Small pure helpers (no GPU needed).
# --------------------------------------------------------------------------------------------


def gpu_reason() -> str | None:
    """Why CPU-GPU copies cannot be measured here, or None on a usable CUDA GPU.

    Returns:
        None in ``gpu`` mode with a CUDA build of torch; otherwise a sentence starting with
        ``"not measured: "``.
    """
    if backend.MODE != "gpu":
        return (f"not measured: no CUDA GPU here ({backend.MODE_REASON}); copies between host "
                f"and GPU memory need one")
    import torch

    if not torch.cuda.is_available():
        return ("not measured: a GPU is present but torch cannot use it (a CPU-only build of "
                "torch?)")
    return None


def layer_for(layer: ConvLayer | str, batch: int | None = None) -> ConvLayer:
    """A Table I layer by name (``"Conv1"`` .. ``"Conv5"``) or as given, with its batch replaced.

    Args:
        layer: a :class:`helpers.paper.ConvLayer` or the name of one in :data:`TABLE_I`.
        batch: the batch size N to use instead of the layer's (None: keep it). >= 1.

    Returns:
        The layer (a copy when ``batch`` is given).

    Raises:
        ValueError: an unknown layer name, a non-layer, or ``batch < 1``.
    """
    if isinstance(layer, str):
        by_name = {lay.name: lay for lay in TABLE_I}
        if layer not in by_name:
            raise ValueError(f"layer must be one of {sorted(by_name)} or a ConvLayer, "
                             f"got {layer!r}")
        layer = by_name[layer]
    elif not isinstance(layer, ConvLayer):
        raise ValueError(f"layer must be a ConvLayer or a Table I name, got {type(layer).__name__}")
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        layer = dataclasses.replace(layer, b=batch)
    return layer


def _layer_bytes(layer: ConvLayer, itemsize: int = 4) -> tuple[int, int]:
    """(bytes of x, bytes of y) for a layer: N*C*H*W and N*K*P*Q elements of ``itemsize``."""
    p = layer.out_size
    return layer.b * layer.c * layer.i * layer.i * itemsize, layer.b * layer.f * p * p * itemsize


def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into ``chunks`` contiguous, nearly equal parts (the first ones larger).

    Args:
        n: items (the batch size N). >= 1.
        chunks: parts, 1 <= chunks <= n.

    Returns:
        ``[(start, stop), ...]`` covering 0..n without gaps, e.g. ``chunk_bounds(10, 4)`` =
        ``[(0, 3), (3, 6), (6, 8), (8, 10)]``.

    Raises:
        ValueError: ``n < 1`` or ``chunks`` outside 1..n.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= n:
        raise ValueError(f"chunks must be an int in 1..{n} (the batch size), got {chunks!r}")
    base, extra = divmod(n, chunks)
    out, start = [], 0
    for j in range(chunks):
        stop = start + base + (1 if j < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def overlap_achieved(h2d_ms: float, compute_ms: float, d2h_ms: float,
                     overlapped_ms: float) -> float:
    """How much of the time that could be hidden was hidden, from 0 (nothing) to 1 (all).

    With three streams (copy in, compute, copy out) a perfect pipeline takes about as long as
    its longest stage, so at most ``h2d + compute + d2h - max(h2d, compute, d2h)`` can be
    hidden. This returns ``(h2d + compute + d2h - overlapped) / (that hideable time)``, clipped
    to [0, 1] (chunking overheads can make the pipeline slower than the sum).

    Args:
        h2d_ms, compute_ms, d2h_ms: each stage alone, on one stream, ms (>= 0).
        overlapped_ms: the pipelined run, ms (> 0).

    Returns:
        A fraction in [0, 1]; 0 when nothing could be hidden (one stage only).

    Raises:
        ValueError: a negative stage time or ``overlapped_ms <= 0``.

    Source: the study's remedy of asynchronous copies; the measure is ours.
    """
    for name, v in (("h2d_ms", h2d_ms), ("compute_ms", compute_ms), ("d2h_ms", d2h_ms)):
        if not v >= 0:
            raise ValueError(f"{name} must be >= 0 ms, got {v!r}")
    if not overlapped_ms > 0:
        raise ValueError(f"overlapped_ms must be > 0, got {overlapped_ms!r}")
    total = h2d_ms + compute_ms + d2h_ms
    hideable = total - max(h2d_ms, compute_ms, d2h_ms)
    if hideable <= 0:
        return 0.0
    return min(1.0, max(0.0, (total - overlapped_ms) / hideable))


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


# --------------------------------------------------------------------------------------------
# Analytic estimates (work everywhere).
# --------------------------------------------------------------------------------------------


def _gpu_spec(gpu: str):
    spec = backend.lookup_gpu(gpu)
    if spec is None:
        known = [s.name for _, s in backend.KNOWN_GPUS]
        raise ValueError(f"gpu must name a GPU of helpers.backend.KNOWN_GPUS ({', '.join(known)}), "
                         f"got {gpu!r}")
    return spec


def _link(link: str) -> Link:
    if link not in LINKS:
        raise ValueError(f"link must be one of {sorted(LINKS)}, got {link!r}")
    return LINKS[link]


def estimate_share(layer: ConvLayer | str, gpu: str = "K40c", link: str = "PCIe 3.0 x16", *,
                   batch: int | None = None, backward: bool = True,
                   copy_output: bool = True) -> dict:
    """Estimated share of copies in copy in + compute (+ copy out) for one layer: no GPU needed.

    ``copy = (bytes of x [+ bytes of y]) / link bandwidth`` and
    ``compute = FLOPs / GPU's datasheet FP32 peak``, where FLOPs are the forward's
    ``2 N K P Q C R S`` (x 3 with ``backward``: the data and filter gradients cost one forward
    each). ``share = copy / (copy + compute) = 1 / (1 + (FLOP/byte) x bandwidth / peak)``.
    Compute at the peak is the fastest it can be, so the share is an upper estimate for that
    link; the filters are assumed to stay on the GPU.

    Args:
        layer: a :class:`ConvLayer` or a Table I name (``"Conv1"`` .. ``"Conv5"``).
        gpu: a GPU name :func:`helpers.backend.lookup_gpu` knows (``"K40c"``, ``"H100 PCIe"``, ...).
        link: a key of :data:`LINKS`.
        batch: replaces the layer's batch size (None: keep Table I's 128). >= 1.
        backward: forward + backward (as the study timed) instead of forward only.
        copy_output: copy y back to the host too (False: only x crosses the link, as when the
            output stays on the GPU for the next layer).

    Returns:
        dict with the keys of :data:`ESTIMATE_FIELDS`: bytes in and out, GFLOP, FLOP per byte
        moved, ``copy_ms``, ``compute_ms``, ``copy_share`` (0..1) and ``kind="estimate"``.

    Raises:
        ValueError: an unknown layer, GPU or link, or ``batch < 1``.

    Source: the study's Figure 7 (copy share of runtime on Table I layers); bandwidths from
    :data:`LINKS`, peaks from :data:`helpers.backend.KNOWN_GPUS`.
    """
    lay = layer_for(layer, batch)
    spec, lk = _gpu_spec(gpu), _link(link)
    bytes_in, y_bytes = _layer_bytes(lay)
    bytes_out = y_bytes if copy_output else 0
    flops = lay.flops * (3 if backward else 1)
    copy_s = (bytes_in + bytes_out) / lk.bytes_s
    compute_s = flops / spec.fp32_flops
    return {
        "layer": lay.name, "b": lay.b, "gpu": spec.name, "link": lk.name,
        "pass": "forward+backward" if backward else "forward",
        "copies": "input + output" if copy_output else "input only",
        "bytes_in": bytes_in, "bytes_out": bytes_out, "gflop": flops / 1e9,
        "flop_per_byte": flops / (bytes_in + bytes_out),
        "copy_ms": copy_s * 1e3, "compute_ms": compute_s * 1e3,
        "copy_share": copy_s / (copy_s + compute_s), "kind": "estimate",
    }


def estimate_table(layers: Iterable[ConvLayer | str] = TABLE_I,
                   scenarios: Iterable[tuple[str, str, str]] = SCENARIOS, *,
                   batch: int | None = None, backward: bool = True,
                   copy_output: bool = True) -> list[dict]:
    """:func:`estimate_share` for every (scenario, layer), with the scenario's label.

    Args:
        layers: layers or Table I names (default: all of Table I).
        scenarios: (label, gpu, link) triples (default :data:`SCENARIOS`).
        batch, backward, copy_output: as :func:`estimate_share`.

    Returns:
        One dict per (scenario, layer): :data:`ESTIMATE_FIELDS` plus ``scenario``.

    Raises:
        ValueError: as :func:`estimate_share`.
    """
    layers = list(layers)
    return [dict(estimate_share(lay, gpu, link, batch=batch, backward=backward,
                                copy_output=copy_output), scenario=label)
            for label, gpu, link in scenarios for lay in layers]


def estimated_timeline(layer: ConvLayer | str, chunks: int = 4, gpu: str = "K40c",
                       link: str = "PCIe 3.0 x16", *, batch: int | None = None) -> list[dict]:
    """The copy/compute schedule the estimate implies, sequential and pipelined (forward only).

    Each chunk's copy in takes its bytes of x / link bandwidth, its compute its FLOPs / the
    datasheet peak, its copy out its bytes of y / link bandwidth. Sequential: copy all in,
    compute all, copy all out, one after another. Overlapped: copies in back to back on one copy
    engine; chunk j computes once its copy is in and chunk j-1 has computed; its copy out starts
    once it has computed and chunk j-1's copy out is done (a second copy engine, as on Tesla and
    later data-centre GPUs).

    Args:
        layer: a :class:`ConvLayer` or Table I name. chunks: 1..batch.
        gpu, link: as :func:`estimate_share`. batch: replaces the layer's batch (>= 1).

    Returns:
        Dicts with ``run`` (``"sequential"`` or ``"overlapped"``), ``stream``, ``kind``
        (``h2d``, ``compute``, ``d2h``), ``chunk``, ``start_ms``, ``end_ms`` and
        ``source="estimate"``, in the shape of :func:`overlap_experiment`'s measured timeline.

    Raises:
        ValueError: as :func:`estimate_share`, or ``chunks`` outside 1..batch.
    """
    lay = layer_for(layer, batch)
    spec, lk = _gpu_spec(gpu), _link(link)
    bounds = chunk_bounds(lay.b, chunks)
    x_bytes, y_bytes = _layer_bytes(lay)
    per_in, per_out, per_flop = x_bytes / lay.b, y_bytes / lay.b, lay.flops / lay.b

    def ms(n: int, kind: str) -> float:
        if kind == "compute":
            return n * per_flop / spec.fp32_flops * 1e3
        return n * (per_in if kind == "h2d" else per_out) / lk.bytes_s * 1e3

    out, t = [], 0.0
    for kind in ("h2d", "compute", "d2h"):
        d = ms(lay.b, kind)
        out.append(dict(run="sequential", stream=_SEQUENTIAL_STREAM, kind=kind, chunk=0,
                        start_ms=t, end_ms=t + d, source="estimate"))
        t += d
    h_end = c_end = d_end = 0.0
    for j, (a, b) in enumerate(bounds):
        n = b - a
        h_start, h_end = h_end, h_end + ms(n, "h2d")
        c_start = max(h_end, c_end)
        c_end = c_start + ms(n, "compute")
        d_start = max(c_end, d_end)
        d_end = d_start + ms(n, "d2h")
        for kind, s, e in (("h2d", h_start, h_end), ("compute", c_start, c_end),
                           ("d2h", d_start, d_end)):
            out.append(dict(run="overlapped", stream=_STREAMS[kind], kind=kind, chunk=j,
                            start_ms=s, end_ms=e, source="estimate"))
    return out


# --------------------------------------------------------------------------------------------
# Reference rows from results/.
# --------------------------------------------------------------------------------------------


def reference_rows(experiment: str, directory=None, **match) -> list[dict]:
    """Rows of ``experiment`` measured on GPUs and saved in ``results/transfers_*``.

    Args:
        experiment: ``"bandwidth"``, ``"overlap"``, ``"share"`` or ``"timeline"``.
        directory: where to look (default ``results/``).
        match: keep only rows whose fields equal these values (e.g. ``direction="h2d"``).

    Returns:
        The measured rows (status ``"ok"``), each with ``source="reference"`` and ``device`` =
        "<GPU>, <date>" (see :func:`helpers.results.gpu_rows`); empty when nothing is saved yet.

    Raises:
        ValueError: an unknown experiment.
    """
    if experiment not in ("bandwidth", "overlap", "share", "timeline"):
        raise ValueError("experiment must be 'bandwidth', 'overlap', 'share' or 'timeline', "
                         f"got {experiment!r}")
    rows = results.gpu_rows(results.find(PREFIX, directory), experiment=experiment, **match)
    return [r for r in rows if r.get("status") == "ok"]


# --------------------------------------------------------------------------------------------
# Measurements on a GPU.
# --------------------------------------------------------------------------------------------


def _refusal(gpu_bytes: int, host_bytes: int) -> str | None:
    """A reason to refuse a measurement that would not fit in GPU or host memory, or None."""
    import psutil
    import torch

    free, _ = torch.cuda.mem_get_info()
    if gpu_bytes > 0.8 * free:
        return (f"refused: needs about {gpu_bytes / 2**20:,.0f} MiB of GPU memory, "
                f"{free / 2**20:,.0f} MiB free")
    available = psutil.virtual_memory().available
    if host_bytes > 0.5 * available:
        return (f"refused: needs about {host_bytes / 2**20:,.0f} MiB of host memory, "
                f"{available / 2**20:,.0f} MiB available")
    return None


_DEVICE = "cuda"  # where the measured copies go (a name, so the logic can be exercised elsewhere)


def _host_empty(shape, dtype, pinned: bool):
    """An uninitialised host tensor, page-locked (pinned) or ordinary (pageable)."""
    import torch

    return torch.empty(shape, dtype=dtype, pin_memory=pinned)


def _pin(t):
    """A pinned (page-locked) copy of a host tensor."""
    return t.pin_memory()


def _event():
    import torch

    return torch.cuda.Event(enable_timing=True)


def _event_times(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """Milliseconds of ``fn()`` on the current stream, between two CUDA events, per repeat."""
    import torch

    torch.cuda.synchronize()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = _event(), _event()
        start.record()
        fn()
        end.record()
        end.synchronize()  # wait for the copy itself, not only for its launch
        times.append(start.elapsed_time(end))
    return times


def copy_bandwidth(sizes: Iterable[int] = DEFAULT_SIZES, direction: str = "h2d",
                   pinned: bool = True, *, repeats: int = 20, warmup: int = 3,
                   references: bool = True) -> list[dict]:
    """Host-to-device or device-to-host copy bandwidth, from pageable or pinned host memory.

    Each size is copied ``warmup`` times untimed, then ``repeats`` times, each copy between two
    CUDA events on the current stream (``end.synchronize()`` waits for the copy to finish); the
    row reports the median and interquartile range. Host buffers are ``torch.uint8`` tensors,
    touched once before timing so that first-touch page faults are not timed; pinned ones come
    from ``torch.empty(..., pin_memory=True)`` and are copied with ``non_blocking=True``.

    Args:
        sizes: bytes per copy, each an int >= 1 (default :data:`DEFAULT_SIZES`, 4 KiB..256 MiB).
        direction: ``"h2d"`` (host to device) or ``"d2h"`` (device to host).
        pinned: page-locked host memory (True) or ordinary pageable memory (False).
        repeats: timed copies per size, >= 1. warmup: untimed copies first, >= 0.
        references: without a GPU, append the matching rows saved in ``results/`` (labelled
            with their GPU and date, ``source="reference"``).

    Returns:
        One dict per size with the keys of :data:`BANDWIDTH_FIELDS`: ``median_ms``, ``iqr_ms``
        and ``gb_s`` (size / median time, 10^9 bytes/s); ``source="measured"`` and
        ``status="ok"``. Without a GPU the numbers are None and ``status`` says why (then any
        reference rows follow); a size that does not fit is refused with the reason.

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

    if reason:
        rows = [row(s, status=reason) for s in sizes]
        if references:
            rows += [{k: r.get(k) for k in BANDWIDTH_FIELDS}
                     for r in reference_rows("bandwidth", direction=direction, memory=memory)]
        return rows

    import torch

    rows = []
    for size in sizes:
        refused = _refusal(size, size)
        if refused:
            rows.append(row(size, status=refused))
            continue
        host = _host_empty(size, torch.uint8, pinned)
        host.fill_(1)
        dev = torch.empty(size, dtype=torch.uint8, device=_DEVICE)
        if direction == "h2d":
            def copy(dev=dev, host=host):
                dev.copy_(host, non_blocking=pinned)
        else:
            def copy(dev=dev, host=host):
                host.copy_(dev, non_blocking=pinned)
        rows.append(row(size, _event_times(copy, repeats, warmup)))
        del host, dev
    return rows


def _compute_fn(w, layer: ConvLayer, backward: bool) -> Callable:
    """``compute(x) -> y`` for one layer with torch's own convolution (cuDNN on a GPU).

    With ``backward``, it also computes the data and filter gradients of ``sum(y * dy)`` for
    ``dy`` = ones (standing for the loss gradient, made on the device), with one
    ``aten.convolution_backward`` call, and returns y. Works on any device (tested on the CPU).
    """
    import torch
    import torch.nn.functional as F

    stride, padding = (layer.s, layer.s), (layer.padding, layer.padding)

    def forward(x):
        return F.conv2d(x, w, stride=stride, padding=padding)

    if not backward:
        return forward

    def forward_backward(x):
        y = forward(x)
        dy = torch.ones_like(y)
        torch.ops.aten.convolution_backward(dy, x, w, None, stride, padding, (1, 1), False,
                                            (0, 0), 1, (True, True, False))
        return y

    return forward_backward


def _inputs(layer: ConvLayer, seed: int):
    """Random float32 x (N, C, H, W) on the host and w (K, C, R, S) on the GPU, seeded."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn((layer.b, layer.c, layer.i, layer.i), generator=g)
    w = torch.randn((layer.f, layer.c, layer.k, layer.k), generator=g)
    w /= (layer.c * layer.k * layer.k) ** 0.5  # keep outputs of order 1
    return x, w.to(_DEVICE)


def _gpu_bytes_needed(layer: ConvLayer, backward: bool) -> int:
    x_bytes, y_bytes = _layer_bytes(layer)
    w_bytes = layer.f * layer.c * layer.k * layer.k * 4
    # x and y on the device, chunk outputs, dy and dx with backward; 1.5x for cuDNN's workspace
    need = 2 * x_bytes + 2 * y_bytes + w_bytes
    if backward:
        need += x_bytes + y_bytes + w_bytes
    return int(1.5 * need)


def _sequential_run(x_host, xd, y_host, compute, *, pinned: bool, pieces=None):
    """Copy in, compute, copy out, one after another on the current stream.

    ``pieces``: None for one copy each way, else ``chunk_bounds`` to copy piece by piece.
    Returns ``(h2d_ms, compute_ms, d2h_ms, total_ms)`` from CUDA events.
    """
    e = [_event() for _ in range(4)]
    e[0].record()
    if pieces is None:
        xd.copy_(x_host, non_blocking=pinned)
    else:
        for a, b in pieces:
            xd[a:b].copy_(x_host[a:b], non_blocking=pinned)
    e[1].record()
    y = compute(xd)
    e[2].record()
    if pieces is None:
        y_host.copy_(y, non_blocking=pinned)
    else:
        for a, b in pieces:
            y_host[a:b].copy_(y[a:b], non_blocking=pinned)
    e[3].record()
    e[3].synchronize()
    return (e[0].elapsed_time(e[1]), e[1].elapsed_time(e[2]), e[2].elapsed_time(e[3]),
            e[0].elapsed_time(e[3]))


def _pipelined_run(x_pin, xd, y_pin, compute, bounds, streams):
    """Chunk j+1 is copied in on one stream while chunk j computes on another; copies out on a
    third. Host buffers must be pinned for the copies to be asynchronous.

    Returns ``(total_ms, timeline)``: the time between two events on the current stream, and
    one dict per (chunk, stage) with its start and end in ms after the start event.
    """
    import torch

    copy_in, work, copy_out = streams
    current = torch.cuda.current_stream()
    start, end = _event(), _event()
    start.record(current)
    for s in streams:
        s.wait_stream(current)  # nothing begins before the start event
    marks, outs = [], []
    for j, (a, b) in enumerate(bounds):
        copied, computed, returned = ([_event(), _event()] for _ in range(3))
        with torch.cuda.stream(copy_in):  # copy chunk j in (runs while chunk j-1 computes)
            copied[0].record()
            xd[a:b].copy_(x_pin[a:b], non_blocking=True)
            copied[1].record()
        with torch.cuda.stream(work):  # compute chunk j once it has arrived
            work.wait_event(copied[1])
            computed[0].record()
            outs.append(compute(xd[a:b]))
            computed[1].record()
        with torch.cuda.stream(copy_out):  # copy chunk j's output back once computed
            copy_out.wait_event(computed[1])
            returned[0].record()
            y_pin[a:b].copy_(outs[j], non_blocking=True)
            returned[1].record()
        marks += [("h2d", j, copied), ("compute", j, computed), ("d2h", j, returned)]
    for s in streams:
        current.wait_stream(s)
    end.record(current)
    end.synchronize()  # every stream has finished: all events are complete
    timeline = [dict(run="overlapped", stream=_STREAMS[kind], kind=kind, chunk=j,
                     start_ms=start.elapsed_time(ev[0]), end_ms=start.elapsed_time(ev[1]))
                for kind, j, ev in marks]
    del outs  # chunk outputs stay alive until every stream is done with them
    return start.elapsed_time(end), timeline


def _not_measured(fields: Sequence[str], base: dict, status: str) -> dict:
    row = {k: None for k in fields}
    row.update(base)
    row.update(device=_device_label(), device_kind="cuda", source="none", status=status)
    return row


def _layer_fields(lay: ConvLayer) -> dict:
    x_bytes, y_bytes = _layer_bytes(lay)
    return {"layer": lay.name, "b": lay.b, "c": lay.c, "i": lay.i, "f": lay.f, "k": lay.k,
            "s": lay.s, "bytes_in": x_bytes, "bytes_out": y_bytes}


def overlap_experiment(layer: ConvLayer | str, chunks: int = 4, *, batch: int | None = None,
                       repeats: int = 10, warmup: int = 2, seed: int = 0) -> dict:
    """Overlap copies with computation: a layer's batch in chunks on separate CUDA streams.

    Three runs of the same forward convolution (torch's own: cuDNN), each timed with CUDA
    events, medians over ``repeats`` after ``warmup`` runs:

    * **sequential, pageable**: x copied from pageable memory, convolution, y copied back, all
      on one stream (what ``x.to("cuda")`` and ``y.cpu()`` do);
    * **sequential, pinned**: the same from pinned memory; its three stages, timed separately,
      give ``h2d_ms``, ``compute_ms``, ``d2h_ms``;
    * **overlapped**: pinned memory, the batch split into ``chunks``; chunk j+1 is copied in on a
      copy stream while chunk j computes on a compute stream, and outputs are copied back on a
      third stream (``torch.cuda.Stream``, ordered by events).

    Args:
        layer: a :class:`ConvLayer` or a Table I name.
        chunks: chunks of the batch, 1..batch (1: no overlap possible).
        batch: replaces the layer's batch size (None: Table I's 128). >= 1.
        repeats: timed runs, >= 1. warmup: untimed runs first, >= 0. seed: of the random data.

    Returns:
        dict with the keys of :data:`OVERLAP_FIELDS` plus ``timeline``: times in ms;
        ``speedup`` = sequential pageable / overlapped; ``overlap`` =
        :func:`overlap_achieved` (share of the hideable time that was hidden, 0..1);
        ``max_rel_error`` = max |overlapped y - sequential y| / max |sequential y| and
        ``matches`` (below :data:`OUTPUT_TOLERANCE`); ``timeline`` lists every stage of the last
        sequential-pageable and overlapped runs as measured by events (see
        :func:`estimated_timeline` for the fields). Without a GPU: numbers None, ``timeline``
        empty, ``status`` says why.

    Raises:
        ValueError: an unknown layer, ``batch < 1``, ``chunks`` outside 1..batch,
            ``repeats < 1`` or ``warmup < 0``.

    Source: the study's second remedy, asynchronous copies (Figure 7).
    """
    lay = layer_for(layer, batch)
    bounds = chunk_bounds(lay.b, chunks)
    _check_repeats(repeats, warmup)
    base = dict(experiment="overlap", chunks=chunks, repeats=repeats, **_layer_fields(lay))
    reason = gpu_reason()
    if reason:
        return dict(_not_measured(OVERLAP_FIELDS, base, reason), timeline=[])
    x_bytes, y_bytes = _layer_bytes(lay)
    refused = _refusal(_gpu_bytes_needed(lay, False), 2 * (x_bytes + y_bytes))
    if refused:
        return dict(_not_measured(OVERLAP_FIELDS, base, refused), timeline=[])

    import torch

    x, w = _inputs(lay, seed)
    compute = _compute_fn(w, lay, backward=False)
    p = lay.out_size
    y_shape = (lay.b, lay.f, p, p)
    xd = torch.empty_like(x, device=_DEVICE)
    x_pin = _pin(x)
    y_page = torch.empty(y_shape)
    y_pin = _host_empty(y_shape, torch.float32, True)
    streams = (torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream())

    seq_page, seq_pin, stages, piped = [], [], [], []
    for rep in range(warmup + repeats):
        a = _sequential_run(x, xd, y_page, compute, pinned=False)
        b = _sequential_run(x_pin, xd, y_pin, compute, pinned=True)
        c, timeline = _pipelined_run(x_pin, xd, y_pin, compute, bounds, streams)
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
    seq_timeline = [dict(run="sequential", stream=_SEQUENTIAL_STREAM, kind=kind, chunk=0,
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


def transfer_share(layer: ConvLayer | str, strategy: str = "pageable", *,
                   batch: int | None = None, backward: bool = True, pieces: int | None = None,
                   chunks: int = 4, repeats: int = 10, warmup: int = 2, seed: int = 0) -> dict:
    """Measured share of CPU-GPU copies in copy x in + forward (+ backward) + copy y out.

    Every run is timed with CUDA events on the GPU; medians over ``repeats`` after ``warmup``
    runs. The convolution is torch's own (cuDNN); with ``backward`` it also computes the data
    and filter gradients for a ``dy`` made on the GPU (the filters and gradients stay there).

    Args:
        layer: a :class:`ConvLayer` or a Table I name.
        strategy: a key of :data:`TRANSFER_STRATEGIES`: ``"pageable"``, ``"pinned"``,
            ``"small-copies"`` or ``"overlapped"``.
        batch: replaces the layer's batch size (None: Table I's 128). >= 1.
        backward: forward + backward (as the study timed) instead of forward only.
        pieces: copies per direction for ``"small-copies"``, 1..batch (default: one per image).
        chunks: chunks for ``"overlapped"``, 1..batch.
        repeats: timed runs, >= 1. warmup: untimed runs, >= 0. seed: of the random data.

    Returns:
        dict with the keys of :data:`SHARE_FIELDS` (``pieces``: copies per direction, the
        chunks for ``"overlapped"``). For the sequential strategies ``h2d_ms``,
        ``compute_ms``, ``d2h_ms`` are the medians of each stage, ``total_ms`` the median of the
        whole run, ``copy_ms = h2d_ms + d2h_ms`` and ``copy_share`` the median over runs of
        copies / total. For ``"overlapped"``, ``h2d_ms`` and ``d2h_ms`` are None and
        ``copy_ms`` = total - compute alone: the copy time left exposed. Without a GPU: the
        numbers are None and ``status`` says why.

    Raises:
        ValueError: an unknown layer or strategy, ``batch < 1``, ``pieces`` or ``chunks``
            outside 1..batch, ``repeats < 1`` or ``warmup < 0``.

    Source: the study's Figure 7 and its three remedies.
    """
    lay = layer_for(layer, batch)
    if strategy not in TRANSFER_STRATEGIES:
        raise ValueError(f"strategy must be one of {list(TRANSFER_STRATEGIES)}, got {strategy!r}")
    if strategy == "small-copies":
        pieces = lay.b if pieces is None else pieces
        bounds = chunk_bounds(lay.b, pieces)
    elif strategy == "overlapped":
        bounds = chunk_bounds(lay.b, chunks)
    else:
        bounds = None
    if pieces is not None and strategy != "small-copies":
        chunk_bounds(lay.b, pieces)  # validate it anyway
    _check_repeats(repeats, warmup)
    base = {"experiment": "share", "strategy": strategy,
            "pass": "forward+backward" if backward else "forward",
            "pieces": len(bounds) if bounds else 1, "repeats": repeats, **_layer_fields(lay)}
    reason = gpu_reason()
    if reason:
        return _not_measured(SHARE_FIELDS, base, reason)
    x_bytes, y_bytes = _layer_bytes(lay)
    refused = _refusal(_gpu_bytes_needed(lay, backward), 2 * (x_bytes + y_bytes))
    if refused:
        return _not_measured(SHARE_FIELDS, base, refused)

    import torch

    x, w = _inputs(lay, seed)
    compute = _compute_fn(w, lay, backward)
    p = lay.out_size
    y_shape = (lay.b, lay.f, p, p)
    xd = torch.empty_like(x, device=_DEVICE)
    pinned = strategy in ("pinned", "overlapped")
    x_host = _pin(x) if pinned else x
    y_host = _host_empty(y_shape, torch.float32, pinned)
    row = dict(base)
    if strategy == "overlapped":
        streams = (torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream())
        totals, alone = [], []
        for rep in range(warmup + repeats):
            t, _ = _pipelined_run(x_host, xd, y_host, compute, bounds, streams)
            c = _event_times(lambda: compute(xd), 1, 0)[0]
            if rep >= warmup:
                totals.append(t)
                alone.append(c)
        total, comp = statistics.median(totals), statistics.median(alone)
        row.update(h2d_ms=None, compute_ms=comp, d2h_ms=None, copy_ms=max(total - comp, 0.0),
                   total_ms=total, copy_share=max(total - comp, 0.0) / total)
    else:
        runs = []
        for rep in range(warmup + repeats):
            r = _sequential_run(x_host, xd, y_host, compute, pinned=pinned,
                                pieces=bounds if strategy == "small-copies" else None)
            if rep >= warmup:
                runs.append(r)
        h2d, comp, d2h, total = (statistics.median(r[k] for r in runs) for k in range(4))
        row.update(h2d_ms=h2d, compute_ms=comp, d2h_ms=d2h, copy_ms=h2d + d2h, total_ms=total,
                   copy_share=statistics.median((r[0] + r[2]) / r[3] for r in runs))
    row.update(device=_device_label(), device_kind="cuda", source="measured", status="ok")
    return {k: row.get(k) for k in SHARE_FIELDS}


# --------------------------------------------------------------------------------------------
# Tables and the command line.
# --------------------------------------------------------------------------------------------


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a fixed-width text table of the given columns (floats to 4 significant digits,
    None as ``-``, shares in %)."""
    def cell(key, v):
        if v is None or v == "":
            return "-"
        if key in ("copy_share", "overlap") and isinstance(v, (int, float)):
            return f"{100 * v:.1f} %"
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    table = [list(columns)] + [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(columns))]
    return "\n".join("  ".join(v.rjust(w) if j else v.ljust(w)
                               for j, (v, w) in enumerate(zip(line, widths)))
                     for line in table)


_ESTIMATE_COLUMNS = ("scenario", "layer", "b", "copies", "gflop", "flop_per_byte", "copy_ms",
                     "compute_ms", "copy_share")


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.transfers [--save] [--batch N] [--chunks J] [--quick]``.

    On a GPU: copy bandwidth (h2d and d2h, pageable and pinned), the overlap experiment and
    the copy share of every Table I layer for every transfer strategy, printed as tables;
    ``--save`` writes ``results/transfers_{bandwidth,overlap,share,timeline}_*``. Without a GPU it
    says why, prints the analytic estimate (labelled so) and any saved reference rows; ``--save``
    then returns 1 (nothing measured, nothing saved).
    """
    parser = argparse.ArgumentParser(
        prog="python -m helpers.transfers",
        description="Measure CPU-GPU copies: bandwidth, overlap with compute, and their share "
                    "of the study's Table I layers (its Figure 7).")
    parser.add_argument("--save", action="store_true",
                        help="write results/transfers_*.csv + .json (needs a GPU)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size instead of Table I's 128")
    parser.add_argument("--chunks", type=int, default=4, help="chunks of the overlapped runs")
    parser.add_argument("--quick", action="store_true",
                        help="few sizes and repeats (a smoke test)")
    parser.add_argument("--out", default=None, help="output folder (default results/)")
    args = parser.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be >= 1, got {args.batch}")
    batch = args.batch or TABLE_I[0].b
    if not 1 <= args.chunks <= batch:
        parser.error(f"--chunks must be in 1..{batch} (the batch size), got {args.chunks}")

    reason = gpu_reason()
    if reason:
        print(reason)
        print("\nAnalytic ESTIMATE (not measured): copies of x in and y out at the stated link "
              "bandwidth vs FLOPs at the datasheet FP32 peak, forward + backward, batch "
              f"{batch}:")
        print(format_table(estimate_table(batch=batch), _ESTIMATE_COLUMNS))
        for experiment in ("bandwidth", "overlap", "share"):
            refs = reference_rows(experiment, args.out)
            devices = sorted({r["device"] for r in refs})
            print(f"\nreference rows for {experiment!r} in results/: "
                  + (", ".join(devices) if devices else "none yet"))
        if args.save:
            print("\n--save: nothing was measured, so nothing was saved")
            return 1
        return 0

    repeats = 5 if args.quick else 20
    sizes = DEFAULT_SIZES[::2] if args.quick else DEFAULT_SIZES
    print(f"measuring on {_device_label()}")
    bw = [r for d in DIRECTIONS for pinned in (False, True)
          for r in copy_bandwidth(sizes, d, pinned, repeats=repeats)]
    print(format_table(bw, ("direction", "memory", "size_bytes", "median_ms", "iqr_ms", "gb_s",
                            "status")))
    layers = TABLE_I[-1:] if args.quick else TABLE_I
    chunks = min(args.chunks, batch)
    overlaps = [overlap_experiment(lay, chunks, batch=batch, repeats=max(3, repeats // 2))
                for lay in layers]
    print()
    print(format_table(overlaps, ("layer", "b", "chunks", "sequential_pageable_ms",
                                  "sequential_pinned_ms", "overlapped_ms", "speedup", "overlap",
                                  "matches", "status")))
    shares = [transfer_share(lay, strategy, batch=batch, chunks=chunks,
                             repeats=max(3, repeats // 2))
              for lay in layers for strategy in TRANSFER_STRATEGIES]
    print()
    print(format_table(shares, ("layer", "b", "strategy", "pass", "h2d_ms", "compute_ms",
                                "d2h_ms", "total_ms", "copy_share", "status")))
    if args.save:
        slug = results.slug(backend.info().gpu_name or "gpu")
        timeline = []
        for o in overlaps:
            for t in o["timeline"]:
                full = dict(t, experiment="timeline", layer=o["layer"], b=o["b"],
                            chunks=o["chunks"], device=o["device"], device_kind="cuda",
                            status="ok")
                timeline.append({k: full[k] for k in TIMELINE_FIELDS})
        datasets = [(f"{PREFIX}bandwidth_{slug}", bw),
                    (f"{PREFIX}overlap_b{batch}_{slug}",
                     [{k: o[k] for k in OVERLAP_FIELDS} for o in overlaps]),
                    (f"{PREFIX}share_b{batch}_{slug}", shares),
                    (f"{PREFIX}timeline_b{batch}_{slug}", timeline)]
        for name, rows in datasets:
            if rows:
                paths = results.save(name, rows, directory=args.out)
                print("saved " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

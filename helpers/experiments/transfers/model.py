"""The analytic model of CPU-GPU copies: how long copying a layer's data takes next to computing it.

Copy time = bytes moved / a stated link bandwidth (:data:`LINKS`); compute time = FLOPs / a GPU's
datasheet FP32 peak (:data:`helpers.device.backend.KNOWN_GPUS`). The copies' share:
:func:`estimate_share` (one layer), :func:`estimate` (every machine and layer of :data:`SCENARIOS`),
:func:`estimate_channels` (against input channels); :func:`estimated_timeline` gives the schedule,
sequential and in overlapped chunks. Rows say ``"estimate"``: nothing is measured or needs a GPU.

Layers are :class:`helpers.conv.config.ConvConfig` (Table I: :data:`helpers.paper.TABLE_I`); rows
name them in the study's (b, i, f, k, s) symbols. Tensors are NCHW float32: x (N, C, H, W),
y (N, K, P, Q). Sizes in bytes, times in ms, bandwidths in bytes/s per direction.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
Figure 7 (share of CPU-GPU copies in each Table I layer's runtime).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from helpers.conv.config import ConvConfig
from helpers.device import backend
from helpers.paper import TABLE_I

__all__ = [
    "Link", "LINKS", "SCENARIOS", "ESTIMATE_FIELDS", "STREAMS", "SEQUENTIAL_STREAM",
    "layer_for", "layer_bytes", "chunk_bounds", "overlap_achieved",
    "estimate_share", "estimate", "estimated_timeline", "estimate_channels",
]


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

#: (label, GPU name for :func:`helpers.device.backend.lookup_gpu`, link name): the machines the
#: notebook compares. The third pairs the H100 SXM datasheet's FP32 peak with the Grace Hopper
#: link, standing in for a GH200.
SCENARIOS: tuple[tuple[str, str, str], ...] = (
    ("K40c + PCIe 3.0 (the study)", "K40c", "PCIe 3.0 x16"),
    ("H100 PCIe + PCIe 5.0", "H100 PCIe", "PCIe 5.0 x16"),
    ("H100 SXM peak + NVLink-C2C (GH200-like)", "H100 SXM", "NVLink-C2C"),
)

ESTIMATE_FIELDS = ("layer", "b", "gpu", "link", "pass", "copies", "bytes_in", "bytes_out",
                   "gflop", "flop_per_byte", "copy_ms", "compute_ms", "copy_share", "kind")

#: Stream names of a timeline's stages in the overlapped run (copy in, compute, copy out).
STREAMS = {"h2d": "copy stream (in)", "compute": "compute stream", "d2h": "copy stream (out)"}
#: Stream name of every stage of the sequential run.
SEQUENTIAL_STREAM = "one stream"


def layer_for(layer: ConvConfig | str, batch: int | None = None) -> ConvConfig:
    """A Table I layer by name (``"Conv1"`` .. ``"Conv5"``) or as given, with its batch replaced.

    Args:
        layer: a :class:`helpers.conv.config.ConvConfig` or the name of one in
            :data:`helpers.paper.TABLE_I`.
        batch: the batch size N to use instead of the layer's (None: keep it). >= 1.

    Returns:
        The layer (a copy when ``batch`` is given).

    Raises:
        ValueError: an unknown layer name, a non-layer, or ``batch < 1``.
    """
    if isinstance(layer, str):
        by_name = {lay.name: lay for lay in TABLE_I}
        if layer not in by_name:
            raise ValueError(f"layer must be one of {sorted(by_name)} or a ConvConfig, "
                             f"got {layer!r}")
        layer = by_name[layer]
    elif not isinstance(layer, ConvConfig):
        raise ValueError("layer must be a ConvConfig or a Table I name, "
                         f"got {type(layer).__name__}")
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {batch!r}")
        layer = layer.with_batch(batch)
    return layer


def layer_bytes(layer: ConvConfig, itemsize: int = 4) -> tuple[int, int]:
    """(bytes of x, bytes of y) for a layer: N*C*H*W and N*K*P*Q elements of ``itemsize`` bytes
    (4 for float32)."""
    return math.prod(layer.x_shape) * itemsize, math.prod(layer.y_shape) * itemsize


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


def _gpu_spec(gpu: str) -> backend.GpuSpec:
    spec = backend.lookup_gpu(gpu)
    if spec is None:
        known = [s.name for _, s in backend.KNOWN_GPUS]
        raise ValueError(f"gpu must name a GPU of helpers.device.backend.KNOWN_GPUS "
                         f"({', '.join(known)}), got {gpu!r}")
    return spec


def _link(link: str) -> Link:
    if link not in LINKS:
        raise ValueError(f"link must be one of {sorted(LINKS)}, got {link!r}")
    return LINKS[link]


def estimate_share(layer: ConvConfig | str, gpu: str = "K40c", link: str = "PCIe 3.0 x16", *,
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
        layer: a :class:`helpers.conv.config.ConvConfig` or a Table I name (``"Conv1"`` ..
            ``"Conv5"``).
        gpu: a GPU name :func:`helpers.device.backend.lookup_gpu` knows (``"K40c"``,
            ``"H100 PCIe"``, ...).
        link: a key of :data:`LINKS`.
        batch: replaces the layer's batch size (None: keep Table I's 128). >= 1.
        backward: forward + backward (as the study timed) instead of forward only.
        copy_output: copy y back to the host too (False: only x crosses the link, as when the
            output stays on the GPU for the next layer).

    Returns:
        dict with the keys of :data:`ESTIMATE_FIELDS`: ``b`` (batch), bytes in and out, GFLOP,
        FLOP per byte moved, ``copy_ms``, ``compute_ms``, ``copy_share`` (0..1) and
        ``kind="estimate"``.

    Raises:
        ValueError: an unknown layer, GPU or link, or ``batch < 1``.

    Source: the study's Figure 7 (copy share of runtime on Table I layers); bandwidths from
    :data:`LINKS`, peaks from :data:`helpers.device.backend.KNOWN_GPUS`.
    """
    lay = layer_for(layer, batch)
    spec, lk = _gpu_spec(gpu), _link(link)
    bytes_in, y_bytes = layer_bytes(lay)
    bytes_out = y_bytes if copy_output else 0
    flops = lay.flops * (3 if backward else 1)
    copy_s = (bytes_in + bytes_out) / lk.bytes_s
    compute_s = flops / spec.fp32_flops
    return {
        "layer": lay.name, "b": lay.n, "gpu": spec.name, "link": lk.name,
        "pass": "forward+backward" if backward else "forward",
        "copies": "input + output" if copy_output else "input only",
        "bytes_in": bytes_in, "bytes_out": bytes_out, "gflop": flops / 1e9,
        "flop_per_byte": flops / (bytes_in + bytes_out),
        "copy_ms": copy_s * 1e3, "compute_ms": compute_s * 1e3,
        "copy_share": copy_s / (copy_s + compute_s), "kind": "estimate",
    }


def estimate(layers: Iterable[ConvConfig | str] = TABLE_I,
             scenarios: Iterable[tuple[str, str, str]] = SCENARIOS, *,
             batch: int | None = None, backward: bool = True,
             copy_output: bool = True) -> list[dict]:
    """The model's prediction: :func:`estimate_share` for every (scenario, layer).

    Args:
        layers: layers or Table I names (default: all of Table I).
        scenarios: (label, gpu, link) triples (default :data:`SCENARIOS`).
        batch, backward, copy_output: as :func:`estimate_share`.

    Returns:
        One dict per (scenario, layer), scenario by scenario: :data:`ESTIMATE_FIELDS` plus
        ``scenario`` (the label).

    Raises:
        ValueError: as :func:`estimate_share`.

    Source: the study's Figure 7, estimated for its K40c and for today's GPUs.
    """
    layers = list(layers)
    return [dict(estimate_share(lay, gpu, link, batch=batch, backward=backward,
                                copy_output=copy_output), scenario=label)
            for label, gpu, link in scenarios for lay in layers]


def estimated_timeline(layer: ConvConfig | str, chunks: int = 4, gpu: str = "K40c",
                       link: str = "PCIe 3.0 x16", *, batch: int | None = None) -> list[dict]:
    """The copy/compute schedule the estimate implies, sequential and pipelined (forward only).

    Each chunk's copy in takes its bytes of x / link bandwidth, its compute its FLOPs / the
    datasheet peak, its copy out its bytes of y / link bandwidth. Sequential: copy all in,
    compute all, copy all out, one after another. Overlapped: copies in back to back on one copy
    engine; chunk j computes once its copy is in and chunk j-1 has computed; its copy out starts
    once it has computed and chunk j-1's copy out is done (a second copy engine, as on Tesla and
    later data-centre GPUs).

    Args:
        layer: a :class:`helpers.conv.config.ConvConfig` or Table I name. chunks: 1..batch.
        gpu, link: as :func:`estimate_share`. batch: replaces the layer's batch (>= 1).

    Returns:
        Dicts with ``run`` (``"sequential"`` or ``"overlapped"``), ``stream``, ``kind``
        (``h2d``, ``compute``, ``d2h``), ``chunk``, ``start_ms``, ``end_ms`` and
        ``source="estimate"``, in the shape of the measured timeline of
        :func:`helpers.experiments.transfers.overlap_experiment`.

    Raises:
        ValueError: as :func:`estimate_share`, or ``chunks`` outside 1..batch.

    Source: the study's remedy of asynchronous copies (Figure 7); the schedule is ours.
    """
    lay = layer_for(layer, batch)
    spec, lk = _gpu_spec(gpu), _link(link)
    bounds = chunk_bounds(lay.n, chunks)
    x_bytes, y_bytes = layer_bytes(lay)
    per_in, per_out, per_flop = x_bytes / lay.n, y_bytes / lay.n, lay.flops / lay.n

    def ms(n: int, kind: str) -> float:
        if kind == "compute":
            return n * per_flop / spec.fp32_flops * 1e3
        return n * (per_in if kind == "h2d" else per_out) / lk.bytes_s * 1e3

    out, t = [], 0.0
    for kind in ("h2d", "compute", "d2h"):
        d = ms(lay.n, kind)
        out.append(dict(run="sequential", stream=SEQUENTIAL_STREAM, kind=kind, chunk=0,
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
            out.append(dict(run="overlapped", stream=STREAMS[kind], kind=kind, chunk=j,
                            start_ms=s, end_ms=e, source="estimate"))
    return out


def estimate_channels(layer: ConvConfig | str = "Conv2", channels: Iterable[int] = (1, 3, 64, 384),
                      gpu: str = "K40c", link: str = "PCIe 3.0 x16", *,
                      copy_output: bool = True) -> list[dict]:
    """:func:`estimate_share` of one layer for several input channel counts C (forward + backward).

    Table I gives each layer as (b, i, f, k, s) and no input channels, so a layer's C is a
    choice (:mod:`helpers.paper` explains ours). C scales the FLOPs (``2 N K P Q C R S``) and
    the bytes of x, but not the bytes of y, so the copies' share falls as C grows.

    Args:
        layer: a :class:`helpers.conv.config.ConvConfig` or Table I name (default ``"Conv2"``).
        channels: input channel counts C to try, each an int >= 1.
        gpu, link, copy_output: as :func:`estimate_share`.

    Returns:
        One :func:`estimate_share` dict per C, in the given order, with ``c`` (the channels)
        added.

    Raises:
        ValueError: an unknown layer, GPU or link, or a channel count < 1.

    Source: the study's Table I (no channels given) and Figure 7; the sweep is ours.
    """
    lay = layer_for(layer)
    out = []
    for c in channels:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"channels must be ints >= 1, got {c!r}")
        varied = dataclasses.replace(lay, c=c)
        out.append(dict(estimate_share(varied, gpu, link, copy_output=copy_output), c=c))
    return out

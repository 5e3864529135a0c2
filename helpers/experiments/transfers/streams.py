"""How a copy and a convolution are run and timed on a GPU: host buffers, CUDA events and streams.

A copy from pinned (page-locked) host memory can run asynchronously on its own stream; CUDA events
recorded on a stream time what ran there on the GPU. :func:`event_times` times one call,
:func:`sequential_run` times copy in, compute, copy out on one stream, :func:`pipelined_run`
splits a batch into chunks over three streams (copy in, compute, copy out) ordered by events.
:func:`compute_fn` is the layer's convolution (torch's own: cuDNN on a GPU).

Tensors are NCHW float32: x (N, C, H, W) on the host, w (K, C, R, S) and y (N, K, P, Q); times
in ms. Everything here but :func:`compute_fn` and :func:`random_inputs` needs a CUDA GPU.

Source: the study's remedies of pinned memory and asynchronous copies (Li et al., ICPP 2016,
Figure 7); CUDA C Programming Guide, "Asynchronous Concurrent Execution" (streams, events).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from helpers.conv.config import ConvConfig
from helpers.device import host
from helpers.experiments.transfers.model import STREAMS, layer_bytes

__all__ = [
    "DEVICE", "host_empty", "event", "event_times", "compute_fn", "random_inputs",
    "gpu_bytes_needed", "refusal", "sequential_run", "pipelined_run",
]

#: Where the measured copies go (a name, so the logic can be exercised on another device).
DEVICE = "cuda"


def host_empty(shape, dtype: torch.dtype, pinned: bool) -> torch.Tensor:
    """An uninitialised host tensor of ``shape`` and ``dtype``, page-locked (``pinned``) or
    ordinary (pageable). Pinned memory needs a CUDA GPU."""
    return torch.empty(shape, dtype=dtype, pin_memory=pinned)


def event() -> torch.cuda.Event:
    """A CUDA event that records a time stamp on the GPU."""
    return torch.cuda.Event(enable_timing=True)


def event_times(fn: Callable[[], object], repeats: int, warmup: int) -> list[float]:
    """Milliseconds of ``fn()`` on the current stream, between two CUDA events, per repeat.

    ``warmup`` untimed calls come first; ``end.synchronize()`` waits for the work itself (a copy
    from pinned memory returns to Python before it has finished), not only for its launch.
    """
    torch.cuda.synchronize()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = event(), event()
        start.record()
        fn()
        end.record()
        end.synchronize()  # wait for the copy itself, not only for its launch
        times.append(start.elapsed_time(end))
    return times


def compute_fn(w: torch.Tensor, layer: ConvConfig,
               backward: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """``compute(x) -> y`` for one layer with torch's own convolution (cuDNN on a GPU).

    Args:
        w: the filters, float32 (K, C, R, S), on the device x will be on.
        layer: the layer's strides and paddings.
        backward: also compute the data and filter gradients of ``sum(y * dy)`` for ``dy`` =
            ones (standing for the loss gradient, made on the device), with one
            ``aten.convolution_backward`` call.

    Returns:
        A function of x (N, C, H, W) returning y (N, K, P, Q). Works on any device.
    """
    stride, padding = (layer.stride_h, layer.stride_w), (layer.pad_h, layer.pad_w)

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


def random_inputs(layer: ConvConfig, seed: int,
                  device: str = DEVICE) -> tuple[torch.Tensor, torch.Tensor]:
    """Random float32 x (N, C, H, W) on the host and w (K, C, R, S) on ``device``, seeded; w is
    scaled by 1 / sqrt(C R S) to keep outputs of order 1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(layer.x_shape, generator=g)
    w = torch.randn(layer.w_shape, generator=g)
    w /= (layer.c * layer.r * layer.s) ** 0.5
    return x, w.to(device)


def gpu_bytes_needed(layer: ConvConfig, backward: bool) -> int:
    """GPU memory a measurement of ``layer`` needs, bytes: x and y, chunk outputs, w (and dy, dx,
    dw with ``backward``), plus half again for cuDNN's workspace. A rough upper figure."""
    x_bytes, y_bytes = layer_bytes(layer)
    w_bytes = math.prod(layer.w_shape) * 4
    need = 2 * x_bytes + 2 * y_bytes + w_bytes
    if backward:
        need += x_bytes + y_bytes + w_bytes
    return int(1.5 * need)


def refusal(gpu_bytes: int, host_bytes: int) -> str | None:
    """A reason (starting ``"refused: "``) not to run a measurement that needs more than 80 % of
    the free GPU memory or half the available host memory, in bytes; None when it fits."""
    free, _ = torch.cuda.mem_get_info()
    if gpu_bytes > 0.8 * free:
        return (f"refused: needs about {gpu_bytes / 2**20:,.0f} MiB of GPU memory, "
                f"{free / 2**20:,.0f} MiB free")
    available = host.ram_available_bytes()
    if host_bytes > 0.5 * available:
        return (f"refused: needs about {host_bytes / 2**20:,.0f} MiB of host memory, "
                f"{available / 2**20:,.0f} MiB available")
    return None


def sequential_run(x_host, xd, y_host, compute, *, pinned: bool,
                   pieces: Sequence[tuple[int, int]] | None = None) -> tuple[float, ...]:
    """Copy in, compute, copy out, one after another on the current stream.

    Args:
        x_host: x on the host (pinned or pageable). xd: a device tensor of x's shape.
        y_host: a host tensor of y's shape. compute: ``compute(xd) -> y`` on the device.
        pinned: whether the host tensors are pinned (then the copies are ``non_blocking``).
        pieces: None for one copy each way, else :func:`~helpers.experiments.transfers.model.
            chunk_bounds` to copy piece by piece along the batch.

    Returns:
        ``(h2d_ms, compute_ms, d2h_ms, total_ms)`` from CUDA events.
    """
    e = [event() for _ in range(4)]
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


def pipelined_run(x_pin, xd, y_pin, compute, bounds, streams) -> tuple[float, list[dict]]:
    """Chunk j+1 is copied in on one stream while chunk j computes on another; copies out on a
    third. Host buffers must be pinned for the copies to be asynchronous.

    Args:
        x_pin, y_pin: pinned host tensors of x's and y's shapes. xd: a device tensor like x.
        compute: ``compute(x chunk) -> y chunk`` on the device.
        bounds: the chunks, ``[(start, stop), ...]`` along the batch.
        streams: three ``torch.cuda.Stream``: copy in, compute, copy out.

    Returns:
        ``(total_ms, timeline)``: the time between two events on the current stream, and one
        dict per (chunk, stage) with ``run``, ``stream``, ``kind``, ``chunk``, ``start_ms`` and
        ``end_ms`` in ms after the start event.
    """
    copy_in, work, copy_out = streams
    current = torch.cuda.current_stream()
    start, end = event(), event()
    start.record(current)
    for s in streams:
        s.wait_stream(current)  # nothing begins before the start event
    marks, outs = [], []
    for j, (a, b) in enumerate(bounds):
        copied, computed, returned = ([event(), event()] for _ in range(3))
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
    timeline = [dict(run="overlapped", stream=STREAMS[kind], kind=kind, chunk=j,
                     start_ms=start.elapsed_time(ev[0]), end_ms=start.elapsed_time(ev[1]))
                for kind, j, ev in marks]
    del outs  # chunk outputs stay alive until every stream is done with them
    return start.elapsed_time(end), timeline

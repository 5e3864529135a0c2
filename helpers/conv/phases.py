"""Steps inside a strategy (im2col, GEMM, col2im; FFT, Cgemm, inverse FFT), marked with
:func:`phase` so that :mod:`helpers.experiments.phases` can time each one.

Outside :func:`recording` a step costs one ``torch.profiler.record_function`` (nothing unless
a torch profiler runs; it labels the step in the profiler's trace when one does). Inside it, each
step is timed between two device synchronisations, so GPU time counts in the step that launched it.

Source: Li et al., ICPP 2016, Figure 4 (the hotspot kernels of each implementation).
"""

from __future__ import annotations

import contextlib
import time

import torch

from helpers.device import backend

__all__ = ["phase", "recording"]

_recorder: list[tuple[str, float]] | None = None


def _sync() -> None:
    if backend.MODE == "gpu":
        torch.cuda.synchronize()


@contextlib.contextmanager
def phase(name: str):
    """Mark one step of a strategy (``with phase("im2col"): ...``)."""
    with torch.profiler.record_function(name):
        if _recorder is None:
            yield
            return
        _sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            _sync()
            _recorder.append((name, time.perf_counter() - start))


@contextlib.contextmanager
def recording():
    """Record the steps run inside the block: yields a list that fills with ``(name, seconds)``
    pairs, one per :func:`phase` entered, in the order they ran. Not re-entrant."""
    global _recorder
    if _recorder is not None:
        raise RuntimeError("recording() is already active")
    steps: list[tuple[str, float]] = []
    _recorder = steps
    try:
        yield steps
    finally:
        _recorder = None


def sync() -> None:
    """Wait for the GPU (every stream of the device) when kernels run on one; no-op otherwise."""
    _sync()

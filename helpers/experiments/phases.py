"""Where the time goes inside a strategy: each step's share (im2col vs GEMM vs col2im, FFT vs
Cgemm vs inverse FFT), and the kernels torch's own convolution launched.

:func:`phase_times` runs a strategy with :func:`helpers.conv.phases.recording` on; for torch's
convolution, which has no steps of ours, :func:`library_kernels` lists what ``torch.profiler``
saw (on a GPU cuDNN's kernels, whose names say the algorithm; on a CPU the aten operators).

Source: Li et al., ICPP 2016, Figure 4 (hotspot kernels at (64, 128, 64, 11, 1)).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from helpers.conv import config_for, conv2d, conv2d_backward
from helpers.conv.phases import recording, sync
from helpers.device import backend

__all__ = ["phase_times", "library_kernels"]


def phase_times(strategy: str, x_shape, w_shape, stride=1, padding=0, device: str = "cpu",
                backward: bool = False, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Time each step of one strategy's forward (or backward) pass.

    Args:
        strategy: a key of :data:`helpers.conv.STRATEGIES`.
        x_shape, w_shape, stride, padding: as :func:`helpers.conv.conv2d` (N, C, H, W) and
            (K, C, R, S).
        device: ``"cpu"`` or ``"cuda"``.
        backward: time :func:`helpers.conv.conv2d_backward` instead of the forward pass.
        repeats: measured calls after one warm-up; the median of each step is reported.
        seed: seed of the random float32 inputs.

    Returns:
        One dict per step, in the order the steps ran: ``phase``, ``ms`` (median over the
        repeats), ``share`` (of the sum of the rows' ``ms``); plus a last row ``other`` for the
        time outside any step (validation, allocation, layout changes: each call's total minus
        its steps, median over the repeats), so the shares add up to 1. Steps that occur
        several times in a call are summed.

    Raises:
        ValueError: as :func:`helpers.conv.conv2d`; ``repeats < 1``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cfg = config_for(x_shape, w_shape, stride, padding)
    rng = np.random.default_rng(seed)
    where = torch.device("cuda") if device == "cuda" and backend.MODE == "gpu" else "cpu"
    x, w, dy = (torch.from_numpy(rng.standard_normal(s, dtype=np.float32)).to(where)
                for s in (cfg.x_shape, cfg.w_shape, cfg.y_shape))

    def call():
        if backward:
            conv2d_backward(x, w, dy, stride, padding, strategy, device)
        else:
            conv2d(x, w, stride, padding, strategy, device)

    call()  # warm-up: compilation, library initialisation
    totals, steps, order = [], [], []
    for _ in range(repeats):
        with recording() as recorded:
            sync()
            start = time.perf_counter()
            call()
            sync()
            totals.append(time.perf_counter() - start)
        per = {}
        for name, seconds in recorded:
            if name not in order:
                order.append(name)
            per[name] = per.get(name, 0.0) + seconds
        steps.append(per)
    # "other" is taken per call (that call's total minus its steps) before the median, so a
    # slow call does not count as "other" time in a fast one.
    others = [t - sum(per.values()) for t, per in zip(totals, steps)]
    rows = [{"phase": name, "ms": float(np.median([s.get(name, 0.0) for s in steps])) * 1e3}
            for name in order]
    rows.append({"phase": "other", "ms": max(float(np.median(others)), 0.0) * 1e3})
    total_ms = sum(r["ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["ms"] / total_ms
    return rows


def library_kernels(x_shape, w_shape, stride=1, padding=0, device: str = "cpu",
                    backward: bool = True, top: int = 8, seed: int = 0) -> list[dict]:
    """What torch's own convolution ran, as ``torch.profiler`` reports it.

    Args:
        x_shape, w_shape, stride, padding: as :func:`helpers.conv.conv2d`.
        device: ``"cpu"`` (aten operators, by self CPU time) or ``"cuda"`` (CUDA kernels, by
            GPU time; on a machine without a GPU it falls back to the CPU).
        backward: profile forward + backward instead of forward only.
        top: how many rows to return, the most expensive first.

    Returns:
        Dicts with ``name``, ``ms`` (total over one call), ``calls``, ``kind`` (``"cuda
        kernel"`` or ``"cpu op"``).

    Raises:
        ValueError: as :func:`helpers.conv.conv2d`.
    """
    cfg = config_for(x_shape, w_shape, stride, padding)
    on_gpu = device == "cuda" and backend.MODE == "gpu"
    where = torch.device("cuda") if on_gpu else torch.device("cpu")
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(cfg.x_shape, dtype=np.float32)).to(where)
    w = torch.from_numpy(rng.standard_normal(cfg.w_shape, dtype=np.float32)).to(where)
    x.requires_grad_(backward)
    w.requires_grad_(backward)
    kw = {"stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w)}

    def call():
        y = torch.nn.functional.conv2d(x, w, **kw)
        if backward:
            y.backward(torch.ones_like(y))

    call()  # warm-up (cuDNN picks its algorithm on the first call)
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        call()
        sync()
    rows = []
    for e in prof.key_averages():
        if on_gpu:
            us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
            if e.device_type == torch.autograd.DeviceType.CUDA and us > 0:
                rows.append({"name": e.key, "ms": us / 1e3, "calls": e.count, "kind": "cuda kernel"})
        elif e.self_cpu_time_total > 0 and e.key.startswith("aten::"):
            rows.append({"name": e.key, "ms": e.self_cpu_time_total / 1e3, "calls": e.count,
                         "kind": "cpu op"})
    rows.sort(key=lambda r: -r["ms"])
    return rows[:top]

"""What the live explorers measure, one point per call, in their measuring process
(:class:`helpers.device.worker.Worker`): nothing is estimated, a point is run or stopped.

:func:`conv_point` is one strategy on one layer (:func:`helpers.experiments.sweep.measure`),
:func:`throughput_point` one backend at one size (Figure 1's operations); both add the
quartiles of the per-call time (``q1``, ``q3``), which the charts draw as error bars.
:func:`warm_up` runs every strategy and backend once on a tiny size (compiling kernels,
starting thread pools), so that no point pays for it.
"""

from __future__ import annotations

import math

import torch

from helpers.conv import STRATEGIES, ConvConfig, config_for, conv2d, conv2d_backward
from helpers.device import backend
from helpers.device.timing import benchmark, quartiles
from helpers.experiments import sweep, throughput
from helpers.experiments.throughput.calls import make_call, row

__all__ = ["conv_point", "throughput_point", "warm_up"]


def warm_up() -> None:
    """Once per process: one forward and backward call of every strategy on a 1 x 1 x 8 x 8
    input with a 3 x 3 filter, and one call of every throughput backend at a tiny size, on
    the CPU and (when there is one) the GPU. Errors are left for the points to report."""
    devices = ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
    benchmark(lambda: None, min_run_time=1e-3, warmup=0)  # the timer's imports
    tiny = config_for((1, 1, 8, 8), (1, 1, 3, 3))
    gen = torch.Generator().manual_seed(0)
    for device in devices:
        where = "cuda" if device == "cuda" else "cpu"
        x = torch.randn(tiny.x_shape, generator=gen).to(where)
        w = torch.randn(tiny.w_shape, generator=gen).to(where)
        dy = torch.randn(tiny.y_shape, generator=gen).to(where)
        for name, strat in STRATEGIES.items():
            try:
                if strat.supports(tiny, device) is None:
                    conv2d(x, w, strategy=name, device=device)
                    conv2d_backward(x, w, dy, strategy=name, device=device)
            except Exception:  # noqa: BLE001
                pass
        for experiment, op, n in (("elementwise", "relu", 64), ("gemm", "gemm", 8)):
            for name in throughput.backends_for(device, experiment):
                try:
                    make_call(experiment, op, name, n, "float32", device)()
                except Exception:  # noqa: BLE001
                    pass
        if device == "cuda":
            torch.cuda.synchronize()


def conv_point(cfg: ConvConfig, strategy: str, device: str, backward: bool,
               min_run_time: float, measure_memory: bool, passes: int = 1) -> dict:
    """One strategy on one layer: the row of :func:`helpers.experiments.sweep.measure`
    (a warm-up call, then timed calls for ``min_run_time`` seconds; memory refused only when
    the tensors and workspace exceed half the device's free memory, never for time), with
    ``q1_ms`` and ``q3_ms``, the quartiles of the per-call time (None when not measured).
    With ``passes`` > 1 the measurement is repeated and the last one kept: the first calls
    at a new size in a fresh process pay for touching its memory."""
    for _ in range(passes):
        out = sweep.measure(cfg, strategy, device, backward, min_run_time, measure_memory,
                            budget_s=math.inf, keep_times=True)
        if out["status"] != "ok":
            break
    times = out.pop("times_s", None)
    q1, q3 = quartiles(times) if times else (None, None)
    out["q1_ms"], out["q3_ms"] = (q1 * 1e3, q3 * 1e3) if times else (None, None)
    return out


def throughput_point(experiment: str, op: str, name: str, device: str, dtype: str, n: int,
                     min_run_time: float) -> dict:
    """One backend at one size: the row of :func:`helpers.experiments.throughput.calls.row`
    after one warm-up call and timed calls for ``min_run_time`` seconds, with ``q1_s`` and
    ``q3_s``, the quartiles of the per-call time in seconds. Errors of the call propagate."""
    timing = benchmark(make_call(experiment, op, name, n, dtype, device), device=device,
                       label=f"{name} {op} n={n}", warmup=1, min_run_time=min_run_time)
    out = row(experiment, op, name, device, dtype, n, timing)
    out["q1_s"], out["q3_s"] = quartiles(timing.times_s)
    return out

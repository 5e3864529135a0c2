"""What the live explorers measure, one point per call, in their measuring process
(:class:`helpers.device.worker.Worker`): nothing is estimated, a point is run or stopped.

:func:`conv_point` is one strategy on one layer (:func:`helpers.experiments.sweep.measure`),
:func:`throughput_point` one backend at one size (Figure 1's operations); both add the
quartiles of the per-call time (``q1``, ``q3``), which the charts draw as error bars.
:func:`warm_up` runs every strategy and backend once on a tiny size (compiling kernels,
starting thread pools), so that no point pays for it. Each point times at least
:data:`MIN_REPEATS` blocks where its budget allows, and runs torch (and Numba's parallel loops)
on the cores other processes left free (:class:`helpers.device.host.FreeCores`), which its row
names (``threads``).
"""

from __future__ import annotations

import math
import sys
import time

import torch

from helpers.conv import STRATEGIES, ConvConfig, config_for, conv2d, conv2d_backward
from helpers.device import backend
from helpers.device.host import FreeCores
from helpers.device.timing import benchmark, quartiles
from helpers.experiments import sweep, throughput
from helpers.experiments.throughput.calls import make_call, row

__all__ = ["MIN_REPEATS", "conv_point", "throughput_point", "use_free_cores", "warm_up"]

#: Timed blocks a point collects at least, where its budget allows (fewer: no quartile bar).
MIN_REPEATS = 5
#: Share of a point's budget its timed blocks may use: the rest is left for the warm-up call,
#: the memory measurement and the reply.
_BUDGET_SHARE = 0.7

_FREE: FreeCores | None = None
_MAX_THREADS = torch.get_num_threads()


def use_free_cores() -> int:
    """Run torch's CPU operators (and Numba's parallel loops, once loaded) on the cores other
    processes left free since the last call, at most as many as torch chose at start; how
    many. Two busy programs on two cores leave one: a thread pool that waits for a core
    another process holds is many times slower than one thread."""
    global _FREE
    if _FREE is None:
        _FREE = FreeCores()
    threads = max(1, min(_FREE.read(), _MAX_THREADS))
    torch.set_num_threads(threads)
    numba = sys.modules.get("numba")
    if numba is not None:
        try:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        except Exception:  # noqa: BLE001  (no threading layer: its loops run as they are)
            pass
    return threads


def _deadline(budget_s: float | None) -> float | None:
    return None if budget_s is None else time.monotonic() + _BUDGET_SHARE * budget_s


def warm_up():
    """Once per process, a generator the measuring process runs in steps
    (:class:`helpers.device.worker.Worker`): to its first ``yield`` before it reports ready
    (the timer's imports and the library's convolution, the one every update measures first),
    then one step at a time while no call waits: a forward and backward call of every other
    strategy on a 1 x 1 x 8 x 8 input with a 3 x 3 filter, then one call of every throughput
    backend at a tiny size, on the CPU and (when there is one) the GPU. Errors are left for the
    points to report."""
    devices = ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
    benchmark(lambda: None, min_run_time=1e-3, warmup=0)  # the timer's imports
    tiny = config_for((1, 1, 8, 8), (1, 1, 3, 3))
    gen = torch.Generator().manual_seed(0)
    first = sorted(STRATEGIES, key=lambda name: not name.startswith("reference"))
    for device in devices:
        where = "cuda" if device == "cuda" else "cpu"
        x = torch.randn(tiny.x_shape, generator=gen).to(where)
        w = torch.randn(tiny.w_shape, generator=gen).to(where)
        dy = torch.randn(tiny.y_shape, generator=gen).to(where)
        for name in first:
            strat = STRATEGIES[name]
            try:
                if strat.supports(tiny, device) is None:
                    conv2d(x, w, strategy=name, device=device)
                    conv2d_backward(x, w, dy, strategy=name, device=device)
            except Exception:  # noqa: BLE001
                pass
            if device == "cuda":
                torch.cuda.synchronize()
            yield name
    for device in devices:
        for experiment, op, n in (("elementwise", "relu", 64), ("gemm", "gemm", 8)):
            for name in throughput.backends_for(device, experiment):
                try:
                    make_call(experiment, op, name, n, "float32", device)()
                except Exception:  # noqa: BLE001
                    pass
                yield name
        if device == "cuda":
            torch.cuda.synchronize()


def conv_point(cfg: ConvConfig, strategy: str, device: str, backward: bool,
               min_run_time: float, measure_memory: bool, passes: int = 1,
               budget_s: float | None = None) -> dict:
    """One strategy on one layer: the row of :func:`helpers.experiments.sweep.measure`
    (a warm-up call, then timed calls for ``min_run_time`` seconds and at least
    :data:`MIN_REPEATS` blocks, no block begun that would end past 70 % of ``budget_s``
    seconds from now; memory refused only when the tensors and workspace exceed half the
    device's free memory, never for time), with ``q1_ms`` and ``q3_ms``, the quartiles of the
    per-call time (None when not measured or with fewer than :data:`MIN_REPEATS` blocks),
    ``repeats`` (timed blocks), ``calls_per_repeat`` and ``threads`` (torch's CPU threads).
    With ``passes`` > 1 the measurement is repeated and the last one kept (the first calls at
    a new size in a fresh process pay for touching its memory), unless the first used half
    the budget. Raises :class:`helpers.device.cancel.Cancelled` when asked to stop."""
    started = time.monotonic()
    threads = use_free_cores()
    for done in range(passes):
        if done and budget_s is not None and time.monotonic() - started > budget_s / 2:
            break
        out = sweep.measure(cfg, strategy, device, backward, min_run_time, measure_memory,
                            budget_s=math.inf, keep_times=True,
                            min_repeats=MIN_REPEATS if done == passes - 1 else 1,
                            deadline=_deadline(budget_s))
        if out["status"] != "ok":
            break
    times = out.pop("times_s", None)
    out["repeats"], out["calls_per_repeat"] = len(times or ()), out.pop("calls_per_repeat", 0)
    out["threads"] = threads
    q1, q3 = quartiles(times) if times and len(times) >= MIN_REPEATS else (None, None)
    out["q1_ms"], out["q3_ms"] = (q1 * 1e3, q3 * 1e3) if q1 is not None else (None, None)
    return out


def throughput_point(experiment: str, op: str, name: str, device: str, dtype: str, n: int,
                     min_run_time: float, budget_s: float | None = None) -> dict:
    """One backend at one size: the row of :func:`helpers.experiments.throughput.calls.row`
    after one warm-up call and timed calls for ``min_run_time`` seconds and at least
    :data:`MIN_REPEATS` blocks (none begun that would end past 70 % of ``budget_s``), with
    ``q1_s`` and ``q3_s``, the quartiles of the per-call time in seconds (None with fewer
    blocks), ``repeats``, ``calls_per_repeat`` and ``threads``. Errors of the call propagate."""
    deadline = _deadline(budget_s)
    threads = use_free_cores()
    timing = benchmark(make_call(experiment, op, name, n, dtype, device), device=device,
                       label=f"{name} {op} n={n}", warmup=1, min_run_time=min_run_time,
                       min_repeats=MIN_REPEATS, deadline=deadline)
    out = row(experiment, op, name, device, dtype, n, timing)
    enough = timing.repeats >= MIN_REPEATS
    out["q1_s"], out["q3_s"] = quartiles(timing.times_s) if enough else (None, None)
    out["repeats"], out["calls_per_repeat"] = timing.repeats, timing.calls_per_repeat
    out["threads"] = threads
    return out

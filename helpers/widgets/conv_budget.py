"""How long measuring one convolution strategy will take, found before measuring it.

The FLOP-rate estimate (:func:`helpers.experiments.sweep.estimate_seconds`) refuses what is
surely too slow, but for memory-bound layers (few filters, 1 x 1 kernels, large strides) a
call can take a hundred times longer than it says. :func:`probe` therefore times the strategy
on a reduced copy of the layer (batch 1 and a small input, grown fourfold in work until a call
takes :data:`PROBE_TARGET_S` and its time grows with the work) and scales that time by the
work, FLOPs or tensor elements, whichever grows more, with a safety factor.
:func:`measure_seconds` turns the time of a call into that of
:func:`helpers.experiments.sweep.measure` (random inputs, a warm-up call, the timed calls and
one call for the memory peak). :func:`warm_up` runs each strategy once per process, so that
no measurement pays for compiling kernels. Symbols: the cuDNN paper's (N, C, H, W, K, R, S).
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from helpers.conv import STRATEGIES, ConvConfig, config_for, conv2d, conv2d_backward
from helpers.device import backend
from helpers.experiments import sweep, throughput_budget

__all__ = ["PROBE_CALLS", "PROBE_TARGET_S", "REPEAT_BELOW_S", "SAFETY", "Probe", "bounds",
           "calls", "measure_seconds", "probe", "warm_up"]

#: A probe stops growing once one call takes this long (seconds).
PROBE_TARGET_S = 0.01
#: Safety factor on a time scaled up from a reduced layer (larger tensors leave the caches).
SAFETY = 2.0
#: A probe step counts once its time grew at least MIN_GROWTH times from the step before, and
#: at most MAX_GROWTH times as fast as the work did: a jump far beyond the work is a delay that
#: began at that step (threads waiting for cores another process holds), not the layer's cost.
MIN_GROWTH = 1.5
MAX_GROWTH = 8.0
#: Calls per probe step; the fastest counts. A call of at least REPEAT_BELOW_S seconds is
#: not repeated (a delay waiting for a core, CALL_DELAY_S, changes it by 20 % at most).
PROBE_CALLS = 3
REPEAT_BELOW_S = 0.5
#: How much slower than the assumed FLOP rate a call may be (up to 1,000 times, measured on a
#: 2-core CPU for memory-bound layers), and the delay a call may wait for a core while
#: another process holds it (about 0.09 s, measured under load).
PESSIMISM = 1000.0
CALL_DELAY_S = 0.1

_WARM: set = set()


def _sync(device: str) -> None:
    if device == "cuda" and backend.MODE == "gpu":
        torch.cuda.synchronize()


def _call_seconds(cfg: ConvConfig, strategy: str, device: str, backward: bool,
                  gen: torch.Generator) -> float:
    """Seconds of one forward (and backward) call on standard-normal inputs of ``cfg``."""
    where = "cuda" if device == "cuda" and backend.MODE == "gpu" else "cpu"
    x = torch.randn(cfg.x_shape, generator=gen).to(where)
    w = torch.randn(cfg.w_shape, generator=gen).to(where)
    dy = torch.randn(cfg.y_shape, generator=gen).to(where) if backward else None
    stride, padding = (cfg.stride_h, cfg.stride_w), (cfg.pad_h, cfg.pad_w)
    _sync(device)
    start = time.perf_counter()
    conv2d(x, w, stride, padding, strategy, device)
    if backward:
        conv2d_backward(x, w, dy, stride, padding, strategy, device)
    _sync(device)
    return time.perf_counter() - start


def warm_up(devices=("cpu",)) -> None:
    """Once per process: the timer's imports, and one call (forward and backward) of every
    strategy on each of ``devices`` on a tiny layer, where the strategy runs there (kernel
    compilation, library initialisation: up to seconds, paid here rather than by the first
    measurement). Errors are left for the measurement to report."""
    throughput_budget.warm_up()
    tiny = config_for((1, 1, 8, 8), (1, 1, 3, 3))
    gen = torch.Generator().manual_seed(0)
    for device in devices:
        if device == "cuda" and backend.MODE != "gpu":
            continue  # the simulator times nothing: no measurement to warm up
        for name, strat in STRATEGIES.items():
            if (device, name) in _WARM or device not in strat.devices:
                continue
            _WARM.add((device, name))
            try:
                if strat.supports(tiny, device) is None:
                    _call_seconds(tiny, name, device, True, gen)
            except Exception:  # noqa: BLE001  (the measurement reports this strategy's errors)
                pass


def bounds(cfg: ConvConfig, strategy: str, device: str, backward: bool, min_run_time: float,
           measure_memory: bool) -> tuple[float, float]:
    """(optimistic, pessimistic) seconds of measuring ``strategy`` at ``cfg``, before running
    anything: at the assumed FLOP rate of :func:`helpers.experiments.sweep.estimate_seconds`,
    and at :data:`PESSIMISM` times slower plus :data:`CALL_DELAY_S` a call. A measurement
    whose pessimistic time fits needs no :func:`probe`."""
    est = sweep.estimate_seconds(cfg, strategy, device, backward)
    return (measure_seconds(cfg, est, min_run_time, backward, measure_memory),
            measure_seconds(cfg, est * PESSIMISM + CALL_DELAY_S, min_run_time, backward,
                            measure_memory))


def calls(measure_memory: bool) -> int:
    """Calls :func:`helpers.experiments.sweep.measure` makes at most for a slow strategy: a
    warm-up, the timed ones, and one for the memory peak."""
    return 1 + throughput_budget.CALLS_TIMED + (1 if measure_memory else 0)


def measure_seconds(cfg: ConvConfig, call_s: float, min_run_time: float, backward: bool,
                    measure_memory: bool) -> float:
    """Estimated seconds of :func:`helpers.experiments.sweep.measure` at ``cfg`` when one call
    takes ``call_s``: drawing the inputs, a warm-up call, the timed calls
    (:func:`helpers.experiments.throughput_budget.benchmark_seconds`) and the memory call."""
    values = math.prod(cfg.x_shape) + math.prod(cfg.w_shape)
    values += math.prod(cfg.y_shape) if backward else 0
    return (throughput_budget.setup_seconds(values) + call_s * (2 if measure_memory else 1)
            + throughput_budget.benchmark_seconds(call_s, min_run_time))


@dataclasses.dataclass(frozen=True)
class Probe:
    """Estimated ``seconds`` of one call at the full layer, and how it was found (``text``)."""

    seconds: float
    text: str


def _steps(cfg: ConvConfig) -> list[ConvConfig]:
    """Reduced copies of ``cfg``, in increasing work: batch 1 with the input doubled from the
    smallest that fits the kernel up to H x W, then the batch grown fourfold up to N."""
    h_min, w_min = max(1, cfg.r - 2 * cfg.pad_h), max(1, cfg.s - 2 * cfg.pad_w)
    out, j = [], 0
    while True:
        h, w = min(cfg.h, h_min << j), min(cfg.w, w_min << j)
        out.append((1, h, w))
        if (h, w) == (cfg.h, cfg.w):
            break
        j += 1
    n = 4
    while n < cfg.n:
        out.append((n, cfg.h, cfg.w))
        n *= 4
    if cfg.n > 1:
        out.append((cfg.n, cfg.h, cfg.w))
    return [config_for((n, cfg.c, h, w), cfg.w_shape, (cfg.stride_h, cfg.stride_w),
                       (cfg.pad_h, cfg.pad_w)) for n, h, w in out]


def _work(cfg: ConvConfig, strategy: str, backward: bool) -> tuple[int, int]:
    """(FLOPs, elements of x and y): what a call's time grows with."""
    return (max(1, STRATEGIES[strategy].flops(cfg, backward)),
            math.prod(cfg.x_shape) + math.prod(cfg.y_shape))


def probe(cfg: ConvConfig, strategy: str, device: str, backward: bool = True,
          deadline: float | None = None, enough_s: float = 0.0) -> Probe:
    """Estimate one call of ``strategy`` at ``cfg`` from reduced copies of the layer (see the
    module). Each step counts the fastest of up to :data:`PROBE_CALLS` calls (a shape's first
    call can pay for setting it up, and any call can wait for a core on a loaded machine: a
    delay scaled up by the work would refuse a cheap strategy). Stops at the full layer, once
    a step's estimate is at most ``enough_s`` seconds (small enough for the caller), once a
    step takes :data:`PROBE_TARGET_S` and grew with the work (at least :data:`MIN_GROWTH`
    times, and at most :data:`MAX_GROWTH` times the work's growth), or at ``deadline`` (a
    :func:`time.monotonic` value). When the last two steps grew, the time is fitted as a
    fixed part (a delay per call that does not grow with the layer: threads waiting for a
    core) plus one growing with the work, and only the growing part is scaled; otherwise the
    whole time is. Errors of the strategy propagate."""
    gen = torch.Generator().manual_seed(0)
    full = _work(cfg, strategy, backward)
    before, seconds, scale, step, grew = None, math.inf, 1.0, cfg, False
    for step in _steps(cfg):
        if STRATEGIES[strategy].supports(step, device) is not None:
            continue
        flops, elements = _work(step, strategy, backward)
        scale = max(full[0] / flops, full[1] / elements, 1.0)
        seconds = math.inf
        for _ in range(PROBE_CALLS):
            seconds = min(seconds, _call_seconds(step, strategy, device, backward, gen))
            if (seconds * scale * SAFETY <= enough_s or seconds >= REPEAT_BELOW_S
                    or (deadline is not None and time.monotonic() >= deadline)):
                break  # small enough already, or too long for a delay to matter, or no time
        grew = (before is not None
                and MIN_GROWTH * before[0] <= seconds <= MAX_GROWTH * before[1] / scale * before[0])
        if (scale == 1.0 or seconds * scale * SAFETY <= enough_s
                or (seconds >= PROBE_TARGET_S and grew)
                or (deadline is not None and time.monotonic() >= deadline)):
            break
        before = (seconds, scale)
    if scale == 1.0:
        return Probe(seconds, f"one call measured at {seconds:.2g} s")
    fixed = 0.0
    if grew and before[1] > scale:
        # t = fixed + growing * (fraction of the full layer's work), through both steps
        growing = (seconds - before[0]) / (1 / scale - 1 / before[1])
        fixed = max(0.0, seconds - growing / scale)
    estimate = fixed + (seconds - fixed) * scale * SAFETY
    split = (f" ({fixed:.2g} s of it a fixed delay per call, found from the step before)"
             if fixed > 0 else "")
    return Probe(estimate, f"the fastest call at batch {step.n}, input {step.h} x {step.w} took "
                           f"{seconds:.2g} s{split}; scaled to this layer ({scale:,.0f} times "
                           f"the work, x{SAFETY:g} for safety) about {estimate:.2g} s")

"""One convolution strategy timed at one layer on one device, fairly, or the reason it is not:
:func:`refusal` (no code, the simulator, an estimated time or memory over budget),
:func:`estimate_seconds` (from assumed rates, never reported) and :func:`measure`, which every
experiment that times a strategy uses (the sweeps, Table I, the explorers). Re-exported by
:mod:`helpers.experiments.sweep`.

Symbols: layers as :class:`helpers.conv.ConvConfig` (cuDNN's N, C, H, W, K, R, S); times in
ms, rates in GFLOP/s, memory in bytes.

Source: Li et al., ICPP 2016, Sections IV-B (Figure 3, runtime) and V-B (Figure 5, memory).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from helpers.conv import STRATEGIES, ConvConfig, conv2d, conv2d_backward, simulator_refusal
from helpers.device import backend, memory, timing
from helpers.device.arrays import all_finite, unpoisoned
from helpers.device.precision import tf32_mode
from helpers.device.progress import time_limit_status, time_up

__all__ = ["ASSUMED_GFLOPS", "estimate_seconds", "measure", "refusal"]

#: Assumed sustained rates in GFLOP/s (of each strategy's own FLOP count), used only to refuse
#: points that would take too long before running them; never reported as measurements.
#: Deliberately optimistic for the slow paths, so that a refusal is a safe call.
ASSUMED_GFLOPS = {
    "cpu": {"direct": 5.0, "unrolling": 40.0, "fft": 8.0, "winograd": 40.0, "library": 40.0},
    "cuda": {"direct": 500.0, "unrolling": 5000.0, "fft": 2000.0, "winograd": 5000.0,
             "library": 10000.0},
}


def estimate_seconds(cfg: ConvConfig, strategy: str, device: str, backward: bool = True) -> float:
    """A rough estimate of one call's time in seconds, from the strategy's FLOPs and
    :data:`ASSUMED_GFLOPS` (an assumption for refusing points, not a measurement)."""
    strat = STRATEGIES[strategy]
    rate = ASSUMED_GFLOPS["cuda" if device == "cuda" else "cpu"][strat.family]
    return strat.flops(cfg, backward) / (rate * 1e9)


def _memory_needed(cfg: ConvConfig, strategy: str, backward: bool, device: str = "cuda") -> int:
    tensors = 4 * (np.prod(cfg.x_shape) + np.prod(cfg.w_shape) + np.prod(cfg.y_shape))
    ws = STRATEGIES[strategy].workspace_bytes(cfg, backward, device) or 0
    return int(tensors * (2 if backward else 1) + ws)


def refusal(cfg: ConvConfig, strategy: str, device: str, backward: bool = True,
            budget_s: float = 2.0) -> str | None:
    """Why ``strategy`` should not be measured at ``cfg`` on ``device``, or None.

    In order: the strategy has no code for the device or does not support the configuration
    (its own reason); the CUDA simulator (correctness only: its times mean nothing); the
    estimated time of one call over ``budget_s`` seconds (:func:`estimate_seconds`); the
    tensors plus analytic workspace over half the memory available on the device.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    strat = STRATEGIES[strategy]
    reason = strat.supports(cfg, device)
    if reason:
        return reason
    if device == "cuda" and backend.MODE != "gpu":
        return "CUDA simulator: correctness only, its timings are meaningless"
    est = estimate_seconds(cfg, strategy, device, backward)
    if est > budget_s:
        rate = ASSUMED_GFLOPS["cuda" if device == "cuda" else "cpu"][strat.family]
        return (f"refused: about {strat.flops(cfg, backward) / 1e9:.1f} GFLOP at an assumed "
                f"{rate:g} GFLOP/s is about {est:.1f} s a call, over the {budget_s:g} s budget")
    need, avail = _memory_needed(cfg, strategy, backward, device), memory.available_bytes(device)
    if need > avail // 2:
        return (f"refused: needs about {need / 2**20:,.0f} MiB (tensors + workspace), over half "
                f"of the {avail / 2**20:,.0f} MiB available on {device}")
    return None


def measure(cfg: ConvConfig, strategy: str, device: str, backward: bool = True,
            min_run_time: float = 0.05, measure_memory: bool = True, budget_s: float = 2.0,
            seed: int = 0, *, deadline: float | None = None,
            time_limit: float | None = None, keep_times: bool = False,
            min_repeats: int = 2) -> dict:
    """Time one strategy at one configuration, or say why not.

    What is timed, and what is not: one warm-up call through :func:`helpers.conv.conv2d` (and
    :func:`helpers.conv.conv2d_backward`), which validates the layer, compiles kernels, lets
    the library choose its algorithm, and fills our outputs with NaN first
    (:func:`helpers.device.arrays.poisoned`); its outputs must then be finite (an element no
    kernel wrote fails the row). The timed calls (:func:`helpers.device.timing.benchmark`, no
    further warm-up) run the strategy itself on the same tensors, unpoisoned
    (:func:`helpers.device.arrays.unpoisoned`), with TF32 off unless the strategy is the
    TF32 library (``reference-tf32``): no argument checks, no NaN fill, no host
    synchronisation of ours between kernels. Outputs and workspace are still allocated in
    every timed call, by the library and by us alike: after the warm-up torch's caching
    allocator serves them from blocks it already holds, a host-side bookkeeping step without
    a CUDA call, the same for cuDNN's workspace as for our buffers.

    Args:
        cfg: the configuration (:func:`helpers.conv.config_for`).
        strategy: a key of :data:`STRATEGIES`.
        device: ``"cpu"`` or ``"cuda"``.
        backward: time forward + backward (the study's Figure 3) instead of forward only.
        min_run_time: seconds of timed calls (:func:`helpers.device.timing.benchmark`, >= 2 calls).
        measure_memory: also measure the call's peak memory (:func:`helpers.device.memory.peak_memory`).
        budget_s: refuse, without running, a call estimated to take longer (seconds); and no
            timed block is begun that would end more than this after the warm-up began (at
            least one is timed; the warm-up call pays for compiling, so it is not judged).
        seed: seed of the random float32 inputs.
        deadline: a :func:`time.monotonic` value; once it has passed nothing is run and the
            row's status is :func:`time_limit_status` of ``time_limit`` (seconds, the limit the
            deadline came from; only for that text); before it, no timed block is begun that
            would end after it (at least one is timed). None: no deadline.
        keep_times: also return ``times_s``, the per-call time of each timed block (seconds),
            and ``calls_per_repeat``, the calls in each block.
        min_repeats: timed blocks to collect at least, deadline permitting
            (:func:`helpers.device.timing.benchmark`).

    Returns:
        dict with ``strategy, family, device`` (the device's name), ``pass``, ``median_ms``,
        ``iqr_ms``, ``gflop_per_s`` (the strategy's FLOPs over the median), ``flops``,
        ``workspace_bytes`` (analytic; None if unknown or if the strategy cannot compute
        this configuration on ``device``), ``peak_bytes`` (measured; None if not
        measured), ``status`` (``"ok"``, or why nothing was measured: :func:`refusal`, or the
        error the call raised). Never raises for a configuration it cannot run.

    Raises:
        ValueError: an unknown strategy or device.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    strat = STRATEGIES.get(strategy)
    if strat is None:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    row = {"strategy": strategy, "family": strat.family, "device": timing.device_label(device),
           "pass": "forward+backward" if backward else "forward", "median_ms": None,
           "iqr_ms": None, "gflop_per_s": None, "flops": strat.flops(cfg, backward),
           "workspace_bytes": (None if strat.supports(cfg, device)   # cannot run it at all
                               else strat.workspace_bytes(cfg, backward, device)),
           "peak_bytes": None,
           "status": "ok"}
    if time_up(deadline):
        row["status"] = time_limit_status(time_limit)
        return row
    try:  # reads the device's free memory: fails once a point left a sticky CUDA error
        reason = refusal(cfg, strategy, device, backward, budget_s)
    except Exception as exc:  # noqa: BLE001
        reason = f"failed: {type(exc).__name__}: {exc}"
    if reason is None and device == "cuda":
        reason = simulator_refusal(strat, cfg, backward)
    if reason:
        row["status"] = reason
        return row
    x = w = dy = None

    def checked() -> str | None:
        """The warm-up: the public calls, outputs poisoned; why an output is wrong, or None."""
        out = {"y": conv2d(x, w, **cfg.kwargs, strategy=strategy, device=device)}
        if backward:
            out["dx"], out["dw"] = conv2d_backward(x, w, dy, **cfg.kwargs, strategy=strategy,
                                                   device=device)
        for name, t in out.items():
            if not all_finite(t):
                return (f"failed: the warm-up call's {name} holds NaN or infinity from finite "
                        f"inputs (an element no kernel wrote?); not timed")
        return None

    def call():
        strat.forward(x, w, cfg, device)
        if backward:
            strat.backward(x, w, dy, cfg, device)

    failure = None
    started = time.monotonic()
    stop_by = min(deadline if deadline is not None else math.inf,
                  started + budget_s if math.isfinite(budget_s) else math.inf)
    try:
        x, w, dy = _random_inputs(cfg, backward, seed, device)
        with tf32_mode(False):
            failure = checked()
            if failure is None:
                with unpoisoned():
                    t = timing.benchmark(call, device=device, label=strategy, warmup=0,
                                         min_run_time=min_run_time, min_repeats=min_repeats,
                                         deadline=None if math.isinf(stop_by) else stop_by)
                    if measure_memory:
                        row["peak_bytes"] = memory.peak_memory(call, device=device).peak_bytes
    # any error (torch's, or a Numba CUDA driver error, which is no RuntimeError) fails this
    # row only: the other points of a recording run are still measured and saved
    except Exception as exc:  # noqa: BLE001
        failure = f"failed: {type(exc).__name__}: {exc}"
    if failure is not None:
        row["status"] = failure
        x = w = dy = None
        if device == "cuda":  # hand the failed point's cached blocks back (after an OOM, say)
            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001  (a sticky CUDA error: the row says it already)
                pass
        return row
    row.update(median_ms=t.median_ms, iqr_ms=t.iqr_s * 1e3,
               gflop_per_s=row["flops"] / t.median_s / 1e9)
    if keep_times:
        row["times_s"], row["calls_per_repeat"] = t.times_s, t.calls_per_repeat
    return row


def _random_inputs(cfg: ConvConfig, backward: bool, seed: int, device: str):
    """Standard-normal float32 x, w and (with ``backward``, else None) dy on ``device``.

    On a GPU they are drawn there by torch's generator: NumPy would draw them on the host at
    about 10 ns a value, a second or more per point of the paper sweep (dy alone is up to
    4.6e8 values), longer than most measurements. On the CPU, NumPy's generator."""
    shapes = [cfg.x_shape, cfg.w_shape] + ([cfg.y_shape] if backward else [])
    if device == "cuda":
        gen = torch.Generator(device="cuda").manual_seed(seed)
        drawn = [torch.randn(s, generator=gen, device="cuda") for s in shapes]
    else:
        rng = np.random.default_rng(seed)
        drawn = [torch.from_numpy(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    return (*drawn, None) if not backward else tuple(drawn)

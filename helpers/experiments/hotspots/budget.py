"""Refusing hotspot runs up front: a rough lower estimate of a run's time and memory.

:func:`estimate` (seconds): the training FLOPs of the run
(:func:`helpers.experiments.layer_costs.layer_flops`) over :data:`ASSUMED_EFFICIENCY` of the
device's peak FLOP/s; :func:`refusal` says why a run should not start (no GPU, over the time
budget, over half the device's memory), or None. An assumption for refusing, never reported as
a measurement. Units: seconds, bytes; input size in pixels; batch in images.

Source: Li et al., ICPP 2016, IV-A, Figure 2 (the networks); datasheet peaks from
:data:`helpers.device.backend.KNOWN_GPUS`.
"""

from __future__ import annotations

from helpers.device import backend, memory
from helpers.experiments.hotspots.records import PREFIX
from helpers.experiments.layer_costs import layer_flops
from helpers.experiments.layer_times import check_run_args
from helpers.networks import figure2
from helpers.networks.figure2 import MODELS

__all__ = ["ASSUMED_EFFICIENCY", "estimate", "refusal"]

#: Fraction of the device's peak FP32 FLOP/s that :func:`estimate` assumes training reaches.
#: Optimistic on purpose, so that a refused run is surely too slow.
ASSUMED_EFFICIENCY = 0.5


def _peak_flops(device: str, threads: int | None = None) -> tuple[float, str]:
    info = backend.info()
    if device == "cuda":
        if info.gpu_peak_fp16_tensor_flops:  # cuDNN may use TF32 tensor cores for float32
            return info.gpu_peak_fp16_tensor_flops / 2, f"{info.gpu_name} TF32 peak (datasheet)"
        if info.gpu_peak_fp32_flops:
            return info.gpu_peak_fp32_flops, f"{info.gpu_name} FP32 peak (datasheet)"
        return 20e12, "an assumed 20 TFLOP/s (GPU not in helpers.device.backend.KNOWN_GPUS)"
    cores = info.cpu_logical_cores or info.cpu_physical_cores or 1
    part = min(threads, cores) / cores if threads else 1.0
    on = f", {min(threads, cores)} of {cores} cores" if threads else ""
    if info.cpu_peak_fp32_flops_estimate:
        return (part * info.cpu_peak_fp32_flops_estimate,
                f"{info.cpu_label} estimated FP32 peak{on}")
    return part * 100e9, f"an assumed 100 GFLOP/s (CPU peak unknown){on}"


def _check_args(model_name, batch, input_size, iterations, device, warmup, threads=None) -> None:
    figure2.check_input_size(model_name, input_size)
    check_run_args(batch, iterations, warmup, device, threads)


def estimate(model_name: str, batch: int, input_size: int, iterations: int,
             device: str = "cpu", warmup: int = 1, threads: int | None = None) -> float:
    """A rough lower estimate of a :func:`measure` run's time, in seconds (float).

    ``(warmup + iterations) x batch x training FLOPs per image``
    (:func:`helpers.experiments.layer_costs.layer_flops`, 3 x forward) divided by
    :data:`ASSUMED_EFFICIENCY` x the device's peak FLOP/s (the CPU's estimated peak from
    :func:`helpers.device.backend.info`, the part of it that ``threads`` cores give; a GPU's
    datasheet TF32 or FP32 peak). An assumption for refusing runs up front, never reported as
    a measurement.

    Args:
        model_name, batch, input_size, iterations, device, warmup, threads: as :func:`measure`.

    Raises:
        ValueError: as :func:`measure`.
    """
    _check_args(model_name, batch, input_size, iterations, device, warmup, threads)
    cost = layer_flops(model_name, input_size, 1)
    peak, _ = _peak_flops(device, threads)
    return (warmup + iterations) * batch * cost.training_flops / (ASSUMED_EFFICIENCY * peak)


def _memory_needed(model_name: str, batch: int, input_size: int) -> int:
    """About the bytes training needs: weights and their gradients, plus every layer's output
    and its gradient (float32)."""
    cost = layer_flops(model_name, input_size, batch)
    return 4 * (2 * cost.params + 2 * cost.activations)


def refusal(model_name: str, batch: int, input_size: int, iterations: int, device: str = "cpu",
            warmup: int = 1, budget_s: float = 120.0, threads: int | None = None) -> str | None:
    """Why a :func:`measure` run should not be started, or None if it may.

    Refused: a CUDA run on a machine without a GPU; an estimated time (:func:`estimate`) over
    ``budget_s`` seconds; an estimated memory need (weights, gradients and every layer's
    output, float32) over half of the memory available on the device.

    Args:
        model_name, batch, input_size, iterations, device, warmup, threads: as :func:`measure`.
        budget_s: the longest acceptable run, seconds.

    Returns:
        None, or a message starting with ``"refused:"`` that gives the estimate.

    Raises:
        ValueError: as :func:`measure`; ``budget_s <= 0``.
    """
    _check_args(model_name, batch, input_size, iterations, device, warmup, threads)
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    if device == "cuda" and backend.MODE != "gpu":
        return (f"refused: device='cuda' needs a CUDA GPU and this machine has none "
                f"({backend.MODE_REASON}); GPU measurements come from results/ ({PREFIX}*)")
    est = estimate(model_name, batch, input_size, iterations, device, warmup, threads)
    if est > budget_s:
        peak, source = _peak_flops(device, threads)
        per_image = layer_flops(model_name, input_size).training_flops
        gflop = (warmup + iterations) * batch * per_image / 1e9
        return (f"refused: {MODELS[model_name]} at {input_size} px, batch {batch}, "
                f"{warmup} + {iterations} iterations is about {gflop:,.0f} GFLOP; at "
                f"{ASSUMED_EFFICIENCY:.0%} of {peak / 1e9:,.0f} GFLOP/s ({source}) that is at "
                f"least {est:,.0f} s, over the {budget_s:g} s budget. Use a smaller batch or "
                f"input, or a GPU.")
    need, avail = _memory_needed(model_name, batch, input_size), memory.available_bytes(device)
    if need > avail // 2:
        return (f"refused: {MODELS[model_name]} at {input_size} px, batch {batch} needs about "
                f"{need / 2**30:,.1f} GiB (weights, gradients, layer outputs), over half of the "
                f"{avail / 2**30:,.1f} GiB available on {device}")
    return None

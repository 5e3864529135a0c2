"""Hotspot layers: where the time of training a CNN goes, by layer type (the study's Figure 2).

The study trained AlexNet, GoogLeNet, VGG and OverFeat for 10 iterations (forward + backward)
on a Tesla K40c and found that convolution layers took 86 %, 89 %, 90 % and 94 % of the time
(:data:`STUDY_FIGURE2`). :func:`profile_training` repeats the experiment with torch on this
machine: it runs training iterations (forward, cross-entropy loss, backward, SGD step) of one of
the networks of :mod:`helpers.models` under ``torch.profiler`` and groups the time by layer type
(:data:`GROUPS`):

* ``convolution``, ``pooling``, ``activation`` (ReLU), ``fully connected`` (linear layers),
* ``other``: normalisation, dropout, concatenation (GoogLeNet's Inception modules), the loss,
  reshapes, and the framework's own time between operators (Python, autograd bookkeeping),
* ``weight update``: the SGD step and ``zero_grad`` (which releases last iteration's gradients),
  kept apart because they are not layers: their cost grows with the number of weights, not with
  the batch or the image size.

How time is attributed (each microsecond exactly once): the profiler records every aten operator
as an event with its children. Walking down from each iteration's root, the first event whose
name says what it is (``aten::conv2d``, ``aten::max_pool2d``, ``aten::relu_``, ``aten::linear``,
``aten::batch_norm``, ``Optimizer.step#SGD.step``...) gets its *inclusive* time, so the
convolution's inner ``aten::mkldnn_convolution`` is not counted a second time; time of events
that say nothing (the iteration itself: Python between operators) counts as ``other``. A
backward node (``autograd::engine::evaluate_function: AddmmBackward0``) goes to the group of the
forward operator that created it, found by the autograd sequence number the two share: so
``AddmmBackward0`` and ``TBackward0`` count as fully connected because their forward ``addmm`` and
``t`` ran inside ``aten::linear``, and dropout's ``MulBackward0`` counts as dropout. On the CPU
the times are the operators' CPU (wall) times, which add up to the iterations' wall time; on a
GPU they are the CUDA kernels' device times (``device_time_total``), each kernel counted under
the operator that launched it, and kernels linked to no operator count as ``other``.

Why convolution dominates: :func:`layer_flops` counts each layer type's arithmetic analytically
from the layers' shapes (a forward-hook pass on the ``meta`` device, which computes shapes and
no numbers).

Command line::

    python -m helpers.hotspots --model alexnet [--batch N --input S --iterations I
                                                --device cpu|cuda --threads T --save]
    python -m helpers.hotspots --model all            # the four networks

Defaults on the CPU (chosen so that all four networks finish in well under a minute on a 2-core
machine): batch 4, input 128 px, 2 profiled iterations after 1 warm-up, one CPU thread. On a
GPU: batch 64, each network's native input (224 px, OverFeat 231 px), 10 iterations as in the
study. A run estimated to take far too long (for example VGG-16 at 224 px, batch 64, on a CPU)
is refused before it starts, with the estimate.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
ICPP 2016, Section III, Figure 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time

import torch

from . import backend, models
from .models import MODELS, NAMES, NATIVE_INPUT

__all__ = ["GROUPS", "STUDY_FIGURE2", "CPU_DEFAULTS", "GPU_DEFAULTS", "ASSUMED_EFFICIENCY",
           "HotspotProfile", "ModelCost", "classify", "layer_flops", "estimate_seconds",
           "refusal", "profile_training", "profile_module", "attribute", "format_table",
           "reference_profiles", "main"]

#: Layer-type groups, in the order tables and charts show them.
GROUPS: tuple[str, ...] = ("convolution", "pooling", "activation", "fully connected", "other",
                           "weight update")

#: The study's Figure 2: share of 10 training iterations (forward + backward) spent in
#: convolution layers, on a Tesla K40c (Li et al., ICPP 2016). Reported, not measured here.
STUDY_FIGURE2: dict[str, float] = {"alexnet": 0.86, "googlenet": 0.89, "vgg16": 0.90,
                                   "overfeat": 0.94}

#: Default run on a CPU: small enough that all four networks take well under a minute on a
#: 2-core machine (our choice; the study's batch sizes are not in its summary). One thread:
#: on a machine shared with other work, threads that wait for each other inflate the time of
#: small operators (pooling, ReLU) far beyond their cost.
CPU_DEFAULTS = {"batch": 4, "input_size": 128, "iterations": 2, "threads": 1}

#: Default run on a GPU: batch 64, each network's native input size, 10 iterations as the study.
GPU_DEFAULTS = {"batch": 64, "input_size": None, "iterations": 10, "threads": None}

#: Fraction of the device's peak FP32 FLOP/s that :func:`estimate_seconds` assumes training
#: reaches. Optimistic on purpose, so that a refused run is surely too slow.
ASSUMED_EFFICIENCY = 0.5

_EVAL = "autograd::engine::evaluate_function: "

#: (group, detail, pattern) rules matched against operator names (case-insensitive), in order.
#: Forward names are aten operators (``aten::conv2d``); backward names are autograd nodes
#: (``ConvolutionBackward0``), used when the forward operator of a node is not found.
_RULES: tuple[tuple[str, str, re.Pattern], ...] = tuple(
    (g, d, re.compile(p, re.IGNORECASE)) for g, d, p in (
        ("weight update", "SGD step", r"^Optimizer\.step|^aten::_foreach_"),
        ("weight update", "zero_grad", r"^Optimizer\.zero_grad"),
        ("convolution", "convolution", r"conv2d|convolution"),
        ("pooling", "pooling", r"pool"),
        ("activation", "ReLU", r"relu|threshold_backward"),
        ("fully connected", "linear", r"linear|addmm|^aten::mm$|^aten::matmul$"),
        ("other", "normalisation", r"batch_?norm|local_response|layer_?norm|group_?norm"),
        ("other", "dropout", r"dropout"),
        ("other", "concatenation", r"^aten::cat$|^aten::concat|^CatBackward"),
        ("other", "loss", r"cross_?entropy|nll_?loss|log_?softmax"),
        ("other", "reshape", r"flatten|^aten::view$|^aten::reshape$|^ViewBackward|^ReshapeAlias"),
    ))


def classify(name: str) -> tuple[str, str] | None:
    """The (group, detail) an operator or autograd-node name belongs to, or None if the name
    says nothing (e.g. ``aten::empty``, ``ProfilerStep#3``, ``MulBackward0``).

    Examples: ``"aten::conv2d"`` -> ``("convolution", "convolution")``;
    ``"aten::linear"`` -> ``("fully connected", "linear")``;
    ``"NativeBatchNormBackward0"`` -> ``("other", "normalisation")``.

    Args:
        name: a ``torch.profiler`` event name (str). An ``autograd::engine::evaluate_function:``
            prefix is ignored.
    """
    if name.startswith(_EVAL):
        name = name[len(_EVAL):]
    for group, detail, pattern in _RULES:
        if pattern.search(name):
            return group, detail
    return None


# ----------------------------------------------------------------------------------------------
# Analytic FLOPs of each layer type (shape-only pass on the meta device).
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ModelCost:
    """Analytic cost of one network's forward pass at one input size (from :func:`layer_flops`).

    Attributes:
        model: key of :data:`helpers.models.MODELS`. input_size: pixels (H = W). batch: N.
        flops: forward FLOPs per group of :data:`GROUPS` (int; multiply-add = 2 FLOPs).
        layers: one dict per layer with ``layer`` (module path), ``type`` (class name),
            ``group``, ``output`` (shape without the batch, tuple), ``flops`` (int, whole
            batch) and ``params`` (the layer's weights and biases, int).
        params: number of weights (int). activations: elements of all layer outputs (int,
            whole batch).
    """

    model: str
    input_size: int
    batch: int
    flops: dict[str, int]
    layers: list[dict]
    params: int
    activations: int

    @property
    def total_flops(self) -> int:
        """Forward FLOPs of the whole network (int)."""
        return sum(self.flops.values())

    @property
    def training_flops(self) -> int:
        """About 3 x the forward FLOPs: the backward pass computes gradients with respect to both
        the inputs and the weights of every convolution and linear layer, each about as costly
        as the forward product."""
        return 3 * self.total_flops

    @property
    def shares(self) -> dict[str, float]:
        """Each group's fraction of :attr:`total_flops` (sums to 1)."""
        total = self.total_flops or 1
        return {g: f / total for g, f in self.flops.items()}

    @property
    def params_by_group(self) -> dict[str, int]:
        """Weights (and biases) of each group's layers (int)."""
        out = {g: 0 for g in GROUPS}
        for r in self.layers:
            out[r["group"]] += r["params"]
        return out

    def flops_per_weight(self, group: str) -> float | None:
        """Forward FLOPs per weight of a group's layers (its arithmetic reuse of each weight), or
        None for a group without weights. A convolution uses each weight at every output
        position of every image (``2 N P Q`` FLOPs per weight); a fully connected layer only
        once per image (``2 N``)."""
        w = self.params_by_group[group]
        return self.flops[group] / w if w else None

    def conv_layers(self) -> list[dict]:
        """The convolution layers' rows of :attr:`layers`, in order."""
        return [r for r in self.layers if r["group"] == "convolution"]


def _module_cost(mod: torch.nn.Module, inp: torch.Tensor,
                 out: torch.Tensor) -> tuple[str, int] | None:
    """(group, forward FLOPs) of one leaf module, or None for modules that compute nothing."""
    nn = torch.nn
    n_out = out.numel()
    if isinstance(mod, nn.Conv2d):
        kh, kw = mod.kernel_size
        return "convolution", 2 * n_out * (mod.in_channels // mod.groups) * kh * kw
    if isinstance(mod, nn.Linear):
        return "fully connected", 2 * n_out * mod.in_features
    if isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d)):
        k = mod.kernel_size
        kh, kw = (k, k) if isinstance(k, int) else k
        return "pooling", n_out * kh * kw  # one comparison (or addition) per window element
    if isinstance(mod, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
        return "pooling", max(inp.numel(), n_out)
    if isinstance(mod, nn.ReLU):
        return "activation", n_out
    if isinstance(mod, (nn.BatchNorm2d, nn.LocalResponseNorm)):
        return "other", 2 * n_out  # scale and shift per element
    if isinstance(mod, nn.Dropout):
        return "other", n_out  # one multiplication per element
    return None


def layer_flops(model_name: str, input_size: int, batch: int = 1) -> ModelCost:
    """Forward FLOPs of each layer type of a network, counted analytically from its layers.

    A forward hook on every layer records its output shape during one pass on PyTorch's
    ``meta`` device (shapes only: nothing is computed or allocated), and FLOPs follow from the
    shapes (multiply-add = 2 FLOPs; bias additions ignored):

    * convolution: ``2 N K P Q (C / groups) R S``; fully connected: ``2 N in out``;
    * max / average pooling: one operation per window element, ``N C P Q R S``; adaptive
      pooling: one per input (or output, if larger) element;
    * ReLU: one per element; batch normalisation: two per element; dropout: one per element.

    GoogLeNet applies its ReLU as a function inside each ``BasicConv2d`` (no ReLU module), so
    its ReLU is counted from those blocks' outputs. Inception's concatenation moves data and
    does no arithmetic.

    Args:
        model_name: a key of :data:`helpers.models.MODELS`.
        input_size: height = width of the input in pixels (from the network's
            :data:`helpers.models.MIN_INPUT` to 4096).
        batch: N, 1 to 65,536.

    Returns:
        A :class:`ModelCost` (deterministic: same numbers on every machine).

    Raises:
        ValueError: unknown model, input size out of range, batch out of range.

    Source: the study's Figure 2 (why convolution layers dominate training time).
    """
    models.check_input_size(model_name, input_size)
    _check_int("batch", batch, 1, 65_536)
    with torch.device("meta"):
        model = models.build(model_name)
    layers: list[dict] = []

    def hook(name):
        def record(mod, args, out):
            cost = _module_cost(mod, args[0], out)
            if cost is not None:
                layers.append({"layer": name, "type": type(mod).__name__, "group": cost[0],
                               "output": tuple(out.shape[1:]), "flops": int(cost[1]),
                               "params": sum(p.numel() for p in mod.parameters(recurse=False))})
        return record

    def relu_of(name):
        def record(mod, args, out):
            layers.append({"layer": f"{name} (F.relu)", "type": "relu", "group": "activation",
                           "output": tuple(out.shape[1:]), "flops": int(out.numel()),
                           "params": 0})
        return record

    handles = []
    for name, mod in model.named_modules():
        if type(mod).__name__ == "BasicConv2d":  # torchvision GoogLeNet: conv, BN, F.relu
            handles.append(mod.register_forward_hook(relu_of(name)))
        if not list(mod.children()):
            handles.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            model(torch.empty(batch, 3, input_size, input_size, device="meta"))
    except (RuntimeError, ValueError) as exc:  # a window that does not fit, a 1-value BN
        raise ValueError(f"input_size {input_size} with batch {batch} does not fit "
                         f"{MODELS[model_name]}: {exc}") from exc
    finally:
        for h in handles:
            h.remove()
    flops = {g: 0 for g in GROUPS}
    for r in layers:
        flops[r["group"]] += r["flops"]
    params = sum(p.numel() for p in model.parameters())
    activations = batch * sum(_prod(r["output"]) for r in layers)
    return ModelCost(model_name, input_size, batch, flops, layers, params, activations)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _check_int(name: str, value, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------
# Refusing runs that would take far too long.
# ----------------------------------------------------------------------------------------------


def _peak_flops(device: str, threads: int | None = None) -> tuple[float, str]:
    info = backend.info()
    if device == "cuda":
        if info.gpu_peak_fp16_tensor_flops:  # cuDNN may use TF32 tensor cores for float32
            return info.gpu_peak_fp16_tensor_flops / 2, f"{info.gpu_name} TF32 peak (datasheet)"
        if info.gpu_peak_fp32_flops:
            return info.gpu_peak_fp32_flops, f"{info.gpu_name} FP32 peak (datasheet)"
        return 20e12, "an assumed 20 TFLOP/s (GPU not in helpers.backend.KNOWN_GPUS)"
    cores = info.cpu_logical_cores or info.cpu_physical_cores or 1
    part = min(threads, cores) / cores if threads else 1.0
    on = f", {min(threads, cores)} of {cores} cores" if threads else ""
    if info.cpu_peak_fp32_flops_estimate:
        return (part * info.cpu_peak_fp32_flops_estimate,
                f"{info.cpu_label} estimated FP32 peak{on}")
    return part * 100e9, f"an assumed 100 GFLOP/s (CPU peak unknown){on}"


def _sizes(model_names, input_size):
    return [(m, input_size if input_size is not None else NATIVE_INPUT[m]) for m in model_names]


def estimate_seconds(model_name: str, batch: int, input_size: int, iterations: int,
                     device: str = "cpu", warmup: int = 1, threads: int | None = None) -> float:
    """A rough lower estimate of a :func:`profile_training` run's time in seconds.

    ``(warmup + iterations) x batch x training FLOPs per image`` (:func:`layer_flops`,
    3 x forward) divided by :data:`ASSUMED_EFFICIENCY` x the device's peak FLOP/s (the CPU's
    estimated peak from :func:`helpers.backend.info`, the part of it that ``threads`` cores
    give; a GPU's datasheet TF32 or FP32 peak). An assumption for refusing runs up front, never
    reported as a measurement.

    Raises:
        ValueError: as :func:`profile_training`.
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


def _memory_available(device: str) -> int:
    if device == "cuda" and backend.MODE == "gpu":
        free, _ = torch.cuda.mem_get_info()
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def refusal(model_name: str, batch: int, input_size: int, iterations: int, device: str = "cpu",
            warmup: int = 1, budget_s: float = 120.0, threads: int | None = None) -> str | None:
    """Why a :func:`profile_training` run should not be started, or None if it may.

    Refused: a CUDA run on a machine without a GPU; an estimated time
    (:func:`estimate_seconds`) over ``budget_s`` seconds; an estimated memory need (weights,
    gradients and every layer's output, float32) over half of the memory available on the
    device.

    Args:
        model_name, batch, input_size, iterations, device, warmup, threads: as
            :func:`profile_training`. budget_s: the longest acceptable run, seconds.

    Returns:
        None, or a message starting with ``"refused:"`` that gives the estimate.

    Raises:
        ValueError: as :func:`profile_training`; ``budget_s <= 0``.
    """
    _check_args(model_name, batch, input_size, iterations, device, warmup, threads)
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    if device == "cuda" and backend.MODE != "gpu":
        return (f"refused: device='cuda' needs a CUDA GPU and this machine has none "
                f"({backend.MODE_REASON}); GPU measurements come from results/ (hotspots_*)")
    est = estimate_seconds(model_name, batch, input_size, iterations, device, warmup, threads)
    if est > budget_s:
        peak, source = _peak_flops(device, threads)
        per_image = layer_flops(model_name, input_size).training_flops
        gflop = (warmup + iterations) * batch * per_image / 1e9
        return (f"refused: {MODELS[model_name]} at {input_size} px, batch {batch}, "
                f"{warmup} + {iterations} iterations is about {gflop:,.0f} GFLOP; at "
                f"{ASSUMED_EFFICIENCY:.0%} of {peak / 1e9:,.0f} GFLOP/s ({source}) that is at "
                f"least {est:,.0f} s, over the {budget_s:g} s budget. Use a smaller batch or "
                f"input, or a GPU.")
    need, avail = _memory_needed(model_name, batch, input_size), _memory_available(device)
    if need > avail // 2:
        return (f"refused: {MODELS[model_name]} at {input_size} px, batch {batch} needs about "
                f"{need / 2**30:,.1f} GiB (weights, gradients, layer outputs), over half of the "
                f"{avail / 2**30:,.1f} GiB available on {device}")
    return None


def _check_args(model_name, batch, input_size, iterations, device, warmup, threads=None) -> None:
    models.check_input_size(model_name, input_size)
    if threads is not None:
        _check_int("threads", threads, 1, 1024)
    _check_int("batch", batch, 1, 65_536)
    _check_int("iterations", iterations, 1, 10_000)
    _check_int("warmup", warmup, 0, 100)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


# ----------------------------------------------------------------------------------------------
# Profiling training iterations.
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class HotspotProfile:
    """Where the time of training one network went, by layer type (from :func:`profile_training`).

    Attributes:
        model: key of :data:`helpers.models.MODELS`. device: ``"cpu"`` or ``"cuda"``.
        device_label: the measuring device, e.g. ``"CPU: AMD EPYC (2 cores)"`` or
            ``"GPU: NVIDIA H100 80GB HBM3"``.
        time_kind: ``"CPU time"`` or ``"GPU time (CUDA kernels)"``.
        batch, input_size (pixels), iterations (profiled), warmup (iterations run before).
        seconds: time per group of :data:`GROUPS` over all profiled iterations (float, s).
        detail: the same time split finer, ``{group: {detail: seconds}}`` (e.g. ``other`` into
            normalisation, dropout, concatenation, loss, reshape, framework).
        total_s: sum of :attr:`seconds` (the profiled time). wall_s: wall-clock time of the
            profiled iterations (synchronised on a GPU), for comparison.
        threads: CPU threads torch used (``torch.get_num_threads()`` during the run).
        source: ``"measured"`` here, or ``"reference"`` (loaded from results/).
        date: ISO date of a reference measurement, else "".
    """

    model: str
    device: str
    device_label: str
    time_kind: str
    batch: int
    input_size: int
    iterations: int
    warmup: int
    seconds: dict[str, float]
    detail: dict[str, dict[str, float]]
    total_s: float
    wall_s: float
    threads: int = 0
    source: str = "measured"
    date: str = ""

    @property
    def name(self) -> str:
        """The network's display name, e.g. ``"AlexNet"``."""
        return MODELS.get(self.model, self.model)

    @property
    def shares(self) -> dict[str, float]:
        """Each group's fraction of :attr:`total_s` (they sum to 1)."""
        total = self.total_s or 1.0
        return {g: self.seconds.get(g, 0.0) / total for g in GROUPS}

    @property
    def conv_share(self) -> float:
        """Fraction of the profiled time spent in convolution layers (forward + backward)."""
        return self.shares["convolution"]

    @property
    def measured_on(self) -> str:
        """The device, the CPU threads on a CPU, and the kind of time, for titles."""
        threads = (f", {self.threads} thread{'s' if self.threads != 1 else ''}"
                   if self.device == "cpu" and self.threads else "")
        return f"{self.device_label}{threads} ({self.time_kind})"

    @property
    def ms_per_iteration(self) -> float:
        """Profiled time per training iteration in ms."""
        return 1e3 * self.total_s / self.iterations

    def rows(self) -> list[dict]:
        """One dict per group, for :func:`helpers.results.save` (same keys in every row)."""
        return [{"model": self.model, "group": g, "seconds": self.seconds.get(g, 0.0),
                 "share": self.shares[g], "total_s": self.total_s, "wall_s": self.wall_s,
                 "batch": self.batch, "input_size": self.input_size,
                 "iterations": self.iterations, "warmup": self.warmup,
                 "threads": self.threads, "device_kind": self.device,
                 "device": self.device_label, "time_kind": self.time_kind} for g in GROUPS]


def _depth(e) -> int:
    d = 0
    while e.cpu_parent is not None:
        e, d = e.cpu_parent, d + 1
    return d


def _chain(e) -> list:
    """The event and its ancestors, outermost first."""
    out = []
    while e is not None:
        out.append(e)
        e = e.cpu_parent
    return out[::-1]


def _in_backward(e) -> bool:
    return any(a.name.startswith(_EVAL) for a in _chain(e))


def attribute(events, device_time: bool = False) -> tuple[dict[str, float], dict, float]:
    """Split profiled time into :data:`GROUPS` (see the module docstring for the rules).

    Args:
        events: ``prof.events()`` of a ``torch.profiler.profile`` run (FunctionEvents).
        device_time: attribute CUDA kernel time (GPU) instead of CPU time.

    Returns:
        ``(seconds per group, {group: {detail: seconds}}, total seconds)``; the groups sum to
        the total. On the CPU the total is the roots' CPU time; on a GPU it is the time of all
        device events (kernels, copies, memsets; not the GPU-side copies of annotated ranges),
        linked to an operator or not.
    """
    cpu = torch.autograd.DeviceType.CPU
    host = [e for e in events if e.device_type == cpu and not e.is_async]
    forward: dict[int, object] = {}
    for e in host:
        if e.sequence_nr >= 0 and not e.name.startswith(_EVAL) and not _in_backward(e):
            old = forward.get(e.sequence_nr)
            if old is None or _depth(e) < _depth(old):
                forward[e.sequence_nr] = e
    detail: dict[str, dict[str, float]] = {g: {} for g in GROUPS}

    def add(where: tuple[str, str], us: float) -> None:
        group, label = where
        detail[group][label] = detail[group].get(label, 0.0) + us

    # Device time of an operator: the kernels linked to it (torch links each kernel to the
    # operator that launched it), without GPU-side copies of record_function ranges
    # (ProfilerStep#, Optimizer.step...), which torch may link too and which carry the range's
    # own name; inclusive of its children's kernels.
    inclusive: dict[int, float] = {}

    def own_device(e) -> float:
        return sum(k.duration for k in e.kernels if k.name != e.name)

    def incl_device(e) -> float:
        key = id(e)
        if key not in inclusive:
            inclusive[key] = own_device(e) + sum(incl_device(c) for c in e.cpu_children)
        return inclusive[key]

    def incl(e) -> float:
        return incl_device(e) if device_time else e.cpu_time_total

    def own(e) -> float:
        return own_device(e) if device_time else e.self_cpu_time_total

    def of_forward(e) -> tuple[str, str] | None:
        for a in _chain(e):
            where = classify(a.name)
            if where is not None:
                return where
        return None

    def visit(e) -> None:
        if e.name.startswith(_EVAL):
            fwd = forward.get(e.sequence_nr) if e.sequence_nr >= 0 else None
            where = (of_forward(fwd) if fwd is not None else None) or classify(e.name)
            add(where or ("other", "framework"), incl(e))
            return
        where = classify(e.name)
        if where is not None:
            add(where, incl(e))
            return
        add(("other", "framework"), own(e))
        for c in e.cpu_children:
            visit(c)

    for e in host:
        if e.cpu_parent is None:
            visit(e)
    if device_time:
        names = {e.name for e in host}
        total = sum(e.time_range.elapsed_us() for e in events
                    if e.device_type != cpu and not e.is_async
                    and not getattr(e, "is_user_annotation", False) and e.name not in names)
        linked = sum(sum(d.values()) for d in detail.values())
        if total > linked:
            add(("other", "GPU work linked to no operator"), total - linked)
        total = max(total, linked)
    else:
        total = sum(sum(d.values()) for d in detail.values())
    seconds = {g: sum(detail[g].values()) / 1e6 for g in GROUPS}
    detail_s = {g: {k: v / 1e6 for k, v in sorted(d.items(), key=lambda kv: -kv[1])}
                for g, d in detail.items()}
    return seconds, detail_s, total / 1e6


def profile_training(model_name: str, batch: int, input_size: int, iterations: int,
                     device: str = "cpu", warmup: int = 1, budget_s: float = 120.0,
                     seed: int = 0, threads: int | None = None) -> HotspotProfile:
    """Profile training iterations of one network and group the time by layer type.

    Each iteration: ``zero_grad``, forward pass, cross-entropy loss against random labels,
    backward pass, SGD step (learning rate 0.01), on random float32 images ``(batch, 3,
    input_size, input_size)``. The first ``warmup`` iterations run under the profiler's own
    warm-up phase and are not recorded (the first calls allocate memory, create oneDNN/cuDNN
    plans and start the profiler, and are many times slower); the next ``iterations`` are
    recorded. On a GPU every iteration ends with ``torch.cuda.synchronize()`` and the groups are
    CUDA kernel times.

    Args:
        model_name: a key of :data:`helpers.models.MODELS`.
        batch: images per iteration, 1 to 65,536.
        input_size: height = width in pixels (the network's :data:`helpers.models.MIN_INPUT`
            to 4096; native sizes are :data:`helpers.models.NATIVE_INPUT`).
        iterations: profiled training iterations, 1 to 10,000 (the study used 10).
        device: ``"cpu"`` or ``"cuda"``.
        warmup: iterations run before the profiled ones, 0 to 100.
        budget_s: refuse (without running) a run estimated to take longer (seconds).
        seed: seed of the weights and the random images and labels.
        threads: CPU threads for torch during the run (1 to 1024; restored afterwards), or
            None to keep torch's setting. One thread keeps small operators' times honest on a
            machine shared with other work, where threads wait for each other.

    Returns:
        A :class:`HotspotProfile`: seconds and shares per group, the device label, batch, input
        size, iterations, the profiled total and the wall-clock time.

    Raises:
        ValueError: bad arguments (each names the parameter and its valid range), or the run is
            refused (:func:`refusal`: no GPU for ``device="cuda"``, too slow, too large).

    Source: Li et al., ICPP 2016, Figure 2 (10 training iterations, forward + backward).
    """
    reason = refusal(model_name, batch, input_size, iterations, device, warmup, budget_s, threads)
    if reason:
        raise ValueError(reason)
    model = models.build(model_name, seed=seed)
    return profile_module(model, (batch, 3, input_size, input_size), iterations, device, warmup,
                          num_classes=1000, seed=seed, name=model_name, threads=threads)


def profile_module(model: torch.nn.Module, input_shape: tuple[int, int, int, int],
                   iterations: int = 2, device: str = "cpu", warmup: int = 1,
                   num_classes: int = 1000, seed: int = 0, name: str | None = None,
                   threads: int | None = None) -> HotspotProfile:
    """Profile training iterations of any classifier ``model`` (the engine of
    :func:`profile_training`, which adds the study's networks and the up-front refusal).

    Args:
        model: a ``torch.nn.Module`` mapping float32 ``input_shape`` images to
            ``(N, num_classes)`` scores; moved to ``device`` and trained in place.
        input_shape: ``(N, C, H, W)`` of the random input batch.
        iterations, device, warmup, seed, threads: as :func:`profile_training`.
        num_classes: labels are drawn from ``0 .. num_classes - 1``.
        name: what :attr:`HotspotProfile.model` says (default: the model's class name).

    Returns:
        A :class:`HotspotProfile` (see :func:`profile_training`).

    Raises:
        ValueError: ``input_shape`` not 4 positive integers; ``iterations``, ``warmup``,
            ``num_classes``, ``threads`` out of range; ``device`` not ``"cpu"``/``"cuda"``,
            or ``"cuda"`` on a machine without a GPU.
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    if len(input_shape) != 4 or any(not isinstance(d, int) or d < 1 for d in input_shape):
        raise ValueError(f"input_shape must be (N, C, H, W) positive integers, got {input_shape!r}")
    _check_int("iterations", iterations, 1, 10_000)
    _check_int("warmup", warmup, 0, 100)
    _check_int("num_classes", num_classes, 1, 1_000_000)
    if threads is not None:
        _check_int("threads", threads, 1, 1024)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    on_gpu = device == "cuda"
    if on_gpu and backend.MODE != "gpu":
        raise ValueError(f"device='cuda' needs a CUDA GPU and this machine has none "
                         f"({backend.MODE_REASON})")
    info = backend.info()
    where = torch.device("cuda" if on_gpu else "cpu")
    model = model.to(where).train()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*input_shape, generator=gen).to(where)
    labels = torch.randint(0, num_classes, (input_shape[0],), generator=gen).to(where)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    # The profiler's own warm-up phase runs the warm-up iterations without recording them.
    kw = dict(schedule=schedule(wait=0, warmup=warmup, active=iterations, repeat=1),
              acc_events=True) if warmup else {}
    walls = []
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        used_threads = torch.get_num_threads()
        sync()
        with profile(activities=activities, **kw) as prof:
            for _ in range(warmup + iterations):
                start = time.perf_counter()
                step()
                sync()
                walls.append(time.perf_counter() - start)
                if warmup:
                    prof.step()
    finally:
        torch.set_num_threads(old_threads)
    seconds, detail, total = attribute(prof.events(), device_time=on_gpu)
    del opt, x
    if on_gpu:
        torch.cuda.empty_cache()
    return HotspotProfile(
        model=name or type(model).__name__, device=device,
        device_label=f"GPU: {info.gpu_name}" if on_gpu else info.cpu_label,
        time_kind="GPU time (CUDA kernels)" if on_gpu else "CPU time",
        batch=input_shape[0], input_size=input_shape[2], iterations=iterations, warmup=warmup,
        seconds=seconds, detail=detail, total_s=total, wall_s=sum(walls[warmup:]),
        threads=used_threads)


# ----------------------------------------------------------------------------------------------
# Tables, reference results, command line.
# ----------------------------------------------------------------------------------------------


def format_table(profiles: list[HotspotProfile], study: bool = True) -> str:
    """A text table: one line per profile with each group's share of the time (%), the time per
    iteration, and profiled / wall time; the measuring devices named above it and, with
    ``study=True``, the study's convolution shares (Figure 2) beside ours."""
    head = (f"{'model':<16}{'batch':>6}{'input':>6}  "
            + "".join(f"{g:>16}" for g in GROUPS)
            + f"{'ms/iter':>10}{'profiled/wall':>15}" + (f"{'study conv':>12}" if study else ""))
    lines = []
    for label in dict.fromkeys(p.measured_on for p in profiles):
        lines.append(f"measured on {label}")
    lines += ["share of training time (forward + backward + SGD step) by layer type", head,
              "-" * len(head)]
    for p in profiles:
        s = p.shares
        ratio = p.total_s / p.wall_s if p.wall_s else float("nan")
        line = (f"{p.name:<16}{p.batch:>6}{p.input_size:>6}  "
                + "".join(f"{100 * s[g]:>14.1f} %" for g in GROUPS)
                + f"{p.ms_per_iteration:>10.1f}{ratio:>15.2f}")
        if study:
            line += f"{100 * STUDY_FIGURE2[p.model]:>10.0f} %" if p.model in STUDY_FIGURE2 else ""
        lines.append(line)
    if study:
        lines.append("study conv: the study's Figure 2 (Tesla K40c, 2016), reported, not measured "
                     "here")
    return "\n".join(lines)


def reference_profiles(prefix: str = "hotspots_", directory=None) -> list[HotspotProfile]:
    """GPU measurements saved in ``results/`` (by ``python -m helpers.hotspots --save`` on a
    GPU), as :class:`HotspotProfile` objects (``source="reference"``) labelled with their GPU
    and date; [] if there are none.

    Args:
        prefix: file-name prefix in ``results/``. directory: default ``results/``.
    """
    from . import results

    out = []
    for ds in results.find(prefix, directory):
        by_model: dict[str, list[dict]] = {}
        for r in ds.rows:
            if r.get("device_kind") == "cuda":
                by_model.setdefault(r["model"], []).append(r)
        for model, rows in by_model.items():
            r0 = rows[0]
            out.append(HotspotProfile(
                model=model, device="cuda", device_label=str(r0["device"]),
                time_kind=str(r0["time_kind"]), batch=int(r0["batch"]),
                input_size=int(r0["input_size"]), iterations=int(r0["iterations"]),
                warmup=int(r0["warmup"]),
                seconds={r["group"]: float(r["seconds"]) for r in rows}, detail={},
                total_s=float(r0["total_s"]), wall_s=float(r0["wall_s"]),
                threads=int(r0.get("threads") or 0), source="reference", date=ds.date[:10]))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.hotspots``: profile training and print the shares by layer type."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.hotspots",
        description="Share of CNN training time by layer type (the study's Figure 2). CPU "
                    f"defaults: batch {CPU_DEFAULTS['batch']}, input {CPU_DEFAULTS['input_size']} "
                    f"px, {CPU_DEFAULTS['iterations']} iterations, {CPU_DEFAULTS['threads']} "
                    "thread; GPU defaults: batch "
                    f"{GPU_DEFAULTS['batch']}, native input (224 px, OverFeat 231 px), "
                    f"{GPU_DEFAULTS['iterations']} iterations.")
    parser.add_argument("--model", required=True, choices=[*NAMES, "all"])
    parser.add_argument("--batch", type=int, default=None, help="images per iteration")
    parser.add_argument("--input", type=int, default=None, dest="input_size",
                        help="input height = width in pixels")
    parser.add_argument("--iterations", type=int, default=None, help="profiled iterations")
    parser.add_argument("--warmup", type=int, default=1, help="iterations before profiling")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (CPU default 1; GPU default: torch's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda on a GPU machine, else cpu")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="refuse runs estimated to take longer than this many seconds")
    parser.add_argument("--save", action="store_true",
                        help="on a GPU, save the rows to results/hotspots_<gpu>.csv/.json")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if backend.MODE == "gpu" else "cpu")
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    batch = args.batch if args.batch is not None else defaults["batch"]
    iterations = args.iterations if args.iterations is not None else defaults["iterations"]
    input_size = args.input_size if args.input_size is not None else defaults["input_size"]
    threads = args.threads if args.threads is not None else defaults["threads"]
    if threads is not None and not 1 <= threads <= 1024:
        parser.error(f"threads must be an integer from 1 to 1024, got {threads}")
    names = list(NAMES) if args.model == "all" else [args.model]
    runs = _sizes(names, input_size)
    try:
        reasons = [refusal(m, batch, s, iterations, device, args.warmup, args.budget, threads)
                   for m, s in runs]
        total_est = sum(estimate_seconds(m, batch, s, iterations, device, args.warmup, threads)
                        for m, s in runs) if device == "cpu" or backend.MODE == "gpu" else 0.0
    except ValueError as exc:
        parser.error(str(exc))
    for (m, _), reason in zip(runs, reasons):
        if reason:
            print(f"{MODELS[m]}: {reason}")
            if device == "cuda" and backend.MODE != "gpu":
                refs = reference_profiles()
                print(format_table(refs) if refs else "no GPU reference in results/ yet")
            return 2
    if total_est > args.budget:
        print(f"refused: the {len(runs)} runs together are estimated at about {total_est:,.0f} s, "
              f"over the {args.budget:g} s budget (raise --budget or measure fewer models)")
        return 2
    profiles = []
    for m, s in runs:
        print(f"profiling {MODELS[m]}: batch {batch}, input {s} px, {args.warmup} warm-up + "
              f"{iterations} iterations on {device}...", flush=True)
        profiles.append(profile_training(m, batch, s, iterations, device, args.warmup,
                                         budget_s=args.budget, threads=threads))
    print(format_table(profiles))
    if args.save:
        if device == "cuda":
            from . import results

            rows = [r for p in profiles for r in p.rows()]
            name = f"hotspots_{results.slug(backend.info().gpu_name or 'gpu')}"
            paths = results.save(name, rows, command="python -m helpers.hotspots "
                                 + " ".join(sys.argv[1:] if argv is None else argv))
            print("saved", *paths)
        else:
            print("not saved: results/ holds GPU measurements (run with --device cuda on a GPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

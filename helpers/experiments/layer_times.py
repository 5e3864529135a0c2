"""Layer times: profile training iterations of a classifier and split the time by layer type.

:func:`profile_module` runs training iterations (forward, cross-entropy loss, backward, SGD step)
under ``torch.profiler``; :func:`attribute` walks the profiler's events and gives each
microsecond to exactly one group of :data:`helpers.experiments.layer_costs.GROUPS`, using
:func:`classify` on the operators' names. On a CPU the times are the operators' CPU (wall)
times; on a GPU, the CUDA kernels' device times.

Shapes: float32 NCHW inputs ``(N, C, H, W)``; times in seconds (float).

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
ICPP 2016, Section IV-A, Figure 2 (the share of training time per layer type).
"""

from __future__ import annotations

import dataclasses
import re
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from helpers.device import backend
from helpers.experiments.layer_costs import GROUPS
from helpers.networks.figure2 import MODELS

__all__ = ["HotspotProfile", "attribute", "check_run_args", "classify", "profile_module"]

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
    name = name.removeprefix(_EVAL)
    for group, detail, pattern in _RULES:
        if pattern.search(name):
            return group, detail
    return None


@dataclasses.dataclass
class HotspotProfile:
    """Where the time of training one network went, by layer type (from :func:`profile_module`).

    Attributes:
        model: key of :data:`helpers.networks.figure2.MODELS` (or any name given to
            :func:`profile_module`). device: ``"cpu"`` or ``"cuda"``.
        device_label: the measuring device, e.g. ``"CPU: AMD EPYC (2 cores)"`` or
            ``"GPU: NVIDIA H100 80GB HBM3"``.
        time_kind: ``"CPU time"`` or ``"GPU time (CUDA kernels)"``.
        batch, input_size (pixels), iterations (profiled), warmup (iterations run before).
        seconds: time per group of :data:`GROUPS` over all profiled iterations (float, s).
        detail: the same time split finer, ``{group: {detail: seconds}}`` (e.g. ``other`` into
            normalisation, dropout, concatenation, loss, reshape, framework); empty for a
            profile read back from ``results/``.
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
    """Split profiled time into :data:`GROUPS`, each microsecond exactly once.

    Walking down from each root event, the first event whose name says what it is
    (:func:`classify`: ``aten::conv2d``, ``aten::linear``, ``Optimizer.step#SGD.step``...) gets
    its *inclusive* time, so nothing inside it (``aten::mkldnn_convolution``) counts again; the
    own time of events that say nothing (the iteration: Python between operators) counts as
    ``other``/``framework``. A backward node goes to the group of the forward operator that
    created it, found by the autograd sequence number they share: ``AddmmBackward0`` and
    ``TBackward0`` are fully connected (their ``addmm`` and ``t`` ran inside ``aten::linear``),
    dropout's ``MulBackward0`` is dropout. On a GPU each CUDA kernel counts under the operator
    that launched it, and kernels linked to no operator count as ``other``.

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


def _check_int(name: str, value, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_run_args(batch: int, iterations: int, warmup: int, device: str,
                   threads: int | None = None) -> None:
    """Check the arguments of a profiled training run (returns None when they are valid).

    Raises:
        ValueError: ``batch`` not an integer from 1 to 65,536, ``iterations`` from 1 to 10,000,
            ``warmup`` from 0 to 100, ``threads`` from 1 to 1024 (or None); ``device`` not
            ``"cpu"`` or ``"cuda"``. The message names the parameter and its valid range.
    """
    if threads is not None:
        _check_int("threads", threads, 1, 1024)
    _check_int("batch", batch, 1, 65_536)
    _check_int("iterations", iterations, 1, 10_000)
    _check_int("warmup", warmup, 0, 100)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def _profiled_steps(model: torch.nn.Module, x: torch.Tensor, labels: torch.Tensor,
                    iterations: int, warmup: int, on_gpu: bool):
    """Run ``warmup + iterations`` SGD training steps under the profiler, the warm-up ones in
    its own warm-up phase (not recorded). Returns ``(profiler, wall seconds of each step)``; the
    optimiser and its state are released when this returns."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    kw = {"schedule": schedule(wait=0, warmup=warmup, active=iterations, repeat=1),
          "acc_events": True} if warmup else {}
    walls = []
    sync()
    with profile(activities=activities, **kw) as prof:
        for _ in range(warmup + iterations):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), labels)
            loss.backward()
            opt.step()
            sync()
            walls.append(time.perf_counter() - start)
            if warmup:
                prof.step()
    return prof, walls


def profile_module(model: torch.nn.Module, input_shape: tuple[int, int, int, int],
                   iterations: int = 2, device: str = "cpu", warmup: int = 1,
                   num_classes: int = 1000, seed: int = 0, name: str | None = None,
                   threads: int | None = None) -> HotspotProfile:
    """Profile training iterations of any classifier and group the time by layer type.

    Each iteration: ``zero_grad``, forward pass, cross-entropy loss against random labels,
    backward pass, SGD step (learning rate 0.01), on random float32 images. The first
    ``warmup`` iterations run under the profiler's warm-up phase and are not recorded (they
    allocate memory, create oneDNN/cuDNN plans and start the profiler); the next
    ``iterations`` are, and their time is split by :func:`attribute`. On a GPU every
    iteration ends with ``torch.cuda.synchronize()`` and the groups are CUDA kernel times.

    Args:
        model: a ``torch.nn.Module`` mapping float32 ``input_shape`` images to
            ``(N, num_classes)`` scores; moved to ``device`` and trained in place.
        input_shape: ``(N, C, H, W)`` of the random input batch (N from 1 to 65,536).
        iterations: profiled iterations, 1 to 10,000. warmup: iterations before, 0 to 100.
        device: ``"cpu"`` or ``"cuda"``. seed: seed of the random images and labels.
        num_classes: labels are drawn from ``0 .. num_classes - 1``.
        name: what :attr:`HotspotProfile.model` says (default: the model's class name).
        threads: CPU threads for torch during the run (1 to 1024; restored afterwards), or
            None to keep torch's setting.

    Returns:
        A :class:`HotspotProfile`: seconds and shares per group, the device label, batch, input
        size, iterations, the profiled total and the wall-clock time.

    Raises:
        ValueError: ``input_shape`` not 4 positive integers; ``iterations``, ``warmup``,
            ``num_classes``, ``threads`` out of range; ``device`` not ``"cpu"``/``"cuda"``,
            or ``"cuda"`` on a machine without a GPU.
    """
    if len(input_shape) != 4 or any(not isinstance(d, int) or d < 1 for d in input_shape):
        raise ValueError(f"input_shape must be (N, C, H, W) positive integers, got {input_shape!r}")
    check_run_args(input_shape[0], iterations, warmup, device, threads)
    _check_int("num_classes", num_classes, 1, 1_000_000)
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
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        used_threads = torch.get_num_threads()
        prof, walls = _profiled_steps(model, x, labels, iterations, warmup, on_gpu)
    finally:
        torch.set_num_threads(old_threads)
    seconds, detail, total = attribute(prof.events(), device_time=on_gpu)
    del x, labels
    if on_gpu:
        torch.cuda.empty_cache()
    return HotspotProfile(
        model=name or type(model).__name__, device=device,
        device_label=f"GPU: {info.gpu_name}" if on_gpu else info.cpu_label,
        time_kind="GPU time (CUDA kernels)" if on_gpu else "CPU time",
        batch=input_shape[0], input_size=input_shape[2], iterations=iterations, warmup=warmup,
        seconds=seconds, detail=detail, total_s=total, wall_s=sum(walls[warmup:]),
        threads=used_threads)

"""One point of training throughput: training steps timed, split into waiting and computing.

:func:`measure` trains a model of :data:`helpers.networks.training_cnns.MODELS` for a few steps
and returns one row (:data:`ROW_KEYS`; images/s, seconds, percent); :func:`time_steps` is its
timed loop, each step split into **waiting for data** (``next()`` on the DataLoader) and
**computing** (copy, forward, loss, backward, optimiser step; on a GPU read after
``torch.cuda.synchronize()``). Without a GPU a GPU row says why. The sweeps over these points
are in :mod:`helpers.experiments.training.throughput`.

Sources: the V100 review ("GPU vs CPU Deep Learning: Training Performance of Convolutional
Networks"); PyTorch's ``torch.utils.data`` (worker processes), AMP and channels_last docs.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from helpers.device.timing import device_label
from helpers.experiments.training import learning
from helpers.experiments.training.utilisation import UtilisationSampler
from helpers.networks import training_cnns

__all__ = ["ROW_KEYS", "StepTimes", "time_steps", "measure"]


#: Keys of every row :func:`measure` returns, in order (results.save needs one order).
ROW_KEYS = ("experiment", "dataset", "model", "depth", "device_kind", "device", "batch_size",
            "workers", "augment", "image_size", "channels", "precision", "channels_last",
            "steps", "images", "total_s", "wait_s", "compute_s", "images_per_s", "wait_share",
            "gpu_util_mean", "cpu_util_mean", "status")

_PRECISIONS = ("fp32", "bf16", "fp16")


def _sync(device: str) -> None:
    """Wait for the GPU's queued work before a clock is read; nothing to wait for on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()


def _row(**kw) -> dict:
    row = {k: math.nan for k in ROW_KEYS}
    row.update(kw)
    return {k: row[k] for k in ROW_KEYS}


def _model_name(model) -> tuple[str, int]:
    if isinstance(model, nn.Module):
        return type(model).__name__, training_cnns.weight_layers(model)
    if model not in training_cnns.MODELS:
        raise ValueError(f"model must be one of {list(training_cnns.MODELS)} or an nn.Module, "
                         f"got {model!r}")
    return model, training_cnns.MODELS[model].depth


@dataclasses.dataclass(frozen=True)
class StepTimes:
    """What :func:`time_steps` measured: ``steps`` timed, ``total_s`` (wall time of those steps),
    ``wait_s`` and ``compute_s`` (their parts, seconds), ``step_s`` (each step's wait + compute,
    seconds) and ``start``/``end`` (``time.perf_counter()`` values bounding the timed steps)."""

    steps: int
    total_s: float
    wait_s: float
    compute_s: float
    start: float
    end: float
    step_s: tuple[float, ...] = ()

    @property
    def median_step_s(self) -> float:
        """Median time of one step (seconds): robust to a step slowed by other processes."""
        return float(np.median(self.step_s)) if self.step_s else self.total_s / self.steps


def time_steps(batches, step, *, steps: int, warmup: int, min_seconds: float = 0.0,
               device: str = "cpu") -> StepTimes:
    """The timed training loop: ``warmup`` untimed steps, then at least ``steps`` timed steps (and
    at least ``min_seconds``), each split into waiting for data and computing.

    Args:
        batches: an iterator of ``(x, y)`` batches (``iter(DataLoader)``); ``next(batches)`` is
            the **wait**.
        step: ``step(x, y)`` does one training step (the **compute**); on a GPU it must end with
            ``torch.cuda.synchronize()`` so that the clock is read after the GPU's work.
        steps: timed steps, at least 1. warmup: untimed steps first, at least 0.
        min_seconds: keep stepping until this many seconds are timed.
        device: ``"cpu"`` or ``"cuda"`` (synchronised once before the timed window opens).

    Returns:
        :class:`StepTimes`; ``wait_s + compute_s`` equals ``total_s`` up to the loop's overhead.

    Source: the workbook's split of the V100 review's "input pipeline vs GPU" observation.
    """
    for _ in range(warmup):
        step(*next(batches))
    _sync(device)
    wait = compute = 0.0
    n = 0
    per_step = []
    start = time.perf_counter()
    while n < steps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        x, y = next(batches)      # waiting for data: load, augment, batch (or wait for a worker)
        t1 = time.perf_counter()
        step(x, y)                # computing: copy, forward, backward, optimiser step (+ sync)
        t2 = time.perf_counter()
        wait += t1 - t0
        compute += t2 - t1
        per_step.append(t2 - t0)
        n += 1
    end = time.perf_counter()
    return StepTimes(n, end - start, wait, compute, start, end, tuple(per_step))


def measure(model="small", dataset="lfw_subset", *, device: str = "cpu", batch_size: int = 64,
            workers: int = 0, augment: bool = True, image_size: int | None = 32,
            channels: int = 3, steps: int = 20, warmup: int = 3, min_seconds: float | None = None,
            precision: str = "fp32", channels_last: bool = False,
            sample_utilisation: bool = False, experiment: str = "single", seed: int = 0,
            data_root=None, download: bool = False, sampler: UtilisationSampler | None = None
            ) -> dict:
    """Training throughput of one configuration, with the time split into waiting and computing.

    Runs ``warmup`` untimed steps (worker start-up, cuDNN's algorithm search, first-call
    allocations), then at least ``steps`` timed steps (and at least ``min_seconds``) with
    :func:`time_steps`. The optimiser is SGD with momentum (lr 0.01): throughput, not accuracy,
    is measured. On a GPU each step ends with ``torch.cuda.synchronize()`` before the clock is
    read, so the main process does not fetch the next batch while the GPU still computes the last
    one (with workers, the workers keep preparing batches meanwhile).

    Args:
        model: a key of :data:`helpers.networks.training_cnns.MODELS`, or an ``nn.Module`` taking
            ``(N, C, S, S)`` and returning ``(N, classes)`` logits.
        dataset: ``"lfw_subset"``, ``"cifar10"`` or a Dataset object with ``name``,
            ``channels``, ``image_size`` and ``num_classes``.
        device: ``"cpu"`` or ``"cuda"``. Without a GPU, ``"cuda"`` returns a row whose
            ``status`` says why it was not measured (no number is made up).
        batch_size: images per step, in [1, 4096].
        workers: DataLoader worker processes, in [0, 64] (0: data is loaded in this process).
        augment: per-image random flip and shift on the CPU (in the workers if any).
        image_size: side S of the images in pixels (upsampled per image); None keeps the
            dataset's. Default 32, so lfw_subset has CIFAR-10's shape.
        channels: 1 or 3 for lfw_subset (3: grey copied to RGB, CIFAR-10's shape).
        steps: timed steps, at least, in [1, 100000]. warmup: untimed steps first, in [1, 1000].
        min_seconds: keep stepping until this many seconds are timed (None: 0 on the CPU, 1 s
            on a GPU, long enough for NVML's sample period), in [0, 600].
        precision: ``"fp32"``, or mixed precision with ``torch.autocast``: ``"bf16"`` or
            ``"fp16"`` (fp16 with a GradScaler).
        channels_last: model and inputs in NHWC memory layout (``torch.channels_last``).
        sample_utilisation: run a :class:`UtilisationSampler` (of
            :mod:`helpers.experiments.training.utilisation`) during the timed steps.
        experiment: label stored in the row. seed: weights, shuffling and augmentation.
        data_root, download: where CIFAR-10 is cached, and whether it may be downloaded.
        sampler: an already running sampler to read the means from (the caller keeps its
            samples, e.g. for a trace); overrides ``sample_utilisation``.

    Returns:
        A row (dict with keys :data:`ROW_KEYS`): ``images_per_s`` (``batch_size`` / the median
        step time, so that a step slowed by another process does not set the rate; on a quiet
        machine it matches ``images / total_s``), ``total_s`` (wall time of the timed steps),
        ``wait_s`` and ``compute_s`` (their sum is ``total_s`` up to loop overhead),
        ``wait_share`` = wait / total, ``gpu_util_mean`` and ``cpu_util_mean`` (percent, NaN if
        not sampled), ``device`` (label), ``dataset`` (name), ``status`` (``"ok"`` or why not).

    Raises:
        ValueError: an argument outside its range.
        helpers.networks.datasets.DatasetUnavailable: CIFAR-10 requested but not available offline.

    Source: the V100 review's training-throughput experiments (batch size, workers,
    augmentation, utilisation).
    """
    learning.check_device(device)
    learning.check_whole("batch_size", batch_size, 1, 4096)
    learning.check_whole("workers", workers, 0, 64)
    learning.check_whole("steps", steps, 1, 100_000)
    learning.check_whole("warmup", warmup, 1, 1000)
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {_PRECISIONS}, got {precision!r}")
    if min_seconds is not None and not 0 <= min_seconds <= 600:
        raise ValueError(f"min_seconds must be in [0, 600], got {min_seconds!r}")
    name, depth = _model_name(model)
    ds = learning.load_dataset(dataset, image_size=image_size, augment=augment,
                               channels=channels, data_root=data_root, download=download,
                               seed=seed)
    base = dict(experiment=experiment, dataset=getattr(ds, "name", type(ds).__name__),
                model=name, depth=depth, device_kind=device, batch_size=int(batch_size),
                workers=int(workers), augment=bool(getattr(ds, "augment", augment)),
                image_size=getattr(ds, "image_size", ""), channels=getattr(ds, "channels", ""),
                precision=precision, channels_last=bool(channels_last))
    if device == "cuda" and learning.gpu_reason():
        return _row(**base, device="GPU (none here)", status=learning.gpu_reason())
    if min_seconds is None:
        min_seconds = 1.0 if device == "cuda" else 0.0

    net = model if isinstance(model, nn.Module) else training_cnns.build(
        model, ds.channels, ds.num_classes, ds.image_size, seed=seed)
    net = net.to(device).train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    pin = device == "cuda"
    loader = learning.endless_loader(ds, batch_size, workers=workers, pin=pin, seed=seed)
    cudnn_before = torch.backends.cudnn.benchmark
    if device == "cuda":
        torch.backends.cudnn.benchmark = True  # pick the fastest algorithm once, in warm-up

    def step(x, y):
        x = x.to(device, non_blocking=pin).contiguous(memory_format=fmt)
        y = y.to(device, non_blocking=pin)
        with torch.autocast(device_type=device, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        _sync(device)  # the clock is read after the GPU has finished the step

    own = None
    if sampler is None and sample_utilisation:
        own = sampler = UtilisationSampler(gpu=device == "cuda")
        own.__enter__()
    it = iter(loader)
    try:
        timed = time_steps(it, step, steps=steps, warmup=warmup, min_seconds=min_seconds,
                           device=device)
    finally:
        del it  # shuts the worker processes down
        torch.backends.cudnn.benchmark = cudnn_before
        if own is not None:
            own.__exit__(None, None, None)
    n, total, wait, compute = timed.steps, timed.total_s, timed.wait_s, timed.compute_s
    if sampler:
        t_from, t_to = sampler.since_start(timed.start), sampler.since_start(timed.end)
    return _row(**base, device=device_label(device), steps=n, images=n * batch_size,
                total_s=total, wait_s=wait, compute_s=compute,
                images_per_s=batch_size / timed.median_step_s, wait_share=wait / total,
                gpu_util_mean=sampler.mean("gpu_util", t_from, t_to) if sampler else math.nan,
                cpu_util_mean=sampler.mean("cpu_util", t_from, t_to) if sampler else math.nan,
                status="ok")

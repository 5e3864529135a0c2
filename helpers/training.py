"""Training throughput end to end: images per second on a CPU and a GPU, and where the time goes.

The V100 review behind the workbook (the sources' "GPU vs CPU Deep Learning: Training Performance
of Convolutional Networks") measured whole training runs rather than single layers, and found:

* batch size and data-loading workers change throughput a lot (about 3x on the V100);
* a small network leaves the GPU 0-10 % utilised, because the CPU input pipeline (decode,
  augment) cannot keep up; removing augmentation raised GPU throughput from 425 to 533 images/s;
* deeper networks widen the GPU's lead: about 23x, then about 100x faster than the CPU;
* CIFAR-10 at batch 512 on the V100: 15,000-17,000 images/s at about 45 % utilisation, against
  about 210 images/s on 16 CPU cores.

These are the review's numbers (:data:`REVIEW`), quoted, never measured here. This module measures
the same quantities on this machine:

* :func:`train`: a short, complete training run (loss per step, test accuracy) that shows the
  model learns (the small CNN on ``lfw_subset`` faces vs non-faces reaches
  :data:`ACCURACY_THRESHOLD` within seconds on a 2-core CPU).
* :func:`measure`: one throughput point. Each training step is timed in two parts: **waiting for
  data** (the ``next(iterator)`` call on the ``DataLoader``: loading, augmenting, collating, or
  waiting for a worker) and **computing** (copy to the device, forward, loss, backward, optimiser
  step). ``wait_s + compute_s`` equals the measured total up to the loop's own overhead.
  Warm-up steps (worker start-up, cuDNN's algorithm search, first-call allocations) are excluded.
* :func:`batch_size_sweep`, :func:`workers_sweep`, :func:`depth_sweep`, :func:`precision_sweep`:
  the review's experiments as lists of rows; :func:`speedup_table` the GPU/CPU ratio per depth.
* :class:`UtilisationSampler` and :func:`utilisation_trace`: GPU utilisation from NVML
  (``pynvml``, from nvidia-ml-py) and CPU utilisation (psutil), sampled by a background thread
  while training.

GPU timing, by design: CUDA work is asynchronous (a launch returns before the kernel ends), so
every clock reading on a GPU comes after ``torch.cuda.synchronize()``: each step ends with a
synchronisation before its end time is read, and the measured window starts after one. The
consequence is stated, not hidden: in the main process the next batch is not fetched while the
GPU still computes the last one (with workers, the workers keep preparing batches meanwhile). A
test marked ``gpu`` checks that a step's compute time includes GPU work that outlasts its launch.

Without a GPU every GPU row is returned with ``status`` giving the reason it was not measured,
and reference rows come from ``results/training_*`` (saved by ``python -m helpers.training
--save`` on a GPU) via :func:`reference_datasets`, labelled with their GPU and date.

Command line: ``python -m helpers.training [--experiment all|batch|workers|depth|precision|
utilisation|train] [--dataset lfw_subset|cifar10] [--save]`` prints a table per experiment.

Sources: the V100 review (above), summarised in the workbook's seed summary; PyTorch's
``torch.utils.data`` documentation (worker processes); NVML's ``nvmlDeviceGetUtilizationRates``
(percent of time over the past sample period, between 1/6 s and 1 s, during which a kernel ran).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import threading
import time
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import backend, cnn_models, datasets
from .timing import device_label

__all__ = [
    "REVIEW",
    "ACCURACY_THRESHOLD",
    "ROW_KEYS",
    "TrainResult",
    "train",
    "gpu_reason",
    "UtilisationSampler",
    "StepTimes",
    "time_steps",
    "measure",
    "batch_size_sweep",
    "workers_sweep",
    "depth_sweep",
    "precision_sweep",
    "utilisation_trace",
    "speedup_table",
    "reference_datasets",
    "reference_rows",
    "format_table",
    "main",
]

#: The V100 review's reported numbers: (what, value). Quoted, not measured here.
REVIEW: tuple[tuple[str, str], ...] = (
    ("more workers and a larger batch (small CNN, GPU)", "about 3x faster"),
    ("GPU utilisation with a small CNN", "0-10 % (the CPU input pipeline is the bottleneck)"),
    ("removing augmentation (GPU)", "425 -> 533 images/s"),
    ("128x128 inputs instead (GPU)", "333 images/s"),
    ("deeper networks, GPU vs CPU", "about 23x, then about 100x faster"),
    ("CIFAR-10, batch 512, Tesla V100", "15,000-17,000 images/s at about 45 % utilisation"),
    ("CIFAR-10 on 16 CPU cores", "about 210 images/s"),
    ("CIFAR-10 on a cloud VM's CPU", "about 90 images/s"),
)

#: Test accuracy the short run of :func:`train` (small CNN, lfw_subset, default arguments)
#: reaches: over seeds 0-9 every run reached at least 0.98 here (the tests check seeds 0 and 1).
ACCURACY_THRESHOLD = 0.9

#: Keys of every row :func:`measure` returns, in order (results.save needs one order).
ROW_KEYS = ("experiment", "dataset", "model", "depth", "device_kind", "device", "batch_size",
            "workers", "augment", "image_size", "channels", "precision", "channels_last",
            "steps", "images", "total_s", "wait_s", "compute_s", "images_per_s", "wait_share",
            "gpu_util_mean", "cpu_util_mean", "status")

_PRECISIONS = ("fp32", "bf16", "fp16")


# ------------------------------------------------------------------------------ checks


def _check_device(device: str) -> None:
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def _check_int(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number in [{lo}, {hi}], got {value!r}")


def gpu_reason() -> str | None:
    """None when a CUDA GPU can be used for timing here; otherwise why not (for rows and charts)."""
    if backend.MODE != "gpu":
        return (f"not measured: no CUDA GPU here (backend mode '{backend.MODE}'); "
                "GPU rows come from results/training_* where present")
    if not torch.cuda.is_available():
        return "not measured: torch sees no CUDA device (a CPU-only torch build?)"
    return None


def _sync(device: str) -> None:
    """Wait for the GPU's queued work before a clock is read; nothing to wait for on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------ data


class _Forever(torch.utils.data.Sampler):
    """Random indices without end (a new seeded permutation per pass): a throughput loop never
    runs out of batches, whatever the dataset's size."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.n, generator=g).tolist()


def _dataset(dataset, *, split="train", image_size=None, augment=False, channels=1,
             data_root=None, download=False, seed=0):
    if isinstance(dataset, str):
        return datasets.make(dataset, split, size=image_size, augment=augment,
                             channels=channels, root=data_root, download=download, seed=seed)
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ValueError(f"dataset must be a name in {datasets.DATASETS} or a Dataset, "
                         f"got {dataset!r}")
    return dataset


def _loader(ds, batch_size: int, workers: int, pin: bool, seed: int):
    return torch.utils.data.DataLoader(
        ds, batch_size=batch_size, sampler=_Forever(len(ds), seed), num_workers=workers,
        pin_memory=pin, drop_last=True, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------ training


@dataclasses.dataclass
class TrainResult:
    """The outcome of :func:`train`.

    Attributes:
        model, dataset: names (the dataset's ``name``). device: label of where it ran.
        epochs, batch_size: as run. losses: training loss (cross-entropy, nats) per step.
        epoch_losses: mean loss per epoch. train_accuracy, test_accuracy: fractions in [0, 1]
            after the last epoch (evaluation mode, no augmentation). seconds: wall time of the
            training loop. images: training images processed.
    """

    model: str
    dataset: str
    device: str
    epochs: int
    batch_size: int
    losses: list[float]
    epoch_losses: list[float]
    train_accuracy: float
    test_accuracy: float
    seconds: float
    images: int

    def reached(self, threshold: float = ACCURACY_THRESHOLD) -> bool:
        """Whether the test accuracy is at least ``threshold``."""
        return self.test_accuracy >= threshold


@torch.no_grad()
def _accuracy(net: nn.Module, ds, device: str) -> float:
    net.eval()
    loader = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=False)
    right = total = 0
    for x, y in loader:
        pred = net(x.to(device)).argmax(1).cpu()
        right += int((pred == y).sum())
        total += len(y)
    net.train()
    return right / total


def train(model: str = "small", dataset: str = "lfw_subset", *, epochs: int = 20,
          batch_size: int = 32, lr: float = 2e-3, seed: int = 0, device: str = "cpu",
          augment: bool = True, image_size: int | None = None, data_root=None,
          download: bool = False, progress: bool = False) -> TrainResult:
    """A short, complete training run: Adam on cross-entropy, then accuracy on the test split.

    Args:
        model: a key of :data:`helpers.cnn_models.MODELS`.
        dataset: ``"lfw_subset"`` (faces vs non-faces, offline) or ``"cifar10"`` (needs the files
            or ``download=True``).
        epochs: passes over the training split, in [1, 1000].
        batch_size: images per step, in [1, 4096].
        lr: Adam's learning rate, in (0, 1].
        seed: seeds the weights, the shuffling and the augmentation (same seed, same run on the
            same machine).
        device: ``"cpu"`` or ``"cuda"``.
        augment: random flips and shifts of the training images (CPU, per image).
        image_size: side in pixels (None: the dataset's own, 25 for lfw_subset).
        progress: show a tqdm bar over epochs.

    Returns:
        :class:`TrainResult`. With the defaults the small CNN reaches
        :data:`ACCURACY_THRESHOLD` test accuracy on lfw_subset in a few seconds on a 2-core CPU.

    Raises:
        ValueError: an argument outside its range, or ``device="cuda"`` without a GPU.
        helpers.datasets.DatasetUnavailable: CIFAR-10 requested but not available offline.

    Source: the workbook's own check that the models learn before their speed is measured.
    """
    _check_device(device)
    _check_int("epochs", epochs, 1, 1000)
    _check_int("batch_size", batch_size, 1, 4096)
    if not 0 < lr <= 1:
        raise ValueError(f"lr must be in (0, 1], got {lr!r}")
    if device == "cuda" and gpu_reason():
        raise ValueError(f"device='cuda' needs a CUDA GPU: {gpu_reason()}")
    from tqdm.auto import tqdm

    channels = 1
    train_ds = _dataset(dataset, split="train", image_size=image_size, augment=augment,
                        channels=channels, data_root=data_root, download=download, seed=0)
    test_ds = _dataset(dataset, split="test", image_size=image_size, augment=False,
                       channels=channels, data_root=data_root, download=download, seed=0)
    net = cnn_models.build(model, train_ds.channels, train_ds.num_classes, train_ds.image_size,
                           seed=seed).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(train_ds, batch_size=batch_size, shuffle=True,
                                         generator=g, drop_last=len(train_ds) > batch_size)
    torch.manual_seed(seed)  # the augmentation's random flips and shifts
    losses, epoch_losses, images = [], [], 0
    start = time.perf_counter()
    for _ in tqdm(range(epochs), desc=f"training {model}", unit=" epochs", disable=not progress):
        first = len(losses)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach().item())  # .item() synchronises: the step has finished
            images += len(y)
        epoch_losses.append(float(np.mean(losses[first:])))
    seconds = time.perf_counter() - start
    plain_train = _dataset(dataset, split="train", image_size=image_size, augment=False,
                           channels=channels, data_root=data_root, download=download, seed=0)
    return TrainResult(
        model=model, dataset=train_ds.name, device=device_label(device), epochs=epochs,
        batch_size=batch_size, losses=losses, epoch_losses=epoch_losses,
        train_accuracy=_accuracy(net, plain_train, device),
        test_accuracy=_accuracy(net, test_ds, device), seconds=seconds, images=images)


# ------------------------------------------------------------------------------ utilisation


class UtilisationSampler:
    """Samples GPU utilisation (NVML) and CPU utilisation (psutil) in a background thread.

    Use as a context manager around training::

        with UtilisationSampler(interval_s=0.1) as sampler:
            ...  # train
        sampler.samples  # [{"t_s", "gpu_util", "gpu_mem_bytes", "cpu_util"}, ...]

    Args:
        interval_s: seconds between samples, in [0.01, 10].
        gpu: sample the GPU (needs a CUDA GPU and NVML); False samples the CPU only.

    Attributes:
        samples: one dict per sample: ``t_s`` (seconds since the sampler started), ``gpu_util``
            (percent of the last NVML sample period, 1/6 s to 1 s depending on the GPU, in which a
            kernel ran; NaN without a GPU), ``gpu_mem_bytes`` (device memory in use, NaN without),
            ``cpu_util`` (percent of all CPU cores busy since the previous sample, every process
            on the machine counted).
        gpu_reason: None if the GPU was sampled, else why not.

    Raises:
        ValueError: ``interval_s`` outside its range.

    Source: NVML ``nvmlDeviceGetUtilizationRates`` (what ``nvidia-smi`` shows as GPU-Util), as
    the V100 review read utilisation; psutil ``cpu_percent``.
    """

    def __init__(self, interval_s: float = 0.1, gpu: bool = True):
        if not 0.01 <= interval_s <= 10:
            raise ValueError(f"interval_s must be in [0.01, 10] seconds, got {interval_s!r}")
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self.gpu_reason: str | None = gpu_reason() if gpu else (
            gpu_reason() or "GPU not sampled: the training ran on the CPU")
        self._handle = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def _open_nvml(self) -> None:
        if self.gpu_reason:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            try:  # NVML numbers GPUs differently from CUDA when CUDA_VISIBLE_DEVICES is set
                index = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
            except Exception:  # noqa: BLE001  (private torch helper; fall back to CUDA's index)
                index = torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001  (ImportError, NVMLError: report, do not fail)
            self.gpu_reason = f"GPU utilisation not sampled: NVML unavailable ({exc})"

    def _sample(self) -> dict:
        import psutil

        util = mem = math.nan
        if self._handle is not None:
            import pynvml

            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                mem = float(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            except Exception:  # noqa: BLE001  (a failed read is a gap, not a crash)
                pass
        return {"t_s": time.perf_counter() - self._t0, "gpu_util": util, "gpu_mem_bytes": mem,
                "cpu_util": float(psutil.cpu_percent(interval=None))}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(self._sample())

    def since_start(self, perf_counter_value: float) -> float:
        """A ``time.perf_counter()`` value as seconds since the sampler started (the clock of
        ``samples``' ``t_s``)."""
        return perf_counter_value - self._t0

    def __enter__(self) -> UtilisationSampler:
        import psutil

        self._open_nvml()
        psutil.cpu_percent(interval=None)  # the first call only starts psutil's interval
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="utilisation-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._handle is not None:
            import pynvml

            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._handle = None

    def mean(self, key: str, t_from: float = 0.0, t_to: float = math.inf) -> float:
        """Mean of ``key`` (``"gpu_util"`` or ``"cpu_util"``, percent) over samples taken in
        ``[t_from, t_to]`` seconds; NaN when there is none."""
        vals = [s[key] for s in self.samples
                if t_from <= s["t_s"] <= t_to and not math.isnan(s[key])]
        return float(np.mean(vals)) if vals else math.nan


# ------------------------------------------------------------------------------ throughput


def _row(**kw) -> dict:
    row = {k: math.nan for k in ROW_KEYS}
    row.update(kw)
    return {k: row[k] for k in ROW_KEYS}


def _model_name(model) -> tuple[str, int]:
    if isinstance(model, nn.Module):
        return type(model).__name__, cnn_models.weight_layers(model)
    if model not in cnn_models.MODELS:
        raise ValueError(f"model must be one of {list(cnn_models.MODELS)} or an nn.Module, "
                         f"got {model!r}")
    return model, cnn_models.MODELS[model].depth


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

    Runs ``warmup`` untimed steps, then at least ``steps`` timed steps (and at least
    ``min_seconds``). For each step, ``next(iterator)`` on the DataLoader is timed separately
    (**wait**) from the copy to the device, forward, loss, backward and SGD step (**compute**).
    On a GPU the clock is read only after ``torch.cuda.synchronize()``. The optimiser is SGD with
    momentum (lr 0.01): throughput, not accuracy, is measured.

    Args:
        model: a key of :data:`helpers.cnn_models.MODELS`, or an ``nn.Module`` taking
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
        sample_utilisation: run a :class:`UtilisationSampler` during the timed steps.
        experiment: label stored in the row.
        sampler: an already running :class:`UtilisationSampler` to read the means from (the
            caller keeps its samples, e.g. for a trace); overrides ``sample_utilisation``.

    Returns:
        A row (dict with keys :data:`ROW_KEYS`): ``images_per_s`` (training images per second:
        ``batch_size`` / the median step time, so that a step slowed by another process on a
        shared machine does not set the rate; on a quiet machine it matches
        ``images / total_s``), ``total_s`` (wall time of the timed steps), ``wait_s`` and
        ``compute_s`` (their sum is ``total_s`` up to loop overhead), ``wait_share`` = wait / total, ``gpu_util_mean`` and
        ``cpu_util_mean`` (percent, NaN if not sampled), ``device`` (label), ``dataset``
        (name), ``status`` (``"ok"`` or the reason it was not measured).

    Raises:
        ValueError: an argument outside its range.
        helpers.datasets.DatasetUnavailable: CIFAR-10 requested but not available offline.

    Source: the V100 review's training-throughput experiments (batch size, workers,
    augmentation, utilisation); timing by design as in the module docstring.
    """
    _check_device(device)
    _check_int("batch_size", batch_size, 1, 4096)
    _check_int("workers", workers, 0, 64)
    _check_int("steps", steps, 1, 100_000)
    _check_int("warmup", warmup, 1, 1000)
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {_PRECISIONS}, got {precision!r}")
    if min_seconds is not None and not 0 <= min_seconds <= 600:
        raise ValueError(f"min_seconds must be in [0, 600], got {min_seconds!r}")
    name, depth = _model_name(model)
    ds = _dataset(dataset, image_size=image_size, augment=augment, channels=channels,
                  data_root=data_root, download=download, seed=seed)
    base = dict(experiment=experiment, dataset=getattr(ds, "name", type(ds).__name__),
                model=name, depth=depth, device_kind=device, batch_size=int(batch_size),
                workers=int(workers), augment=bool(getattr(ds, "augment", augment)),
                image_size=getattr(ds, "image_size", ""), channels=getattr(ds, "channels", ""),
                precision=precision, channels_last=bool(channels_last))
    if device == "cuda" and gpu_reason():
        return _row(**base, device="GPU (none here)", status=gpu_reason())
    if min_seconds is None:
        min_seconds = 1.0 if device == "cuda" else 0.0

    net = model if isinstance(model, nn.Module) else cnn_models.build(
        model, ds.channels, ds.num_classes, ds.image_size, seed=seed)
    net = net.to(device).train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    pin = device == "cuda"
    loader = _loader(ds, batch_size, workers, pin, seed)
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
    images = n * batch_size
    return _row(**base, device=device_label(device), steps=n, images=images, total_s=total,
                wait_s=wait, compute_s=compute,
                images_per_s=batch_size / timed.median_step_s,
                wait_share=wait / total,
                gpu_util_mean=sampler.mean("gpu_util", t_from, t_to) if sampler else math.nan,
                cpu_util_mean=sampler.mean("cpu_util", t_from, t_to) if sampler else math.nan,
                status="ok")


def _devices(devices) -> list[str]:
    devices = list(devices) if devices is not None else ["cpu", "cuda"]
    for d in devices:
        _check_device(d)
    return devices


def _points(jobs: list[dict], progress: bool, desc: str, **common) -> list[dict]:
    from tqdm.auto import tqdm

    rows = []
    for job in tqdm(jobs, desc=desc, unit=" points", disable=not progress, leave=False):
        rows.append(measure(**{**common, **job}))
    return rows


def batch_size_sweep(model="small", batch_sizes: Sequence[int] = (8, 32, 128),
                     devices: Iterable[str] | None = None, *, progress: bool = False,
                     **kwargs) -> list[dict]:
    """Images/s against batch size on each device: :func:`measure` per (device, batch size).

    Args:
        model: as :func:`measure`. batch_sizes: each in [1, 4096], at least one.
        devices: ``"cpu"`` and/or ``"cuda"`` (default both; without a GPU the ``"cuda"`` rows
            carry the reason instead of numbers).
        progress: tqdm bar over the points. kwargs: passed to :func:`measure`.

    Returns:
        Rows with ``experiment="batch"``, ordered by device then batch size.

    Raises:
        ValueError: no batch sizes, or a bad argument (see :func:`measure`).

    Source: the V100 review (batch size and workers: about 3x on the GPU).
    """
    if not batch_sizes:
        raise ValueError("batch_sizes must hold at least one batch size")
    jobs = [dict(device=d, batch_size=b) for d in _devices(devices) for b in batch_sizes]
    return _points(jobs, progress, f"batch sizes ({model})", model=model, experiment="batch",
                   **kwargs)


def workers_sweep(model="small", workers: Sequence[int] = (0, 1, 2),
                  augment: Sequence[bool] = (False, True), device: str = "cpu", *,
                  progress: bool = False, **kwargs) -> list[dict]:
    """Data-loading workers 0..N, with and without augmentation, with the wait/compute split.

    Args:
        model: as :func:`measure`. workers: worker counts, each in [0, 64], at least one.
        augment: which of False/True to measure. device: ``"cpu"`` or ``"cuda"``.
        progress: tqdm bar. kwargs: passed to :func:`measure` (e.g. ``batch_size``).

    Returns:
        Rows with ``experiment="workers"``: each gives ``wait_s`` (time blocked in
        ``next(iterator)``) and ``compute_s``.

    Raises:
        ValueError: empty lists or a bad argument.

    Source: the V100 review (workers; removing augmentation: 425 -> 533 images/s on the GPU).
    """
    if not workers or not augment:
        raise ValueError("workers and augment must each hold at least one value")
    jobs = [dict(workers=w, augment=bool(a)) for a in augment for w in workers]
    return _points(jobs, progress, f"workers ({model}, {device})", model=model, device=device,
                   experiment="workers", **kwargs)


def depth_sweep(models: Sequence[str] = ("small", "vgg", "resnet20"), batch_size: int = 64,
                devices: Iterable[str] | None = None, *, progress: bool = False,
                **kwargs) -> list[dict]:
    """Images/s per model (shallow to deep) on each device, for :func:`speedup_table`.

    Args:
        models: keys of :data:`helpers.cnn_models.MODELS`, at least one.
        batch_size: in [1, 4096]. devices: as :func:`batch_size_sweep`.
        progress: tqdm bar. kwargs: passed to :func:`measure`.

    Returns:
        Rows with ``experiment="depth"``.

    Raises:
        ValueError: no models or a bad argument.

    Source: the V100 review (deeper networks: about 23x, then about 100x GPU vs CPU).
    """
    if not models:
        raise ValueError("models must hold at least one model")
    jobs = [dict(device=d, model=m) for m in models for d in _devices(devices)]
    return _points(jobs, progress, "depth", batch_size=batch_size, experiment="depth", **kwargs)


def precision_sweep(model="resnet20", batch_size: int = 256, device: str = "cuda", *,
                    progress: bool = False, **kwargs) -> list[dict]:
    """fp32 against mixed precision (``torch.autocast`` bf16 / fp16), each in NCHW and in
    channels_last (NHWC): the GPU's tensor cores work best with both.

    Args:
        model: as :func:`measure`. batch_size: in [1, 4096].
        device: ``"cuda"`` (the experiment is meant for a GPU; without one every row carries the
            reason) or ``"cpu"``.
        progress: tqdm bar. kwargs: passed to :func:`measure`.

    Returns:
        Six rows with ``experiment="precision"``.

    Raises:
        ValueError: a bad argument.

    Source: PyTorch's automatic mixed precision and channels_last documentation; not in the
    review.
    """
    jobs = [dict(precision=p, channels_last=cl) for p in _PRECISIONS for cl in (False, True)]
    return _points(jobs, progress, f"precision ({device})", model=model, device=device,
                   batch_size=batch_size, experiment="precision", **kwargs)


def utilisation_trace(model="small", device: str | None = None, *, batch_size: int = 64,
                      workers: int = 0, seconds: float = 3.0, interval_s: float = 0.1,
                      **kwargs) -> dict:
    """GPU and CPU utilisation over time while training: a sampler runs during :func:`measure`.

    Args:
        model: as :func:`measure`. device: ``"cpu"`` or ``"cuda"`` (default: the GPU if there is
            one, else the CPU).
        batch_size, workers: as :func:`measure`. seconds: timed training, in (0, 600].
        interval_s: sampling period, in [0.01, 10]. kwargs: passed to :func:`measure`.

    Returns:
        ``{"row": the measurement row, "samples": [{"t_s", "gpu_util", "gpu_mem_bytes",
        "cpu_util"}, ...], "gpu_reason": None or why the GPU was not sampled, "device": label}``.
        The samples cover warm-up too (``row`` holds the means over the timed steps only).

    Raises:
        ValueError: a bad argument.

    Source: the V100 review (small CNN: GPU 0-10 % utilised; CIFAR-10 at batch 512: about 45 %).
    """
    if not 0 < seconds <= 600:
        raise ValueError(f"seconds must be in (0, 600], got {seconds!r}")
    if device is None:
        device = "cpu" if gpu_reason() else "cuda"
    _check_device(device)
    with UtilisationSampler(interval_s=interval_s, gpu=device == "cuda") as sampler:
        row = measure(model, device=device, batch_size=batch_size, workers=workers, steps=1,
                      min_seconds=seconds, experiment="utilisation", sampler=sampler, **kwargs)
    return {"row": row, "samples": sampler.samples, "gpu_reason": sampler.gpu_reason,
            "device": row["device"]}


# ------------------------------------------------------------------------------ comparison


def speedup_table(rows: Sequence[dict]) -> list[dict]:
    """GPU/CPU throughput ratio per model, from depth rows measured on one machine.

    Rows are grouped by ``source`` (``"live"`` when absent; a results/ dataset's name otherwise,
    so a reference GPU is compared with the CPU of the same machine) and by model.

    Returns:
        One dict per (source, model), shallowest first: ``source``, ``model``, ``depth``,
        ``cpu``/``gpu`` (device labels or ""), ``cpu_images_per_s``, ``gpu_images_per_s``
        (NaN if not measured), ``speedup`` (gpu / cpu, NaN if either is missing), ``note``
        (why a value is missing).

    Source: the V100 review's comparison of deeper networks (about 23x, then about 100x).
    """
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r.get("source", "live"), r["model"])
        entry = out.setdefault(key, dict(
            source=key[0], model=r["model"], depth=r["depth"], cpu="", gpu="",
            cpu_images_per_s=math.nan, gpu_images_per_s=math.nan, speedup=math.nan, note=""))
        kind = "gpu" if r["device_kind"] == "cuda" else "cpu"
        if r["status"] == "ok":
            entry[kind] = r["device"]
            entry[f"{kind}_images_per_s"] = float(r["images_per_s"])
        else:
            entry["note"] = f"{kind.upper()} {r['status']}"
    for e in out.values():
        if e["cpu_images_per_s"] > 0 and e["gpu_images_per_s"] > 0:
            e["speedup"] = e["gpu_images_per_s"] / e["cpu_images_per_s"]
    return sorted(out.values(), key=lambda e: (e["source"] != "live", e["source"], e["depth"]))


def reference_datasets(prefix: str = "training_", directory=None):
    """Saved GPU runs in ``results/`` (``helpers.results.find``; ``directory`` overrides the
    folder): list of ``Dataset`` whose ``device`` and ``date`` label them; only runs made on a
    machine with a GPU; empty when none has been recorded yet."""
    from . import results

    return [ds for ds in results.find(prefix, directory)
            if ds.meta.get("environment", {}).get("gpu_name")]


def reference_rows(experiment: str, prefix: str = "training_", gpu_only: bool = False,
                   directory=None) -> list[dict]:
    """Rows of one experiment from :func:`reference_datasets`, each with ``source`` (the
    dataset's name) and ``device`` labelled with the run's date: ``"GPU: <name>, <date>"`` for
    GPU rows, ``"<CPU> (beside that GPU), <date>"`` for the same machine's CPU rows.

    Args:
        experiment: ``"batch"``, ``"workers"``, ``"depth"``, ``"precision"``,
            ``"utilisation"`` (the traced run's row) or ``"utilisation_trace"`` (its samples:
            ``t_s``, ``gpu_util``, ``cpu_util``).
        gpu_only: keep only the GPU rows (the reference machine's CPU rows are kept otherwise,
            for same-machine speedups).
        directory: folder to read (default ``results/``).

    Returns:
        A list of row dicts (numbers parsed from the CSV; flags as the strings "True"/"False");
        empty when there is no reference.
    """
    out = []
    for ds in reference_datasets(prefix, directory):
        for r in ds.rows:
            if r.get("experiment") != experiment:
                continue
            if r.get("device_kind") == "cuda":
                out.append(dict(r, source=ds.name, device=f"{ds.device}, {ds.date[:10]}"))
            elif not gpu_only:
                out.append(dict(r, source=ds.name,
                                device=f"{r.get('device', 'CPU')} (beside that GPU), "
                                       f"{ds.date[:10]}"))
    return out


def format_table(rows: Sequence[dict], columns: Sequence[str] = (
        "experiment", "model", "device_kind", "batch_size", "workers", "augment", "precision",
        "channels_last", "images_per_s", "wait_share", "gpu_util_mean", "status")) -> str:
    """Plain-text table of rows (numbers rounded; status shortened to its first 60 characters)."""
    def cell(v):
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return str(v)[:60]

    table = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c)
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)) for t in table]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    """Command line: run the experiments, print a table each, optionally save to results/."""
    from . import results

    parser = argparse.ArgumentParser(
        prog="python -m helpers.training",
        description="Training throughput (images/s) on the CPU and, if present, the GPU: batch "
                    "size, data-loading workers and augmentation, model depth, mixed precision.")
    parser.add_argument("--experiment", default="all",
                        choices=["all", "batch", "workers", "depth", "precision", "utilisation",
                                 "train"])
    parser.add_argument("--dataset", default="lfw_subset", choices=list(datasets.DATASETS))
    parser.add_argument("--data-dir", default=None, help="CIFAR-10 cache folder")
    parser.add_argument("--download", action="store_true",
                        help="download CIFAR-10 if missing (needs internet)")
    parser.add_argument("--model", default="small", choices=list(cnn_models.MODELS))
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    parser.add_argument("--workers", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="few, small points (a smoke test)")
    parser.add_argument("--save", action="store_true",
                        help="write results/training_<device>.csv/.json "
                             "(and the utilisation trace)")
    args = parser.parse_args(argv)

    gpu = gpu_reason() is None
    devices = ["cpu", "cuda"]
    common = dict(dataset=args.dataset, image_size=args.image_size, data_root=args.data_dir,
                  download=args.download, steps=args.steps)
    import os

    cores = os.cpu_count() or 2
    if args.quick:
        batch_sizes, workers, models = args.batch_sizes or [8, 32], args.workers or [0, 1], \
            ["small", "resnet20"]
        common["steps"] = min(args.steps, 5)
    else:
        batch_sizes = args.batch_sizes or ([16, 64, 256, 1024] if gpu else [8, 32, 128])
        workers = args.workers or sorted({0, 1, 2, min(4, cores), min(8, cores)})
        models = list(cnn_models.MODELS)
    exp = args.experiment
    rows: list[dict] = []
    trace = None
    print(f"dataset: {args.dataset}; CPU: {device_label('cpu')}; "
          f"GPU: {device_label('cuda') if gpu else gpu_reason()}")
    if exp == "train":
        res = train(args.model, args.dataset, data_root=args.data_dir, download=args.download,
                    progress=True)
        print(f"{res.model} on {res.dataset}, {res.device}: test accuracy "
              f"{res.test_accuracy:.3f} after {res.epochs} epochs in {res.seconds:.1f} s "
              f"(threshold {ACCURACY_THRESHOLD}: {'reached' if res.reached() else 'NOT reached'})")
        return 0
    if exp in ("all", "batch"):
        rows += batch_size_sweep(args.model, batch_sizes, devices, progress=True, **common)
    if exp in ("all", "workers"):
        for d in (["cpu", "cuda"] if gpu else ["cpu"]):
            rows += workers_sweep(args.model, workers, device=d, progress=True,
                                  batch_size=256 if d == "cuda" else 64, **common)
    if exp in ("all", "depth"):
        rows += depth_sweep(models, 64, devices, progress=True, **common)
    if exp in ("all", "precision"):
        rows += precision_sweep("resnet20", 256, "cuda", progress=True, **common)
    if exp in ("all", "utilisation"):
        common_u = {k: v for k, v in common.items() if k != "steps"}
        trace = utilisation_trace(args.model, "cuda" if gpu else "cpu", batch_size=256 if gpu
                                  else 64, seconds=2.0 if args.quick else 5.0, **common_u)
        rows.append(trace["row"])
    print(format_table(rows))
    if args.save:
        device = backend.info().gpu_name if gpu else backend.info().cpu_model
        paths = results.save(f"training_{results.slug(device)}", rows)
        print("wrote", *paths)
        if trace and trace["samples"]:
            samples = [dict(experiment="utilisation_trace", model=trace["row"]["model"],
                            dataset=trace["row"]["dataset"],
                            device_kind=trace["row"]["device_kind"],
                            batch_size=trace["row"]["batch_size"], **s)
                       for s in trace["samples"]]
            print("wrote", *results.save(f"training_utilisation_{results.slug(device)}", samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

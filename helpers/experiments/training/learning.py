"""Does it learn? A short training run of a CNN to a test accuracy (notebook 09).

:func:`train` trains a model of :data:`helpers.networks.training_cnns.MODELS` with Adam on
cross-entropy and returns a :class:`TrainResult`: loss per step (nats), train and test accuracy
(fractions in [0, 1]), wall time (seconds). The small CNN on ``lfw_subset`` (faces vs non-faces,
1 x 25 x 25 float32 images) reaches :data:`ACCURACY_THRESHOLD` within seconds on a 2-core CPU.
Also here, for every training experiment: :func:`gpu_reason` (why a GPU cannot be used),
:func:`load_dataset` (a dataset by name) and :func:`endless_loader` (batches without end).

Command line: ``python -m helpers.experiments.training [--model M] [--dataset D] [--epochs N]
[--device cpu|cuda]`` trains once and prints the accuracy reached. Images per second are
measured by :mod:`helpers.experiments.training.throughput`.

Source: the workbook's own check that the models learn before their speed is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from helpers.device import backend
from helpers.device.progress import progress as progress_bar
from helpers.device.timing import device_label
from helpers.networks import datasets, training_cnns

__all__ = ["ACCURACY_THRESHOLD", "TrainResult", "train", "gpu_reason", "load_dataset",
           "endless_loader", "check_device", "check_whole", "main"]

#: Test accuracy the short run of :func:`train` (small CNN, lfw_subset, default arguments)
#: reaches: over seeds 0-9 every run reached at least 0.98 on a 2-core CPU.
ACCURACY_THRESHOLD = 0.9


def check_device(device: str) -> None:
    """Raise ValueError unless ``device`` is ``"cpu"`` or ``"cuda"``."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def check_whole(name: str, value, lo: int, hi: int) -> None:
    """Raise ValueError unless ``value`` is a whole number (not a bool) in ``[lo, hi]``; the
    message names the argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number in [{lo}, {hi}], got {value!r}")


def gpu_reason() -> str | None:
    """None when a CUDA GPU can be used for training here; otherwise why not (a sentence for
    result rows and chart titles)."""
    if backend.MODE != "gpu":
        return (f"not measured: no CUDA GPU here (backend mode '{backend.MODE}'); "
                "GPU rows come from results/training_* where present")
    if not torch.cuda.is_available():
        return "not measured: torch sees no CUDA device (a CPU-only torch build?)"
    return None


def load_dataset(dataset, *, split: str = "train", image_size: int | None = None,
                 augment: bool = False, channels: int = 1, data_root=None,
                 download: bool = False, seed: int = 0):
    """A dataset by name (:func:`helpers.networks.datasets.make`), or a Dataset object unchanged.

    Args:
        dataset: ``"lfw_subset"``, ``"cifar10"``, or an object with ``__getitem__`` and
            ``__len__`` yielding ``(x: (C, S, S) float32, y: int)``.
        split, image_size (pixels, None: the dataset's own), augment, channels (1 or 3),
            data_root, download, seed: passed to :func:`~helpers.networks.datasets.make` for a name.

    Raises:
        ValueError: an unknown name, an object that is not a Dataset, or a bad argument.
        helpers.networks.datasets.DatasetUnavailable: CIFAR-10 requested but not available offline.
    """
    if isinstance(dataset, str):
        return datasets.make(dataset, split, size=image_size, augment=augment,
                             channels=channels, root=data_root, download=download, seed=seed)
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise ValueError(f"dataset must be a name in {datasets.DATASETS} or a Dataset, "
                         f"got {dataset!r}")
    return dataset


class _Forever(torch.utils.data.Sampler):
    """Random indices without end (a new seeded permutation per pass)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed = n, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.n, generator=g).tolist()


def endless_loader(ds, batch_size: int, *, workers: int = 0, pin: bool = False,
                   seed: int = 0) -> torch.utils.data.DataLoader:
    """A DataLoader over ``ds`` that never runs out of batches, whatever the dataset's size: a
    new seeded random order per pass, ``batch_size`` items a batch (the last partial batch of a
    pass dropped), ``workers`` worker processes, pinned host memory if ``pin``.

    Batches are ``(x: (batch_size, C, S, S) float32, y: (batch_size,) int64)``.
    """
    return torch.utils.data.DataLoader(
        ds, batch_size=batch_size, sampler=_Forever(len(ds), seed), num_workers=workers,
        pin_memory=pin, drop_last=True, generator=torch.Generator().manual_seed(seed))


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
        """Whether the test accuracy is at least ``threshold`` (a fraction in [0, 1])."""
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
        model: a key of :data:`helpers.networks.training_cnns.MODELS`.
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
        data_root, download: where CIFAR-10 is cached, and whether it may be downloaded.
        progress: show a progress bar over epochs (:func:`helpers.device.progress.progress`).

    Returns:
        :class:`TrainResult`. With the defaults the small CNN reaches
        :data:`ACCURACY_THRESHOLD` test accuracy on lfw_subset in a few seconds on a 2-core CPU.

    Raises:
        ValueError: an argument outside its range, or ``device="cuda"`` without a GPU.
        helpers.networks.datasets.DatasetUnavailable: CIFAR-10 requested but not available offline.

    Source: the workbook's own check that the models learn before their speed is measured.
    """
    check_device(device)
    check_whole("epochs", epochs, 1, 1000)
    check_whole("batch_size", batch_size, 1, 4096)
    if not 0 < lr <= 1:
        raise ValueError(f"lr must be in (0, 1], got {lr!r}")
    if device == "cuda" and gpu_reason():
        raise ValueError(f"device='cuda' needs a CUDA GPU: {gpu_reason()}")
    data = dict(image_size=image_size, channels=1, data_root=data_root, download=download)
    train_ds = load_dataset(dataset, split="train", augment=augment, **data)
    test_ds = load_dataset(dataset, split="test", **data)
    net = training_cnns.build(model, train_ds.channels, train_ds.num_classes,
                              train_ds.image_size, seed=seed).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(train_ds, batch_size=batch_size, shuffle=True,
                                         generator=g, drop_last=len(train_ds) > batch_size)
    torch.manual_seed(seed)  # the augmentation's random flips and shifts
    losses, epoch_losses, images = [], [], 0
    start = time.perf_counter()
    for _ in progress_bar(range(epochs), desc=f"training {model}", unit=" epochs",
                          disable=not progress):
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
    plain_train = load_dataset(dataset, split="train", **data)
    return TrainResult(
        model=model, dataset=train_ds.name, device=device_label(device), epochs=epochs,
        batch_size=batch_size, losses=losses, epoch_losses=epoch_losses,
        train_accuracy=_accuracy(net, plain_train, device),
        test_accuracy=_accuracy(net, test_ds, device), seconds=seconds, images=images)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.training``: train once, print the test accuracy reached
    against :data:`ACCURACY_THRESHOLD`. Returns 0."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.training",
        description="Train a CNN briefly and print the test accuracy it reaches.")
    parser.add_argument("--model", default="small", choices=list(training_cnns.MODELS))
    parser.add_argument("--dataset", default="lfw_subset", choices=list(datasets.DATASETS))
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--data-dir", default=None, help="CIFAR-10 cache folder")
    parser.add_argument("--download", action="store_true",
                        help="download CIFAR-10 if missing (needs internet)")
    args = parser.parse_args(argv)
    res = train(args.model, args.dataset, epochs=args.epochs, batch_size=args.batch_size,
                seed=args.seed, device=args.device, data_root=args.data_dir,
                download=args.download, progress=True)
    print(f"{res.model} on {res.dataset}, {res.device}: test accuracy "
          f"{res.test_accuracy:.3f} after {res.epochs} epochs in {res.seconds:.1f} s "
          f"(threshold {ACCURACY_THRESHOLD}: {'reached' if res.reached() else 'NOT reached'})")
    return 0

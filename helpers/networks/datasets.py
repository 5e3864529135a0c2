"""Training data for notebook 09: ``lfw_subset`` offline (the default), CIFAR-10 when online.

Both are ``torch.utils.data.Dataset`` objects yielding ``(x, y)``: ``x: (C, S, S) float32``
(NCHW once batched) and ``y: int`` class index (int64 once batched). Each carries ``name`` (every
result row says which dataset it used), ``description``, ``classes``, ``num_classes``,
``channels`` and ``image_size``. Augmentation and upsampling run on the CPU, per image, in
``__getitem__`` (so in the DataLoader's workers when there are any), standing in for the decoding,
resizing and augmenting of a real input pipeline. CIFAR-10 is downloaded only when asked
(``download=True``); otherwise :class:`DatasetUnavailable` says what to do.

Sources: scikit-image ``skimage.data.lfw_subset`` (Huang, Mattar, Lee, Learned-Miller,
"Learning to align from scratch", NIPS 2012); CIFAR-10 (Krizhevsky, "Learning Multiple Layers
of Features from Tiny Images", 2009); the V100 review ("GPU vs CPU Deep Learning: Training
Performance of Convolutional Networks") for the role of the CPU input pipeline.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = [
    "DATASETS",
    "LFW_CLASSES",
    "CIFAR10_CLASSES",
    "DatasetUnavailable",
    "lfw_arrays",
    "lfw_split",
    "LFWFaces",
    "cifar10",
    "default_data_dir",
    "bilinear_matrix",
    "make",
]

#: Dataset names :func:`make` accepts.
DATASETS = ("lfw_subset", "cifar10")

#: Class names of ``lfw_subset`` by label.
LFW_CLASSES = ("face", "non-face")

#: Class names of CIFAR-10 by label (torchvision's order).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

_LFW_SIZE = 25


class DatasetUnavailable(RuntimeError):
    """A dataset that needs files or a download is not available; the message says what to do."""


def lfw_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 200 images of ``skimage.data.lfw_subset()`` and their labels.

    Returns:
        ``images: (200, 25, 25) float32`` in [0, 1] and ``labels: (200,) int64`` with 0 = face
        (the first 100) and 1 = non-face (the last 100: background patches cut from the same
        photographs). scikit-image's docstring says ``uint8``, but the bundled array is float64
        in [0, 1] (scikit-image 0.26): both are accepted and scaled to [0, 1].

    Raises:
        RuntimeError: the bundled array does not have the documented shape (a changed
            scikit-image).

    Source: ``skimage.data.lfw_subset`` (bundled with scikit-image, no download).
    """
    import skimage.data

    raw = np.asarray(skimage.data.lfw_subset())
    if raw.shape != (200, _LFW_SIZE, _LFW_SIZE):
        raise RuntimeError(f"skimage.data.lfw_subset() returned shape {raw.shape}, "
                           "expected (200, 25, 25)")
    images = raw.astype(np.float32)
    if raw.dtype == np.uint8:  # as its docstring says; the bundled file holds floats in [0, 1]
        images /= 255.0
    labels = np.repeat(np.arange(2, dtype=np.int64), 100)
    return images, labels


def lfw_split(seed: int = 0, test_fraction: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """A fixed, seeded, stratified train/test split of the 200 ``lfw_subset`` images.

    Args:
        seed: seed of the NumPy generator that shuffles each class (same seed, same split).
        test_fraction: share of each class held out, in (0, 1); rounded to whole images, at
            least one per class in each part.

    Returns:
        ``(train_idx, test_idx)``: sorted ``int64`` index arrays into :func:`lfw_arrays`,
        disjoint, together covering all 200 images. Default: 150 and 50 (25 per class).

    Raises:
        ValueError: ``test_fraction`` outside (0, 1).
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in range(2):
        idx = rng.permutation(np.arange(100) + 100 * label)
        n_test = min(99, max(1, round(100 * test_fraction)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _check_size(size, name="size"):
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 8 <= size <= 512:
        raise ValueError(f"{name} must be a whole number of pixels in [8, 512] or None, "
                         f"got {size!r}")


def _check_common(split, channels, max_shift):
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grey) or 3 (grey copied to RGB), got {channels!r}")
    if isinstance(max_shift, bool) or not isinstance(max_shift, (int, np.integer)) \
            or not 0 <= max_shift <= 8:
        raise ValueError(f"max_shift must be a whole number of pixels in [0, 8], got {max_shift!r}")


def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """The (n_out, n_in) float32 matrix A with ``A @ img @ A.T`` = bilinear resizing of an
    (n_in, n_in) image to (n_out, n_out), as ``torch.nn.functional.interpolate(...,
    mode="bilinear", align_corners=False)`` computes it (without antialiasing).

    Raises:
        ValueError: a size below 1.
    """
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sizes must be >= 1, got n_in={n_in}, n_out={n_out}")
    src = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(int), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = src - i0
    a = np.zeros((n_out, n_in), np.float64)
    np.add.at(a, (np.arange(n_out), i0), 1 - w1)
    np.add.at(a, (np.arange(n_out), i1), w1)
    return a.astype(np.float32)


def _random_shift_flip(img: np.ndarray, max_shift: int) -> np.ndarray:
    """Random horizontal flip and random shift (reflect-pad by max_shift, random crop back) of one
    image ``img: (H, W)``. NumPy does the pixel work (one thread, no parallel-region overhead per
    tiny image); the random draws come from torch's generator, which DataLoader seeds differently
    in every worker (NumPy's global generator would repeat the same draws in each worker)."""
    if torch.rand(()) < 0.5:
        img = img[:, ::-1]
    if max_shift:
        h, w = img.shape
        dy, dx = torch.randint(0, 2 * max_shift + 1, (2,)).tolist()
        img = np.pad(img, max_shift, mode="reflect")[dy:dy + h, dx:dx + w]
    return img


class LFWFaces(Dataset):
    """``skimage.data.lfw_subset`` as a torch Dataset: faces (label 0) vs non-faces (label 1).

    Args:
        split: ``"train"`` (150 images by default), ``"test"`` (50) or ``"all"`` (200); see
            :func:`lfw_split`.
        size: side in pixels of the images returned (bilinear upsampling from 25 x 25, done per
            image in ``__getitem__``), in [8, 512]; None keeps 25.
        augment: random horizontal flip and random shift of up to ``max_shift`` pixels, per image
            in ``__getitem__`` (on the CPU, in the DataLoader's workers when there are any).
        channels: 1 (grey) or 3 (the grey image copied to three channels, for RGB models).
        seed, test_fraction: the split (:func:`lfw_split`).
        max_shift: largest shift in pixels (at 25 x 25 resolution), in [0, 8].

    Items: ``(x, y)`` with ``x: (channels, S, S) float32``, standardised with the training
    split's mean and standard deviation, and ``y: int`` in {0, 1}.

    Raises:
        ValueError: an argument outside the ranges above.

    Source: ``skimage.data.lfw_subset`` (Huang et al., NIPS 2012); per-image CPU augmentation as
    in the V100 review's input pipeline.
    """

    name = "lfw_subset"
    classes = LFW_CLASSES
    num_classes = 2

    def __init__(self, split: str = "train", size: int | None = None, augment: bool = False,
                 channels: int = 1, seed: int = 0, test_fraction: float = 0.25,
                 max_shift: int = 2):
        _check_common(split, channels, max_shift)
        _check_size(size)
        images, labels = lfw_arrays()
        train_idx, test_idx = lfw_split(seed, test_fraction)
        idx = {"train": train_idx, "test": test_idx, "all": np.arange(200)}[split]
        mean, std = float(images[train_idx].mean()), float(images[train_idx].std())
        self.split, self.augment, self.channels = split, bool(augment), channels
        self.max_shift = int(max_shift)
        self.image_size = int(size) if size is not None else _LFW_SIZE
        self.indices = idx
        self.labels = labels[idx]
        self._images = ((images[idx] - mean) / std).astype(np.float32)  # (n, 25, 25)
        self._resize = (bilinear_matrix(_LFW_SIZE, self.image_size)
                        if self.image_size != _LFW_SIZE else None)
        self.description = (
            f"lfw_subset (scikit-image): faces vs non-faces, {split} split of {len(idx)} grey "
            f"25x25 images" + (f" upsampled to {self.image_size}x{self.image_size}"
                               if self.image_size != _LFW_SIZE else "")
            + (", augmented (flip, shift)" if augment else ""))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        img = self._images[i]
        if self.augment:
            img = _random_shift_flip(img, self.max_shift)
        if self._resize is not None:
            img = self._resize @ img @ self._resize.T  # bilinear upsampling, per image
        img = np.ascontiguousarray(img, dtype=np.float32)
        if self.channels == 3:
            img = np.repeat(img[None], 3, axis=0)
        else:
            img = img[None]
        return torch.from_numpy(img), int(self.labels[i])


def default_data_dir() -> pathlib.Path:
    """Where downloaded datasets are cached: ``$WORKBOOK_DATA`` if set, else
    ``~/.cache/gpu-cnn-workbook``."""
    env = os.environ.get("WORKBOOK_DATA")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "gpu-cnn-workbook"


class _Labelled(Dataset):
    """A torchvision dataset with the metadata every result row needs."""

    def __init__(self, inner, name, description, classes, channels, image_size):
        self.inner, self.name, self.description = inner, name, description
        self.classes, self.num_classes = classes, len(classes)
        self.channels, self.image_size = channels, image_size
        self.labels = np.asarray(inner.targets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        return self.inner[i]


def cifar10(split: str = "train", root: str | os.PathLike | None = None, augment: bool = False,
            download: bool = False, size: int | None = None):
    """CIFAR-10 through torchvision, cached in ``root``; downloaded only if ``download=True``.

    Args:
        split: ``"train"`` (50,000 images) or ``"test"`` (10,000).
        root: cache folder (default :func:`default_data_dir` / ``"cifar10"``).
        augment: random crop with 4-pixel padding and random horizontal flip (the usual CIFAR-10
            augmentation, He et al. 2016), per image on the CPU.
        download: fetch the files (about 170 MB) if they are not in ``root``; needs internet.
        size: resize to ``size x size`` pixels (bilinear) per image, in [8, 512]; None keeps 32.

    Returns:
        A Dataset of ``(x: (3, S, S) float32 normalised per channel, y: int in 0..9)`` with
        ``name="cifar10"`` and ``classes`` = :data:`CIFAR10_CLASSES`.

    Raises:
        ValueError: bad ``split`` or ``size``.
        DatasetUnavailable: the files are not in ``root`` and ``download`` is False, or the
            download failed (offline): the message names the folder and what to do.

    Source: Krizhevsky 2009; the V100 review measured CIFAR-10 training throughput.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    _check_size(size)
    root = pathlib.Path(root) if root is not None else default_data_dir() / "cifar10"
    present = (root / "cifar-10-batches-py").is_dir()
    if not present and not download:
        raise DatasetUnavailable(
            f"CIFAR-10 is not in {root}. Pass download=True (about 170 MB; needs internet, e.g. "
            "in Colab) or set root to a folder that holds cifar-10-batches-py. The default "
            "dataset, 'lfw_subset', needs no download.")
    from torchvision import datasets as tvd
    from torchvision import transforms as T

    steps = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if augment else []
    if size is not None and size != 32:
        steps.append(T.Resize((size, size), antialias=True))
    steps += [T.ToTensor(), T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))]
    try:
        inner = tvd.CIFAR10(str(root), train=(split == "train"), transform=T.Compose(steps),
                            download=download and not present)
    except (OSError, RuntimeError) as exc:  # URLError is an OSError; a corrupt folder RuntimeError
        raise DatasetUnavailable(
            f"CIFAR-10 could not be loaded into {root} ({type(exc).__name__}: {exc}). Offline? "
            "Use the default dataset 'lfw_subset', which needs no download.") from exc
    s = size or 32
    desc = (f"CIFAR-10 (torchvision), {split} split of {len(inner):,} colour 32x32 images"
            + (f" resized to {s}x{s}" if s != 32 else "")
            + (", augmented (crop, flip)" if augment else ""))
    out = _Labelled(inner, "cifar10", desc, CIFAR10_CLASSES, 3, s)
    out.augment = bool(augment)
    return out


def make(name: str = "lfw_subset", split: str = "train", *, size: int | None = None,
         augment: bool = False, channels: int = 1, root=None, download: bool = False,
         seed: int = 0):
    """A dataset by name: ``"lfw_subset"`` (:class:`LFWFaces`) or ``"cifar10"`` (:func:`cifar10`).

    ``channels`` and ``seed`` apply to ``lfw_subset`` only (CIFAR-10 is RGB with a fixed split);
    ``root`` and ``download`` to CIFAR-10 only.

    Raises:
        ValueError: unknown name or a bad argument (see the two constructors).
        DatasetUnavailable: CIFAR-10 not available offline.
    """
    if name == "lfw_subset":
        return LFWFaces(split, size=size, augment=augment, channels=channels, seed=seed)
    if name == "cifar10":
        return cifar10(split, root=root, augment=augment, download=download, size=size)
    raise ValueError(f"name must be one of {DATASETS}, got {name!r}")

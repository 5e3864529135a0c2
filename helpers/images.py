"""Real photographs and classic filters, so every convolution is shown on real data.

The photographs ship inside scikit-image (no download): ``chelsea`` (a cat, 300 x 451),
``astronaut`` (Eileen Collins, 512 x 512), ``camera`` (a cameraman, 512 x 512, grey).

Arrays follow the workbook's NCHW convention: :func:`photo_batch` gives ``x: (N, C, H, W)``
and :func:`filter_bank` gives ``w: (K, C, R, S)``, both float32.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PHOTOS", "FILTERS", "photo", "photo_batch", "filter_bank"]

#: Photographs bundled with scikit-image that :func:`photo` can load.
PHOTOS = ("chelsea", "astronaut", "camera")

#: Classic image filters as (R, S) float32 arrays (cross-correlation, as torch computes it).
FILTERS: dict[str, np.ndarray] = {
    "identity": np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], np.float32),
    "box blur 3x3": np.full((3, 3), 1 / 9, np.float32),
    "sharpen": np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32),
    "Sobel x (vertical edges)": np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float32),
    "Sobel y (horizontal edges)": np.array([[-1, -2, -1], [0, 0, 0], [1, 2, 1]], np.float32),
    "Laplacian (all edges)": np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32),
}


def _gaussian(size: int, sigma: float) -> np.ndarray:
    t = np.arange(size) - (size - 1) / 2
    g = np.exp(-(t[:, None] ** 2 + t[None, :] ** 2) / (2 * sigma**2))
    return (g / g.sum()).astype(np.float32)


FILTERS["Gaussian blur 11x11"] = _gaussian(11, 2.5)


def photo(name: str = "chelsea", size: int | None = 128, gray: bool = True) -> np.ndarray:
    """A bundled photograph as float32 in [0, 1].

    Args:
        name: one of :data:`PHOTOS`.
        size: resize so the shorter side has this many pixels (None: full size), >= 8.
        gray: luminance only, shape (H, W); else RGB, shape (3, H, W) (channels first).

    Returns:
        float32 array, (H, W) or (3, H, W).

    Raises:
        ValueError: unknown name, or size < 8.
    """
    import skimage.color
    import skimage.data
    import skimage.transform
    import skimage.util

    if name not in PHOTOS:
        raise ValueError(f"name must be one of {PHOTOS}, got {name!r}")
    if size is not None and size < 8:
        raise ValueError(f"size must be >= 8 pixels (or None), got {size}")
    img = getattr(skimage.data, name)()
    img = skimage.util.img_as_float32(img)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if size is not None:
        h, w = img.shape[:2]
        scale = size / min(h, w)
        img = skimage.transform.resize(img, (round(h * scale), round(w * scale)),
                                       anti_aliasing=True).astype(np.float32)
    if gray:
        return skimage.color.rgb2gray(img).astype(np.float32)
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)


def photo_batch(names=("chelsea",), size: int = 128, gray: bool = True) -> np.ndarray:
    """Several photographs as one NCHW batch, cropped to a common ``size x size`` centre.

    Returns:
        float32 (N, 1, size, size) if gray, else (N, 3, size, size).
    """
    out = []
    for name in names:
        img = photo(name, size, gray)
        img = img[None] if gray else img
        h, w = img.shape[1:]
        top, left = (h - size) // 2, (w - size) // 2
        out.append(img[:, top:top + size, left:left + size])
    return np.ascontiguousarray(np.stack(out), dtype=np.float32)


def filter_bank(names, channels: int = 1) -> np.ndarray:
    """Filters from :data:`FILTERS` as a (K, C, R, S) bank, each applied equally to every
    input channel (divided by C, so an RGB image filters like its grey average).

    Raises:
        ValueError: an unknown name, names of different sizes, or channels < 1.
    """
    names = list(names)
    for n in names:
        if n not in FILTERS:
            raise ValueError(f"filter must be one of {list(FILTERS)}, got {n!r}")
    shapes = {FILTERS[n].shape for n in names}
    if len(shapes) != 1:
        raise ValueError(f"filters in one bank must have one size, got {sorted(shapes)}")
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    w = np.stack([FILTERS[n] for n in names])[:, None] / channels
    return np.ascontiguousarray(np.repeat(w, channels, axis=1), dtype=np.float32)

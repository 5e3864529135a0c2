"""helpers.images: bundled photographs and filters in NCHW / KCRS layout."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.images import FILTERS, PHOTOS, filter_bank, photo, photo_batch


@pytest.mark.parametrize("name", PHOTOS)
def test_photos_load_offline_as_float32_in_unit_range(name):
    img = photo(name, size=32)
    assert img.dtype == np.float32 and img.ndim == 2 and min(img.shape) == 32
    assert 0 <= img.min() < img.max() <= 1  # a real picture, not a constant
    rgb = photo(name, size=32, gray=False)
    assert rgb.shape[0] == 3 and rgb.shape[1:] == img.shape


def test_batch_and_bank_shapes():
    x = photo_batch(("chelsea", "astronaut"), size=40, gray=False)
    assert x.shape == (2, 3, 40, 40) and x.dtype == np.float32
    w = filter_bank(["Sobel x (vertical edges)", "box blur 3x3"], channels=3)
    assert w.shape == (2, 3, 3, 3)
    assert np.allclose(w.sum(axis=1)[1], FILTERS["box blur 3x3"])


def test_filters_do_what_their_names_say():
    assert FILTERS["Gaussian blur 11x11"].sum() == pytest.approx(1.0, rel=1e-5)
    for name in ("Sobel x (vertical edges)", "Sobel y (horizontal edges)", "Laplacian (all edges)"):
        assert FILTERS[name].sum() == pytest.approx(0.0)  # no response on flat regions


def test_bad_arguments():
    with pytest.raises(ValueError, match="name must be one of"):
        photo("lena")
    with pytest.raises(ValueError, match="size must be >= 8"):
        photo("chelsea", size=4)
    with pytest.raises(ValueError, match="one size"):
        filter_bank(["sharpen", "Gaussian blur 11x11"])
    with pytest.raises(ValueError, match="filter must be one of"):
        filter_bank(["emboss"])

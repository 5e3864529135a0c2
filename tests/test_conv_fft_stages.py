"""helpers.conv.fft.stages: the forward pass's intermediates (for notebook 05's pictures) are
what the strategy computes: spectra equal torch.fft's, the product is the channel sum, the
circular result cropped is the output."""

from __future__ import annotations

import helpers  # noqa: F401  (must come first: decides simulator vs GPU before numba.cuda)
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.conv import fft
from helpers.conv.config import ConvConfig


def _data(cfg: ConvConfig, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
                 for shape in (cfg.x_shape, cfg.w_shape))


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> bool:
    a, b = a.to(torch.complex128), b.to(torch.complex128)
    return bool((a - b).abs().max() <= tol * max(float(b.abs().max()), 1e-6))


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", [
    ((1, 1, 16, 16), (1, 1, 5, 5), 1, 0),
    ((2, 3, 13, 9), (4, 3, 3, 2), 1, 2),          # odd sizes, padding: FFT size rounded up
    ((1, 2, 11, 12), (3, 2, 3, 3), (2, 1), 1),    # stride 2 along the height
])
def test_stages_are_the_steps_of_forward(x_shape, w_shape, stride, padding):
    cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding)
    x, w = _data(cfg)
    hf, wf = fft.fft_size(cfg)
    s = fft.stages(x, w, cfg)

    assert set(s) == {"x_spectrum", "w_spectrum", "product", "circular", "y"}
    assert s["x_spectrum"].shape == (cfg.n, cfg.c, hf, wf // 2 + 1)
    assert s["w_spectrum"].shape == (cfg.k, cfg.c, hf, wf // 2 + 1)
    assert s["product"].shape == (cfg.n, cfg.k, hf, wf // 2 + 1)
    assert s["circular"].shape == (cfg.n, cfg.k, hf, wf)
    assert s["y"].shape == cfg.y_shape
    for name in ("x_spectrum", "w_spectrum", "product"):
        assert s[name].dtype == torch.complex64
    assert s["circular"].dtype == s["y"].dtype == torch.float32

    xp = F.pad(x, (cfg.pad_w, wf - cfg.w - cfg.pad_w, cfg.pad_h, hf - cfg.h - cfg.pad_h))
    assert _close(s["x_spectrum"], torch.fft.rfft2(xp))
    assert _close(s["w_spectrum"], torch.fft.rfft2(w, s=(hf, wf)))
    expected = (s["x_spectrum"][:, None] * s["w_spectrum"][None].conj()).sum(2)
    assert _close(s["product"], expected)

    assert torch.equal(s["y"], fft.forward(x, w, cfg))
    valid = s["circular"][:, :, :(cfg.p - 1) * cfg.stride_h + 1:cfg.stride_h,
                          :(cfg.q - 1) * cfg.stride_w + 1:cfg.stride_w]
    y_ref = F.conv2d(x.double(), w.double(), stride=stride, padding=padding)
    assert _close(valid, y_ref, 1e-3)
    assert _close(s["y"], y_ref, 1e-3)


def test_an_explicit_fft_shape_is_used_and_a_small_one_refused():
    cfg = ConvConfig.from_shapes((1, 1, 8, 8), (1, 1, 3, 3), 1, 1)
    x, w = _data(cfg, 1)
    s = fft.stages(x, w, cfg, fft_shape=(12, 16))
    assert s["circular"].shape == (1, 1, 12, 16) and s["x_spectrum"].shape == (1, 1, 12, 9)
    with pytest.raises(ValueError, match="wrap-around"):
        fft.stages(x, w, cfg, fft_shape=(9, 10))
    with pytest.raises(ValueError, match="x must have shape"):
        fft.stages(x[..., :7], w, cfg)

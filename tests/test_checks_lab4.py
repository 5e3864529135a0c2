"""Lab 4's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab4_fft_convolution.ipynb``. The
planted mistakes: all zeros, returning the input, no complex conjugate (convolution instead
of cross-correlation), an FFT size too small (the borders wrap around), a wrong crop (the
valid part of a convolution, offset R-1), a crop off by one, the inverse transform's size left
out (right only for even sizes, as a tiled kernel is right only for tile multiples), the
channel sum left out; and for the FLOP model: an off-by-one output size, log2 rounded down
(right only for power-of-two sizes), the filter transforms forgotten, the full spectrum
counted, the unpadded FFT size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.checks import lab4


# ------------------------------------------------------------------- the solution notebook's


def fft_correlate_plane(x, w, padding=0):
    xp = np.pad(x, padding)
    Hf, Wf = xp.shape
    R, S = w.shape
    X = np.fft.rfft2(xp)
    Wk = np.fft.rfft2(w, s=(Hf, Wf))
    y = np.fft.irfft2(X * np.conj(Wk), s=(Hf, Wf))
    return y[:Hf - R + 1, :Wf - S + 1]


def fft_conv2d(x, w, padding=0):
    K, C, R, S = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    Hf, Wf = xp.shape[2:]
    X = np.fft.rfft2(xp)
    Wk = np.fft.rfft2(w, s=(Hf, Wf))
    Y = np.einsum("nchw,kchw->nkhw", X, np.conj(Wk))
    y = np.fft.irfft2(Y, s=(Hf, Wf))
    return y[:, :, :Hf - R + 1, :Wf - S + 1]


def conv_flops(x_shape, w_shape, padding=0):
    N, C, H, W = x_shape
    K, _, R, S = w_shape
    Hf, Wf = H + 2 * padding, W + 2 * padding
    P, Q = Hf - R + 1, Wf - S + 1
    M = Hf * Wf
    direct = 2 * N * K * P * Q * C * R * S
    transforms = (N * C + K * C + N * K) * 2.5 * M * math.log2(M)
    products = 8 * N * K * C * Hf * (Wf // 2 + 1)
    return direct, transforms + products


# ------------------------------------------------------------------------ planted mistakes


def planted_fft(conj=True, size="padded", crop=0, irfft_size=True, channel_sum=True):
    """An FFT convolution with one mistake; works on planes (H, W) and on NCHW batches."""
    def run(x, w, padding=0):
        plane = x.ndim == 2
        if plane:
            x, w = x[None, None], w[None, None]
        R, S = w.shape[2:]
        H, W = x.shape[2:]
        P, Q = H + 2 * padding - R + 1, W + 2 * padding - S + 1
        if size == "padded":
            xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
            Hf, Wf = xp.shape[2:]
            shift = 0
        else:   # "too small": room for the output but not for the padding, which wraps around
            Hf, Wf = max(H, P), max(W, Q)
            xp, shift = x, padding
        X = np.fft.rfft2(xp, s=(Hf, Wf))
        Wk = np.fft.rfft2(w, s=(Hf, Wf))
        if not channel_sum:
            X, Wk = X[:, :1], Wk[:, :1]
        Y = np.einsum("nchw,kchw->nkhw", X, np.conj(Wk) if conj else Wk)
        y = np.fft.irfft2(Y, s=(Hf, Wf)) if irfft_size else np.fft.irfft2(Y, axes=(-2, -1))
        y = np.roll(y, (shift, shift), axis=(2, 3))
        if crop == "convolution":       # where the valid part of a *convolution* sits
            y = y[:, :, R - 1:R - 1 + P, S - 1:S - 1 + Q]
        else:
            y = y[:, :, crop:crop + P, crop:crop + Q]
        return y[0, 0] if plane else y
    return run


def zeros_like_output(x, w, padding=0):
    R, S = w.shape[-2:]
    P, Q = x.shape[-2] + 2 * padding - R + 1, x.shape[-1] + 2 * padding - S + 1
    return np.zeros((P, Q) if x.ndim == 2 else (x.shape[0], w.shape[0], P, Q))


def planted_flops(off_by_one=False, log2=math.log2, filter_transforms=True, half=True,
                  padded=True):
    def run(x_shape, w_shape, padding=0):
        N, C, H, W = x_shape
        K, _, R, S = w_shape
        Hf, Wf = (H + 2 * padding, W + 2 * padding) if padded else (H, W)
        P, Q = H + 2 * padding - R + (0 if off_by_one else 1), W + 2 * padding - S + 1
        M = Hf * Wf
        n_transforms = N * C + N * K + (K * C if filter_transforms else 0)
        freqs = Hf * (Wf // 2 + 1) if half else Hf * Wf
        return (2 * N * K * P * Q * C * R * S,
                n_transforms * 2.5 * M * log2(M) + 8 * N * K * C * freqs)
    return run


FFT_MISTAKES = {
    "zeros": zeros_like_output,
    "the input": lambda x, w, padding=0: x,
    "no conjugate (convolution)": planted_fft(conj=False, crop="convolution"),
    "FFT size too small (wrap-around)": planted_fft(size="too small"),
    "wrong crop": planted_fft(crop="convolution"),
    "off-by-one crop": planted_fft(crop=1),
    "inverse size left out (right only for even sizes)": planted_fft(irfft_size=False),
}

CHECKERS = {
    "plane": (lab4.check_fft_correlate_plane, fft_correlate_plane, FFT_MISTAKES),
    "conv": (lab4.check_fft_conv2d, fft_conv2d,
             {**FFT_MISTAKES, "no channel sum": planted_fft(channel_sum=False)}),
    "flops": (lab4.check_conv_flops, conv_flops, {
        "zeros": lambda x_shape, w_shape, padding=0: (0, 0),
        "the input": lambda x_shape, w_shape, padding=0: x_shape,
        "off-by-one output size": planted_flops(off_by_one=True),
        "log2 rounded down (right only for powers of two)":
            planted_flops(log2=lambda m: int(math.log2(m))),
        "filter transforms forgotten": planted_flops(filter_transforms=False),
        "full spectrum counted": planted_flops(half=False),
        "unpadded FFT size": planted_flops(padded=False),
    }),
}

PLANTED = [(kind, name) for kind, (_, _, wrongs) in CHECKERS.items() for name in wrongs]


def stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("kind", CHECKERS)
def test_a_stub_is_not_implemented_yet(kind):
    report = CHECKERS[kind][0](stub)
    assert not report and report.status == "not implemented" and report.cases_run == 0
    assert "not implemented yet" in report._repr_html_()


@pytest.mark.parametrize("kind,name", PLANTED)
def test_a_planted_mistake_fails_with_the_case(kind, name):
    checker, _, wrongs = CHECKERS[kind]
    report = checker(wrongs[name])
    assert not report and report.status in ("failed", "error"), (name, str(report))
    assert "padding" in report.message


@pytest.mark.parametrize("kind", CHECKERS)
def test_the_solution_passes_every_case(kind):
    checker, solution, _ = CHECKERS[kind]
    report = checker(solution)
    assert report and report.status == "passed", str(report)


def test_the_solution_passes_in_float32_with_torch_fft_too():
    import torch

    def torch_plane(x, w, padding=0):
        xp = torch.nn.functional.pad(torch.from_numpy(x), (padding,) * 4)
        hf, wf = xp.shape
        spec = torch.fft.rfft2(xp) * torch.fft.rfft2(torch.from_numpy(w), s=(hf, wf)).conj()
        return torch.fft.irfft2(spec, s=(hf, wf))[:hf - w.shape[0] + 1, :wf - w.shape[1] + 1]

    assert lab4.check_fft_correlate_plane(torch_plane).status == "passed"


def test_wrap_around_is_wrong_only_at_the_border():
    """The too-small FFT is right in the interior: the checker catches a border-only error."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((9, 10)), rng.standard_normal((3, 3))
    got = planted_fft(size="too small")(x, w, padding=1)
    want = fft_correlate_plane(x, w, padding=1)
    assert np.allclose(got[1:-1, 1:-1], want[1:-1, 1:-1])
    assert not np.allclose(got, want)
    assert "max error" in lab4.check_fft_correlate_plane(planted_fft(size="too small")).message


def test_the_model_flops_match_the_workbook_fft_at_its_own_size():
    """helpers.conv.fft.flops uses the same model, at 2-3-5-smooth sizes: equal where the padded
    size is already smooth."""
    from helpers.conv import config_for
    from helpers.conv import fft

    cfg = config_for((2, 3, 30, 30), (4, 3, 5, 5), padding=1)   # 32 x 32: smooth
    assert lab4.model_flops(cfg.x_shape, cfg.w_shape, 1)[1] == pytest.approx(fft.flops(cfg), abs=1)
    assert lab4.model_flops(cfg.x_shape, cfg.w_shape, 1)[0] == cfg.flops

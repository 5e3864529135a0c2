"""Lab 4's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab4_fft_convolution.ipynb``. The
planted mistakes: all zeros, returning the input, no complex conjugate (convolution instead
of cross-correlation), an FFT size too small (the borders wrap around), a wrong crop (the
valid part of a convolution, offset R-1), a crop off by one, the inverse transform's size left
out (right only for even sizes, as a tiled kernel is right only for tile multiples), the
channel sum left out, the padding all at one end, np.pad padding N and C too, the filter
transformed at its own size, the (K, N) result read as (N, K); and for the FLOP model every
wrong reading of one part of it in FLOP_READINGS (``/`` for ``//``, the wrong axis halved,
a rounded log2, a transform count or factor left out...), each failing on its own case.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from helpers.checks import lab4
from helpers.conv import config_for, fft

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


def planted_fft(conj=True, size="padded", crop=0, irfft_size=True, channel_sum=True,
                pad="both sides", order="nk", filter_size=True):
    """An FFT convolution with one mistake; works on planes (H, W) and on NCHW batches.

    conj: True (right), False (convolution) or "x" (conj(X) * W).
    size: "padded" (right), "too small" (the padding wraps around), "power of two" or
    "linear" (Hp + R - 1: larger than needed, also right). pad: "both sides" (right), "end"
    (all 2*padding zeros after the data), "all axes" (np.pad(x, padding) on NCHW: N and C
    padded too). order: "nk" (right) or "kn" (the (K, N, ...) result reshaped to (N, K, ...)).
    filter_size: False transforms w at its own size (rfft2(w) without s).
    """
    def run(x, w, padding=0):
        plane = x.ndim == 2
        if plane:
            x, w = x[None, None], w[None, None]
        R, S = w.shape[2:]
        H, W = x.shape[2:]
        P, Q = H + 2 * padding - R + 1, W + 2 * padding - S + 1
        shift = 0
        if size == "too small":   # room for the output but not for the padding: it wraps
            Hf, Wf = max(H, P), max(W, Q)
            xp, shift = x, padding
        else:
            if pad == "all axes":
                xp = np.pad(x, padding)
            elif pad == "end":
                xp = np.pad(x, ((0, 0), (0, 0), (0, 2 * padding), (0, 2 * padding)))
            else:
                xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
            Hf, Wf = xp.shape[2:]
            if size == "power of two":
                Hf, Wf = 2 ** math.ceil(math.log2(Hf)), 2 ** math.ceil(math.log2(Wf))
            elif size == "linear":
                Hf, Wf = Hf + R - 1, Wf + S - 1
        X = np.fft.rfft2(xp, s=(Hf, Wf))
        Wk = np.fft.rfft2(w, s=(Hf, Wf)) if filter_size else np.fft.rfft2(w)
        if not channel_sum:
            X, Wk = X[:, :1], Wk[:, :1]
        if conj == "x":                 # the conjugate taken of the input's spectrum
            X, Wk = np.conj(X), np.conj(Wk)
        Y = np.einsum("nchw,kchw->nkhw", X, np.conj(Wk) if conj else Wk)
        if order == "kn":
            Y = Y.transpose(1, 0, 2, 3).reshape(Y.shape)
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


#: The FLOP model, one named part at a time; a wrong reading replaces one part. Each part reads
#: the shapes (v.N, v.C, v.H, v.W, v.K, v.R, v.S, v.pad) and the parts computed before it.
FLOP_PARTS = {
    "fft_size": lambda v: (v.H + 2 * v.pad, v.W + 2 * v.pad),
    "out_size": lambda v: (v.H + 2 * v.pad - v.R + 1, v.W + 2 * v.pad - v.S + 1),
    "M": lambda v: v.Hf * v.Wf,
    "direct": lambda v: 2 * v.N * v.K * v.P * v.Q * v.C * v.R * v.S,
    "n_transforms": lambda v: v.N * v.C + v.K * v.C + v.N * v.K,
    "transform": lambda v: 2.5 * v.M * math.log2(v.M),
    "freqs": lambda v: v.Hf * (v.Wf // 2 + 1),
    "products": lambda v: 8 * v.N * v.K * v.C * v.freqs,
    "result": lambda v: (v.direct, v.n_transforms * v.transform + v.products),
}


def flops_reading(**wrong):
    """conv_flops with the parts named in ``wrong`` replaced (none: the right model)."""
    parts = {**FLOP_PARTS, **wrong}

    def run(x_shape, w_shape, padding=0):
        (N, C, H, W), (K, _, R, S) = x_shape, w_shape
        v = types.SimpleNamespace(N=N, C=C, H=H, W=W, K=K, R=R, S=S, pad=padding)
        v.Hf, v.Wf = parts["fft_size"](v)
        v.P, v.Q = parts["out_size"](v)
        for name in ("M", "direct", "n_transforms", "transform", "freqs", "products"):
            setattr(v, name, parts[name](v))
        return parts["result"](v)
    return run


def padded_out(v):
    return v.H + 2 * v.pad - v.R + 1, v.W + 2 * v.pad - v.S + 1


#: Plausible wrong readings of FLOP_MODEL, each with the text of the case that must catch it
#: (the first case where it gives another count), or "" where the first case already does.
FLOP_READINGS = {
    # the output size P x Q
    "P off by one (H + 2p - R)": (dict(out_size=lambda v: (v.Hf - v.R, v.Wf - v.S + 1)), ""),
    "Q off by one (W + 2p - S)": (dict(out_size=lambda v: (v.Hf - v.R + 1, v.Wf - v.S)), ""),
    "P and Q without the padding": (
        dict(out_size=lambda v: (v.H - v.R + 1, v.W - v.S + 1)), ""),
    "R and S swapped in P and Q": (
        dict(out_size=lambda v: (v.Hf - v.S + 1, v.Wf - v.R + 1)), "odd height, even width"),
    # the FFT size
    "padding added once (H + p)": (dict(fft_size=lambda v: (v.H + v.pad, v.W + v.pad)), ""),
    "unpadded FFT size": (dict(fft_size=lambda v: (v.H, v.W), out_size=padded_out), ""),
    "padding ignored altogether": (
        dict(fft_size=lambda v: (v.H, v.W), out_size=lambda v: (v.H - v.R + 1, v.W - v.S + 1)),
        ""),
    "FFT size of a full linear convolution (Hp + R - 1)": (
        dict(fft_size=lambda v: (v.H + 2 * v.pad + v.R - 1, v.W + 2 * v.pad + v.S - 1),
             out_size=padded_out), ""),
    "FFT size rounded up to a power of two": (
        dict(fft_size=lambda v: (2 ** math.ceil(math.log2(v.H + 2 * v.pad)),
                                 2 ** math.ceil(math.log2(v.W + 2 * v.pad))),
             out_size=padded_out), ""),
    "FFT size of the output (P x Q)": (dict(fft_size=padded_out, out_size=padded_out), ""),
    "products at the unpadded size": (dict(freqs=lambda v: v.H * (v.W // 2 + 1)), ""),
    # the half spectrum rfft2 keeps
    "Wf / 2 + 1 in true division": (dict(freqs=lambda v: v.Hf * (v.Wf / 2 + 1)), "odd width"),
    "ceil(Wf / 2): the + 1 left out, rounded up": (
        dict(freqs=lambda v: v.Hf * math.ceil(v.Wf / 2)), ""),
    "Wf // 2: the + 1 left out": (dict(freqs=lambda v: v.Hf * (v.Wf // 2)), ""),
    "the height halved, not the width": (
        dict(freqs=lambda v: (v.Hf // 2 + 1) * v.Wf), "odd height, even width"),
    "the plane halved: Hf * Wf // 2 + 1": (dict(freqs=lambda v: v.Hf * v.Wf // 2 + 1), ""),
    "full spectrum counted": (dict(freqs=lambda v: v.Hf * v.Wf), ""),
    # the cost of one transform
    "log2 rounded down (right only for powers of two)": (
        dict(transform=lambda v: 2.5 * v.M * math.floor(math.log2(v.M))), ""),
    "log2 rounded up": (dict(transform=lambda v: 2.5 * v.M * math.ceil(math.log2(v.M))), ""),
    "natural log": (dict(transform=lambda v: 2.5 * v.M * math.log(v.M)), ""),
    "a complex FFT's 5 M log2 M": (dict(transform=lambda v: 5 * v.M * math.log2(v.M)), ""),
    "M log2 M, the 2.5 left out": (dict(transform=lambda v: v.M * math.log2(v.M)), ""),
    # how many transforms
    "filter transforms forgotten": (dict(n_transforms=lambda v: v.N * v.C + v.N * v.K), ""),
    "inverse transforms forgotten": (dict(n_transforms=lambda v: v.N * v.C + v.K * v.C), ""),
    "input transforms forgotten": (dict(n_transforms=lambda v: v.K * v.C + v.N * v.K), ""),
    "one filter transform per filter (K, not K*C)": (
        dict(n_transforms=lambda v: v.N * v.C + v.K + v.N * v.K), ""),
    "one inverse per filter (K, not N*K: batch ignored)": (
        dict(n_transforms=lambda v: v.N * v.C + v.K * v.C + v.K), "odd height, even width"),
    "N*C counted again instead of N*K": (
        dict(n_transforms=lambda v: 2 * v.N * v.C + v.K * v.C), ""),
    # the products
    "products without the channel sum (C)": (
        dict(products=lambda v: 8 * v.N * v.K * v.freqs), ""),
    "products without the batch (N)": (dict(products=lambda v: 8 * v.K * v.C * v.freqs),
                                       "odd height, even width"),
    "6 flops a complex multiply-add": (dict(products=lambda v: 6 * v.N * v.K * v.C * v.freqs),
                                       ""),
    "products forgotten": (dict(products=lambda v: 0), ""),
    # direct
    "direct without the factor 2": (
        dict(direct=lambda v: v.N * v.K * v.P * v.Q * v.C * v.R * v.S), ""),
    "direct without the channels (C)": (
        dict(direct=lambda v: 2 * v.N * v.K * v.P * v.Q * v.R * v.S), ""),
    "direct without the batch (N)": (
        dict(direct=lambda v: 2 * v.K * v.P * v.Q * v.C * v.R * v.S), "odd height, even width"),
    "direct with R*R (a square kernel assumed)": (
        dict(direct=lambda v: 2 * v.N * v.K * v.P * v.Q * v.C * v.R * v.R),
        "odd height, even width"),
    # the pair
    "(fft, direct): the pair swapped": (
        dict(result=lambda v: (v.n_transforms * v.transform + v.products, v.direct)), ""),
}

conv_flops_by_parts = flops_reading()


FFT_MISTAKES = {
    "zeros": zeros_like_output,
    "the input": lambda x, w, padding=0: x,
    "no conjugate (convolution)": planted_fft(conj=False, crop="convolution"),
    "FFT size too small (wrap-around)": planted_fft(size="too small"),
    "the conjugate of X, not of W": planted_fft(conj="x"),
    "wrong crop": planted_fft(crop="convolution"),
    "off-by-one crop": planted_fft(crop=1),
    "inverse size left out (right only for even sizes)": planted_fft(irfft_size=False),
    "padding all at the end (np.pad(x, (0, 2 * padding)))": planted_fft(pad="end"),
    "the filter transformed at its own size": planted_fft(filter_size=False),
}

CHECKERS = {
    "plane": (lab4.check_fft_correlate_plane, fft_correlate_plane, FFT_MISTAKES),
    "conv": (lab4.check_fft_conv2d, fft_conv2d,
             {**FFT_MISTAKES, "no channel sum": planted_fft(channel_sum=False),
              "np.pad(x, padding) pads N and C too": planted_fft(pad="all axes"),
              "(K, N, ...) reshaped to (N, K, ...)": planted_fft(order="kn")}),
    "flops": (lab4.check_conv_flops, conv_flops, {
        "zeros": lambda x_shape, w_shape, padding=0: (0, 0),
        "the input": lambda x_shape, w_shape, padding=0: x_shape,
        **{name: flops_reading(**parts) for name, (parts, _) in FLOP_READINGS.items()},
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


@pytest.mark.parametrize("size", ["power of two", "linear"])
def test_a_larger_fft_size_is_right_and_passes(size):
    """Any FFT size at least the padded input is right: the checker must not fail it."""
    for checker in (lab4.check_fft_correlate_plane, lab4.check_fft_conv2d):
        assert checker(planted_fft(size=size)).status == "passed"


@pytest.mark.parametrize("name", FLOP_READINGS)
def test_each_wrong_reading_of_the_flop_model_fails_on_the_case_built_for_it(name):
    parts, where = FLOP_READINGS[name]
    report = lab4.check_conv_flops(flops_reading(**parts))
    assert report.status == "failed", str(report)
    assert (where or lab4.FLOP_CASES[0][3]) in report.message, report.message


def test_the_flop_model_by_parts_is_the_solution():
    assert lab4.check_conv_flops(conv_flops_by_parts).status == "passed"
    for x_shape, w_shape, padding, _ in lab4.FLOP_CASES:
        assert conv_flops_by_parts(x_shape, w_shape, padding) == pytest.approx(
            conv_flops(x_shape, w_shape, padding))


def test_the_flop_cases_cover_every_parity_of_the_fft_size():
    sizes = [(h + 2 * p, w + 2 * p) for (_, _, h, w), _, p, _ in lab4.FLOP_CASES]
    assert {(hf % 2, wf % 2) for hf, wf in sizes} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert any(math.log2(hf * wf).is_integer() for hf, wf in sizes)
    assert any(len({n, c, k}) == 3 and n > 1 for (n, c, _, _), (k, *_), _, _ in lab4.FLOP_CASES)
    assert any(r != s for _, (_, _, r, s), _, _ in lab4.FLOP_CASES)
    assert any(p == 0 for *_, p, _ in lab4.FLOP_CASES) and any(p > 1 for *_, p, _ in
                                                                lab4.FLOP_CASES)


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
    cfg = config_for((2, 3, 30, 30), (4, 3, 5, 5), padding=1)   # 32 x 32: smooth
    assert lab4.model_flops(cfg.x_shape, cfg.w_shape, 1)[1] == pytest.approx(fft.flops(cfg), abs=1)
    assert lab4.model_flops(cfg.x_shape, cfg.w_shape, 1)[0] == cfg.flops

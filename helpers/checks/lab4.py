"""Checkers for Lab 4: convolution by FFT, and its cost against direct convolution.

One checker per TODO of ``labs/lab4_fft_convolution.ipynb``, each returning a
:class:`helpers.checks.Report`: :func:`check_fft_correlate_plane` (one plane ``x: (H, W)``, one
filter ``w: (R, S)``), :func:`check_fft_conv2d` (whole NCHW batches) and
:func:`check_conv_flops` (the cost model of :data:`FLOP_MODEL`).

Shapes use the cuDNN paper's symbols: input ``x: (N, C, H, W)``, filters ``w: (K, C, R, S)``,
output ``y: (N, K, P, Q)``, stride 1, zero padding ``padding`` (an int, both axes):
``P = H + 2*padding - R + 1``, ``Q = W + 2*padding - S + 1``. Cross-correlation, as
``torch.nn.functional.conv2d`` computes it:
``y[n, k, p, q] = sum_{c, r, s} x_padded[n, c, p + r, q + s] * w[k, c, r, s]``.

Source: Li et al., ICPP 2016, Section II-B (FFT-based convolution: fbfft, Theano-fft), Section
V-A and Figure 4 (FFT, transpose, Cgemm, inverse FFT).
"""

from __future__ import annotations

import math

import numpy as np

from helpers.checks import Case, Report, check_cases, random_array
from helpers.conv.check import reference

__all__ = ["PLANE_CASES", "CONV_CASES", "FLOP_CASES", "FLOP_MODEL", "model_flops",
           "check_fft_correlate_plane", "check_fft_conv2d", "check_conv_flops"]

#: Cases for one plane: ((H, W), (R, S), padding).
PLANE_CASES: list[tuple[tuple[int, int], tuple[int, int], int]] = [
    ((7, 9), (3, 3), 1),       # padded 9 x 11: odd FFT sizes
    ((8, 8), (3, 3), 0),       # square, even
    ((6, 11), (5, 2), 2),      # rectangular kernel, padding 2
    ((5, 5), (5, 5), 0),       # kernel as large as the input: a single output
    ((4, 12), (1, 4), 1),      # a 1-row kernel
    ((9, 6), (1, 1), 0),       # 1 x 1 kernel
    ((10, 7), (4, 4), 1),      # even kernel, odd padded width
]

#: Cases for whole batches: ((N, C, H, W), (K, R, S), padding).
CONV_CASES: list[tuple[tuple[int, int, int, int], tuple[int, int, int], int]] = [
    ((2, 3, 7, 9), (4, 3, 3), 1),
    ((1, 2, 8, 8), (3, 5, 5), 2),     # batch 1, 5 x 5 kernel
    ((3, 1, 6, 11), (2, 2, 3), 0),    # one channel, rectangular kernel
    ((2, 4, 5, 6), (1, 5, 6), 0),     # one filter as large as the input
    ((1, 3, 9, 7), (2, 1, 1), 1),     # 1 x 1 kernel with padding: a border of zeros
]

#: Cases for the FLOP model: ((N, C, H, W), (K, C, R, S), padding, what the case is for). The
#: FFT sizes Hf x Wf are even x even, odd x even, even x odd, odd x odd and a power of two, so
#: that ``Wf / 2`` and ``Wf // 2``, the width and the height halved, a rounded log2 and the
#: padded and unpadded sizes all give another count somewhere; N, C and K differ from each other
#: (and R from S) in most cases, so that a term with the wrong one of them does too.
FLOP_CASES: list[tuple[tuple[int, int, int, int], tuple[int, int, int, int], int, str]] = [
    ((1, 3, 32, 32), (16, 3, 3, 3), 1, "square, not a power of two"),
    ((2, 8, 27, 20), (4, 8, 5, 7), 0, "odd height, even width, no padding"),
    ((3, 2, 10, 9), (5, 2, 3, 2), 1, "odd width: Wf // 2 + 1 is not Wf / 2 + 1"),
    ((2, 3, 7, 13), (4, 3, 2, 4), 2, "odd height and odd width, padding 2"),
    ((4, 16, 30, 30), (8, 16, 11, 11), 1, "a power of two: log2 is an integer"),
    ((1, 1, 9, 6), (1, 1, 1, 1), 2, "1 x 1 kernel, padding 2"),
]


#: The cost model the FLOP TODO follows, in words (also in the lab).
FLOP_MODEL = """\
direct: 2 * N*K*P*Q * C*R*S (a multiply and an add per filter tap per output).
FFT, with the FFT size Hf x Wf = the padded input (H + 2*padding) x (W + 2*padding) and
M = Hf*Wf points per plane:
  transforms: N*C input planes + K*C filter planes + N*K output planes (the inverse), each a
              real 2-D FFT costing 2.5 * M * log2(M) flops (half the 5 M log2 M of a complex one);
  products:   at each of the Hf * (Wf//2 + 1) frequencies rfft2 keeps, N*K*C complex
              multiply-adds of 8 flops each.
fft = transforms + products (a float: log2 is not an integer in general)."""


def model_flops(x_shape, w_shape, padding: int = 0) -> tuple[int, float]:
    """The reference of :func:`check_conv_flops`: (direct, fft) flops by :data:`FLOP_MODEL`.

    Args:
        x_shape: (N, C, H, W). w_shape: (K, C, R, S). padding: zero padding, >= 0.

    Returns:
        (direct flops as an int, FFT flops as a float), stride 1.

    Source: study Section II-B (FFT's lower computational complexity); the Cooley-Tukey
    estimate 5 M log2 M for a complex FFT.
    """
    n, c, h, w = x_shape
    k, _, r, s = w_shape
    hf, wf = h + 2 * padding, w + 2 * padding
    p, q = hf - r + 1, wf - s + 1
    m = hf * wf
    transforms = (n * c + k * c + n * k) * 2.5 * m * math.log2(m)
    products = 8 * n * k * c * hf * (wf // 2 + 1)
    return 2 * n * k * p * q * c * r * s, transforms + products


def _distinct(expected: np.ndarray, *inputs: np.ndarray) -> None:
    """Guard: the reference is neither all zeros nor equal to an input (so neither passes)."""
    assert np.abs(expected).max() > 0, "a case whose answer is all zeros"
    for a in inputs:
        assert a.shape != expected.shape or not np.allclose(a, expected), \
            "a case whose answer is its input"


def _sizes(h: int, w: int, r: int, s: int, padding: int) -> str:
    return (f"padded input {h + 2 * padding} x {w + 2 * padding}, output P x Q = "
            f"{h + 2 * padding - r + 1} x {w + 2 * padding - s + 1}")


def _plane_cases() -> list[Case]:
    rng = np.random.default_rng(41)
    cases = []
    for (h, w), (r, s), padding in PLANE_CASES:
        x, wt = random_array(rng, (h, w)), random_array(rng, (r, s))
        expected = reference(x[None, None], wt[None, None], padding=padding)[0, 0]
        _distinct(expected, x, wt)
        cases.append(Case((x, wt), expected,
                          f"x (H, W) = {(h, w)}, w (R, S) = {(r, s)}, padding {padding} "
                          f"({_sizes(h, w, r, s, padding)})", kwargs={"padding": padding}))
    return cases


def _conv_cases() -> list[Case]:
    rng = np.random.default_rng(42)
    cases = []
    for (n, c, h, w), (k, r, s), padding in CONV_CASES:
        x, wt = random_array(rng, (n, c, h, w)), random_array(rng, (k, c, r, s))
        expected = reference(x, wt, padding=padding)
        _distinct(expected, x, wt)
        cases.append(Case((x, wt), expected,
                          f"x (N, C, H, W) = {(n, c, h, w)}, w (K, C, R, S) = {(k, c, r, s)}, "
                          f"padding {padding} ({_sizes(h, w, r, s, padding)})",
                          kwargs={"padding": padding}))
    return cases


def _flop_cases() -> list[Case]:
    cases = []
    for x_shape, w_shape, padding, what in FLOP_CASES:
        expected = np.array(model_flops(x_shape, w_shape, padding), dtype=np.float64)
        hf, wf = x_shape[2] + 2 * padding, x_shape[3] + 2 * padding
        cases.append(Case((x_shape, w_shape), expected,
                          f"x_shape {x_shape}, w_shape {w_shape}, padding {padding} (FFT size "
                          f"{hf} x {wf}: {what}; expected (direct, fft) = "
                          f"({expected[0]:,.0f}, {expected[1]:,.1f}))",
                          rtol=1e-6, kwargs={"padding": padding}))
    return cases


def check_fft_correlate_plane(fn) -> Report:
    """Check ``fn(x, w, padding=...) -> y`` on single planes against torch's conv2d in float64.

    Args:
        fn: the learner's FFT cross-correlation of one plane. ``x``: (H, W), ``w``: (R, S),
            float32 NumPy arrays; ``padding``: int >= 0 (keyword). It must return ``y``:
            (H + 2*padding - R + 1, W + 2*padding - S + 1), as NumPy array or torch tensor.

    Returns:
        A :class:`Report`; never raises for what ``fn`` does. The cases (:data:`PLANE_CASES`,
        fixed seeds) use odd, even and rectangular sizes, rectangular kernels, a kernel as
        large as the padded input (a 1 x 1 output), a 1 x 1 kernel and padding 0, 1 and 2; the
        reference, torch's ``conv2d`` in float64, is independent of any FFT. The tolerance is
        1e-4 of the largest output (the same for :func:`check_fft_conv2d`): float32 transforms
        spread their round-off over the plane, but it stays orders of magnitude below that,
        while every planted mistake (no conjugate, an FFT size so small that the borders wrap
        around, a wrong crop, the inverse transform's size left out so only even sizes come out
        right) is off by order 1.
    """
    return check_cases(
        "Lab 4, TODO 1: cross-correlation of one plane by FFT", fn, _plane_cases(),
        hint="zero-pad x by `padding` first; transform x and w at the same size, at least the "
             "padded input (a smaller size wraps the borders around); multiply X by the "
             "complex conjugate of W's spectrum (without it you get convolution, the flipped "
             "filter); give the inverse rfft2 the size (irfft2(..., s=...)), or odd sizes come "
             "back one short; keep the top-left P x Q corner.")


def check_fft_conv2d(fn) -> Report:
    """Check ``fn(x, w, padding=...) -> y`` on NCHW batches against torch's conv2d in float64.

    Args:
        fn: the learner's FFT convolution. ``x``: (N, C, H, W), ``w``: (K, C, R, S), float32
            NumPy arrays; ``padding``: int >= 0 (keyword); stride 1. It must return ``y``:
            (N, K, P, Q), as NumPy array or torch tensor.

    Returns:
        A :class:`Report` (relative tolerance 1e-4) over :data:`CONV_CASES` (batch 1, one
        channel, rectangular and 1 x 1 kernels, a filter as large as the input); never raises
        for what ``fn`` does.
    """
    return check_cases(
        "Lab 4, TODO 2: a whole convolution layer by FFT", fn, _conv_cases(),
        hint="the channel sum happens in the frequency domain: Y[n, k] = sum over c of "
             "X[n, c] * conj(W[k, c]) at every frequency (np.einsum('nchw,kchw->nkhw', X, "
             "W.conj())), then one inverse transform per (n, k) and the crop.")


def check_conv_flops(fn) -> Report:
    """Check ``fn(x_shape, w_shape, padding=...) -> (direct, fft)`` against :data:`FLOP_MODEL`.

    Args:
        fn: the learner's cost model. ``x_shape``: (N, C, H, W), ``w_shape``: (K, C, R, S),
            tuples of ints; ``padding``: int >= 0 (keyword); stride 1. It must return the pair
            (direct flops, FFT flops) as numbers.

    Returns:
        A :class:`Report` over :data:`FLOP_CASES` (relative tolerance 1e-6: a formula, not a
        measurement); never raises for what ``fn`` does. Each case's description gives its FFT
        size and what it is for.
    """
    return check_cases(
        "Lab 4, TODO 3: FLOPs of direct and FFT convolution", fn, _flop_cases(),
        hint="P = H + 2*padding - R + 1 (likewise Q); the FFT size is the padded input; there "
             "are N*C + K*C + N*K transforms; use math.log2 (not rounded), and count the "
             "Hf * (Wf//2 + 1) frequencies rfft2 keeps, not Hf * Wf.")

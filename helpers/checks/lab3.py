"""Checkers for Lab 3: im2col, convolution as one GEMM, and col2im for the backward pass.

One checker per TODO of ``labs/lab3_im2col.ipynb`` (:func:`check_im2col`,
:func:`check_conv2d_im2col`, :func:`check_col2im`, :func:`check_conv2d_backward_dx`), each
returning a :class:`helpers.checks.Report`. Shapes: ``x: (N, C, H, W)``, ``w: (K, C, R, S)``,
``y: (N, K, P, Q)``, ``cols: (C*R*S, N*P*Q)``; int ``stride`` and ``padding``; cross-correlation
as ``torch.nn.functional.conv2d``. Results are float32 NumPy arrays (a Numba device array or a
torch tensor is accepted); references are torch's in float64, on :data:`CONFIGS`. New float
``cuda.device_array(_like)`` arrays are NaN-filled while the learner's code runs
(:func:`_nan_allocations`), so an element never written shows as NaN, and a
result that is not float32 fails even when its values are right (:func:`_check`).

Source: Li et al., ICPP 2016, Section II-B (unrolling: Caffe, Torch-cunn, Theano-CorrMM,
cuDNN), Section V-A and Figure 4 (im2col, GEMM, col2im).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F
from numba import cuda

from helpers.checks import Case, Report, check_cases, random_array
from helpers.conv.check import reference

__all__ = ["CONFIGS", "check_im2col", "check_conv2d_im2col", "check_col2im",
           "check_conv2d_backward_dx"]

#: The checked configurations: ((N, C, H, W), (K, R, S), stride, padding). The first catches
#: most mistakes at once (batch 2, two channels, odd sizes, stride 2, padding 1).
CONFIGS: list[tuple[tuple[int, int, int, int], tuple[int, int, int], int, int]] = [
    ((2, 2, 7, 9), (3, 3, 3), 2, 1),      # P x Q = 4 x 5, cols 18 x 40
    ((1, 2, 7, 9), (2, 3, 3), 1, 1),      # batch 1, "same" size, cols 18 x 63
    ((1, 2, 8, 9), (3, 5, 5), 2, 2),      # 5 x 5 kernel, padding 2, cols 50 x 20
    ((2, 1, 5, 6), (4, 2, 3), 1, 0),      # rectangular 2 x 3 kernel, no padding, cols 6 x 32
    ((1, 3, 8, 7), (2, 2, 2), 3, 1),      # stride 3 > kernel 2: gaps no window reads
    ((3, 2, 6, 5), (3, 1, 1), 2, 0),      # 1 x 1 kernel, stride 2, batch 3
    ((2, 2, 5, 6), (2, 3, 3), 1, 1),      # C = K and "same" size: dy and dx share a shape
]


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _describe(x_shape, r: int, s: int, stride: int, padding: int, k: int | None = None) -> str:
    n, c, h, w = x_shape
    p, q = _out_size(h, r, stride, padding), _out_size(w, s, stride, padding)
    filters = f"w (K, C, R, S) = {(k, c, r, s)}" if k is not None else f"R x S = {r} x {s}"
    return (f"x (N, C, H, W) = {tuple(x_shape)}, {filters}, stride {stride}, padding {padding} "
            f"(P x Q = {p} x {q}; cols {c * r * s} x {n * p * q} = {c * r * s * n * p * q} "
            f"elements)")


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _im2col_ref(x: np.ndarray, r: int, s: int, stride: int, padding: int) -> np.ndarray:
    """cols (C*R*S, N*P*Q) in float64 from torch's unfold ((N, C*R*S, P*Q), same row order)."""
    u = F.unfold(_t(x), (r, s), padding=padding, stride=stride)
    return u.permute(1, 0, 2).reshape(u.shape[1], -1).numpy()


def _col2im_ref(dcols: np.ndarray, x_shape, r: int, s: int, stride: int,
                padding: int) -> np.ndarray:
    """dx (N, C, H, W) in float64 from torch's fold, which sums overlapping windows."""
    n, _, h, w = x_shape
    u = _t(dcols).reshape(dcols.shape[0], n, -1).permute(1, 0, 2)
    return F.fold(u, (h, w), (r, s), padding=padding, stride=stride).numpy()


def _distinct(expected: np.ndarray, *inputs: np.ndarray) -> None:
    """Guard: the reference is neither all zeros nor equal to an input (so neither passes)."""
    assert np.abs(expected).max() > 0, "a case whose answer is all zeros"
    for a in inputs:
        assert a.shape != expected.shape or not np.allclose(a, expected), \
            "a case whose answer is its input"


def _cases(kind: str) -> list[Case]:
    """The cases of one checker (``kind``: im2col, conv, col2im or dx), one per :data:`CONFIGS`.

    Fixed seeds, so a report is the same on every run. The configurations include batch 1, odd
    and rectangular sizes, rectangular kernels, stride 2 and 3 (a stride larger than the kernel
    leaves input elements no window reads), zero padding 1 and 2, and thread counts that are not
    multiples of a block. Every case is small (at most about 1,200 CUDA threads), so a check
    runs in about a second in the Numba CUDA simulator. The references are computed
    independently in float64 by torch (``unfold``, ``fold``, ``conv2d`` and
    ``conv_transpose2d``); each is checked to differ from all zeros and from the function's
    input, so neither can pass.
    """
    rng = np.random.default_rng({"im2col": 3, "conv": 4, "col2im": 5, "dx": 6}[kind])
    cases = []
    for x_shape, (k, r, s), stride, padding in CONFIGS:
        n, c, h, w = x_shape
        p, q = _out_size(h, r, stride, padding), _out_size(w, s, stride, padding)
        if kind == "im2col":
            x = random_array(rng, x_shape)
            expected = _im2col_ref(x, r, s, stride, padding)
            _distinct(expected, x)
            cases.append(Case((x, r, s), expected, _describe(x_shape, r, s, stride, padding),
                              rtol=1e-6, kwargs={"stride": stride, "padding": padding}))
        elif kind == "conv":
            x, wt = random_array(rng, x_shape), random_array(rng, (k, c, r, s))
            expected = reference(x, wt, stride, padding)
            _distinct(expected, x, wt)
            cases.append(Case((x, wt), expected, _describe(x_shape, r, s, stride, padding, k),
                              kwargs={"stride": stride, "padding": padding}))
        elif kind == "col2im":
            dcols = random_array(rng, (c * r * s, n * p * q))
            expected = _col2im_ref(dcols, x_shape, r, s, stride, padding)
            _distinct(expected, dcols)
            cases.append(Case((dcols, x_shape, r, s), expected,
                              "dcols " + " x ".join(map(str, dcols.shape)) + " for "
                              + _describe(x_shape, r, s, stride, padding),
                              kwargs={"stride": stride, "padding": padding}))
        else:  # dx
            dy, wt = random_array(rng, (n, k, p, q)), random_array(rng, (k, c, r, s))
            # dx is the transposed convolution of dy (torch's conv_transpose2d, not autograd,
            # whose first use costs seconds); output_padding restores rows no window reached
            extra = (h + 2 * padding - r) % stride, (w + 2 * padding - s) % stride
            expected = F.conv_transpose2d(_t(dy), _t(wt), stride=stride, padding=padding,
                                          output_padding=extra).numpy()
            _distinct(expected, dy, wt)
            cases.append(Case((dy, wt, x_shape), expected,
                              f"dy (N, K, P, Q) = {dy.shape} for "
                              + _describe(x_shape, r, s, stride, padding, k),
                              kwargs={"stride": stride, "padding": padding}))
    return cases


@contextlib.contextmanager
def _nan_allocations():
    """Within the block, ``cuda.device_array`` and ``cuda.device_array_like`` return float
    arrays filled with NaN, not whatever the memory held (on a GPU often zeros, in the
    simulator anything): so an element the learner's kernel never writes (the padding of
    cols, a dx not started from zeros) fails every time, as NaN. Restored on exit."""
    originals = {name: getattr(cuda, name) for name in ("device_array", "device_array_like")}

    def poisoned(allocate):
        def allocate_nan(*args, **kwargs):
            arr = allocate(*args, **kwargs)
            dtype = np.dtype(arr.dtype)
            if dtype.kind in "fc" and arr.size:
                order = "F" if arr.flags["F_CONTIGUOUS"] and not arr.flags["C_CONTIGUOUS"] \
                    else "C"
                arr.copy_to_device(np.full(arr.shape, np.nan, dtype, order=order))
            return arr
        return allocate_nan

    try:
        for name, allocate in originals.items():
            setattr(cuda, name, poisoned(allocate))
        yield
    finally:
        for name, allocate in originals.items():
            setattr(cuda, name, allocate)


def _check(name: str, fn, cases: list[Case], hint: str) -> Report:
    """:func:`helpers.checks.check_cases` with ``fn`` run inside :func:`_nan_allocations`; a
    report that passed fails if a result was an array of another float type than float32
    (``np.zeros(shape)`` is float64: twice the memory, and float64 atomics on a GPU)."""
    if not callable(fn):
        return check_cases(name, fn, cases, hint)
    other_types = []

    def run(*args, **kwargs):
        with _nan_allocations():
            result = fn(*args, **kwargs)
        kind = str(getattr(result, "dtype", "float32")).replace("torch.", "")
        if kind.startswith(("float", "complex")) and kind != "float32":
            other_types.append(kind)
        return result

    report = check_cases(name, run, cases, hint)
    if report.passed and other_types:
        return Report(name, False, f"your function gives the right values, but returns "
                      f"{other_types[0]} arrays, not float32: allocate them with "
                      f"dtype=np.float32 (np.zeros(shape) and np.empty(shape) are float64, and "
                      f"on a GPU float64 doubles the memory and makes loads, stores and "
                      f"atomic adds float64).", report.cases_run, "failed")
    return report


def check_im2col(fn) -> Report:
    """Check ``fn(x, r, s, stride=..., padding=...) -> cols`` against torch's ``unfold``.

    Args:
        fn: the learner's im2col. ``x``: (N, C, H, W) float32 NumPy array; ``r``, ``s``: kernel
            height and width; ``stride`` (>= 1), ``padding`` (>= 0): ints, keyword arguments.
            It must return ``cols`` of shape (C*R*S, N*P*Q) (NumPy array, Numba device array or
            torch tensor): row ``(c*R + r)*S + s``, column ``(n*P + p)*Q + q`` holds
            ``x[n, c, p*stride + r - padding, q*stride + s - padding]``, 0 in the padding.

    Returns:
        A :class:`Report`: passed only if every case matches exactly (a copy has no round-off;
        the tolerance is 1e-6 of the largest value) and cols is float32; otherwise the first
        failing case with its shapes, stride, padding and worst element (NaN where never
        written: ``cuda.device_array`` starts as NaN here). Never raises for what ``fn`` does.
    """
    return _check(
        "Lab 3, TODO 1: im2col kernel", fn, _cases("im2col"),
        hint="thread i owns cols[i // (N*P*Q), i % (N*P*Q)]; split the row into (c, r, s) and "
             "the column into (n, p, q), read x at (p*stride + r - padding, q*stride + s - "
             "padding), and write 0 when that is outside 0..H-1 or 0..W-1. Launch "
             "ceil(C*R*S*N*P*Q / threads) blocks, so the last, partial block runs too.")


def check_conv2d_im2col(fn) -> Report:
    """Check ``fn(x, w, stride=..., padding=...) -> y`` against torch's conv2d in float64.

    Args:
        fn: the learner's convolution by im2col and one GEMM. ``x``: (N, C, H, W), ``w``:
            (K, C, R, S), float32 NumPy arrays; ``stride``, ``padding``: ints (keywords). It
            must return ``y`` (N, K, P, Q), float32.

    Returns:
        A :class:`Report` (relative tolerance 1e-4 of the largest output; a result that is
        not float32 fails); never raises for what ``fn`` does.
    """
    return _check(
        "Lab 3, TODO 2: convolution as one GEMM", fn, _cases("conv"),
        hint="W (K, C*R*S) @ cols (C*R*S, N*P*Q) is (K, N*P*Q): its columns are ordered "
             "(n, p, q), so reshape it to (K, N, P, Q) and then swap the first two axes "
             "(transpose(1, 0, 2, 3)); a plain reshape to (N, K, P, Q) mixes images and filters.")


def check_col2im(fn) -> Report:
    """Check ``fn(dcols, x_shape, r, s, stride=..., padding=...) -> dx`` against torch's
    ``fold`` in float64.

    Args:
        fn: the learner's col2im. ``dcols``: (C*R*S, N*P*Q) float32 NumPy array laid out like
            im2col's ``cols``; ``x_shape``: the tuple (N, C, H, W); ``r``, ``s``: kernel size;
            ``stride``, ``padding``: ints (keywords). It must return ``dx`` (N, C, H, W): each
            input element's entry is the **sum** of every dcols entry im2col copied from it
            (0 for an element no window reads), padding entries dropped; float32.

    Returns:
        A :class:`Report` (relative tolerance 1e-4; a dx started from ``cuda.device_array``
        is NaN here, and a dx that is not float32 fails); never raises for what ``fn`` does.
    """
    return _check(
        "Lab 3, TODO 3: col2im kernel", fn, _cases("col2im"),
        hint="an input element appears in up to R*S columns (overlapping windows), so its "
             "gradient is the sum of all of them: with one thread per dcols entry, add with "
             "cuda.atomic.add (a plain store keeps only one contribution); start dx from zeros "
             "(cuda.device_array is not zeroed); skip entries that fall in the padding.")


def check_conv2d_backward_dx(fn) -> Report:
    """Check ``fn(dy, w, x_shape, stride=..., padding=...) -> dx`` against torch's
    ``conv_transpose2d`` in float64 (the gradient of conv2d with respect to its input).

    Args:
        fn: the learner's input gradient ``dx = col2im(W^T @ dY)``. ``dy``: (N, K, P, Q) and
            ``w``: (K, C, R, S), float32 NumPy arrays; ``x_shape``: (N, C, H, W); ``stride``,
            ``padding``: ints (keywords). It must return ``dx`` (N, C, H, W), the gradient of
            ``sum(conv2d(x, w) * dy)`` with respect to x; float32.

    Returns:
        A :class:`Report` (relative tolerance 1e-4; a result that is not float32 fails); never
        raises for what ``fn`` does.
    """
    return _check(
        "Lab 3, TODO 4: the input gradient dx by GEMM and col2im", fn, _cases("dx"),
        hint="dY is dy as a (K, N*P*Q) matrix with columns ordered (n, p, q): "
             "dy.transpose(1, 0, 2, 3).reshape(K, -1), not dy.reshape(K, -1); then "
             "dcols = W^T @ dY with W = w.reshape(K, -1), and dx = col2im(dcols, ...).")

"""Lab 3's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab3_im2col.ipynb``. The planted
mistakes are the ones learners make: all zeros, returning the input, an off-by-one border
(the first row and column treated as padding), the padding offset forgotten, the stride
ignored or applied to the tap too, a launch that covers only whole blocks (right only for
sizes that are multiples of the block), col2im storing instead of summing overlapping windows,
the (K, N*P*Q) matrix reshaped without moving the batch axis, rows or columns of cols in another
order ((r, s, c), (c, s, r), (p, q, n), (n, q, p)), w checked against H, no check below 0,
P and Q rounded up, filters flattened in another order, and W^T read as a reshape of W.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda

from helpers.checks import lab3

THREADS = 128


# ------------------------------------------------------------------- the solution notebook's


@cuda.jit
def im2col_kernel(x, cols, P, Q, stride, padding, R, S):
    i = cuda.grid(1)
    N, C, H, W = x.shape
    ncols = N * P * Q
    if i < cols.shape[0] * ncols:
        row, col = i // ncols, i % ncols
        c, r, s = row // (R * S), (row // S) % R, row % S
        n, p, q = col // (P * Q), (col // Q) % P, col % Q
        h = p * stride + r - padding
        w = q * stride + s - padding
        if 0 <= h < H and 0 <= w < W:
            cols[row, col] = x[n, c, h, w]
        else:
            cols[row, col] = 0.0


def out_size(size, kernel, stride, padding):
    return (size + 2 * padding - kernel) // stride + 1


def im2col(x, r, s, stride=1, padding=0):
    N, C, H, W = x.shape
    P, Q = out_size(H, r, stride, padding), out_size(W, s, stride, padding)
    cols = cuda.device_array((C * r * s, N * P * Q), dtype=np.float32)
    blocks = (cols.size + THREADS - 1) // THREADS
    im2col_kernel[blocks, THREADS](cuda.to_device(np.ascontiguousarray(x, np.float32)), cols,
                                   P, Q, stride, padding, r, s)
    return cols.copy_to_host()


def conv2d_im2col(x, w, stride=1, padding=0):
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
    cols = im2col(x, R, S, stride=stride, padding=padding)
    y = w.reshape(K, -1) @ cols
    return y.reshape(K, N, P, Q).transpose(1, 0, 2, 3)


@cuda.jit
def col2im_kernel(dcols, dx, P, Q, stride, padding, R, S):
    i = cuda.grid(1)
    N, C, H, W = dx.shape
    ncols = N * P * Q
    if i < dcols.shape[0] * ncols:
        row, col = i // ncols, i % ncols
        c, r, s = row // (R * S), (row // S) % R, row % S
        n, p, q = col // (P * Q), (col // Q) % P, col % Q
        h = p * stride + r - padding
        w = q * stride + s - padding
        if 0 <= h < H and 0 <= w < W:
            cuda.atomic.add(dx, (n, c, h, w), dcols[row, col])


def col2im(dcols, x_shape, r, s, stride=1, padding=0):
    N, C, H, W = x_shape
    P, Q = out_size(H, r, stride, padding), out_size(W, s, stride, padding)
    dx = cuda.to_device(np.zeros(x_shape, dtype=np.float32))
    blocks = (dcols.size + THREADS - 1) // THREADS
    col2im_kernel[blocks, THREADS](cuda.to_device(np.ascontiguousarray(dcols, np.float32)), dx,
                                   P, Q, stride, padding, r, s)
    return dx.copy_to_host()


def conv2d_backward_dx(dy, w, x_shape, stride=1, padding=0):
    K, C, R, S = w.shape
    dY = dy.transpose(1, 0, 2, 3).reshape(K, -1)
    dcols = w.reshape(K, -1).T @ dY
    return col2im(dcols, x_shape, R, S, stride=stride, padding=padding)


# ------------------------------------------------------------------------ planted mistakes

OFF_BY_ONE, NO_PADDING_OFFSET, NO_STRIDE, PLAIN_STORE = 1, 2, 3, 4
ROWS_RSC, ROWS_CSR, COLS_PQN, COLS_NQP, STRIDE_ON_R, W_AGAINST_H, NO_PADDING_CHECK = range(5, 12)


@cuda.jit(device=True)
def buggy_where(i, ncols, N, C, H, W, P, Q, stride, padding, R, S, bug):
    """(row, col, n, c, h, w, inside) of cols entry i, with one mistake ``bug``."""
    row, col = i // ncols, i % ncols
    c, r, s = row // (R * S), (row // S) % R, row % S
    if bug == ROWS_RSC:                   # rows ordered (r, s, c): channel fastest
        r, s, c = row // (S * C), (row // C) % S, row % C
    if bug == ROWS_CSR:                   # kernel column before kernel row: (c, s, r)
        c, s, r = row // (R * S), (row // R) % S, row % R
    n, p, q = col // (P * Q), (col // Q) % P, col % Q
    if bug == COLS_PQN:                   # columns ordered (p, q, n): image fastest
        p, q, n = col // (Q * N), (col // N) % Q, col % N
    if bug == COLS_NQP:                   # columns ordered (n, q, p): column-major windows
        n, q, p = col // (P * Q), (col // P) % Q, col % P
    h = p * stride + r - padding
    w = q * stride + s - padding
    if bug == NO_PADDING_OFFSET:          # the padding never subtracted
        h, w = p * stride + r, q * stride + s
    if bug == NO_STRIDE:                  # windows one element apart whatever the stride
        h, w = p + r - padding, q + s - padding
    if bug == STRIDE_ON_R:                # the stride applied to the tap too: (p + r) * stride
        h, w = (p + r) * stride - padding, (q + s) * stride - padding
    inside = 0 <= h < H and 0 <= w < W
    if bug == OFF_BY_ONE:                 # row 0 and column 0 treated as padding
        inside = 0 < h < H and 0 < w < W
    if bug == W_AGAINST_H:                # a square input assumed: w checked against H
        inside = 0 <= h < H and 0 <= w < H
    if bug == NO_PADDING_CHECK:           # negative indices wrap around instead of reading 0
        inside = h < H and w < W          # (as Python's do; explicit, so a GPU does the same)
        h, w = h + H if h < 0 else h, w + W if w < 0 else w
    return row, col, n, c, h, w, inside


@cuda.jit
def im2col_buggy_kernel(x, cols, P, Q, stride, padding, R, S, bug):
    i = cuda.grid(1)
    N, C, H, W = x.shape
    ncols = N * P * Q
    if i < cols.shape[0] * ncols:
        row, col, n, c, h, w, inside = buggy_where(i, ncols, N, C, H, W, P, Q, stride,
                                                   padding, R, S, bug)
        cols[row, col] = x[n, c, h, w] if inside else 0.0


@cuda.jit
def col2im_buggy_kernel(dcols, dx, P, Q, stride, padding, R, S, bug):
    i = cuda.grid(1)
    N, C, H, W = dx.shape
    ncols = N * P * Q
    if i < dcols.shape[0] * ncols:
        row, col, n, c, h, w, inside = buggy_where(i, ncols, N, C, H, W, P, Q, stride,
                                                   padding, R, S, bug)
        if inside:
            if bug == PLAIN_STORE:            # overlapping windows overwrite each other
                dx[n, c, h, w] = dcols[row, col]
            else:
                cuda.atomic.add(dx, (n, c, h, w), dcols[row, col])


def out_size_rounded_up(size, kernel, stride, padding):
    return -(-(size + 2 * padding - kernel) // stride) + 1


def blocks_for(total, whole_blocks_only):
    """Whole blocks only: right only when the size is a multiple of the block."""
    return total // THREADS if whole_blocks_only else (total + THREADS - 1) // THREADS


def buggy_im2col(bug=0, whole_blocks_only=False, size=out_size):
    def run(x, r, s, stride=1, padding=0):
        N, C, H, W = x.shape
        P, Q = size(H, r, stride, padding), size(W, s, stride, padding)
        cols = cuda.to_device(np.zeros((C * r * s, N * P * Q), dtype=np.float32))
        blocks = blocks_for(cols.size, whole_blocks_only)
        if blocks:
            im2col_buggy_kernel[blocks, THREADS](cuda.to_device(x), cols, P, Q, stride,
                                                 padding, r, s, bug)
        return cols.copy_to_host()
    return run


def buggy_col2im(bug=0, whole_blocks_only=False, size=out_size):
    def run(dcols, x_shape, r, s, stride=1, padding=0):
        N, C, H, W = x_shape
        P, Q = size(H, r, stride, padding), size(W, s, stride, padding)
        dx = cuda.to_device(np.zeros(x_shape, dtype=np.float32))
        blocks = blocks_for(dcols.size, whole_blocks_only)
        if blocks:
            col2im_buggy_kernel[blocks, THREADS](cuda.to_device(np.ascontiguousarray(dcols)),
                                                 dx, P, Q, stride, padding, r, s, bug)
        return dx.copy_to_host()
    return run


def conv_with(im2col_fn, batch_axis_moved=True):
    def run(x, w, stride=1, padding=0):
        N, C, H, W = x.shape
        K, _, R, S = w.shape
        P, Q = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
        y = w.reshape(K, -1) @ im2col_fn(x, R, S, stride=stride, padding=padding)
        if not batch_axis_moved:
            return y.reshape(N, K, P, Q)
        return y.reshape(K, N, P, Q).transpose(1, 0, 2, 3)
    return run


def dx_with(col2im_fn, batch_axis_moved=True):
    def run(dy, w, x_shape, stride=1, padding=0):
        K, C, R, S = w.shape
        dY = dy.transpose(1, 0, 2, 3).reshape(K, -1) if batch_axis_moved else dy.reshape(K, -1)
        return col2im_fn(w.reshape(K, -1).T @ dY, x_shape, R, S, stride=stride, padding=padding)
    return run


def conv_filters_channels_last(x, w, stride=1, padding=0):
    """The filters flattened in (r, s, c) order, the cols rows in (c, r, s): they disagree."""
    return conv_with(im2col)(x, w.transpose(0, 2, 3, 1).reshape(w.shape), stride, padding)


def dx_not_transposed(dy, w, x_shape, stride=1, padding=0):
    """W^T read as W.reshape(C*R*S, K): the right shape, the wrong entries."""
    K, C, R, S = w.shape
    dY = dy.transpose(1, 0, 2, 3).reshape(K, -1)
    return col2im(w.reshape(-1, K) @ dY, x_shape, R, S, stride=stride, padding=padding)


def stub(*args, **kwargs):
    raise NotImplementedError


def out_shape_zeros(kind):
    def run(*args, **kwargs):
        if kind == "im2col":
            x, r, s = args
            N, C, H, W = x.shape
            st, pd = kwargs["stride"], kwargs["padding"]
            return np.zeros((C * r * s, N * out_size(H, r, st, pd) * out_size(W, s, st, pd)))
        if kind == "conv":
            x, w = args
            st, pd = kwargs["stride"], kwargs["padding"]
            return np.zeros((x.shape[0], w.shape[0], out_size(x.shape[2], w.shape[2], st, pd),
                             out_size(x.shape[3], w.shape[3], st, pd)))
        return np.zeros(args[1] if kind == "col2im" else args[2])
    return run


CHECKERS = {
    "im2col": (lab3.check_im2col, im2col, {
        "zeros": out_shape_zeros("im2col"),
        "the input": lambda x, r, s, stride=1, padding=0: x,
        "off-by-one border": buggy_im2col(OFF_BY_ONE),
        "padding offset forgotten": buggy_im2col(NO_PADDING_OFFSET),
        "stride ignored": buggy_im2col(NO_STRIDE),
        "whole blocks only": buggy_im2col(whole_blocks_only=True),
        "rows ordered (r, s, c)": buggy_im2col(ROWS_RSC),
        "kernel row and column swapped (c, s, r)": buggy_im2col(ROWS_CSR),
        "columns ordered (p, q, n)": buggy_im2col(COLS_PQN),
        "columns ordered (n, q, p)": buggy_im2col(COLS_NQP),
        "stride applied to the tap ((p + r) * stride)": buggy_im2col(STRIDE_ON_R),
        "w checked against H (a square input assumed)": buggy_im2col(W_AGAINST_H),
        "no check below 0 (negative indices wrap)": buggy_im2col(NO_PADDING_CHECK),
        "P and Q rounded up": buggy_im2col(size=out_size_rounded_up),
    }),
    "conv": (lab3.check_conv2d_im2col, conv2d_im2col, {
        "zeros": out_shape_zeros("conv"),
        "the input": lambda x, w, stride=1, padding=0: x,
        "off-by-one border": conv_with(buggy_im2col(OFF_BY_ONE)),
        "padding offset forgotten": conv_with(buggy_im2col(NO_PADDING_OFFSET)),
        "stride ignored": conv_with(buggy_im2col(NO_STRIDE)),
        "whole blocks only": conv_with(buggy_im2col(whole_blocks_only=True)),
        "rows ordered (r, s, c)": conv_with(buggy_im2col(ROWS_RSC)),
        "columns ordered (p, q, n)": conv_with(buggy_im2col(COLS_PQN)),
        "stride applied to the tap ((p + r) * stride)": conv_with(buggy_im2col(STRIDE_ON_R)),
        "filters reshaped (K, C*R*S) from w.transpose(0, 2, 3, 1)": conv_filters_channels_last,
        "batch axis not moved": conv_with(im2col, batch_axis_moved=False),
    }),
    "col2im": (lab3.check_col2im, col2im, {
        "zeros": out_shape_zeros("col2im"),
        "the input": lambda dcols, x_shape, r, s, stride=1, padding=0: dcols,
        "off-by-one border": buggy_col2im(OFF_BY_ONE),
        "padding offset forgotten": buggy_col2im(NO_PADDING_OFFSET),
        "stride ignored": buggy_col2im(NO_STRIDE),
        "overlaps stored, not summed": buggy_col2im(PLAIN_STORE),
        "whole blocks only": buggy_col2im(whole_blocks_only=True),
        "rows ordered (r, s, c)": buggy_col2im(ROWS_RSC),
        "kernel row and column swapped (c, s, r)": buggy_col2im(ROWS_CSR),
        "columns ordered (p, q, n)": buggy_col2im(COLS_PQN),
        "columns ordered (n, q, p)": buggy_col2im(COLS_NQP),
        "stride applied to the tap ((p + r) * stride)": buggy_col2im(STRIDE_ON_R),
        "w checked against H (a square input assumed)": buggy_col2im(W_AGAINST_H),
        "no check below 0 (negative indices wrap)": buggy_col2im(NO_PADDING_CHECK),
        "P and Q rounded up": buggy_col2im(size=out_size_rounded_up),
    }),
    "dx": (lab3.check_conv2d_backward_dx, conv2d_backward_dx, {
        "zeros": out_shape_zeros("dx"),
        "the input": lambda dy, w, x_shape, stride=1, padding=0: dy,
        "off-by-one border": dx_with(buggy_col2im(OFF_BY_ONE)),
        "stride ignored": dx_with(buggy_col2im(NO_STRIDE)),
        "overlaps stored, not summed": dx_with(buggy_col2im(PLAIN_STORE)),
        "whole blocks only": dx_with(buggy_col2im(whole_blocks_only=True)),
        "padding offset forgotten": dx_with(buggy_col2im(NO_PADDING_OFFSET)),
        "columns ordered (p, q, n)": dx_with(buggy_col2im(COLS_PQN)),
        "W not transposed (W @ dY reshaped)": dx_not_transposed,
        "batch axis not moved": dx_with(col2im, batch_axis_moved=False),
    }),
}

PLANTED = [(kind, name) for kind, (_, _, wrongs) in CHECKERS.items() for name in wrongs]


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
    assert "x (N, C, H, W) = (" in report.message and "stride" in report.message


@pytest.mark.parametrize("kind", CHECKERS)
def test_the_solution_passes_every_case(kind):
    checker, solution, _ = CHECKERS[kind]
    report = checker(solution)
    assert report and report.status == "passed", str(report)
    assert report.cases_run == len(lab3.CONFIGS)


def test_a_failure_names_the_worst_element_and_gives_the_hint():
    report = lab3.check_conv2d_im2col(CHECKERS["conv"][2]["batch axis not moved"])
    assert "expected" in report.message and "got" in report.message
    assert "Hint:" in report.message and "transpose(1, 0, 2, 3)" in report.message


def test_the_cases_cover_what_the_brief_asks_for():
    shapes = [(x, k, st, pd) for x, k, st, pd in lab3.CONFIGS]
    assert any(x[0] == 1 for x, *_ in shapes)                            # batch 1
    assert any(st > 1 and pd > 0 for _, _, st, pd in shapes)              # stride and padding
    assert any(st > k[1] for _, k, st, _ in shapes)                       # stride > kernel
    assert any(k[1] != k[2] for _, k, _, _ in shapes)                     # rectangular kernel
    for x, (k, r, s), st, pd in shapes:
        p, q = out_size(x[2], r, st, pd), out_size(x[3], s, st, pd)
        threads = x[1] * r * s * x[0] * p * q
        assert threads <= 1200                                            # simulator-sized
    big = [x[1] * r * s * x[0] * out_size(x[2], r, st, pd) * out_size(x[3], s, st, pd)
           for x, (k, r, s), st, pd in shapes]
    assert any(t > THREADS and t % THREADS for t in big)                  # a partial block

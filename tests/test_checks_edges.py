"""The lab checkers at the edges: one planted mistake per rule that the other checker tests
left untested, or that a checker let through before it was fixed.

Each test plants what a learner plausibly writes at an edge of a parameter (a loop step of the
block instead of the grid, a `range` one past the end, a shared tile indexed past TILE, one
barrier, a bound that agrees only while M == K, `<=` for `<`, output memory that happens to be
zero, np.zeros without a dtype, a batch of 1, a square plane, a status that only starts with
"ok" or a row timed as "ok" without a time) and asserts the checker's verdict and what its
message names; where useful, that a right variant still passes.
"""

from __future__ import annotations

import heapq

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
import torch
from numba import cuda, float32

from helpers.checks import lab1, lab2, lab3, lab4, lab5
from helpers.device import backend

simulator_only = pytest.mark.skipif(backend.MODE != "simulator",
                                    reason="the simulator checks every index; a GPU does not")

TILE = 8
THREADS = 128

# ------------------------------------------------------------------------------------ Lab 1


@cuda.jit
def grid_stride_step_of_the_block(x, out):  # blockDim for gridsize: blocks redo each other
    for i in range(cuda.grid(1), x.size, cuda.blockDim.x):
        out[i] = x[i] if x[i] > 0 else float32(0)


@cuda.jit
def grid_stride_step_of_one(x, out):  # every thread walks from its index to the end
    for i in range(cuda.grid(1), x.size):
        out[i] = x[i] if x[i] > 0 else float32(0)


@cuda.jit
def grid_stride_from_grid_dims(x, out):  # right: the grid's size written out
    for i in range(cuda.grid(1), x.size, cuda.gridDim.x * cuda.blockDim.x):
        out[i] = x[i] if x[i] > 0 else float32(0)


@cuda.jit
def grid_stride_one_past_the_end(x, out):
    for i in range(cuda.grid(1), x.size + 1, cuda.gridsize(1)):
        out[i] = x[i] if x[i] > 0 else float32(0)


@pytest.mark.parametrize("kernel", [grid_stride_step_of_the_block, grid_stride_step_of_one])
def test_grid_stride_loop_stepping_by_less_than_the_grid_fails(kernel):
    """Right values (every element is written, several times), but no grid-stride loop."""
    report = lab1.check_relu_grid_stride(kernel)
    assert not report and report.status == "failed", report
    assert "does not step by the whole grid" in report.message
    assert "cuda.gridsize(1)" in report.message
    assert lab1._steps_by_the_grid(grid_stride_from_grid_dims)   # gridDim * blockDim is fine


def test_grid_stride_loop_past_the_end_is_told_to_fix_its_range():
    report = lab1.check_relu_grid_stride(grid_stride_one_past_the_end)
    assert not report and "past the end" in report.message
    hint = report.message.split("Hint:")[1]
    assert "range(cuda.grid(1), x.size, cuda.gridsize(1))" in hint
    assert "rounded up to whole blocks" not in hint     # the one-thread-per-element advice


def saxpy_on_the_host(a, x, y, out):
    out[:] = a * x + y


def relu_on_the_host(x, out):
    out[:] = np.maximum(x, 0)


@pytest.mark.parametrize("check,fn,name", [
    (lab1.check_saxpy, saxpy_on_the_host, "saxpy_kernel"),
    (lab1.check_relu_grid_stride, relu_on_the_host, "relu_grid_stride_kernel"),
])
def test_a_plain_function_is_named_as_not_a_kernel_by_every_kernel_check(check, fn, name):
    report = check(fn)
    assert report.status == "error" and "@cuda.jit" in report.message and name in report.message


def test_launch_config_with_float_threads_fails_naming_the_type():
    report = lab1.check_launch_config(lambda n, t: ((n + t - 1) // t, float(t)))
    assert report.status == "failed" and "threads is 256.0 (float)" in report.message


# ------------------------------------------------------------------------------------ Lab 2


@cuda.jit
def tiled_sums_k_over_all_of_k(a, b, c):  # the naive kernel's k loop inside the tiled one
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i, j = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka, kb = t * TILE + tx, t * TILE + ty
        sa[ty, tx] = a[i, ka] if i < m and ka < k_dim else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < k_dim and j < n else float32(0.0)
        cuda.syncthreads()
        for k in range(k_dim):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < m and j < n:
        c[i, j] = acc


@cuda.jit
def tiled_one_barrier(a, b, c):  # no barrier after the sums: the next load races the reads
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i, j = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka, kb = t * TILE + tx, t * TILE + ty
        sa[ty, tx] = a[i, ka] if i < m and ka < k_dim else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < k_dim and j < n else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
    if i < m and j < n:
        c[i, j] = acc


@cuda.jit
def tiled_double_buffered(a, b, c):  # right with one barrier: step t + 1 loads the other pair
    sa = cuda.shared.array((2, TILE, TILE), float32)
    sb = cuda.shared.array((2, TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i, j = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka, kb, p = t * TILE + tx, t * TILE + ty, t % 2
        sa[p, ty, tx] = a[i, ka] if i < m and ka < k_dim else float32(0.0)
        sb[p, ty, tx] = b[kb, j] if kb < k_dim and j < n else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[p, ty, k] * sb[p, k, tx]
    if i < m and j < n:
        c[i, j] = acc


@cuda.jit
def tiled_a_guarded_by_m_not_k(a, b, c):  # `ka < m`: the same bound while M == K
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i, j = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka, kb = t * TILE + tx, t * TILE + ty
        sa[ty, tx] = a[i, ka] if i < m and ka < m else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < k_dim and j < n else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < m and j < n:
        c[i, j] = acc


@cuda.jit
def naive_bounds_with_le(a, b, c):  # `<=`: the row and column one past C compute too
    j, i = cuda.grid(2)
    if i <= c.shape[0] and j <= c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@simulator_only
def test_tiled_indexing_a_tile_past_tile_is_named_as_a_shared_array():
    report = lab2.check_gemm_tiled(tiled_sums_k_over_all_of_k, TILE)
    assert not report and report.status == "failed", report
    assert "outside a shared (or local) array, not A, B or C" in report.message
    assert "acc += sa[ty, k] * sb[k, tx]" in report.message           # the learner's line
    hint = report.message.split("Hint:")[1]
    assert "range(TILE)" in hint and "i < M" not in hint              # not the grid's advice


def test_tiled_with_one_barrier_fails():
    report = lab2.check_gemm_tiled(tiled_one_barrier, TILE)
    assert not report and report.status == "failed", report
    assert "cuda.syncthreads()" in report.message
    # the source rule makes the verdict independent of how a GPU interleaves the warps
    assert lab2._uses_shared_memory_and_barriers(tiled_one_barrier) == "second cuda.syncthreads()"


def test_tiled_double_buffered_with_one_barrier_is_right_and_not_refused_by_the_source_rule():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((11, 17)), rng.standard_normal((17, 13))
    c = lab2.run_gemm(tiled_double_buffered, a, b, TILE)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert lab2._uses_shared_memory_and_barriers(tiled_double_buffered) is None


@pytest.mark.slow
def test_tiled_bound_right_only_while_m_equals_k_fails_on_the_second_case():
    assert lab2.tiled_shapes(TILE)[0][0] == lab2.tiled_shapes(TILE)[0][1]   # case 1: M == K
    report = lab2.check_gemm_tiled(tiled_a_guarded_by_m_not_k, TILE)
    assert not report and report.cases_run == 2, report
    assert "max error" in report.message and "A (11, 17)" in report.message


def test_naive_bounds_off_by_one_with_le_fails():
    report = lab2.check_gemm_naive(naive_bounds_with_le)
    assert not report and report.status == "failed", report
    assert "outside" in report.message and "A (5, 7) @ B (7, 3)" in report.message


# ------------------------------------------------------------------------------------ Lab 3


def out_size(size, kernel, stride, padding):
    return (size + 2 * padding - kernel) // stride + 1


@cuda.jit(device=True)
def window_position(i, ncols, P, Q, stride, padding, R, S):
    row, col = i // ncols, i % ncols
    c, r, s = row // (R * S), (row // S) % R, row % S
    n, p, q = col // (P * Q), (col // Q) % P, col % Q
    return row, col, n, c, p * stride + r - padding, q * stride + s - padding


@cuda.jit
def im2col_kernel(x, cols, P, Q, stride, padding, R, S, write_padding):
    i = cuda.grid(1)
    N, C, H, W = x.shape
    if i < cols.size:
        row, col, n, c, h, w = window_position(i, N * P * Q, P, Q, stride, padding, R, S)
        if 0 <= h < H and 0 <= w < W:
            cols[row, col] = x[n, c, h, w]
        elif write_padding:
            cols[row, col] = 0.0


@cuda.jit
def col2im_kernel(dcols, dx, P, Q, stride, padding, R, S):
    i = cuda.grid(1)
    N, C, H, W = dx.shape
    if i < dcols.size:
        row, col, n, c, h, w = window_position(i, N * P * Q, P, Q, stride, padding, R, S)
        if 0 <= h < H and 0 <= w < W:
            cuda.atomic.add(dx, (n, c, h, w), dcols[row, col])


def im2col_with(write_padding):
    """im2col as the solution writes it; write_padding=False leaves the padding unwritten."""
    def im2col(x, R, S, stride=1, padding=0):
        N, C, H, W = x.shape
        P, Q = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
        cols = cuda.device_array((C * R * S, N * P * Q), dtype=np.float32)
        blocks = (cols.size + THREADS - 1) // THREADS
        im2col_kernel[blocks, THREADS](cuda.to_device(np.ascontiguousarray(x, np.float32)),
                                       cols, P, Q, stride, padding, R, S, write_padding)
        return cols.copy_to_host()
    return im2col


def col2im_starting_from(allocate):
    """col2im as the solution writes it, with dx = allocate(x_shape) on the device."""
    def col2im(dcols, x_shape, R, S, stride=1, padding=0):
        N, C, H, W = x_shape
        P, Q = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
        dx = allocate(x_shape)
        blocks = (dcols.size + THREADS - 1) // THREADS
        col2im_kernel[blocks, THREADS](cuda.to_device(np.ascontiguousarray(dcols, np.float32)),
                                       dx, P, Q, stride, padding, R, S)
        return dx.copy_to_host()
    return col2im


@pytest.fixture
def memory_that_happens_to_be_zero(monkeypatch):
    """cuda.device_array returning zeros, as fresh GPU memory often is (and the simulator's
    np.empty may be): a kernel that never writes some elements can look right."""
    to_device = cuda.to_device

    def zeroed(shape, dtype=np.float64, *args, **kwargs):
        return to_device(np.zeros(shape, dtype))

    monkeypatch.setattr(cuda, "device_array", zeroed)
    return zeroed


@pytest.mark.slow
def test_im2col_padding_left_unwritten_fails_even_where_memory_is_zero(
        memory_that_happens_to_be_zero):
    report = lab3.check_im2col(im2col_with(write_padding=False))
    assert not report and report.status == "failed", report
    assert "NaN" in report.message and "were they ever written" in report.message
    assert cuda.device_array is memory_that_happens_to_be_zero       # restored after the check
    assert lab3.check_im2col(im2col_with(write_padding=True)).passed


def test_col2im_from_an_unzeroed_device_array_fails_even_where_memory_is_zero(
        memory_that_happens_to_be_zero):
    unzeroed = col2im_starting_from(lambda shape: cuda.device_array(shape, np.float32))
    report = lab3.check_col2im(unzeroed)
    assert not report and report.status == "failed", report
    assert "NaN" in report.message and "start dx from zeros" in report.message
    zeroed = col2im_starting_from(lambda shape: cuda.to_device(np.zeros(shape, np.float32)))
    assert lab3.check_col2im(zeroed).passed


def test_col2im_in_float64_fails_naming_the_dtype():
    """np.zeros(x_shape) without a dtype: right values, a float64 dx (float64 atomics)."""
    report = lab3.check_col2im(col2im_starting_from(lambda shape: cuda.to_device(np.zeros(shape))))
    assert not report and report.status == "failed", report
    assert "float64" in report.message and "dtype=np.float32" in report.message


def test_a_float32_torch_tensor_still_passes_the_dtype_rule():
    def conv_by_torch(x, w, stride=1, padding=0):
        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                          stride=stride, padding=padding)

    assert lab3.check_conv2d_im2col(conv_by_torch).passed


# ------------------------------------------------------------------------------------ Lab 4


def fft_conv2d_first_image_only(x, w, padding=0):
    """Right for batch 1: every image gets the output of image 0."""
    K, C, R, S = w.shape
    xp = np.pad(x[:1], ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    Hf, Wf = xp.shape[2:]
    Y = np.einsum("nchw,kchw->nkhw", np.fft.rfft2(xp), np.conj(np.fft.rfft2(w, s=(Hf, Wf))))
    y = np.fft.irfft2(Y, s=(Hf, Wf))[:, :, :Hf - R + 1, :Wf - S + 1]
    return np.broadcast_to(y, (x.shape[0],) + y.shape[1:])


def fft_plane_crop_axes_swapped(x, w, padding=0):
    """The crop's sizes with H and W swapped: right only for square planes and filters."""
    xp = np.pad(x, padding)
    Hf, Wf = xp.shape
    R, S = w.shape
    y = np.fft.irfft2(np.fft.rfft2(xp) * np.conj(np.fft.rfft2(w, s=(Hf, Wf))), s=(Hf, Wf))
    return y[:Wf - S + 1, :Hf - R + 1]


def test_fft_conv2d_right_only_for_batch_1_fails():
    report = lab4.check_fft_conv2d(fft_conv2d_first_image_only)
    assert not report and report.status == "failed", report
    assert "x (N, C, H, W) = (2, 3, 7, 9)" in report.message and "max error" in report.message


def test_fft_plane_crop_right_only_for_square_planes_fails():
    report = lab4.check_fft_correlate_plane(fft_plane_crop_axes_swapped)
    assert not report and report.status == "failed", report
    assert "shape" in report.message and "x (H, W) = (7, 9)" in report.message


# ------------------------------------------------------------------------------------ Lab 5


def pick_by(keep):
    """The solution's pick with the candidate test replaced by ``keep(row, budget_bytes)``."""
    def pick(rows, budget_bytes):
        candidates = [(row["median_ms"], row["tensor_bytes"] + row["workspace_bytes"], i,
                       row["strategy"]) for i, row in enumerate(rows) if keep(row, budget_bytes)]
        return min(candidates)[3] if candidates else None
    return pick


def fits(row, budget_bytes):
    return (row["workspace_bytes"] is not None
            and row["tensor_bytes"] + row["workspace_bytes"] <= budget_bytes)


def test_pick_without_the_median_ms_test_fails():
    report = lab5.check_pick(pick_by(lambda r, b: r["status"] == "ok" and fits(r, b)))
    assert not report and "median_ms" in report.message


def test_pick_with_status_starting_with_ok_fails():
    report = lab5.check_pick(pick_by(lambda r, b: r["status"].startswith("ok")
                                     and r["median_ms"] is not None and fits(r, b)))
    assert not report and "not exactly 'ok'" in report.message


def test_pick_raising_inside_the_standard_library_is_reported_at_the_learners_line():
    def pick(rows, budget_bytes):
        ok = [r for r in rows if fits(r, budget_bytes)]          # status and time forgotten
        best = heapq.nsmallest(2, ok, key=lambda r: r["median_ms"])
        return best[0]["strategy"] if best else None

    report = lab5.check_pick(pick)
    assert report.status == "error" and "heapq.nsmallest(2, ok" in report.message

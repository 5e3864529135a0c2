"""helpers.checks.lab2, the naive GEMM and run_gemm: the checker fails the stub and planted
wrong kernels, passes the solution, and run_gemm refuses bad input clearly (the tiled kernel's
checks: test_checks_lab2_tiled.py; the shared kernels: lab2_kernels.py).

Planted for the naive kernel: all zeros, A copied into C, no bounds check, a bounds check off
by one or against the wrong sizes, a term of the sum dropped, the sum over N instead of K, B
read transposed, C accumulated without being zeroed, x along the rows, a float64 accumulator
(which the simulator passes and a GPU would not).
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from lab2_kernels import gemm_naive_kernel, gemm_returns_a, gemm_zeros, naive_stub
from numba import cuda, float32

from helpers.device import backend
from helpers.checks import lab2
from helpers.checks.lab2 import check_gemm_naive, run_gemm

# ----------------------------------------------------------------------- planted: naive


@cuda.jit
def naive_no_bounds_check(a, b, c):  # right only when the grid fits C exactly
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for k in range(a.shape[1]):
        acc += a[i, k] * b[k, j]
    c[i, j] = acc


@cuda.jit
def naive_off_by_one_border(a, b, c):  # the last column of C is never written
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1] - 1:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_drops_last_k(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1] - 1):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_x_along_rows(a, b, c):  # a correct kernel in the other convention
    i, j = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_bounds_swapped(a, b, c):  # i checked against N and j against M
    j, i = cuda.grid(2)
    if i < c.shape[1] and j < c.shape[0]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_last_row_missing(a, b, c):  # the last row of C is never written
    j, i = cuda.grid(2)
    if i < c.shape[0] - 1 and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_sums_over_n(a, b, c):  # range(b.shape[1]): the sum runs over N, not K
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(min(b.shape[1], a.shape[1])):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def naive_b_transposed(a, b, c):  # b[j, k]: B read as if stored (N, K)
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            if j < b.shape[0] and k < b.shape[1]:
                acc += a[i, k] * b[j, k]
        c[i, j] = acc


@cuda.jit
def naive_accumulates_into_c(a, b, c):  # c[i, j] += ...: C is never set to 0 first
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        for k in range(a.shape[1]):
            c[i, j] += a[i, k] * b[k, j]


def naive_not_a_kernel(a, b, c):
    c[:] = a @ b


NAIVE_WRONG = {
    "zeros": (gemm_zeros, "max error"),
    "returns A": (gemm_returns_a, "max error"),
    "no bounds check": (naive_no_bounds_check, "outside"),
    "off-by-one border": (naive_off_by_one_border, "NaN"),
    "drops the last k": (naive_drops_last_k, "max error"),
    "x along the rows": (naive_x_along_rows, "NaN"),
    "bounds checked against the wrong sizes": (naive_bounds_swapped, ""),
    "last row never written": (naive_last_row_missing, "NaN"),
    "the sum over N, not K": (naive_sums_over_n, "max error"),
    "B read transposed": (naive_b_transposed, ""),
    "accumulates into C, never zeroed": (naive_accumulates_into_c, "NaN"),
}


def test_naive_passes_the_solution():
    report = check_gemm_naive(gemm_naive_kernel)
    assert report.passed and report.cases_run == len(lab2.naive_shapes())


def test_naive_stub_is_not_implemented_yet():
    report = check_gemm_naive(naive_stub)
    assert report.status == "not implemented" and "NOT IMPLEMENTED YET" in str(report)


@pytest.mark.parametrize("planted", sorted(NAIVE_WRONG))
def test_naive_fails_planted_wrong_kernels(planted):
    kernel, text = NAIVE_WRONG[planted]
    report = check_gemm_naive(kernel)
    assert not report and report.status == "failed", report
    assert text in report.message and "A (" in report.message
    assert "blocks of 8 x 8" in report.message


def test_naive_in_the_other_axis_convention_is_told_so():
    assert "x runs along the rows" in check_gemm_naive(naive_x_along_rows).message
    assert "x runs along the rows" not in check_gemm_naive(naive_off_by_one_border).message


def test_naive_a_plain_function_is_named_as_not_a_kernel():
    report = check_gemm_naive(naive_not_a_kernel)
    assert report.status == "error" and "@cuda.jit" in report.message


# ------------------------------------------------------------------------------- run_gemm


def test_run_gemm_returns_c_and_nan_where_unwritten():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 3))
    c = run_gemm(gemm_naive_kernel, a, b, tile=8)
    assert c.dtype == np.float32 and c.shape == (5, 3)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert np.isnan(run_gemm(naive_off_by_one_border, a, b, tile=8)[:, -1]).all()


@pytest.mark.parametrize("a_shape,b_shape,tile,text", [
    ((3, 4), (5, 2), 8, "inner dimensions differ"),
    ((3,), (3, 2), 8, "2-D"),
    ((3, 4), (4, 2), 0, "tile must be"),
    ((3, 4), (4, 2), 64, "tile must be"),
])
def test_run_gemm_refuses_bad_input(a_shape, b_shape, tile, text):
    with pytest.raises(ValueError, match=text):
        run_gemm(gemm_naive_kernel, np.ones(a_shape), np.ones(b_shape), tile)


def test_run_gemm_refuses_a_size_too_large_for_the_simulator():
    if backend.MODE != "simulator":
        pytest.skip("no limit on a GPU")
    with pytest.raises(ValueError, match="simulator"):
        run_gemm(gemm_naive_kernel, np.ones((100, 4)), np.ones((4, 100)), 8)


def test_run_gemm_names_a_stub_and_a_plain_function():
    with pytest.raises(NotImplementedError):
        run_gemm(naive_stub, np.ones((2, 2)), np.ones((2, 2)), 8)
    with pytest.raises(TypeError, match="cuda.jit"):
        run_gemm(naive_not_a_kernel, np.ones((2, 2)), np.ones((2, 2)), 8)


def test_run_gemm_catches_a_write_outside_c():
    with pytest.raises(IndexError, match="outside"):
        run_gemm(naive_no_bounds_check, np.ones((3, 3)), np.ones((3, 3)), 8)


# --------------------------------------------------- what the simulator passes but a GPU would not


@cuda.jit
def gemm_naive_float64_accumulator(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = 0.0
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@pytest.mark.each_python
@pytest.mark.slow
def test_naive_with_a_float64_accumulator_fails_naming_the_fix():
    report = check_gemm_naive(gemm_naive_float64_accumulator)
    assert not report.passed and report.status == "failed"
    assert "acc = float32(0.0)" in report.message and "acc += a[i, k] * b[k, j]" in report.message


def test_a_write_past_the_result_is_found_in_the_nan_padding():
    """On a GPU nothing checks a view's bounds: a write past C lands in the NaN padding that
    padded_device_array puts around it, and written_inside names the first one."""
    buf = np.full((5, 6), np.nan, np.float32)
    buf[:3, :4] = 1.0
    assert np.array_equal(lab2.written_inside(buf.copy(), 3, 4, "C", "c"), np.ones((3, 4)))
    buf[1, 4] = buf[4, 0] = 2.0           # one past a row, one below the last row
    with pytest.raises(IndexError, match=r"wrote outside C \(3 x 4\): 2 element\(s\), the "
                                         r"first at c\[1, 4\]"):
        lab2.written_inside(buf, 3, 4, "C", "c")

"""helpers.checks.lab1: every checker fails the stub and planted wrong kernels, passes the solution.

The planted kernels are the classic first-kernel mistakes: all zeros, the input copied through,
abs for ReLU, negatives left unwritten, no bounds check (right only when n is a multiple of the
block), off-by-one bounds, only whole blocks computed, an index without the block or the thread,
x and y swapped in SAXPY, no grid-stride loop or one that starts or stops wrong, a launch
configuration rounded the wrong way or with its block shrunk. The
solutions are written here exactly as in labs/solutions/lab1_first_kernels.ipynb.
"""

from __future__ import annotations

import math

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32

from helpers.checks import lab1
from helpers.checks.lab1 import check_launch_config, check_relu, check_relu_grid_stride, check_saxpy

# ------------------------------------------------------------------------- the lab's solutions


@cuda.jit
def relu_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def saxpy_kernel(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


def launch_config(n, threads_per_block=256):
    return (n + threads_per_block - 1) // threads_per_block, threads_per_block


@cuda.jit
def relu_grid_stride_kernel(x, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.size, stride):
        out[i] = x[i] if x[i] > 0 else 0.0


# ------------------------------------------------------------------------------------ stubs


@cuda.jit
def relu_stub(x, out):
    raise NotImplementedError("TODO 1: write the ReLU kernel")


@cuda.jit
def saxpy_stub(a, x, y, out):
    raise NotImplementedError("TODO 2: write the SAXPY kernel")


def launch_config_stub(n, threads_per_block=256):
    raise NotImplementedError("TODO 3: compute the number of blocks")


@cuda.jit
def grid_stride_stub(x, out):
    raise NotImplementedError("TODO 4: write the grid-stride ReLU kernel")


# ------------------------------------------------------------------------ planted: ReLU


@cuda.jit
def relu_zeros(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = 0.0


@cuda.jit
def relu_identity(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


@cuda.jit
def relu_no_bounds_check(x, out):  # right only when n is a multiple of the block
    i = cuda.grid(1)
    out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def relu_misses_last(x, out):  # off by one: the last element is never written
    i = cuda.grid(1)
    if i < x.size - 1:
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def relu_one_past_end(x, out):  # off by one: thread n writes out[n]
    i = cuda.grid(1)
    if i <= x.size:
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def relu_whole_blocks_only(x, out):  # right only for sizes that are multiples of the block
    i = cuda.grid(1)
    if i < (x.size // cuda.blockDim.x) * cuda.blockDim.x:
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def relu_abs(x, out):  # |x|: right only for the positive elements
    i = cuda.grid(1)
    if i < x.size:
        out[i] = abs(x[i])


@cuda.jit
def relu_no_else(x, out):  # negative elements never written (not set to 0)
    i = cuda.grid(1)
    if i < x.size and x[i] > 0:
        out[i] = x[i]


@cuda.jit
def relu_thread_index_only(x, out):  # i = threadIdx.x: every block redoes block 0's elements
    i = cuda.threadIdx.x
    if i < x.size:
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def relu_block_index_only(x, out):  # i = blockIdx.x * blockDim.x: one element a block
    i = cuda.blockIdx.x * cuda.blockDim.x
    if i < x.size:
        out[i] = x[i] if x[i] > 0 else 0.0


def relu_not_a_kernel(x, out):
    out[:] = np.maximum(x, 0)


RELU_WRONG = {
    "zeros": (relu_zeros, "max error"),
    "identity": (relu_identity, "max error"),
    "no bounds check": (relu_no_bounds_check, "past the end"),
    "misses the last element": (relu_misses_last, "NaN"),
    "writes one past the end": (relu_one_past_end, "past the end"),
    "whole blocks only": (relu_whole_blocks_only, "NaN"),
    "abs instead of max(x, 0)": (relu_abs, "max error"),
    "negative elements not written": (relu_no_else, "NaN"),
    "threadIdx.x only (block index forgotten)": (relu_thread_index_only, "NaN"),
    "blockIdx.x * blockDim.x only (thread index forgotten)": (relu_block_index_only, "NaN"),
}


@pytest.mark.slow
def test_relu_passes_the_solution():
    report = check_relu(relu_kernel)
    assert report.passed and report.status == "passed"
    assert report.cases_run == len(lab1.RELU_LAUNCHES)


def test_relu_stub_is_not_implemented_yet():
    report = check_relu(relu_stub)
    assert not report and report.status == "not implemented"
    assert "NOT IMPLEMENTED YET" in str(report)


@pytest.mark.parametrize("planted", sorted(RELU_WRONG))
def test_relu_fails_planted_wrong_kernels(planted):
    kernel, text = RELU_WRONG[planted]
    report = check_relu(kernel)
    assert not report and report.status == "failed", report
    assert text in report.message and "elements, launched as" in report.message
    assert "Hint:" in report.message


def test_relu_missing_bounds_check_names_the_launch_and_the_line():
    report = check_relu(relu_no_bounds_check)
    assert "x of 37 elements, launched as 2 blocks x 32 threads = 64 threads" in report.message
    assert "if i < x.size" in report.message
    if helpers.device.backend.MODE == "simulator":
        assert "out[i] = x[i] if x[i] > 0 else 0.0" in report.message  # the learner's line


def test_relu_wrong_value_names_the_worst_element():
    report = check_relu(relu_identity)
    assert "expected 0, got -" in report.message


def test_relu_a_plain_function_is_named_as_not_a_kernel():
    report = check_relu(relu_not_a_kernel)
    assert report.status == "error" and "@cuda.jit" in report.message


def test_relu_cases_have_both_signs_and_spare_threads():
    n_values = [n for n, _ in lab1.RELU_LAUNCHES]
    assert any(n % tpb for n, tpb in lab1.RELU_LAUNCHES)  # a partial last block
    assert any(n % tpb == 0 for n, tpb in lab1.RELU_LAUNCHES)  # an exact multiple
    assert any(n < tpb for n, tpb in lab1.RELU_LAUNCHES)  # one partial block
    assert min(n_values) >= 2  # room for a positive and a negative value


# ------------------------------------------------------------------------ planted: SAXPY


@cuda.jit
def saxpy_zeros(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = 0.0


@cuda.jit
def saxpy_returns_x(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


@cuda.jit
def saxpy_forgets_a(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + y[i]


@cuda.jit
def saxpy_forgets_y(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i]


@cuda.jit
def saxpy_no_bounds_check(a, x, y, out):
    i = cuda.grid(1)
    out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_misses_last(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size - 1:
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_swapped(a, x, y, out):  # a * y + x
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * y[i] + x[i]


@cuda.jit
def saxpy_a_times_the_sum(a, x, y, out):  # a * (x + y)
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * (x[i] + y[i])


SAXPY_WRONG = {
    "zeros": (saxpy_zeros, "max error"),
    "returns x": (saxpy_returns_x, "max error"),
    "forgets a": (saxpy_forgets_a, "max error"),
    "forgets y": (saxpy_forgets_y, "max error"),
    "no bounds check": (saxpy_no_bounds_check, "past the end"),
    "misses the last element": (saxpy_misses_last, "NaN"),
    "x and y swapped (a * y + x)": (saxpy_swapped, "max error"),
    "a * (x + y)": (saxpy_a_times_the_sum, "max error"),
}


@pytest.mark.slow
def test_saxpy_passes_the_solution():
    report = check_saxpy(saxpy_kernel)
    assert report.passed and report.cases_run == len(lab1.RELU_LAUNCHES)


def test_saxpy_stub_is_not_implemented_yet():
    assert check_saxpy(saxpy_stub).status == "not implemented"


@pytest.mark.parametrize("planted", sorted(SAXPY_WRONG))
def test_saxpy_fails_planted_wrong_kernels(planted):
    kernel, text = SAXPY_WRONG[planted]
    report = check_saxpy(kernel)
    assert not report and report.status == "failed", report
    assert text in report.message and "a = " in report.message


# --------------------------------------------------------------- planted: launch_config


LAUNCH_WRONG = {
    "zeros": (lambda n, t: (0, 0), "expected the requested"),
    "zero blocks": (lambda n, t: (0, t), "never be touched"),
    "the input": (lambda n, t: (n, t), "nothing to do"),
    "rounds down": (lambda n, t: (n // t, t), "never be touched"),
    "always one block more": (lambda n, t: (n // t + 1, t), "nothing to do"),
    "one block short on multiples": (lambda n, t: ((n - 1) // t, t), "never be touched"),
    "a float": (lambda n, t: (n / t, t), "float"),
    "swapped": (lambda n, t: (t, (n + t - 1) // t), "expected the requested"),
    "not a pair": (lambda n, t: (n + t - 1) // t, "expected a pair"),
    "threads shrunk to n for small n": (lambda n, t: ((n + t - 1) // t, min(n, t)),
                                        "expected the requested"),
    "rounded to the nearest": (lambda n, t: (max(round(n / t), 1), t), "never be touched"),
    "(n + t) // t: a block too many on multiples": (lambda n, t: ((n + t) // t, t),
                                                    "nothing to do"),
}


def test_launch_config_passes_the_solution_and_math_ceil():
    assert check_launch_config(launch_config).passed
    assert check_launch_config(lambda n, t: (math.ceil(n / t), t)).passed
    assert check_launch_config(lambda n, t: (np.int64(-(-n // t)), np.int32(t))).passed


def test_launch_config_stub_is_not_implemented_yet():
    assert check_launch_config(launch_config_stub).status == "not implemented"


@pytest.mark.parametrize("planted", sorted(LAUNCH_WRONG))
def test_launch_config_fails_planted_wrong_answers(planted):
    fn, text = LAUNCH_WRONG[planted]
    report = check_launch_config(fn)
    assert not report and report.status == "failed", report
    assert text in report.message and "threads_per_block = " in report.message


def test_launch_config_rounding_down_names_the_untouched_elements():
    report = check_launch_config(lambda n, t: (n // t, t))
    assert "n = 1,000, threads_per_block = 256" in report.message
    assert "elements 768 to 999 would never be touched" in report.message


def test_launch_config_an_exception_is_reported_readably():
    report = check_launch_config(lambda n, t: n // 0)
    assert report.status == "error" and "ZeroDivisionError" in report.message


# ---------------------------------------------------------------- planted: grid-stride


@cuda.jit
def grid_stride_zeros(x, out):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = 0.0


@cuda.jit
def grid_stride_identity(x, out):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = x[i]


@cuda.jit
def grid_stride_misses_last(x, out):
    for i in range(cuda.grid(1), x.size - 1, cuda.gridsize(1)):
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def grid_stride_full_strides_only(x, out):  # right only when n is a multiple of the grid
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for step in range(x.size // stride):
        i = start + step * stride
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def grid_stride_forgets_block(x, out):  # start from threadIdx.x: other blocks redo block 0
    for i in range(cuda.threadIdx.x, x.size, cuda.gridsize(1)):
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def grid_stride_one_past_end(x, out):  # range(..., x.size + 1, ...): thread n writes out[n]
    for i in range(cuda.grid(1), x.size + 1, cuda.gridsize(1)):
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def grid_stride_from_block_index(x, out):  # start = blockIdx.x: the thread index forgotten
    for i in range(cuda.blockIdx.x, x.size, cuda.gridsize(1)):
        out[i] = x[i] if x[i] > 0 else 0.0


GRID_STRIDE_WRONG = {
    "zeros": (grid_stride_zeros, "max error"),
    "identity": (grid_stride_identity, "max error"),
    "no stride loop": (relu_kernel, "NaN"),
    "misses the last element": (grid_stride_misses_last, "NaN"),
    "full strides only": (grid_stride_full_strides_only, "NaN"),
    "forgets blockIdx": (grid_stride_forgets_block, "NaN"),
    "forgets threadIdx": (grid_stride_from_block_index, "NaN"),
    "one past the end": (grid_stride_one_past_end, "past the end"),
}


def test_grid_stride_passes_the_solution():
    report = check_relu_grid_stride(relu_grid_stride_kernel)
    assert report.passed and report.cases_run == len(lab1.GRID_STRIDE_LAUNCHES)


def test_grid_stride_stub_is_not_implemented_yet():
    assert check_relu_grid_stride(grid_stride_stub).status == "not implemented"


@pytest.mark.parametrize("planted", sorted(GRID_STRIDE_WRONG))
def test_grid_stride_fails_planted_wrong_kernels(planted):
    kernel, text = GRID_STRIDE_WRONG[planted]
    report = check_relu_grid_stride(kernel)
    assert not report and report.status == "failed", report
    assert text in report.message


def test_grid_stride_without_the_loop_fails_where_threads_are_fewer_than_elements():
    report = check_relu_grid_stride(relu_kernel)
    assert "fewer than the elements" in report.message
    assert "cuda.gridsize(1)" in report.message  # the hint


def test_reports_are_deterministic():
    first, second = check_relu(relu_misses_last), check_relu(relu_misses_last)
    assert first.message == second.message


# --------------------------------------------------- what the simulator passes but a GPU would not


@cuda.jit
def saxpy_float64_accumulator(a, x, y, out):
    i = cuda.grid(1)
    if i < x.size:
        acc = 0.0          # a float64 in Numba: right values, float64 arithmetic on a GPU
        acc += a * x[i]
        acc += y[i]
        out[i] = acc


@cuda.jit
def relu_max_with_an_int(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = max(x[i], 0)  # float32 with an int: computed as float64


@pytest.mark.each_python
def test_saxpy_with_a_float64_accumulator_fails_naming_the_fix():
    report = lab1.check_saxpy(saxpy_float64_accumulator)
    assert not report.passed and report.status == "failed"
    assert "float64" in report.message and "acc = float32(0.0)" in report.message
    assert "acc += a * x[i]" in report.message  # the line the FP64 instructions come from


@cuda.jit
def relu_max_with_a_float_literal(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = max(x[i], 0.0)  # float32 with a float64 literal: computed as float64


@cuda.jit
def relu_max_with_a_float32_zero(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = max(x[i], float32(0))


@pytest.mark.each_python
def test_relu_computing_in_float64_fails_with_the_line():
    report = lab1.check_relu(relu_max_with_an_int)
    assert not report.passed
    assert "max(x[i], 0)" in report.message and "float32(0)" in report.message
    assert "from numba import float32" in report.message   # the fix names its import


@pytest.mark.each_python
@pytest.mark.slow
def test_relu_with_max_passes_only_with_a_float32_zero():
    """What lab 1's TODO 1 says: max(x[i], 0.0) fails the check, max(x[i], float32(0))
    passes."""
    report = lab1.check_relu(relu_max_with_a_float_literal)
    assert not report.passed and "max(x[i], 0.0)" in report.message
    assert lab1.check_relu(relu_max_with_a_float32_zero).passed


@pytest.mark.each_python
def test_solutions_still_pass_with_the_compiler_check():
    assert lab1.check_saxpy(saxpy_kernel).passed

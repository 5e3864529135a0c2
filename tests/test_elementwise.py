"""helpers.elementwise: ReLU, SAXPY and thread-map kernels against NumPy, launch arithmetic.

Without a GPU the kernels run in the Numba CUDA simulator (a few thousand threads a second),
so every launch here is small. The host wrappers fill outputs with NaN before the launch, so an
element no thread wrote shows up as NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numba import cuda

from helpers import elementwise as ew
from conftest import simulator_only

DTYPES = [np.float32, np.float64]

#: (n, threads per block): n = 1, just below and above a warp, and non-multiples of the block.
SHAPES = [(1, 32), (31, 32), (33, 32), (257, 64), (500, 128), (1000, 256)]


def _random_n(seed: int, count: int, hi: int = 400) -> list[int]:
    return [int(n) for n in np.random.default_rng(seed).integers(2, hi, size=count)]


def _data(rng, n, dtype, scale=3.0):
    return (scale * rng.standard_normal(n)).astype(dtype)


# ----------------------------------------------------------------------------------- ReLU


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, tpb", SHAPES)
def test_relu_matches_numpy(rng, n, tpb, dtype):
    x = _data(rng, n, dtype)
    if n > 1:
        x[0] = -abs(x[0]) - 1  # at least one negative and one positive element
        x[-1] = abs(x[-1]) + 1
    out = ew.relu(x, threads_per_block=tpb)
    assert out.dtype == dtype and out.shape == (n,)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out, np.maximum(x, 0))


@pytest.mark.parametrize("n", _random_n(1, 3))
def test_relu_random_sizes(rng, n):
    x = _data(rng, n, np.float32)
    out = ew.relu(x, threads_per_block=64)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_relu_does_not_modify_input(rng):
    x = _data(rng, 50, np.float32)
    before = x.copy()
    ew.relu(x, 32)
    np.testing.assert_array_equal(x, before)


def test_relu_accepts_lists():
    out = ew.relu([-2.0, 0.0, 3.5, -0.5])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [0.0, 0.0, 3.5, 0.0])


def test_non_contiguous_1d_views_are_accepted(rng):
    # x[::2] and x[::-1] are 1-D float arrays like any other; the result must not depend on
    # how the input is laid out in memory
    base = _data(rng, 80, np.float32)
    other = _data(rng, 80, np.float32)
    for x, y in ((base[::2], other[1::2]), (base[::-1], other[::-1])):
        np.testing.assert_array_equal(ew.relu(x, 32), np.maximum(x, 0))
        np.testing.assert_allclose(ew.saxpy(1.5, x, y, 32), np.float32(1.5) * x + y, rtol=1e-6)


@pytest.mark.parametrize("n, blocks, tpb", [
    (1000, 2, 32),   # 64 threads, each handles ~16 elements
    (777, 1, 64),    # one block
    (300, 3, 1),     # one thread per block
    (10, 3, 32),     # more threads than elements
])
def test_grid_stride_relu_covers_every_element(rng, n, blocks, tpb):
    x = _data(rng, n, np.float32)
    out = ew.relu(x, threads_per_block=tpb, grid_stride_blocks=blocks)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_grid_stride_float64(rng):
    x = _data(rng, 129, np.float64)
    out = ew.relu(x, threads_per_block=32, grid_stride_blocks=2)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.maximum(x, 0))


def test_nan_poison_reveals_a_grid_that_is_too_small(rng):
    # the control for the no-NaN checks: one thread per element with too few threads leaves
    # the rest of a NaN-filled output unwritten
    x = _data(rng, 64, np.float32)
    d_out = cuda.to_device(np.full(64, np.nan, np.float32))
    ew.relu_kernel[1, 32](cuda.to_device(x), d_out)
    out = d_out.copy_to_host()
    np.testing.assert_array_equal(out[:32], np.maximum(x[:32], 0))
    assert np.isnan(out[32:]).all()


# ---------------------------------------------------------------------------------- SAXPY


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("n, tpb", [(1, 32), (33, 32), (257, 128), (1000, 256)])
def test_saxpy_matches_numpy(rng, n, tpb, dtype):
    a = float(rng.uniform(-4, 4))
    x, y = _data(rng, n, dtype), _data(rng, n, dtype)
    out = ew.saxpy(a, x, y, threads_per_block=tpb)
    assert out.dtype == dtype and out.shape == (n,)
    assert not np.isnan(out).any()
    expected = dtype(a) * x + y
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("n", _random_n(2, 2))
def test_saxpy_random_sizes(rng, n):
    a = float(rng.standard_normal())
    x, y = _data(rng, n, np.float32), _data(rng, n, np.float32)
    out = ew.saxpy(a, x, y, threads_per_block=128)
    np.testing.assert_allclose(out, np.float32(a) * x + y, rtol=1e-6, atol=1e-6)


def test_saxpy_argument_order_matters(rng):
    x, y = _data(rng, 40, np.float32), _data(rng, 40, np.float32)
    out = ew.saxpy(2.5, x, y, 32)
    assert not np.allclose(out, 2.5 * y + x)
    np.testing.assert_allclose(out, 2.5 * x + y, rtol=1e-6)


# ----------------------------------------------------------------------------- thread map


@pytest.mark.parametrize("n, tpb", [(1, 32), (100, 32), (70, 7), (37, 1), (200, 64)])
def test_thread_map_covers_every_element_exactly_once(n, tpb):
    block_of, thread_of = ew.thread_map(n, tpb)
    assert block_of.shape == thread_of.shape == (n,)
    assert block_of.dtype == thread_of.dtype == np.int32
    i = np.arange(n)
    np.testing.assert_array_equal(block_of, i // tpb)
    np.testing.assert_array_equal(thread_of, i % tpb)
    # each (block, thread) pair owns exactly one element and maps back to it
    flat = block_of.astype(np.int64) * tpb + thread_of
    np.testing.assert_array_equal(np.sort(flat), i)
    assert thread_of.min() >= 0 and thread_of.max() < tpb
    assert block_of.max() == ew.launch_config(n, tpb)[0] - 1


# -------------------------------------------------------------------------- launch_config


@pytest.mark.parametrize("n, tpb, blocks", [
    (1, 256, 1), (256, 256, 1), (257, 256, 2), (1000, 256, 4), (1024, 32, 32), (1025, 32, 33),
    (10**9, 1024, 976563), (5, 1, 5),
])
def test_launch_config_examples(n, tpb, blocks):
    assert ew.launch_config(n, tpb) == (blocks, tpb)


def test_launch_config_default_and_numpy_integers():
    assert ew.launch_config(1000) == (4, 256)
    blocks, tpb = ew.launch_config(np.int64(1000), np.int32(64))
    assert (blocks, tpb) == (16, 64)
    assert type(blocks) is int and type(tpb) is int


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**12), tpb=st.integers(1, 1024))
def test_launch_config_properties(n, tpb):
    assume(-(-n // tpb) <= 2**31 - 1)  # beyond that the grid is refused (test below)
    blocks, t = ew.launch_config(n, tpb)
    assert t == tpb
    assert blocks >= 1
    assert blocks * tpb >= n           # every element has a thread
    assert (blocks - 1) * tpb < n      # and no block is entirely idle


@pytest.mark.parametrize("n, tpb", [
    (0, 32), (-5, 32), (2.5, 32), ("10", 32), (10, 0), (10, 1025), (10, -32), (10, 32.0),
])
def test_launch_config_rejects(n, tpb):
    with pytest.raises(ValueError):
        ew.launch_config(n, tpb)


# ------------------------------------------------------------------------------ bad input


def test_rejects_2d(rng):
    with pytest.raises(ValueError, match="1-D"):
        ew.relu(_data(rng, 12, np.float32).reshape(3, 4))
    x = _data(rng, 6, np.float32)
    with pytest.raises(ValueError, match="1-D"):
        ew.saxpy(1.0, x.reshape(2, 3), x.reshape(2, 3))


def test_rejects_scalar():
    with pytest.raises(ValueError, match="1-D"):
        ew.relu(np.float32(3.0))


def test_rejects_empty():
    with pytest.raises(ValueError, match="at least 1 element"):
        ew.relu(np.empty(0, np.float32))
    with pytest.raises(ValueError, match="at least 1 element"):
        ew.saxpy(1.0, np.empty(0, np.float32), np.empty(0, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.complex64, bool])
def test_rejects_other_dtypes(rng, dtype):
    x = (10 * rng.standard_normal(8)).astype(dtype)
    with pytest.raises(ValueError, match="float32 or float64"):
        ew.relu(x)
    with pytest.raises(ValueError, match="float32 or float64"):
        ew.saxpy(2.0, x, x)


def test_saxpy_rejects_mismatched_lengths_and_dtypes(rng):
    x = _data(rng, 10, np.float32)
    with pytest.raises(ValueError, match="must match"):
        ew.saxpy(2.0, x, _data(rng, 11, np.float32))
    with pytest.raises(ValueError, match="must match"):
        ew.saxpy(2.0, x, x.astype(np.float64))


@pytest.mark.parametrize("a", [float("nan"), float("inf"), -float("inf")])
def test_saxpy_rejects_non_finite_a(rng, a):
    x = _data(rng, 4, np.float32)
    with pytest.raises(ValueError, match="finite"):
        ew.saxpy(a, x, x)


@pytest.mark.parametrize("tpb", [0, 1025, -1])
def test_rejects_bad_threads_per_block(rng, tpb):
    x = _data(rng, 8, np.float32)
    with pytest.raises(ValueError, match="threads_per_block"):
        ew.relu(x, threads_per_block=tpb)
    with pytest.raises(ValueError, match="threads_per_block"):
        ew.relu(x, threads_per_block=tpb, grid_stride_blocks=1)
    with pytest.raises(ValueError, match="threads_per_block"):
        ew.saxpy(1.0, x, x, threads_per_block=tpb)
    with pytest.raises(ValueError, match="threads_per_block"):
        ew.thread_map(8, tpb)


@pytest.mark.parametrize("blocks", [0, -1])
def test_rejects_bad_grid_stride_blocks(rng, blocks):
    with pytest.raises(ValueError, match="grid_stride_blocks"):
        ew.relu(_data(rng, 8, np.float32), grid_stride_blocks=blocks)


@simulator_only
def test_simulator_refuses_large_sizes(rng):
    n = ew.SIMULATOR_MAX_ELEMENTS + 1
    x = _data(rng, n, np.float32)
    with pytest.raises(ValueError, match="simulator"):
        ew.relu(x)
    with pytest.raises(ValueError, match="simulator"):
        ew.saxpy(1.0, x, x)
    with pytest.raises(ValueError, match="simulator"):
        ew.relu(x, grid_stride_blocks=1)
    with pytest.raises(ValueError, match="simulator"):
        ew.thread_map(n, 256)


def test_launch_config_refuses_more_blocks_than_a_grid_holds():
    assert ew.launch_config(2**31 - 1, 1) == (2**31 - 1, 1)
    with pytest.raises(ValueError, match="grid x"):
        ew.launch_config(2**31, 1)

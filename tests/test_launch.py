"""helpers.device.arrays.launch: the one launch-shape helper (grid = ceil(elements / threads))."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.device.arrays import MAX_GRID, grid_for, grid_refusal, launch


@given(st.integers(1, 10**7), st.integers(1, 1024))
def test_every_element_gets_a_thread_and_no_block_is_idle(n, threads):
    blocks = grid_for(n, threads)
    assert blocks == math.ceil(n / threads)
    assert blocks * threads >= n > (blocks - 1) * threads


def test_shapes_follow_the_arguments():
    assert grid_for(1000, 256) == 4
    assert grid_for((33, 65), (32, 32)) == (2, 3)
    assert launch((33, 65), (32, 32), "k") == ((2, 3), (32, 32))
    assert launch(1000, 256, "k") == (4, 256)


def test_bad_shapes_are_refused_with_the_name():
    with pytest.raises(ValueError, match="elements must be integers >= 1"):
        grid_for(0, 32)
    with pytest.raises(ValueError, match="threads must be integers >= 1"):
        grid_for(10, (32, 0))
    with pytest.raises(ValueError, match="differ in length"):
        grid_for((10, 10), 32)
    with pytest.raises(ValueError, match="at most 1024, got .* for gemm"):
        launch((64, 64), (64, 32), "gemm")


def test_a_grid_beyond_the_cuda_limits_is_refused_naming_the_kernel_and_axis():
    assert grid_refusal((MAX_GRID[0], MAX_GRID[1]), "k") is None
    assert "along grid y" in grid_refusal((1, MAX_GRID[1] + 1), "k")
    with pytest.raises(ValueError, match=r"gemm would launch 65,536 blocks along grid y"):
        launch((32, 65_536 * 32), (32, 32), "gemm")
    with pytest.raises(ValueError, match="along grid x"):
        launch(2**31 * 256, 256, "relu")

"""helpers.gemm: the naive and tiled GEMM kernels against a float64 matmul, on sizes that are
not multiples of the tile (the numba#7324 trap)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda, float32

from helpers import backend, gemm
from helpers.conv._arrays import kernel_array, poisoned, to_torch, cuda_device

sizes = st.sampled_from([1, 2, 15, 16, 17, 31, 33, 40])


def _rel(c, a, b) -> float:
    expected = a.astype(np.float64) @ b.astype(np.float64)
    c = np.asarray(c, np.float64)
    assert c.shape == expected.shape
    assert np.isfinite(c).all(), "an element of C was never written"
    return float(np.abs(c - expected).max() / max(np.abs(expected).max(), 1e-6))


@pytest.mark.parametrize("kernel", ["naive", "tiled"])
@given(m=sizes, n=sizes, k=sizes, seed=st.integers(0, 2**31 - 1))
@settings(max_examples=12, deadline=None)
def test_kernels_match_float64_matmul(kernel, m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    assert _rel(gemm.gemm(a, b, kernel), a, b) < 1e-4


def test_numpy_in_numpy_out_tensor_in_tensor_out():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((17, 5)).astype(np.float32)
    b = rng.standard_normal((5, 9)).astype(np.float32)
    c_np = gemm.gemm(a, b)
    c_t = gemm.gemm(torch.from_numpy(a), torch.from_numpy(b))
    assert isinstance(c_np, np.ndarray) and isinstance(c_t, torch.Tensor)
    np.testing.assert_allclose(c_t.numpy(), c_np, rtol=1e-6)
    assert gemm.gemm_flops(17, 9, 5) == 2 * 17 * 9 * 5


@pytest.mark.parametrize("a_shape,b_shape,kernel,match", [
    ((3,), (3, 2), "tiled", "a must be 2-D"),
    ((2, 3), (4, 2), "tiled", "inner dimensions differ"),
    ((0, 3), (3, 2), "tiled", "must not be empty"),
    ((2, 3), (3, 2), "cublas", "kernel must be"),
])
def test_bad_input(a_shape, b_shape, kernel, match):
    with pytest.raises(ValueError, match=match):
        gemm.gemm(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32), kernel)


def test_integer_input_is_refused():
    with pytest.raises(ValueError, match="floating point"):
        gemm.gemm(np.ones((2, 2), np.int64), np.ones((2, 2), np.float32))


@pytest.mark.skipif(backend.MODE != "simulator", reason="simulator budget")
def test_too_large_for_the_simulator():
    with pytest.raises(ValueError, match="simulator"):
        gemm.gemm(np.ones((200, 200), np.float32), np.ones((200, 200), np.float32))


TILE = gemm.TILE


@cuda.jit
def _tiled_without_tail(a, b, c):
    """A planted bug: walks only the K // TILE whole tiles, dropping the partial last one."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j, i = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
    acc = float32(0.0)
    for t in range(a.shape[1] // TILE):
        a_tile[ty, tx] = a[i, t * TILE + tx] if i < a.shape[0] else 0.0
        b_tile[ty, tx] = b[t * TILE + ty, j] if j < b.shape[1] else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


def test_the_check_catches_a_kernel_right_only_for_tile_multiples():
    rng = np.random.default_rng(5)
    for k, should_pass in ((32, True), (17, False)):
        a = rng.standard_normal((17, k)).astype(np.float32)
        b = rng.standard_normal((k, 17)).astype(np.float32)
        dev = cuda_device()
        c = poisoned((17, 17), dev)
        _tiled_without_tail[(2, 2), (TILE, TILE)](kernel_array(to_torch(a, dev)),
                                                 kernel_array(to_torch(b, dev)), kernel_array(c))
        assert (_rel(c.cpu().numpy(), a, b) < 1e-4) == should_pass
        assert _rel(gemm.gemm(a, b, "tiled"), a, b) < 1e-4

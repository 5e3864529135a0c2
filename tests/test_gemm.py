"""helpers.conv.gemm: the naive and tiled GEMM kernels (rungs 2 and 3) against a float64 matmul.

The other rungs of the ladder are tested in tests/test_gemm_ladder.py.

Shapes are drawn from 1..40 so that M, N and K are often not multiples of the tile (16): the
last blocks then have threads outside C and the last tile along K is partial, which is where a
tiled kernel goes wrong (numba issue #7324). Outputs start as NaN, so an element no thread
wrote fails the comparison. Planted-bug tests at the end run deliberately broken kernels
through the same comparison and show that it fails them.

Without a GPU the kernels run in the Numba CUDA simulator, where a tiled launch costs about
0.1-0.2 s per block per tile of K, so every launch here is small.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from numba import cuda, float32

from helpers.device import backend
from helpers.conv import gemm as g
from helpers.device.arrays import cuda_device, kernel_array, poisoned, to_torch
from conftest import simulator_only

TILE = g.TILE

#: Largest |C - C_float64| allowed, relative to max |C_float64|.
RTOL = 1e-4

#: Simulator budget for one hypothesis example: blocks of C times tiles along K.
MAX_BLOCK_TILES = 9


def _operands(seed: int, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal float32 A (M, K) and B (K, N): no zeros, both signs."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def _check(c, a: np.ndarray, b: np.ndarray) -> None:
    """The comparison every test uses: C has A @ B's shape, every element was written (no NaN
    poison left), and max |C - A @ B| <= RTOL * max |A @ B| with A @ B computed in float64."""
    expected = a.astype(np.float64) @ b.astype(np.float64)
    c = np.asarray(c, dtype=np.float64)
    assert c.shape == expected.shape
    assert not np.isnan(c).any(), f"{int(np.isnan(c).sum())} elements of C were never written"
    err = np.abs(c - expected).max() / np.abs(expected).max()
    assert err <= RTOL, f"relative error {err:.2e} > {RTOL:g}"


def _block_tiles(m: int, n: int, k: int) -> int:
    return math.ceil(m / TILE) * math.ceil(n / TILE) * math.ceil(k / TILE)


def _launch(kernel, a: np.ndarray, b: np.ndarray, grid=None) -> np.ndarray:
    """Launch a kernel the way gemm() does (or with another grid), on NaN-poisoned C."""
    dev = cuda_device()
    ta, tb = to_torch(a, dev), to_torch(b, dev)
    c = poisoned((a.shape[0], b.shape[1]), dev)
    default_grid, block = g.launch_config(a.shape[0], b.shape[1])
    kernel[grid or default_grid, block](kernel_array(ta), kernel_array(tb), kernel_array(c))
    return c.cpu().numpy()


# ------------------------------------------------------------------------------ correctness

dims = st.integers(1, 40)


@pytest.mark.parametrize("kernel", ["naive", "tiled"])
@settings(max_examples=8, deadline=None)
@given(m=dims, n=dims, k=dims, seed=st.integers(0, 2**32 - 1))
@example(m=1, n=1, k=1, seed=0)       # a single element: 255 of the block's threads idle
@example(m=16, n=16, k=16, seed=1)    # exactly one tile
@example(m=32, n=16, k=32, seed=2)    # exact multiples, two tiles along M and along K
@example(m=17, n=17, k=17, seed=3)    # one past a tile in every dimension
@example(m=3, n=40, k=33, seed=4)     # wide C, three tiles along K, the last of one column
@pytest.mark.slow
def test_kernel_matches_float64_matmul(kernel, m, n, k, seed):
    if backend.MODE == "simulator":
        assume(_block_tiles(m, n, k) <= MAX_BLOCK_TILES)
    a, b = _operands(seed, m, n, k)
    c = g.gemm(a, b, kernel)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    _check(c, a, b)


def test_numpy_in_numpy_out():
    a, b = _operands(10, 17, 9, 5)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    before = a64.copy(), b64.copy()
    c = g.gemm(a64, b64)  # float64 in: computed and returned in float32
    assert type(c) is np.ndarray and c.dtype == np.float32 and c.shape == (17, 9)
    _check(c, a, b)
    np.testing.assert_array_equal(a64, before[0])  # the inputs are left alone
    np.testing.assert_array_equal(b64, before[1])


def test_torch_in_torch_out():
    a, b = _operands(11, 5, 17, 18)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    c = g.gemm(ta, tb, "naive")
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32
    assert c.device == ta.device and tuple(c.shape) == (5, 17)
    _check(c.cpu().numpy(), a, b)
    # non-contiguous views (transposes) are accepted: B^T A^T = (A B)^T
    ct = g.gemm(tb.t(), ta.t(), "tiled")
    _check(ct.cpu().numpy(), b.T, a.T)


def test_launch_config_x_along_columns_y_along_rows():
    assert g.launch_config(17, 40) == ((3, 2), (TILE, TILE))
    assert g.launch_config(1, 1) == ((1, 1), (TILE, TILE))
    assert g.launch_config(32, 16) == ((1, 2), (TILE, TILE))
    with pytest.raises(ValueError, match="m must be"):
        g.launch_config(0, 3)


def test_gemm_flops():
    assert g.gemm_flops(17, 9, 5) == 2 * 17 * 9 * 5
    assert g.gemm_flops(1, 1, 1) == 2
    assert isinstance(g.gemm_flops(np.int64(4), 4, 4), int)


# ------------------------------------------------------------------------------- bad input

F32 = np.float32


@pytest.mark.parametrize("a, b, kernel, match", [
    (np.ones(3, F32), np.ones((3, 2), F32), "tiled", r"a must be 2-D, got shape \(3,\)"),
    (np.ones((2, 3), F32), np.ones((3, 2, 1), F32), "tiled", "b must be 2-D"),
    (np.ones((2, 3), F32), np.ones((4, 2), F32), "naive", r"\(2, 3\) and b is \(4, 2\)"),
    (np.ones((0, 3), F32), np.ones((3, 2), F32), "tiled", "a must not be empty"),
    (np.ones((2, 3), F32), np.ones((3, 0), F32), "tiled", "b must not be empty"),
    (np.ones((2, 2), np.int64), np.ones((2, 2), F32), "tiled", "a must be floating point"),
    (torch.ones(2, 2), torch.ones(2, 2, dtype=torch.int32), "tiled", "b must be floating point"),
    (np.ones((2, 3), F32), np.ones((3, 2), F32), "cublas", "kernel must be one of"),
])
def test_bad_input_raises_value_error(a, b, kernel, match):
    with pytest.raises(ValueError, match=match):
        g.gemm(a, b, kernel)


@pytest.mark.parametrize("a, b", [
    ([[1.0, 2.0]], np.ones((2, 1), F32)),                 # a list
    (np.ones((1, 2), F32), torch.ones(2, 1)),              # one of each
])
def test_wrong_kind_raises_type_error(a, b):
    with pytest.raises(TypeError):
        g.gemm(a, b)


@simulator_only
@pytest.mark.parametrize("m, n", [
    (200, 200),
    (16, 1249),  # 79 blocks = 20,224 threads
    (141, 141),  # 19,881 elements, but 9 x 9 blocks = 20,736 threads: rounding counts
])
def test_too_large_for_the_simulator(m, n):
    with pytest.raises(ValueError, match=r"simulator about [\d,]+ s"):
        g.gemm(np.ones((m, 4), F32), np.ones((4, n), F32))


# ---------------------------------------------------------------------- planted bugs: the
# same _check must fail these kernels, or the tests above could not catch the real mistakes.


@cuda.jit
def _tiled_skips_tail_kernel(a, b, c):
    """Planted bug: walks K // TILE tiles, so the partial last tile of K is never added."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j, i = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
    acc = float32(0.0)
    for t in range(a.shape[1] // TILE):  # BUG: should be ceil(K / TILE)
        a_tile[ty, tx] = a[i, t * TILE + tx] if i < a.shape[0] else 0.0
        b_tile[ty, tx] = b[t * TILE + ty, j] if j < b.shape[1] else 0.0
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


@cuda.jit
def _tiled_no_zero_fill_kernel(a, b, c):
    """Planted bug (the #7324 pattern without the deadlock): out-of-range threads skip their
    loads instead of writing 0, so the partial last tile of K still holds the previous tile's
    values, which the in-range threads multiply and add. Every thread still reaches both
    barriers, so the kernel terminates (in the simulator too)."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j, i = cuda.blockIdx.x * TILE + tx, cuda.blockIdx.y * TILE + ty
    k_dim = a.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        if i < a.shape[0] and t * TILE + tx < k_dim:  # BUG: no else branch writing 0.0
            a_tile[ty, tx] = a[i, t * TILE + tx]
        if t * TILE + ty < k_dim and j < b.shape[1]:
            b_tile[ty, tx] = b[t * TILE + ty, j]
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


@pytest.mark.parametrize("bad_kernel", [_tiled_skips_tail_kernel, _tiled_no_zero_fill_kernel],
                         ids=["skips-tail-tile", "no-zero-fill"])
@pytest.mark.slow
def test_check_catches_a_kernel_right_only_for_tile_multiples(bad_kernel):
    # K = 16: no partial tile, the broken kernel is right, so multiples alone would miss it ...
    a, b = _operands(20, 17, 17, 16)
    _check(_launch(bad_kernel, a, b), a, b)
    # ... K = 17: the partial last tile exposes it (M = N = 17: partial blocks as well).
    a, b = _operands(21, 17, 17, 17)
    with pytest.raises(AssertionError, match="relative error"):
        _check(_launch(bad_kernel, a, b), a, b)


def test_poison_catches_a_grid_that_rounds_down():
    """Planted host bug: a grid of floor(N / TILE) x floor(M / TILE) blocks leaves the last row
    and column of a 17 x 17 C unwritten; they stay NaN and the check fails."""
    a, b = _operands(22, 17, 17, 3)
    c = _launch(g.gemm_naive_kernel, a, b, grid=(17 // TILE, 17 // TILE))
    assert np.isnan(c).sum() == 17 + 17 - 1
    with pytest.raises(AssertionError, match="never written"):
        _check(c, a, b)


def test_launch_config_refuses_a_grid_beyond_the_cuda_limit():
    assert g.launch_config(65_535 * g.TILE, 1)[0] == (1, 65_535)
    with pytest.raises(ValueError, match="grid y"):
        g.launch_config(65_535 * g.TILE + 1, 1)

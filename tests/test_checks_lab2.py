"""helpers.checks.lab2: every checker fails the stub and planted wrong GEMM kernels, passes the
solution, and run_gemm refuses bad input clearly.

Planted for the naive kernel: all zeros, A copied into C, no bounds check, a bounds check off
by one or against the wrong sizes, a term of the sum dropped, the sum over N instead of K, B
read transposed, C accumulated without being zeroed, x along the rows.
Planted for the tiled kernel: all zeros, A copied into C, the Numba documentation's first
``fast_matmul`` (early return and unguarded loads: right only for tile multiples, numba#7324), the
same with guarded loads but the early return kept, the last partial K tile dropped, partial tiles
not zero-filled, A's tile stored transposed, k taken from the other thread index, and a
correct kernel without shared memory. The solutions are written here
exactly as in labs/solutions/lab2_tiled_gemm.ipynb.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32

from helpers.device import backend
from helpers.checks import lab2
from helpers.checks.lab2 import check_gemm_naive, check_gemm_tiled, run_gemm

TILE = 8

# ------------------------------------------------------------------------- the lab's solutions


@cuda.jit
def gemm_naive_kernel(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def gemm_tiled_kernel(a, b, c):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]

    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        if i < m and ka < k_dim:
            a_tile[ty, tx] = a[i, ka]
        else:
            a_tile[ty, tx] = float32(0.0)
        if kb < k_dim and j < n:
            b_tile[ty, tx] = b[kb, j]
        else:
            b_tile[ty, tx] = float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < m and j < n:
        c[i, j] = acc


# ------------------------------------------------------------------------------------ stubs


@cuda.jit
def naive_stub(a, b, c):
    raise NotImplementedError("TODO 1: write the naive GEMM kernel")


@cuda.jit
def tiled_stub(a, b, c):
    raise NotImplementedError("TODO 2: write the tiled GEMM kernel")


# ------------------------------------------------------------------ planted: both kernels


@cuda.jit
def gemm_zeros(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = 0.0


@cuda.jit
def gemm_returns_a(a, b, c):  # C = A where the shapes overlap
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1] and j < a.shape[1]:
        c[i, j] = a[i, j]


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


# ----------------------------------------------------------------------- planted: tiled


@cuda.jit
def tiled_docs_fast_matmul(a, b, c):
    """Numba's documented fast_matmul before numba#7324 was fixed, in this lab's layout:
    threads outside C return before the loop, and loads are not bounds-checked."""
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    j, i = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    if i >= c.shape[0] or j >= c.shape[1]:
        return
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        sa[ty, tx] = a[i, t * TILE + tx]
        sb[ty, tx] = b[t * TILE + ty, j]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    c[i, j] = acc


@cuda.jit
def tiled_early_exit(a, b, c):  # guarded, zero-filled loads, but the early return stays
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    j, i = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    if i >= c.shape[0] or j >= c.shape[1]:
        return
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        sa[ty, tx] = a[i, ka] if ka < a.shape[1] else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < b.shape[0] else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    c[i, j] = acc


@cuda.jit
def tiled_drops_partial_k_tile(a, b, c):  # range(K // TILE): the last partial tile is lost
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range(a.shape[1] // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        sa[ty, tx] = a[i, ka] if i < a.shape[0] else float32(0.0)
        sb[ty, tx] = b[kb, j] if j < b.shape[1] else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


@cuda.jit
def tiled_no_zero_fill(a, b, c):  # guarded loads but no else: stale values stay in the tiles
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        if i < a.shape[0] and ka < a.shape[1]:
            sa[ty, tx] = a[i, ka]
        if kb < b.shape[0] and j < b.shape[1]:
            sb[ty, tx] = b[kb, j]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


@cuda.jit
def tiled_a_tile_transposed(a, b, c):  # A's tile stored [tx, ty], read [ty, k]
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        sa[tx, ty] = a[i, ka] if i < a.shape[0] and ka < a.shape[1] else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < b.shape[0] and j < b.shape[1] else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


@cuda.jit
def tiled_k_from_the_wrong_thread(a, b, c):  # A's column from ty and B's row from tx
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range((a.shape[1] + TILE - 1) // TILE):
        ka = t * TILE + ty
        kb = t * TILE + tx
        sa[ty, tx] = a[i, ka] if i < a.shape[0] and ka < a.shape[1] else float32(0.0)
        sb[ty, tx] = b[kb, j] if kb < b.shape[0] and j < b.shape[1] else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = acc


TILED_WRONG = {
    "zeros": (gemm_zeros, "max error"),
    "returns A": (gemm_returns_a, "max error"),
    "Numba docs' fast_matmul (numba#7324)": (tiled_docs_fast_matmul, ""),
    "early exit, loads guarded": (tiled_early_exit, "max error"),
    "drops the last partial K tile": (tiled_drops_partial_k_tile, "max error"),
    "partial tiles not zero-filled": (tiled_no_zero_fill, "max error"),
    "A's tile stored transposed": (tiled_a_tile_transposed, "max error"),
    "k taken from the other thread index": (tiled_k_from_the_wrong_thread, "max error"),
}


def test_tiled_passes_the_solution():
    report = check_gemm_tiled(gemm_tiled_kernel, TILE)
    assert report.passed and report.cases_run == len(lab2.tiled_shapes(TILE))


def test_tiled_stub_is_not_implemented_yet():
    report = check_gemm_tiled(tiled_stub, TILE)
    assert report.status == "not implemented" and "NOT IMPLEMENTED YET" in str(report)


@pytest.mark.parametrize("planted", sorted(TILED_WRONG))
def test_tiled_fails_planted_wrong_kernels(planted):
    kernel, text = TILED_WRONG[planted]
    report = check_gemm_tiled(kernel, TILE)
    assert not report and report.status == "failed", report
    assert text in report.message and "A (" in report.message and "Hint:" in report.message


@pytest.mark.parametrize("kernel", [tiled_docs_fast_matmul, tiled_early_exit])
def test_tiled_right_only_for_tile_multiples_passes_case_1_and_fails_case_2(kernel):
    assert lab2.tiled_shapes(TILE)[0] == (2 * TILE, 2 * TILE, TILE)
    report = check_gemm_tiled(kernel, TILE)
    assert report.cases_run == 2
    assert "A (11, 17) @ B (17, 13), grid 2 x 2 blocks of 8 x 8 threads" in report.message


def test_tiled_docs_kernel_in_the_simulator_reads_outside_a():
    if backend.MODE != "simulator":
        pytest.skip("the simulator checks every index; a GPU reads the guard data instead")
    report = check_gemm_tiled(tiled_docs_fast_matmul, TILE)
    assert "read or wrote outside a matrix" in report.message
    # the learner's line; which of the two loads is named first varies (threads run concurrently)
    assert ("sa[ty, tx] = a[i, t * TILE + tx]" in report.message
            or "sb[ty, tx] = b[t * TILE + ty, j]" in report.message)


def test_tiled_without_shared_memory_fails_even_when_right():
    report = check_gemm_tiled(gemm_naive_kernel, TILE)
    assert report.status == "failed" and report.cases_run == len(lab2.tiled_shapes(TILE))
    assert "cuda.shared.array and cuda.syncthreads()" in report.message


@pytest.mark.parametrize("tile", [3, 33, 8.0, True])
def test_tiled_refuses_a_bad_tile(tile):
    report = check_gemm_tiled(gemm_tiled_kernel, tile)
    assert report.status == "error" and "tile must be an integer" in report.message


def test_tiled_refuses_a_tile_too_large_for_the_simulator():
    if backend.MODE != "simulator":
        pytest.skip("a GPU takes any tile up to 32")
    report = check_gemm_tiled(gemm_tiled_kernel, 32)
    assert report.status == "error" and "TILE = 8" in report.message


def test_cases_are_not_tile_multiples_and_differ_from_zeros_and_a():
    for m, k, n in lab2.tiled_shapes(TILE)[1:]:
        assert m % TILE or n % TILE
    assert any(k % TILE for _, k, _ in lab2.tiled_shapes(TILE))  # a partial K tile
    assert any(k < TILE for _, k, _ in lab2.tiled_shapes(TILE))  # K smaller than a tile
    assert any(m == 1 for m, _, _ in lab2.tiled_shapes(TILE))  # one row
    for case in lab2._cases(lab2.tiled_shapes(TILE), 22, TILE, "tile"):
        a, _ = case.args
        assert np.abs(case.expected).max() > 0
        if a.shape == case.expected.shape:
            assert not np.allclose(a, case.expected)


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


@cuda.jit
def gemm_tiled_shared_sized_by_the_block(a, b, c):
    a_tile = cuda.shared.array((cuda.blockDim.y, cuda.blockDim.x), float32)  # run-time size
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka, kb = t * TILE + tx, t * TILE + ty
        a_tile[ty, tx] = a[i, ka] if i < m and ka < k_dim else float32(0.0)
        b_tile[ty, tx] = b[kb, j] if kb < k_dim and j < n else float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < m and j < n:
        c[i, j] = acc


@pytest.mark.each_python
def test_naive_with_a_float64_accumulator_fails_naming_the_fix():
    report = check_gemm_naive(gemm_naive_float64_accumulator)
    assert not report.passed and report.status == "failed"
    assert "acc = float32(0.0)" in report.message and "acc += a[i, k] * b[k, j]" in report.message


@pytest.mark.each_python
def test_tiled_with_a_run_time_shared_size_fails_as_not_compiling():
    report = check_gemm_tiled(gemm_tiled_shared_sized_by_the_block, TILE)
    assert not report.passed and report.status == "failed"
    assert "compiler rejects it" in report.message
    assert "cuda.shared.array((cuda.blockDim.y, cuda.blockDim.x), float32)" in report.message
    assert "global constant" in report.message


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

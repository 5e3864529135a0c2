"""helpers.checks.lab2, the tiled GEMM: the checker fails the stub and planted wrong kernels and
passes the solution, on cases that are not tile multiples.

Planted: all zeros, A copied into C, the Numba documentation's first ``fast_matmul`` (early
return and unguarded loads: right only for tile multiples, numba#7324), the same with guarded
loads but the early return kept, the last partial K tile dropped, partial tiles not
zero-filled, A's tile stored transposed, k taken from the other thread index, a correct kernel
without shared memory, and a shared array sized at run time (which the simulator runs and the
compiler rejects). The solutions and stubs are in lab2_kernels.py.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from lab2_kernels import (
    TILE,
    gemm_naive_kernel,
    gemm_returns_a,
    gemm_tiled_kernel,
    gemm_zeros,
    tiled_stub,
)
from numba import cuda, float32

from helpers.device import backend
from helpers.checks import lab2
from helpers.checks.lab2 import check_gemm_tiled

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


@pytest.mark.slow
def test_tiled_passes_the_solution():
    report = check_gemm_tiled(gemm_tiled_kernel, TILE)
    assert report.passed and report.cases_run == len(lab2.tiled_shapes(TILE))


def test_tiled_stub_is_not_implemented_yet():
    report = check_gemm_tiled(tiled_stub, TILE)
    assert report.status == "not implemented" and "NOT IMPLEMENTED YET" in str(report)


@pytest.mark.parametrize("planted", sorted(TILED_WRONG))
@pytest.mark.slow
def test_tiled_fails_planted_wrong_kernels(planted):
    kernel, text = TILED_WRONG[planted]
    report = check_gemm_tiled(kernel, TILE)
    assert not report and report.status == "failed", report
    assert text in report.message and "A (" in report.message and "Hint:" in report.message


@pytest.mark.parametrize("kernel", [tiled_docs_fast_matmul, tiled_early_exit])
@pytest.mark.slow
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


# --------------------------------------------------- what the simulator passes but a GPU would not


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
@pytest.mark.slow
def test_tiled_with_a_run_time_shared_size_fails_as_not_compiling():
    report = check_gemm_tiled(gemm_tiled_shared_sized_by_the_block, TILE)
    assert not report.passed and report.status == "failed"
    assert "compiler rejects it" in report.message
    assert "cuda.shared.array((cuda.blockDim.y, cuda.blockDim.x), float32)" in report.message
    assert "global constant" in report.message

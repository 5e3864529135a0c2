"""helpers.checks.lab6's transpose checker (TODO 2): it fails every planted transpose (the naive
one without shared memory, an unpadded tile, the padding on the wrong axis, no barrier, the
bounds or the block index wrong for the write, one row a thread, a shape computed in the kernel,
a float64 tile, a plain function, a NameError) naming the mistake, and runs and recompiles a
learner's kernel. The solution and the constants are test_checks_lab6's; the access patterns
(coalescing, bank conflicts, a warp barrier for a block's) are test_checks_lab6_patterns'.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32
from test_checks_lab6 import BLOCK_ROWS, PADDED, TILE, transpose_kernel, transpose_stub

from helpers import compiled
from helpers.checks import lab6
from helpers.checks.lab6 import check_transpose_kernel
from helpers.checks.lab6 import transpose as lab6_transpose
from helpers.device import backend


# ----------------------------------------------------------------------- planted: TODO 2

PLAIN = 32  # an unpadded row


@cuda.jit
def tr_naive(src, dst):  # no shared memory: a warp's writes to dst are a column
    x = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    y = cuda.blockIdx.y * TILE + cuda.threadIdx.y
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            dst[x, y + j] = src[y + j, x]


@cuda.jit
def tr_unpadded(src, dst):  # (TILE, TILE): the column reads are a 32-way bank conflict
    tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_padded_wrong_axis(src, dst):  # (PADDED, TILE): 33 rows of 32 words, columns conflict
    tile = cuda.shared.array((PADDED, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_no_syncthreads(src, dst):
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_own_element(src, dst):  # shared memory, but each thread reads back what it wrote
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
            dst[x, y + j] = tile[ty + j, tx]


@cuda.jit
def tr_write_bounds_on_src_axes(src, dst):  # the write guarded by src's (H, W), not dst's
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_block_not_swapped(src, dst):  # the tile is read across, but written to its own block
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_one_row_a_thread(src, dst):  # no loop: a block of 32 x 8 threads copies 8 rows of 32
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    if y < src.shape[0] and x < src.shape[1]:
        tile[ty, tx] = src[y, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    if y < dst.shape[0] and x < dst.shape[1]:
        dst[y, x] = tile[tx, ty]


@cuda.jit
def tr_shape_computed_in_the_kernel(src, dst):  # the simulator runs it; the compiler cannot
    tile = cuda.shared.array((TILE, TILE + 1), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_float64_tile(src, dst):  # np.float64, NumPy's default dtype: every copy converts
    tile = cuda.shared.array((TILE, PADDED), np.float64)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


@cuda.jit
def tr_name_error(src, dst):
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tile[ty, tx] = src[ty, tx] if ty < src.shape[0] and tx < src.shape[1] else float32(0)
    cuda.syncthreads()
    dst[tx, ty] = tile[tx, tyy]  # noqa: F821 - the typo planted


def tr_plain_function(src, dst):
    dst[:] = src.T


TRANSPOSE_WRONG = {
    "naive, no shared memory": (tr_naive, "in all 5 cases, but it uses no shared memory",
                                "it is the naive transpose"),
    "unpadded 32 x 32 tile": (tr_unpadded, "", "32-way bank conflict"),
    "padding on the wrong axis": (tr_padded_wrong_axis, "`tile` (33 x 32)",
                                  "32-way bank conflict"),
    "the write bounded by src's axes": (tr_write_bounds_on_src_axes,
                                        "src (H, W) = (64, 32), not square", ""),
    "block index not swapped for the write": (tr_block_not_swapped,
                                              "src (H, W) = (64, 64), a square", "max error"),
    "one row a thread": (tr_one_row_a_thread, "src (H, W) = (64, 64)", "NaN"),
    "(TILE, TILE + 1) in the kernel": (tr_shape_computed_in_the_kernel, "",
                                       "compiler rejects it"),
    "a float64 tile": (tr_float64_tile, "", "float64"),
    "a tile each thread reads back itself": (tr_own_element, "", "no barrier"),
}


@pytest.mark.parametrize("planted", sorted(TRANSPOSE_WRONG))
@pytest.mark.slow
def test_transpose_fails_each_planted_mistake(planted):
    kernel, case, text = TRANSPOSE_WRONG[planted]
    report = check_transpose_kernel(kernel)
    assert report.status == "failed", report
    assert case in report.message and text in report.message, report.message


@pytest.mark.slow
def test_the_unpadded_tile_is_told_its_conflict_degree_from_todo_1():
    message = check_transpose_kernel(tr_unpadded).message
    assert "its reads of the shared array `tile` (32 x 32)" in message
    assert "words 0, 32, 64, ..., 992" in message and "conflict_degree = 32" in message
    assert "all fall in one bank" in message and "PADDED = TILE + 1" in message


@pytest.mark.slow
def test_the_naive_transpose_is_told_its_writes_are_columns():
    message = check_transpose_kernel(tr_naive).message
    assert "writes to dst are a column" in message and "12.5 %" in message


def test_a_missing_barrier_is_named_whether_or_not_the_values_come_out_right():
    report = check_transpose_kernel(tr_no_syncthreads)
    assert report.status == "failed" and "cuda.syncthreads()" in report.message
    assert "no barrier orders the read after another thread's write" in report.message


@pytest.mark.slow
def test_a_shape_computed_in_the_kernel_gets_the_compilers_hint():
    message = check_transpose_kernel(tr_shape_computed_in_the_kernel).message
    assert "cuda.shared.array((TILE, TILE + 1), float32)" in message
    assert "global constant" in message


def test_transpose_errors_are_reported_readably():
    report = check_transpose_kernel(tr_plain_function)
    assert report.status == "error" and "@cuda.jit" in report.message
    report = check_transpose_kernel(tr_name_error)
    assert report.status == "error" and "NameError" in report.message and "tyy" in report.message


def test_transpose_outside_dst_is_caught():
    if backend.MODE != "simulator":
        pytest.skip("the simulator checks every index; a GPU writes the guard data instead")
    report = check_transpose_kernel(tr_write_bounds_on_src_axes)
    assert "outside a matrix" in report.message or "NaN" in report.message


def test_transpose_shapes_are_small_awkward_and_start_with_whole_tiles():
    shapes = [s for s, _ in lab6_transpose.TRANSPOSE_SHAPES]
    assert shapes[0] == (64, 64)
    assert any(h != w for h, w in shapes)
    assert any(h % 32 and w % 32 for h, w in shapes)
    assert (1, 70) in shapes and (33, 1) in shapes
    assert sum(-(-h // 32) * -(-w // 32) for h, w in shapes) * TILE * BLOCK_ROWS <= 4096


def test_run_transpose_returns_the_transpose_and_refuses_bad_input():
    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    assert np.array_equal(lab6.run_transpose(transpose_kernel, a), a.T)
    with pytest.raises(ValueError, match="2-D"):
        lab6.run_transpose(transpose_kernel, np.ones(5))
    with pytest.raises(ValueError, match="1..96"):
        lab6.run_transpose(transpose_kernel, np.ones((100, 3)))
    with pytest.raises(NotImplementedError):
        lab6.run_transpose(transpose_stub, a)
    with pytest.raises(TypeError, match="cuda.jit"):
        lab6.run_transpose(tr_plain_function, a)


@pytest.mark.slow
def test_compile_for_block_rows_recompiles_the_kernel_for_each_block_height():
    out = lab6.compile_for_block_rows(transpose_kernel, (4, 8), ("sm_75",))
    assert set(out) == {("sm_75", 4), ("sm_75", 8)}
    assert all(r.smem_per_block == 4 * TILE * PADDED and r.barriers >= 1 for r in out.values())
    with pytest.raises(ValueError, match="BLOCK_ROWS"):
        lab6.compile_for_block_rows(tr_one_row_a_thread)
    with pytest.raises(ValueError, match="divide"):
        lab6.compile_for_block_rows(transpose_kernel, (3,))
    assert isinstance(out[("sm_75", 8)], compiled.CompiledKernel)

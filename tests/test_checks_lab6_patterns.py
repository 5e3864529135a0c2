"""helpers.checks.lab6's transpose checker judges the access pattern, recorded warp by warp in the
simulator: each planted transpose below gives the right values, and used to pass (shared
memory, a barrier, a tile shape that is not a multiple of 32 words a row), but loads a column
of src, stores a column of dst, indexes a padded tile as if unpadded, pads by 2 or 16 words, or
orders the tile with cuda.syncwarp(); each now fails naming the side and the degree. Right
answers written differently (the tile written across and read along, other names, a 1-D padded
tile, other TILE and BLOCK_ROWS globals) still pass. The residency misreadings of TODO 3 (the
warp limit in threads, the reservation once per SM or on every GPU) fail on a case of their own.
"""

from __future__ import annotations

import types

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32
from test_checks_lab6 import BLOCK_ROWS, PADDED, TILE, resident_warps, transpose_kernel

from helpers.checks.lab6 import check_resident_warps, check_transpose_kernel
from helpers.checks.lab6 import recorded, transpose_pattern

FLAT = TILE * PADDED    # a 1-D tile holding 32 padded rows
WIDE2 = TILE + 2        # rows of 34 words: a column in 16 banks, 2 words each
WIDE16 = TILE + 16      # rows of 48 words: a column in 2 banks


# ------------------------------------------------------------------------- planted: wrong


@cuda.jit
def tr_load_column(src, dst):  # a warp reads a column of src; the rest is right
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    r0, c0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    for j in range(0, TILE, BLOCK_ROWS):
        if r0 + tx < src.shape[0] and c0 + ty + j < src.shape[1]:
            tile[tx, ty + j] = src[r0 + tx, c0 + ty + j]
    cuda.syncthreads()
    for j in range(0, TILE, BLOCK_ROWS):
        if c0 + ty + j < dst.shape[0] and r0 + tx < dst.shape[1]:
            dst[c0 + ty + j, r0 + tx] = tile[tx, ty + j]


@cuda.jit
def tr_store_column(src, dst):  # rows of src in, but a warp writes a column of dst
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    for j in range(0, TILE, BLOCK_ROWS):
        if x < dst.shape[0] and y + j < dst.shape[1]:
            dst[x, y + j] = tile[ty + j, tx]


@cuda.jit
def tr_flat_indexed_unpadded(src, dst):  # 32 x 33 words allocated, rows of 32 used
    tile = cuda.shared.array(FLAT, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[(ty + j) * TILE + tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx * TILE + ty + j]


@cuda.jit
def tr_pad_two(src, dst):  # rows of 34 words: a 2-way conflict on the column reads
    tile = cuda.shared.array((TILE, WIDE2), float32)
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
def tr_pad_sixteen(src, dst):  # rows of 48 words: a 16-way conflict on the column reads
    tile = cuda.shared.array((TILE, WIDE16), float32)
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
def tr_syncwarp(src, dst):  # a warp barrier where the block's is needed
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncwarp()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]


PATTERN_WRONG = {
    "uncoalesced load": (tr_load_column, [
        "its loads of src are not coalesced", "touches 32 sectors of 32 bytes where its 128 "
        "bytes need 4", "load efficiency of 12.5 %", "a column of src", "src[0, 0], src[1, 0]"]),
    "uncoalesced store": (tr_store_column, [
        "its stores to dst are not coalesced", "32 sectors of 32 bytes where its 128 bytes "
        "need 4", "store efficiency of 12.5 %", "a column of dst", "dst[y + j, x]"]),
    "padded tile indexed unpadded": (tr_flat_indexed_unpadded, [
        "its reads of the shared array `tile` (1056)", "32-way bank conflict",
        "words 0, 32, 64, ..., 992", "1-D array of 1,056 words, and the index decides"]),
    "pad of 2 words": (tr_pad_two, [
        "its reads of the shared array `tile` (32 x 34)", "2-way bank conflict",
        "34 apart, and 34 shares the factor 2 with the 32 banks, so they fall in 16 banks only",
        "Its rows are 34 words long"]),
    "pad that leaves conflicts (16 words)": (tr_pad_sixteen, [
        "`tile` (32 x 48)", "16-way bank conflict", "fall in 2 banks only"]),
    "syncwarp instead of syncthreads": (tr_syncwarp, [
        "The block-wide barrier cuda.syncthreads() is missing", "cuda.syncwarp() orders only "
        "the 32 threads of one warp", "of warp 1 reads element", "of warp 0 writes"]),
}


@pytest.mark.parametrize("planted", sorted(PATTERN_WRONG))
@pytest.mark.slow
def test_each_planted_access_pattern_fails_naming_side_and_degree(planted):
    kernel, texts = PATTERN_WRONG[planted]
    report = check_transpose_kernel(kernel)
    assert report.status == "failed", report
    for text in texts:
        assert text in report.message, (text, report.message)


@pytest.mark.slow
def test_the_planted_patterns_give_the_right_values():
    """What the pattern checks catch, the values alone would not: each planted kernel is a
    correct transpose (the syncwarp one aside, which the simulator cannot run)."""
    from helpers.checks.lab6 import run_transpose
    a = np.arange(37 * 45, dtype=np.float32).reshape(37, 45)
    for planted, (kernel, _) in PATTERN_WRONG.items():
        if kernel is not tr_syncwarp:
            assert np.array_equal(run_transpose(kernel, a), a.T), planted


# ------------------------------------------------------------------- right, written otherwise


@cuda.jit
def tr_tile_written_across(src, dst):  # the tile is filled by columns and read by rows
    buf = cuda.shared.array((TILE, PADDED), float32)
    col, row = cuda.threadIdx.x, cuda.threadIdx.y
    in_col = cuda.blockIdx.x * TILE + col
    in_row = cuda.blockIdx.y * TILE + row
    for k in range(0, TILE, BLOCK_ROWS):
        if in_row + k < src.shape[0] and in_col < src.shape[1]:
            buf[col, row + k] = src[in_row + k, in_col]
    cuda.syncthreads()
    out_col = cuda.blockIdx.y * TILE + col
    out_row = cuda.blockIdx.x * TILE + row
    for k in range(0, TILE, BLOCK_ROWS):
        if out_row + k < dst.shape[0] and out_col < dst.shape[1]:
            dst[out_row + k, out_col] = buf[row + k, col]


@cuda.jit
def tr_flat_padded(src, dst):  # a 1-D tile indexed with the padded row length
    tile = cuda.shared.array(FLAT, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x = cuda.grid(2)[0]                   # blockIdx.x * TILE + tx: blocks are TILE wide
    y = cuda.blockIdx.y * TILE + ty       # but BLOCK_ROWS high
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[(ty + j) * PADDED + tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE + tx
    y = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx * PADDED + ty + j]


def with_globals(kernel, **env):
    """The kernel's function with some globals changed, as a learner's cell would set them."""
    fn = kernel.py_func
    return cuda.jit(types.FunctionType(fn.__code__, dict(fn.__globals__, **env), fn.__name__))


RIGHT = {
    "the lab's solution": transpose_kernel,
    "the tile written across and read along, other names": tr_tile_written_across,
    "a 1-D padded tile, cuda.grid": tr_flat_padded,
    "BLOCK_ROWS = 16": with_globals(transpose_kernel, BLOCK_ROWS=16),
    "BLOCK_ROWS = 32": with_globals(transpose_kernel, BLOCK_ROWS=32),
}


@pytest.mark.parametrize("right", sorted(RIGHT))
@pytest.mark.slow
def test_right_answers_written_differently_pass(right):
    report = check_transpose_kernel(RIGHT[right])
    assert report.status == "passed", report
    assert "no bank conflict" in report.message and "(the fewest)" in report.message


@pytest.mark.parametrize("padded", [17, 18])
@pytest.mark.slow
def test_a_16_wide_tile_is_told_that_no_padding_frees_both_sides(padded):
    """With TILE = 16 a warp is two rows of 16 lanes: rows of 17 words conflict on the column
    reads (words 17 k + c and 17 k + c + 1 meet in bank c), rows of 18 on the row writes
    (words 18 r and 18 (r + 1) + 14, 32 apart, meet): a row write is free only for rows of
    16 + 32 m words, and then a column falls in 2 banks. No pad frees both; the check says so."""
    report = check_transpose_kernel(with_globals(transpose_kernel, TILE=16, PADDED=padded))
    assert report.status == "failed" and "2-way bank conflict" in report.message, report
    assert "a warp is 2 rows of 16 threads" in report.message
    assert "use TILE = 32" in report.message


def test_a_tile_the_check_cannot_launch_is_an_error_naming_the_global():
    report = check_transpose_kernel(with_globals(transpose_kernel, TILE=24))
    assert report.status == "error" and "your global TILE is 24" in report.message
    report = check_transpose_kernel(with_globals(transpose_kernel, BLOCK_ROWS=5))
    assert report.status == "error" and "your global BLOCK_ROWS is 5" in report.message


# ------------------------------------------------------------------------------ the recorder


def test_the_recorder_sees_every_access_of_the_solution_warp_by_warp():
    """Fails loudly if the simulator stops running kernels the way the recorder expects."""
    rec = transpose_pattern.record_transpose(transpose_kernel, TILE, BLOCK_ROWS)
    h, w = transpose_pattern.RECORD_SHAPE
    warps = (h // TILE) * (w // TILE) * TILE * BLOCK_ROWS // 32
    loads, stores = rec.sites("global")
    assert (loads.kind, loads.array, stores.kind, stores.array) == ("load", "src", "store", "dst")
    assert loads.requests == stores.requests == warps * (TILE // BLOCK_ROWS)
    assert loads.sectors == loads.ideal == 4 * loads.requests
    assert [s.degree for s in rec.sites("shared")] == [1, 1] and rec.races() == []
    assert "tile[ty + j, tx] = src[y + j, x]" in loads.line[1]


def test_the_recorder_leaves_the_kernel_alone_and_refuses_a_changed_simulator():
    before = dict(transpose_kernel.py_func.__globals__)
    transpose_pattern.record_transpose(transpose_kernel, TILE, BLOCK_ROWS)
    assert transpose_kernel.py_func.__globals__["cuda"] is cuda
    assert set(transpose_kernel.py_func.__globals__) == set(before)
    with pytest.raises(recorded.SimulatorChanged, match="adapted to this numba-cuda"):
        recorded.simulated_module({recorded._SIM_NAME: cuda})


# ---------------------------------------------------------------------- residency (TODO 3)


def rw_warp_limit_in_threads(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    unit = sm.reg_alloc_unit
    regs_per_warp = -(-regs_per_thread * 32 // unit) * unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    by_regs = part // regs_per_warp * sm.reg_sub_partitions // warps
    blocks = min(sm.max_blocks, sm.max_warps * 32 // threads_per_block, by_regs)
    if smem_per_block > 0:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_reserved_once_per_sm(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    unit = sm.reg_alloc_unit
    regs_per_warp = -(-regs_per_thread * 32 // unit) * unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block > 0:
        unit = sm.smem_alloc_unit
        need = -(-smem_per_block // unit) * unit
        blocks = min(blocks, (sm.smem_per_sm - sm.smem_reserved_per_block) // need)
    return blocks * warps


def rw_reserved_on_every_gpu(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    unit = sm.reg_alloc_unit
    regs_per_warp = -(-regs_per_thread * 32 // unit) * unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block > 0:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + 1024) // unit) * unit   # "1 KiB a block"
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


RESIDENCY_WRONG = {
    "warp limit in threads": (rw_warp_limit_in_threads, "H100 (compute capability 9.0), 200 "
                              "threads a block", "the warp limit is counted in threads"),
    "reservation once per SM": (rw_reserved_once_per_sm, "H100 (compute capability 9.0), 64 "
                                "threads a block, 32 registers a thread, 12,288 bytes",
                                "taken once from the SM's shared memory"),
    "1 KiB reserved on every GPU": (rw_reserved_on_every_gpu, "K40c (compute capability 3.5), "
                                    "100 threads", "1 KB is reserved a block on every GPU"),
}


@pytest.mark.parametrize("planted", sorted(RESIDENCY_WRONG))
def test_each_residency_misreading_fails_on_its_case_naming_the_rule(planted):
    fn, case, rule = RESIDENCY_WRONG[planted]
    report = check_resident_warps(fn)
    assert report.status == "failed", report
    assert case in report.message and rule in report.message, report.message


def test_the_residency_solution_still_passes():
    assert check_resident_warps(resident_warps).status == "passed"

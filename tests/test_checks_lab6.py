"""helpers.checks.lab6: every checker passes the solution, reports the stub as not implemented
and a learner's exception as an error, and fails every planted plausible mistake on the case
(or the rule) made for it, naming the mistake where it can.

Planted for TODO 1 (conflict_degree): lanes counted instead of distinct words, 16 banks,
inactive lanes (-1) counted, the number of distinct banks returned, bank = word // 32, a max()
of nothing when no lane is active, None returned.
Planted for TODO 2 (transpose_kernel, test_checks_lab6_transpose.py): the naive transpose
without shared memory, an unpadded 32 x 32 tile, the padding on the wrong axis, no
cuda.syncthreads(), a tile each thread only reads back itself (no barrier), the write's bounds
checked on src's axes, the block index not swapped for the write, one row a thread instead of
four, ``(TILE, TILE + 1)`` in the kernel (it does not compile), a float64 tile (NumPy's default
dtype), a plain function, a NameError; the access patterns (uncoalesced loads or stores, bank
conflicts, cuda.syncwarp() for the block's barrier) are in test_checks_lab6_patterns.py.
Planted for TODO 3 (resident_warps): a partial warp not counted, registers not rounded to the
allocation unit, the whole register file divided (the study's 17 warps, Section V-C), the
block limit left out, the warp limit left out, the shared-memory reservation left out, shared
memory not rounded, a division by zero for a kernel without shared memory (the warp limit in
threads and the reservation once per SM or on every GPU: test_checks_lab6_patterns.py).
The solutions are written here exactly as in labs/solutions/lab6_transpose_and_occupancy.ipynb;
the planted transposes of TODO 2 are in test_checks_lab6_transpose.py.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from numba import cuda, float32

from helpers import occupancy
from helpers.checks import lab6
from helpers.checks.lab6 import check_conflict_degree, check_resident_warps, check_transpose_kernel
from helpers.checks.lab6 import transpose as lab6_transpose

TILE = 32
BLOCK_ROWS = 8

# ------------------------------------------------------------------------- the lab's solutions


def conflict_degree(words):
    """Wavefronts one warp's shared-memory request needs.

    words: 32 word indices (int array), -1 for an inactive lane. Returns the largest number of
    distinct words in one of the 32 banks (bank = word % 32), 0 if no lane is active."""
    active = np.unique(words[words >= 0])   # distinct words: lanes reading one word share it
    if active.size == 0:
        return 0
    return int(np.bincount(active % 32, minlength=32).max())


PADDED = TILE + 1   # 33 words a row: row r of the tile starts in bank r


@cuda.jit
def transpose_kernel(src, dst):
    """dst = src.T for float32 src (H, W), dst (W, H), through a TILE x PADDED shared tile.

    Blocks of (TILE, BLOCK_ROWS) threads, each copying TILE // BLOCK_ROWS rows; a grid of
    (ceil(W / TILE), ceil(H / TILE)) blocks. Right for any H and W."""
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE + tx           # column of src
    y = cuda.blockIdx.y * TILE + ty           # first row of src this thread copies
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]  # a warp reads a row of src: coalesced
    cuda.syncthreads()                        # the whole tile is written before anyone reads
    x = cuda.blockIdx.y * TILE + tx           # the block indices swapped: column of dst
    y = cuda.blockIdx.x * TILE + ty           # first row of dst this thread writes
    for j in range(0, TILE, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]  # a column of the tile, a row of dst: coalesced


def resident_warps(threads_per_block, regs_per_thread, smem_per_block, sm):
    """Warps resident per SM for blocks of threads_per_block threads, regs_per_thread
    registers a thread and smem_per_block bytes of shared memory a block, on an SM with the
    limits `sm` (an SmLimits)."""
    warps = -(-threads_per_block // 32)                        # a partial warp takes a whole slot
    unit = sm.reg_alloc_unit
    regs_per_warp = -(-regs_per_thread * 32 // unit) * unit    # rounded up to the unit
    part = sm.regs_per_sm // sm.reg_sub_partitions             # the registers of one part
    by_regs = part // regs_per_warp * sm.reg_sub_partitions // warps   # whole warps per part
    blocks = min(sm.max_blocks, sm.max_warps // warps, by_regs)
    if smem_per_block > 0:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


@pytest.mark.slow
def test_the_solutions_pass():
    assert check_conflict_degree(conflict_degree).status == "passed"
    assert check_resident_warps(resident_warps).status == "passed"
    report = check_transpose_kernel(transpose_kernel)
    assert report.status == "passed", report
    assert report.cases_run == len(lab6_transpose.TRANSPOSE_SHAPES)
    assert "4,224 bytes of shared memory a block, 1 barrier." in report.message


# ------------------------------------------------------------------------------------ stubs


def conflict_stub(words):
    raise NotImplementedError


def warps_stub(threads_per_block, regs_per_thread, smem_per_block, sm):
    raise NotImplementedError


@cuda.jit
def transpose_stub(src, dst):
    raise NotImplementedError


@pytest.mark.parametrize("check,stub", [(check_conflict_degree, conflict_stub),
                                        (check_resident_warps, warps_stub),
                                        (check_transpose_kernel, transpose_stub)])
def test_a_stub_is_not_implemented_yet(check, stub):
    report = check(stub)
    assert report.status == "not implemented" and "NOT IMPLEMENTED YET" in str(report)


# ----------------------------------------------------------------------- planted: TODO 1


def cd_counts_lanes(words):
    active = words[words >= 0]
    return int(np.bincount(active % 32, minlength=32).max()) if active.size else 0


def cd_16_banks(words):
    active = np.unique(words[words >= 0])
    return int(np.bincount(active % 16, minlength=16).max()) if active.size else 0


def cd_counts_inactive(words):
    return int(np.bincount(np.unique(words) % 32, minlength=32).max())


def cd_distinct_banks(words):
    return len({int(w) % 32 for w in words if w >= 0})


def cd_word_div_32(words):
    active = np.unique(words[words >= 0])
    return int(np.bincount(active // 32).max()) if active.size else 0


def cd_max_of_nothing(words):
    banks = {}
    for w in {int(w) for w in words if w >= 0}:
        banks[w % 32] = banks.get(w % 32, 0) + 1
    return max(banks.values())


def cd_returns_none(words):
    np.unique(words[words >= 0])


CONFLICT_WRONG = {
    "counts lanes, not distinct words": (cd_counts_lanes, "all 32 lanes read word 7",
                                         "you count lanes, not distinct words"),
    "16 banks": (cd_16_banks, "consecutive words 0..31", "you use 16 banks"),
    "counts the -1 lanes": (cd_counts_inactive, "lanes 16-31 inactive",
                            "you count inactive lanes (-1)"),
    "the number of distinct banks": (cd_distinct_banks, "consecutive words 0..31",
                                     "the number of distinct banks hit"),
    "bank = word // 32": (cd_word_div_32, "consecutive words 0..31", "bank = word // 32"),
}


@pytest.mark.parametrize("planted", sorted(CONFLICT_WRONG))
def test_conflict_degree_fails_each_planted_mistake_on_its_case(planted):
    fn, case, mistake = CONFLICT_WRONG[planted]
    report = check_conflict_degree(fn)
    assert report.status == "failed", report
    assert case in report.message and mistake in report.message, report.message
    assert "expected" in report.message and "Hint:" in report.message


def test_conflict_degree_reports_a_learner_exception_and_a_wrong_type():
    report = check_conflict_degree(cd_max_of_nothing)
    assert report.status == "error" and "no lane active" in report.message
    assert "ValueError" in report.message and "max(banks.values())" in report.message
    report = check_conflict_degree(cd_returns_none)
    assert report.status == "failed" and "returned NoneType" in report.message


def test_conflict_degree_cases_cover_the_lab_and_agree_with_the_rules():
    expected = {what.split(":")[0].split(" (")[0]: lab6.conflict_degree(words)
                for what, words in lab6.WORD_CASES}
    assert expected["consecutive words 0..31"] == 1
    assert expected["a column of an unpadded 32-wide tile"] == 32
    assert expected["a column of a padded 33-wide tile"] == 1
    assert expected["stride 2"] == 2
    assert expected["all 32 lanes read word 7"] == 1
    assert expected["no lane active"] == 0
    assert all(len(words) == 32 for _, words in lab6.WORD_CASES)


# ----------------------------------------------------------------------- planted: TODO 3


def rw_floor_warps(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = threads_per_block // 32
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_registers_unrounded(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = regs_per_thread * 32
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_whole_register_file(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    blocks = min(sm.max_blocks, sm.max_warps // warps, sm.regs_per_sm // regs_per_warp // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_no_block_limit(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_warps // warps, part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_no_warp_limit(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_no_reservation(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        unit = sm.smem_alloc_unit
        need = -(-smem_per_block // unit) * unit
        blocks = min(blocks, sm.smem_per_sm // need)
    return blocks * warps


def rw_smem_unrounded(threads_per_block, regs_per_thread, smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    blocks = min(sm.max_blocks, sm.max_warps // warps,
                 part // regs_per_warp * sm.reg_sub_partitions // warps)
    if smem_per_block:
        blocks = min(blocks, sm.smem_per_sm // (smem_per_block + sm.smem_reserved_per_block))
    return blocks * warps


def rw_divides_by_zero_without_shared_memory(threads_per_block, regs_per_thread,
                                             smem_per_block, sm):
    warps = -(-threads_per_block // 32)
    regs_per_warp = -(-regs_per_thread * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    part = sm.regs_per_sm // sm.reg_sub_partitions
    unit = sm.smem_alloc_unit
    need = -(-(smem_per_block + sm.smem_reserved_per_block) // unit) * unit
    return min(sm.max_blocks, sm.max_warps // warps, sm.smem_per_sm // need,
               part // regs_per_warp * sm.reg_sub_partitions // warps) * warps


WARPS_WRONG = {
    "a partial warp not counted": (rw_floor_warps, "K40c (compute capability 3.5), 1000 threads",
                                   "a partial warp is not counted"),
    "registers not rounded": (rw_registers_unrounded, "A100 (compute capability 8.0), 128 "
                              "threads a block, 33 registers", "registers are not rounded up"),
    "the whole register file (the study's 17 warps)": (
        rw_whole_register_file, "K40c (compute capability 3.5), 544 threads a block, 116 "
        "registers", "the whole register file is divided, as the study did (Section V-C)"),
    "no block limit": (rw_no_block_limit, "T4 (compute capability 7.5), 32 threads a block, 16",
                       "sm.max_blocks resident blocks is left out"),
    "no warp limit": (rw_no_warp_limit, "T4 (compute capability 7.5), 1024 threads a block",
                      "sm.max_warps resident warps is left out"),
    "no shared-memory reservation": (rw_no_reservation, "H100 (compute capability 9.0), 256 "
                                     "threads a block, 32 registers a thread, 58,368 bytes",
                                     "reservation of sm.smem_reserved_per_block"),
    "shared memory not rounded": (rw_smem_unrounded, "T4 (compute capability 7.5), 64 threads "
                                  "a block, 32 registers a thread, 13,100 bytes",
                                  "shared memory is not rounded up"),
}


@pytest.mark.parametrize("planted", sorted(WARPS_WRONG))
def test_resident_warps_fails_each_planted_mistake_on_its_case(planted):
    fn, case, mistake = WARPS_WRONG[planted]
    report = check_resident_warps(fn)
    assert report.status == "failed", report
    assert case in report.message and mistake in report.message, report.message
    assert "resident warps (" in report.message and "Hint:" in report.message


def test_the_whole_register_file_gives_the_studys_17_warps():
    report = check_resident_warps(rw_whole_register_file)
    assert "expected 0 resident warps" in report.message and "got 17" in report.message


def test_resident_warps_reports_a_division_by_zero_readably():
    report = check_resident_warps(rw_divides_by_zero_without_shared_memory)
    assert report.status == "error" and "ZeroDivisionError" in report.message
    assert "T4 (compute capability 7.5), 1024 threads a block" in report.message


def test_resident_warps_cases_agree_with_helpers_occupancy_and_span_the_gpus():
    gpus = {gpu for gpu, *_ in lab6.OCCUPANCY_CASES}
    assert {"K40c", "T4", "A100", "H100"} <= gpus
    assert any(t % 32 for _, t, *_ in lab6.OCCUPANCY_CASES)          # a partial warp
    assert any(r in (33, 116, 255) for _, _, r, *_ in lab6.OCCUPANCY_CASES)
    for gpu, t, r, s, _ in lab6.OCCUPANCY_CASES:
        sm = occupancy.limits_for(gpu)
        assert resident_warps(t, r, s, sm) == occupancy.occupancy(gpu, t, r, s).active_warps
    assert all(name in lab6.SM_FIELDS for name in (
        "max_warps", "max_blocks", "regs_per_sm", "reg_sub_partitions", "reg_alloc_unit",
        "smem_per_sm", "smem_alloc_unit", "smem_reserved_per_block"))

"""Checkers for Lab 6 (``labs/lab6_transpose_and_occupancy.ipynb``): bank conflicts, a
conflict-free transpose, and occupancy by hand.

:mod:`.banks_and_warps`: the checkers of the TODOs counted by hand (a warp's wavefronts, the
resident warps per SM). :mod:`.transpose`: the transpose kernel's checker, and running and
compiling a learner's kernel; :mod:`.transpose_pattern` judges its accesses as
:mod:`.recorded` logs them in the simulator, warp by warp.
"""

from helpers.checks.lab6.banks_and_warps import (
    OCCUPANCY_CASES,
    SM_FIELDS,
    WORD_CASES,
    check_conflict_degree,
    check_resident_warps,
    conflict_degree,
)
from helpers.checks.lab6.transpose import (
    BLOCK_ROWS,
    KERNEL_ARGTYPES,
    TILE,
    check_transpose_kernel,
    compile_for_block_rows,
    run_transpose,
)

__all__ = ["BLOCK_ROWS", "KERNEL_ARGTYPES", "OCCUPANCY_CASES", "SM_FIELDS", "TILE", "WORD_CASES",
           "check_conflict_degree", "check_resident_warps", "check_transpose_kernel",
           "compile_for_block_rows", "conflict_degree", "run_transpose"]

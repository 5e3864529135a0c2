"""Checkers for Lab 6's TODOs counted by hand: bank conflicts and occupancy.

Each returns a :class:`helpers.checks.Report`: :func:`check_conflict_degree` (``words``: 32
shared-memory word indices of a warp, int64, -1 = inactive lane -> wavefronts) and
:func:`check_resident_warps` (threads, registers and bytes of shared memory per block and an
:class:`helpers.occupancy.SmLimits` -> resident warps per SM). A wrong answer that matches a
known mistake is named in the report. The transpose's checker is :mod:`.transpose`'s.

Source: Li et al., ICPP 2016, Section V-C, Figure 6 (achieved occupancy, shared-memory
efficiency) and Table II; the references are
:func:`helpers.experiments.memory_access.conflict_degree` and
:func:`helpers.occupancy.occupancy` (the CUDA Occupancy Calculator's rules).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from helpers import occupancy
from helpers.checks import Case, Report, WrongResult, check_cases
from helpers.experiments.memory_access import conflict_degree

__all__ = [
    "OCCUPANCY_CASES",
    "SM_FIELDS",
    "WORD_CASES",
    "check_conflict_degree",
    "check_resident_warps",
]

_OFF = -1  # an inactive lane


def _lanes(words) -> list[int]:
    words = list(words)
    return words + [_OFF] * (32 - len(words))


#: TODO 1's cases: (what the warp reads, its 32 word indices), in the order they are tried.
WORD_CASES: list[tuple[str, list[int]]] = [
    ("consecutive words 0..31 (a row of a tile)", list(range(32))),
    ("a column of an unpadded 32-wide tile: words 0, 32, 64, ..., 992",
     [32 * k for k in range(32)]),
    ("a column of a padded 33-wide tile: words 0, 33, 66, ..., 1023",
     [33 * k for k in range(32)]),
    ("stride 2: words 0, 2, 4, ..., 62", [2 * k for k in range(32)]),
    ("all 32 lanes read word 7 (a broadcast)", [7] * 32),
    ("lanes 0-15 read column 31 of an unpadded tile (words 31, 63, ..., 511), lanes 16-31 "
     "inactive (-1)", _lanes(31 + 32 * k for k in range(16))),
    ("pairs of lanes read the same word: words 0, 0, 32, 32, ..., 480, 480",
     [32 * (k // 2) for k in range(32)]),
    ("no lane active (all -1)", [_OFF] * 32),
    ("random words 0..2047, a few lanes inactive (seed 6)", []),   # filled below
    ("random words 0..95, many repeated (seed 7)", []),
]


def _random_words() -> None:
    rng = np.random.default_rng(6)
    words = rng.integers(0, 2048, 32)
    words[rng.choice(32, 5, replace=False)] = _OFF
    WORD_CASES[-2] = (WORD_CASES[-2][0], [int(w) for w in words])
    rng = np.random.default_rng(7)
    WORD_CASES[-1] = (WORD_CASES[-1][0], [int(w) for w in rng.integers(0, 96, 32)])


_random_words()

#: Wrong readings of TODO 1, each as what it computes: a report names the one a wrong answer
#: matches.
_WORD_MISTAKES = [
    ("you count lanes, not distinct words (lanes reading the same word are served together, "
     "by a broadcast)", lambda w: _per_bank(w, lambda ws: len(ws))),
    ("you count inactive lanes (-1) as a word: in Python -1 % 32 is 31, bank 31",
     lambda w: int(np.bincount(np.unique(w) % 32, minlength=32).max())),
    ("you use 16 banks instead of 32", lambda w: _per_bank(w, lambda ws: len(set(ws)), 16)),
    ("you take bank = word // 32 instead of word % 32",
     lambda w: _per_bank(w, lambda ws: len(set(ws)), bank=lambda x: x // 32)),
    ("you return the number of distinct banks hit, not the most distinct words in one bank",
     lambda w: len({x % 32 for x in w if x >= 0})),
]


def _per_bank(words, count, banks: int = 32, bank=None) -> int:
    groups: dict[int, list[int]] = {}
    for x in words:
        if x >= 0:
            groups.setdefault(bank(x) if bank else x % banks, []).append(x)
    return max((count(ws) for ws in groups.values()), default=0)


def _as_count(value) -> float | None:
    """A number the learner returned, as a float; None if it is not one number."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _named(got: float, expected: int, mistakes, *args) -> str:
    """' That is what ... gives.' for the known mistakes that give ``got`` here, or ''."""
    names = []
    for text, model in mistakes:
        try:
            value = model(*args)
        except (ArithmeticError, ValueError):
            continue
        if value != expected and value == got:
            names.append(text)
    return f" That is what you get if {' or if '.join(names)}." if names else ""


def check_conflict_degree(fn) -> Report:
    """Check ``fn(words) -> int``: the shared-memory wavefronts one warp request needs.

    Args:
        fn: the learner's function. ``words``: a NumPy int64 array of 32 shared-memory word
            indices, one per lane, -1 for an inactive lane. It must return the largest number
            of *distinct* words that fall in one of the 32 banks (bank = word % 32; lanes
            reading the same word share one access), 0 if no lane is active.

    Returns:
        A :class:`Report` over :data:`WORD_CASES` (rows, columns of an unpadded and a padded
        tile, stride 2, a broadcast, half the lanes inactive, pairs sharing words, no lane
        active, random words), against :func:`helpers.experiments.memory_access.
        conflict_degree`; a wrong answer that matches a known mistake (lanes counted instead
        of words, -1 counted, 16 banks, word // 32, the number of banks) is named. Never
        raises for what ``fn`` does.
    """
    cases = []
    for what, words in WORD_CASES:
        expected = conflict_degree(words)
        cases.append(Case((tuple(words),), expected, what))

    def run(words):
        arr = np.array(words, dtype=np.int64)
        got = fn(arr.copy())
        value = _as_count(got)
        expected = conflict_degree(words)
        if value is None:
            raise WrongResult(f"your function returned {type(got).__name__} ({got!r:.60}), "
                              f"expected one int, the number of wavefronts")
        if value != expected:
            raise WrongResult(f"expected {expected}, got {got!r}."
                              + _named(value, expected, _WORD_MISTAKES, arr))
        return expected

    return check_cases(
        "Lab 6, TODO 1: conflict degree of a warp's shared-memory request", run, cases,
        hint="drop the -1 lanes; take the distinct words (np.unique); bank = word % 32; count "
             "the distinct words in each bank (np.bincount(words % 32)); return the largest "
             "count, or 0 when no lane is active.")


#: The fields of :class:`helpers.occupancy.SmLimits` TODO 3 needs, as the lab states them.
SM_FIELDS = """\
sm.max_warps               resident warps an SM holds (64; 32 on a T4)
sm.max_blocks              resident blocks an SM holds (16 on the K40c and T4, 32 on A100/H100)
sm.regs_per_sm             32-bit registers per SM (65,536)
sm.reg_sub_partitions      the register file is split into this many equal parts (4), and a
                           warp's registers all come from one part
sm.reg_alloc_unit          a warp's registers are allocated in units of this many (256)
sm.smem_per_sm             bytes of shared memory per SM
sm.smem_alloc_unit         a block's shared memory is allocated in units of this many bytes
sm.smem_reserved_per_block bytes the system adds to every block's shared memory (1,024 from
                           compute capability 8.0; 0 before)"""

#: TODO 3's cases: (gpu, threads per block, registers per thread, shared memory bytes per
#: block, what the case is for), in the order they are tried.
OCCUPANCY_CASES: list[tuple[str, int, int, int, str]] = [
    ("T4", 1024, 16, 0, "one block of 1,024 threads"),
    ("K40c", 1000, 16, 0, "a partial warp: 1,000 threads are 31.25 warps"),
    ("A100", 128, 33, 0, "33 registers: 1,056 a warp, allocated in units of 256"),
    ("K40c", 544, 116, 0, "cuda-convnet2's 116 registers (Table II) and the study's 17 warps "
     "(Section V-C) as one block"),
    ("H100", 32, 116, 0, "116 registers in blocks of one warp"),
    ("T4", 32, 16, 0, "small blocks: one warp each"),
    ("H100", 256, 32, 58368, "57 KB of shared memory a block on compute capability 9.0"),
    ("T4", 64, 32, 13100, "13,100 bytes of shared memory a block"),
    ("T4", 256, 24, 4224, "the padded transpose tile (32 x 33 floats) on Colab's GPU"),
    ("K40c", 256, 80, 8602, "the study's cuDNN row of Table II (80 registers, 8.4 KB) in "
     "blocks of 256 threads"),
    ("H100", 96, 255, 0, "255 registers, the most a thread may have, in blocks of 3 warps"),
    ("A100", 128, 40, 49152, "48 KB of shared memory a block on compute capability 8.0"),
    ("K40c", 100, 116, 16 * 1024, "116 registers and 16 KB (cuda-convnet2's Table II row) in "
     "blocks of 100 threads"),
    ("H100", 200, 16, 0, "200 threads are 6.25 warps: the warp limit counts the warp slots "
     "a block takes, not its threads"),
    ("H100", 64, 32, 12 * 1024, "12 KB of shared memory a block in blocks of 2 warps: the "
     "reservation is added to every block"),
]


def _model(threads, regs, smem, sm, *, partial=True, reg_unit=True, sub_partitions=True,
           max_blocks=True, max_warps=True, reserve=True, smem_unit=True,
           warps_as_threads=False, reserve_per_sm=False, reserve_always=False) -> int:
    """Resident warps per SM by the occupancy rules, each rule switchable (a mistake model):
    ``warps_as_threads``, the warp limit counted in threads (``max_warps * 32 // threads``);
    ``reserve_per_sm``, the reservation taken once from the SM; ``reserve_always``, 1 KB
    reserved a block whatever the compute capability."""
    warps = math.ceil(threads / 32) if partial else threads // 32
    if warps == 0:
        return 0
    per_warp = regs * 32
    if reg_unit:
        per_warp = math.ceil(per_warp / sm.reg_alloc_unit) * sm.reg_alloc_unit
    if sub_partitions:
        reg_warps = sm.regs_per_sm // sm.reg_sub_partitions // per_warp * sm.reg_sub_partitions
    else:
        reg_warps = sm.regs_per_sm // per_warp
    limits = [reg_warps // warps]
    if max_blocks:
        limits.append(sm.max_blocks)
    if max_warps:
        limits.append(sm.max_warps * 32 // threads if warps_as_threads
                      else sm.max_warps // warps)
    if smem:
        reserved = 1024 if reserve_always else sm.smem_reserved_per_block
        need = smem + (reserved if reserve and not reserve_per_sm else 0)
        if smem_unit:
            need = math.ceil(need / sm.smem_alloc_unit) * sm.smem_alloc_unit
        limits.append((sm.smem_per_sm - (reserved if reserve_per_sm else 0)) // need)
    return min(limits) * warps


_OCC_MISTAKES = [
    ("a partial warp is not counted as a whole warp (ceil(threads / 32))",
     lambda *a: _model(*a, partial=False)),
    ("registers are not rounded up to the allocation unit (sm.reg_alloc_unit a warp)",
     lambda *a: _model(*a, reg_unit=False)),
    ("the whole register file is divided, as the study did (Section V-C), instead of each of "
     "its sm.reg_sub_partitions parts, which hold whole warps only",
     lambda *a: _model(*a, sub_partitions=False)),
    ("the limit of sm.max_blocks resident blocks is left out",
     lambda *a: _model(*a, max_blocks=False)),
    ("the limit of sm.max_warps resident warps is left out",
     lambda *a: _model(*a, max_warps=False)),
    ("the per-block reservation of sm.smem_reserved_per_block bytes is left out",
     lambda *a: _model(*a, reserve=False)),
    ("shared memory is not rounded up to the allocation unit (sm.smem_alloc_unit bytes)",
     lambda *a: _model(*a, smem_unit=False)),
    ("the warp limit is counted in threads (sm.max_warps * 32 // threads) instead of in warp "
     "slots (sm.max_warps // ceil(threads / 32)): a partial warp takes a whole slot",
     lambda *a: _model(*a, warps_as_threads=True)),
    ("the reservation of sm.smem_reserved_per_block bytes is taken once from the SM's shared "
     "memory instead of added to every block's",
     lambda *a: _model(*a, reserve_per_sm=True)),
    ("1 KB is reserved a block on every GPU instead of sm.smem_reserved_per_block bytes "
     "(1,024 from compute capability 8.0, 0 before)",
     lambda *a: _model(*a, reserve_always=True)),
]


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _occupancy_cases() -> list[Case]:
    cases = []
    for gpu, threads, regs, smem, what in OCCUPANCY_CASES:
        occ = occupancy.occupancy(gpu, threads, regs, smem)
        sm = occupancy.limits_for(gpu)
        assert _model(threads, regs, smem, sm) == occ.active_warps, (gpu, threads, regs, smem)
        cases.append(Case((threads, regs, smem, sm), occ.active_warps,
                          f"{gpu} (compute capability {sm.cc}), {threads} threads a block, "
                          f"{regs} registers a thread, {smem:,} bytes of shared memory a "
                          f"block ({what})"))
    return cases


def check_resident_warps(fn) -> Report:
    """Check ``fn(threads_per_block, regs_per_thread, smem_per_block, sm) -> int``.

    Args:
        fn: the learner's theoretical occupancy calculation: ``threads_per_block`` 1..1024,
            ``regs_per_thread`` 1..255, ``smem_per_block`` bytes >= 0 (ints) and ``sm`` an
            :class:`helpers.occupancy.SmLimits` (:func:`helpers.occupancy.limits_for`, fields
            in :data:`SM_FIELDS`). It must return the warps resident per SM: whole blocks, as
            many as the smallest of four limits allows (blocks, warps, registers counted per
            sub-partition, shared memory), times the warps of a block; 0 if a block does not fit.

    Returns:
        A :class:`Report` over :data:`OCCUPANCY_CASES` (K40c, T4, A100, H100; block sizes that
        are not warp multiples, registers that round, shared memory that rounds or meets the
        per-block reservation), against :func:`helpers.occupancy.occupancy`'s
        ``active_warps``; a wrong answer that matches a rule left out or misread is named
        (the warp limit counted in threads, the reservation taken once per SM or on every
        GPU, among others). Never raises for what ``fn`` does.
    """
    def run(threads, regs, smem, sm):
        got = fn(threads, regs, smem, sm)
        value = _as_count(got)
        occ = occupancy.occupancy(sm.cc, threads, regs, smem)
        if value is None:
            raise WrongResult(f"your function returned {type(got).__name__} ({got!r:.60}), "
                              f"expected one int, the resident warps per SM")
        if value != occ.active_warps:
            blocks = ", ".join(f"{k} {v}" for k, v in occ.blocks_by.items())
            raise WrongResult(
                f"expected {occ.active_warps} resident warps ({_n(occ.active_blocks, 'block')} "
                f"of {_n(occ.warps_per_block, 'warp')}; the blocks each limit allows: "
                f"{blocks}), got {got!r}."
                + _named(value, occ.active_warps, _OCC_MISTAKES, threads, regs, smem, sm))
        return occ.active_warps

    return check_cases(
        "Lab 6, TODO 3: resident warps per SM", run, _occupancy_cases(),
        hint="warps = ceil(threads / 32); a warp's registers = 32 * regs rounded up to "
             "sm.reg_alloc_unit, and each of the sm.reg_sub_partitions parts of the register "
             "file holds whole warps; a block's shared memory plus sm.smem_reserved_per_block, "
             "rounded up to sm.smem_alloc_unit (no limit when it is 0); resident blocks = the "
             "smallest of the four limits; return blocks * warps.")

"""Checkers for Lab 9 (``labs/lab9_ring_all_reduce.ipynb``): the ring all-reduce.

:mod:`.ring`: the checkers of the lab's TODOs (the schedule, the all-reduce, its cost model) and
the lab's tables. :mod:`.sim`: W simulated ranks in threads, the checker's stand-in for
torch.distributed. :mod:`.real`: the learner's function on real gloo processes, each running
:mod:`.rank`.
"""

from helpers.checks.lab9.ring import (
    PHASES,
    REAL_WORLDS,
    RING_MODEL,
    SCHEDULE_WORLDS,
    SECONDS_CASES,
    SIM_WORLDS,
    SIZES,
    check_ring_all_reduce,
    check_ring_seconds,
    check_ring_step,
    chunk_sizes,
    fit_latency_bandwidth,
    ring_elements,
    schedule_table,
)

__all__ = ["PHASES", "REAL_WORLDS", "RING_MODEL", "SCHEDULE_WORLDS", "SECONDS_CASES", "SIM_WORLDS",
           "SIZES", "check_ring_all_reduce", "check_ring_seconds", "check_ring_step", "chunk_sizes",
           "fit_latency_bandwidth", "ring_elements", "schedule_table"]

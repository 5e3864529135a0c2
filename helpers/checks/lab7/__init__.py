"""Checkers for Lab 7 (``labs/lab7_overlap_copies.ipynb``): a chunked, pinned, multi-stream
pipeline of copies and computation.

:mod:`.pipeline`: the checkers of the lab's TODOs (chunk bounds, a schedule, the best chunk
count). :mod:`.model`: the rules of the copy engines and streams, their event simulation and the
diagnosis of a wrong schedule. :mod:`.data`: a Table I layer's stage times and a text timeline.
"""

from helpers.checks.lab7.pipeline import (
    BEST_CASES,
    CHUNK_CASES,
    CHUNK_ERROR_CASES,
    OPS,
    ORDERS,
    RULES,
    SCHEDULE_CASES,
    TIE_MS,
    TOL_MS,
    check_best_chunks,
    check_chunk_bounds,
    check_schedule,
    engine_of,
    issue_order,
    makespan,
    reference_best,
    schedule_durations,
    simulate,
)

__all__ = ["RULES", "OPS", "ORDERS", "TOL_MS", "TIE_MS", "CHUNK_CASES", "CHUNK_ERROR_CASES",
           "SCHEDULE_CASES", "BEST_CASES", "issue_order", "engine_of", "simulate", "makespan",
           "reference_best", "schedule_durations", "check_chunk_bounds", "check_schedule",
           "check_best_chunks"]

"""Checkers for Lab 7: a chunked, pinned, multi-stream pipeline of copies and computation.

One checker per TODO of ``labs/lab7_overlap_copies.ipynb``, each returning a
:class:`helpers.checks.Report`: :func:`check_chunk_bounds` (``n`` images in contiguous chunks),
:func:`check_schedule` (the start and end of every operation under :data:`RULES`) and
:func:`check_best_chunks` (the chunk count with the smallest makespan). The rules, their event
simulation (:func:`simulate`) and the diagnosis of a wrong schedule are in
:mod:`helpers.checks.lab7.model`. A schedule is a list of dicts ``{"chunk", "op", "start_ms",
"end_ms"}``; ``durations`` are ``(h2d_ms, compute_ms, d2h_ms)`` per chunk. Times in ms.

Source: Li et al., ICPP 2016, Section V-D and Figure 7 (CPU-GPU transfer overheads; remedies:
pinned memory, asynchronous transfers); CUDA C Programming Guide, "Asynchronous Concurrent
Execution" (streams, copy engines).
"""

from __future__ import annotations

import math

import numpy as np

from helpers.checks import Case, Report, WrongResult, check_cases
from helpers.checks.lab7.model import (
    OPS,
    ORDERS,
    RULES,
    TOL_MS,
    broken_rule,
    engine_of,
    issue_order,
    makespan,
    name_of,
    parse_schedule,
    simulate,
    span_of,
)
from helpers.experiments.transfers.model import chunk_bounds as reference_bounds

__all__ = ["RULES", "OPS", "ORDERS", "TOL_MS", "TIE_MS", "CHUNK_CASES", "CHUNK_ERROR_CASES",
           "SCHEDULE_CASES", "BEST_CASES", "issue_order", "engine_of", "simulate", "makespan",
           "reference_best", "schedule_durations", "check_chunk_bounds", "check_schedule",
           "check_best_chunks"]

#: Makespans within this (ms) of each other tie in :func:`check_best_chunks` (round-off).
TIE_MS = 1e-6

#: (n, chunks, what the case is for): the cases of :func:`check_chunk_bounds`.
CHUNK_CASES: list[tuple[int, int, str]] = [
    (9, 6, "ceil(9 / 6) = 2 would leave the sixth chunk empty"),
    (10, 4, "remainder 2: the first two chunks one larger"),
    (13, 5, "remainder 3"),
    (11, 5, "remainder 1: only the first chunk one larger"),
    (10, 6, "ceil(10 / 6) = 2 would leave the sixth chunk empty"),
    (7, 7, "one image per chunk"),
    (6, 1, "one chunk: the whole batch"),
    (1, 1, "a batch of 1"),
    (128, 5, "the study's batch of 128 in 5 chunks"),
    (12, 4, "no remainder"),
]
#: (n, chunks, what the case is for): calls that must raise ValueError naming ``chunks``.
CHUNK_ERROR_CASES: list[tuple[int, int, str]] = [
    (5, 0, "no chunks at all"),
    (4, 5, "more chunks than images: a chunk would be empty"),
    (1, 2, "a batch of 1 in 2 chunks"),
    (6, -1, "a negative chunk count"),
]

#: (chunks, streams, copy_engines, order, pinned, seed, what the case is for): the cases of
#: :func:`check_schedule`; durations come from :func:`schedule_durations`.
SCHEDULE_CASES: list[tuple[int, int, int, str, bool, int, str]] = [
    (4, 2, 1, "depth-first", True, 1, "one copy engine, depth-first: chunk 1's h2d queues "
     "behind chunk 0's d2h"),
    (4, 2, 1, "breadth-first", True, 2, "one copy engine, breadth-first"),
    (5, 2, 2, "depth-first", True, 3, "two copy engines, 5 chunks sharing 2 streams"),
    (5, 3, 2, "breadth-first", True, 4, "two copy engines, breadth-first, 5 chunks on 3 "
     "streams"),
    (6, 6, 2, "depth-first", True, 5, "a stream per chunk, two copy engines"),
    (3, 4, 1, "breadth-first", True, 6, "more streams than chunks"),
    (3, 1, 2, "depth-first", True, 7, "one stream"),
    (1, 1, 1, "depth-first", True, 8, "the batch in one chunk"),
    (4, 2, 2, "depth-first", False, 9, "pageable memory"),
    (4, 3, 1, "breadth-first", False, 10, "pageable memory, breadth-first"),
    (3, 3, 2, "breadth-first", False, 14, "pageable memory, breadth-first: a copy blocks the "
     "host, a compute does not, so chunk 0's copy out runs beside chunk 1's compute"),
]

#: (h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks, what the case
#: is for): the cases of :func:`check_best_chunks`.
BEST_CASES: list[tuple[float, float, float, int, int, float, int, str]] = [
    (0.63, 0.2, 0.44, 4, 2, 0.02, 12, "copy-bound, like Conv5 on an H100 with cuDNN in TF32"),
    (0.63, 0.67, 0.44, 4, 2, 0.02, 12, "compute-bound, like Conv5 on an H100 in FP32 (TF32 "
     "off)"),
    (0.3, 2.5, 0.2, 3, 2, 0.05, 10, "compute-bound"),
    (1.0, 2.0, 1.5, 1, 2, 0.0, 6, "one stream, no overhead: every chunk count ties"),
    (0.79, 1.68, 1.17, 1, 2, 0.0, 6, "one stream, no overhead: every count ties, but in float "
     "arithmetic 5 chunks come out a few 1e-16 ms shorter (round-off)"),
    (0.9, 1.1, 0.7, 8, 2, 0.0, 8, "no overhead: the most chunks win"),
    (0.8, 0.5, 0.6, 2, 1, 0.01, 8, "one copy engine, 2 streams"),
    (0.2, 0.3, 0.1, 4, 2, 0.5, 6, "a large overhead: one chunk wins"),
    (1.7, 0.4, 0.9, 3, 1, 0.03, 9, "one copy engine, 3 streams"),
]


def schedule_durations(chunks: int, seed: int) -> list[tuple[float, float, float]]:
    """The durations of a :data:`SCHEDULE_CASES` case: seeded, 0.2 to 2.4 ms with two decimals,
    every chunk different (as chunks of unequal size and content are)."""
    rng = np.random.default_rng(seed)
    values = np.round(rng.uniform(0.2, 2.4, size=(chunks, 3)), 2)
    return [tuple(float(v) for v in row) for row in values]


def reference_best(h2d_ms: float, compute_ms: float, d2h_ms: float, streams: int,
                   copy_engines: int, overhead_ms: float, max_chunks: int) -> tuple[int, float]:
    """The reference of :func:`check_best_chunks`: for c = 1..max_chunks, c chunks of
    ``(h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + overhead_ms)``,
    depth-first, pinned, scheduled by :func:`simulate`; the c with the smallest makespan
    (ties within :data:`TIE_MS`: the fewest chunks) and that makespan (ms)."""
    best = None
    for c in range(1, max_chunks + 1):
        each = (h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + overhead_ms)
        span = makespan(simulate([each] * c, streams, copy_engines, "depth-first", True))
        if best is None or span < best[1] - TIE_MS:
            best = (c, span)
    return best


# ------------------------------------------------------------------------ TODO 1: chunks


def _bounds_hint(got: list, n: int, chunks: int) -> str:
    sizes = [b - a for a, b in got]
    if len(got) != chunks:
        return (f"return exactly `chunks` ranges ({chunks}): with sizes n // chunks, and the "
                "first n % chunks of them one larger (divmod(n, chunks)), no chunk is empty.")
    if got[0][0] != 0 or got[-1][1] != n or any(got[k][1] != got[k + 1][0]
                                                for k in range(len(got) - 1)):
        return ("the ranges are (start, stop) with stop exclusive, as in Python slices: the "
                "first starts at 0, each starts where the one before stopped, the last stops "
                "at n.")
    if min(sizes) < 1:
        return "no chunk may be empty: the sizes are n // chunks or n // chunks + 1."
    if max(sizes) - min(sizes) > 1:
        return ("as even as possible: sizes differ by at most 1. Spread the remainder "
                "n % chunks over the chunks, one image each, instead of giving it to one.")
    return "the larger chunks come first: chunk j gets one more image when j < n % chunks."


def _bounds_runner(fn):
    def run(n, chunks, error):
        if error:
            try:
                got = fn(n, chunks)
            except NotImplementedError:
                raise
            except ValueError as exc:
                if "chunks" not in str(exc):
                    raise WrongResult(
                        f"your ValueError says {str(exc)!r}, which does not name the parameter",
                        "name the parameter and its valid range, e.g. ValueError(f\"chunks must "
                        "be in 1..{n}, got {chunks}\")") from None
                return 0.0
            except Exception as exc:  # noqa: BLE001 - the learner's, reported
                raise WrongResult(f"your code raised {type(exc).__name__}: {exc}, expected a "
                                  "ValueError", "check the range first and raise ValueError "
                                  "(not assert): if not 1 <= chunks <= n: raise "
                                  "ValueError(...)") from None
            raise WrongResult(f"your function returned {got!r:.100} instead of raising "
                              "ValueError", "chunks must be in 1..n: fewer than 1 chunk is no "
                              "split, more chunks than images leaves a chunk empty; raise "
                              "ValueError naming chunks.")
        got = fn(n, chunks)
        expected = reference_bounds(n, chunks)
        try:
            items = [tuple(pair) for pair in got]
            pairs = [(int(a), int(b)) for a, b in items]
            same = all(float(a) == int(a) and float(b) == int(b) for a, b in items)
        except (TypeError, ValueError):
            raise WrongResult(f"your function returned {got!r:.100}: expected a list of "
                              f"(start, stop) pairs of ints, e.g. {expected}") from None
        if pairs != expected or not same:
            raise WrongResult(f"expected {expected}, got {pairs}", _bounds_hint(pairs, n, chunks))
        return 0.0
    return run


def check_chunk_bounds(fn) -> Report:
    """Check ``fn(n, chunks) -> [(start, stop), ...]`` against
    :func:`helpers.experiments.transfers.model.chunk_bounds`.

    Args:
        fn: the learner's split of ``n`` images (ints) into ``chunks`` contiguous ranges,
            ``stop`` exclusive, sizes differing by at most 1, the larger ones first; it must raise
            ``ValueError`` naming ``chunks`` for chunks < 1 or chunks > n.

    Returns:
        A :class:`Report` over :data:`CHUNK_CASES` then :data:`CHUNK_ERROR_CASES`; never raises
        for what ``fn`` does. A failure names ``n`` and ``chunks``, the expected and actual
        ranges, and which property broke (count, contiguity, an empty chunk, evenness, order).
    """
    cases = [Case((n, chunks, False), 0.0, f"n = {n}, chunks = {chunks} ({what})")
             for n, chunks, what in CHUNK_CASES]
    cases += [Case((n, chunks, True), 0.0, f"n = {n}, chunks = {chunks} ({what}: must raise "
                   "ValueError)") for n, chunks, what in CHUNK_ERROR_CASES]
    return check_cases("Lab 7, TODO 1: chunk bounds", _bounds_runner(fn), cases)


# ---------------------------------------------------------------------- TODO 2: the schedule

def _schedule_runner(fn):
    def run(durations, streams, copy_engines, order, pinned):
        expected = simulate(durations, streams, copy_engines, order, pinned)
        result = fn([tuple(d) for d in durations], streams, copy_engines, order, pinned)
        got = parse_schedule(result, len(durations))
        issued = {key: k for k, key in enumerate(issue_order(len(durations), order))}
        differ = sorted((o["start_ms"], issued[(o["chunk"], o["op"])], (o["chunk"], o["op"]))
                        for o in expected
                        if abs(got[(o["chunk"], o["op"])][0] - o["start_ms"]) > TOL_MS
                        or abs(got[(o["chunk"], o["op"])][1] - o["end_ms"]) > TOL_MS)
        if not differ:
            return 0.0
        key = differ[0][2]
        ref = next((o["start_ms"], o["end_ms"]) for o in expected
                   if (o["chunk"], o["op"]) == key)
        what, hint = broken_rule(got, expected, key, durations, streams, copy_engines, order,
                                  pinned)
        raise WrongResult(f"{name_of(key)}: expected {span_of(ref)}, got {span_of(got[key])} (the "
                          "first operation, by expected start, whose times differ). "
                          f"{what[0].upper()}{what[1:]}.", hint)
    return run


def _schedule_cases() -> list[Case]:
    cases = []
    for chunks, streams, engines, order, pinned, seed, what in SCHEDULE_CASES:
        durations = schedule_durations(chunks, seed)
        shown = ", ".join(f"({h:g}, {c:g}, {d:g})" for h, c, d in durations)
        cases.append(Case((durations, streams, engines, order, pinned), 0.0,
                          f"{chunks} chunk{'s' if chunks > 1 else ''}, {streams} "
                          f"stream{'s' if streams > 1 else ''}, {engines} copy "
                          f"engine{'s' if engines > 1 else ''}, {order}, "
                          f"{'pinned' if pinned else 'pageable'} ({what}; durations (h2d, "
                          f"compute, d2h) ms per chunk: {shown})"))
    return cases


def check_schedule(fn) -> Report:
    """Check ``fn(durations, streams, copy_engines, order, pinned) -> schedule`` against
    :func:`simulate` on :data:`SCHEDULE_CASES`.

    Args:
        fn: the learner's schedule. ``durations``: a list of ``(h2d_ms, compute_ms, d2h_ms)``
            per chunk; ``streams``: int >= 1; ``copy_engines``: 1 or 2; ``order``:
            ``"depth-first"`` or ``"breadth-first"``; ``pinned``: bool. It must return one dict
            ``{"chunk", "op", "start_ms", "end_ms"}`` per operation, in any order.

    Returns:
        A :class:`Report` (times equal within :data:`TOL_MS`); never raises for what ``fn``
        does. A failure names the case (chunks, streams, engines, order, memory, durations),
        the first operation by expected start whose times differ with both spans, the first
        rule the learner's own schedule breaks (durations, the issue order, rule 5 for
        pageable memory: only copies block the host, stream order, an engine running two
        operations, one copy engine used as two, FIFO order, or an operation started later
        than allowed) and a hint for it.
    """
    return check_cases("Lab 7, TODO 2: the schedule of a chunked pipeline",
                       _schedule_runner(fn), _schedule_cases())


# ------------------------------------------------------------------ TODO 3: how many chunks


def _chunks(c: int) -> str:
    return f"{c} chunk" + ("s" if c != 1 else "")


def _best_runner(fn):
    def run(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks):
        best_c, best_m = reference_best(h2d_ms, compute_ms, d2h_ms, streams, copy_engines,
                                        overhead_ms, max_chunks)
        got = fn(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks)
        try:
            c, m = got
            ok = float(c) == int(c) and math.isfinite(float(m))
        except (TypeError, ValueError):
            ok = False
        if not ok or isinstance(c, bool):
            raise WrongResult(f"your function returned {got!r:.100}", "return the pair "
                              "(chunks, makespan_ms): an int in 1..max_chunks and a number")
        c, m = int(c), float(m)
        if not 1 <= c <= max_chunks:
            raise WrongResult(f"your chunk count {c} is outside 1..{max_chunks}",
                              "try c = 1, 2, ..., max_chunks (range(1, max_chunks + 1))")
        if c != best_c:
            each = (h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms,
                    d2h_ms / c + overhead_ms)
            at_c = makespan(simulate([each] * c, streams, copy_engines, "depth-first", True))
            said = (f"expected {_chunks(best_c)} (makespan {best_m:.4f} ms), got {c}; by the "
                    f"rules {_chunks(c)} take {at_c:.4f} ms")
            if abs(at_c - best_m) <= TIE_MS:
                off = (f" ({_chunks(c)} come out {best_m - at_c:.1e} ms shorter: float "
                       "round-off, not a faster pipeline)" if at_c < best_m else "")
                raise WrongResult(said + off, "the tie rule: ties go to the fewest chunks, and "
                                  "makespans within 1e-6 ms of each other tie (round-off). A "
                                  "makespan counts as smaller only if it is more than 1e-6 ms "
                                  "below the best so far (span < best - 1e-6, not span < best), "
                                  "so a later, larger c never wins a tie.")
            if overhead_ms > 0 and c == reference_best(h2d_ms, compute_ms, d2h_ms, streams,
                                                       copy_engines, 0.0, max_chunks)[0]:
                raise WrongResult(said, "every operation pays overhead_ms: with c chunks each "
                                  "takes (h2d_ms / c + overhead_ms, compute_ms / c + "
                                  "overhead_ms, d2h_ms / c + overhead_ms); without it, more "
                                  "chunks always look better.")
            raise WrongResult(said, "for each c in 1..max_chunks, schedule c chunks of (h2d_ms "
                              "/ c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + "
                              "overhead_ms) with your schedule, depth-first, pinned, and keep "
                              "the smallest makespan (if TODO 2's check fails, fix it first).")
        if abs(m - best_m) > max(TOL_MS, 1e-9 * best_m):
            raise WrongResult(f"{_chunks(c)} is right, but their makespan is {best_m:.4f} ms, "
                              f"you returned {m:.4f} ms", "the makespan is the end of the "
                              "operation that finishes last: max(op['end_ms'] for op in ops).")
        return 0.0
    return run


def check_best_chunks(fn) -> Report:
    """Check ``fn(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks)
    -> (chunks, makespan_ms)`` against :func:`reference_best` on :data:`BEST_CASES`.

    Args:
        fn: the learner's search. The three times are the whole batch's, ms (> 0); c chunks
            take ``(h2d_ms / c + overhead_ms, ...)`` each, depth-first, pinned; ``streams``
            >= 1, ``copy_engines`` 1 or 2, ``overhead_ms`` >= 0, ``max_chunks`` >= 1.

    Returns:
        A :class:`Report`; never raises for what ``fn`` does. A failure names the case, the
        expected chunk count and makespan, the makespan of the learner's count by the rules,
        and the likely cause (overhead left out, ties to more chunks, a tie lost to float
        round-off by a comparison without the 1e-6 ms tolerance, the makespan).
    """
    cases = [Case(args[:7], 0.0, f"h2d_ms = {args[0]:g}, compute_ms = {args[1]:g}, d2h_ms = "
                  f"{args[2]:g}, {args[3]} stream{'s' if args[3] > 1 else ''}, {args[4]} copy "
                  f"engine{'s' if args[4] > 1 else ''}, overhead_ms = {args[5]:g}, max_chunks = "
                  f"{args[6]} ({args[7]})") for args in BEST_CASES]
    return check_cases("Lab 7, TODO 3: how many chunks", _best_runner(fn), cases)

"""Lab 7's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab7_overlap_copies.ipynb``. The
planted mistakes: for the chunk bounds, the remainder all in the last chunk, ceil division (an
empty or missing trailing chunk), an off-by-one stop, the larger chunks last, no error for more
chunks than images, an error that does not name ``chunks``, an assert instead of a ValueError;
for the schedule, one wrong model per rule of ``lab7.RULES`` (stream order ignored, engines not
exclusive, one copy engine used as two, FIFO ignored, everything serial, a stream per chunk,
pageable treated as pinned, pageable read as "everything serialises" or as "only a copy in
blocks the host", durations read in the wrong order, two copy engines used as one, the issue
order ignored), each failing with the hint of its own rule; for the chunk count, the overhead
ignored, ties to the most chunks, ties compared without the round-off tolerance, the last count
never tried, the makespan misread.
"""

from __future__ import annotations

import math

import pytest

from helpers.checks import lab7
from helpers.checks.lab7 import data as lab7_data
from helpers.experiments.transfers import model as transfer_model

# ------------------------------------------------------------------- the solution notebook's


def chunk_bounds(n, chunks):
    if not 1 <= chunks <= n:
        raise ValueError(f"chunks must be in 1..{n} (the batch size), got {chunks}")
    base, extra = divmod(n, chunks)          # every chunk gets base; the first `extra` one more
    bounds, start = [], 0
    for j in range(chunks):
        stop = start + base + (1 if j < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def schedule(durations, streams, copy_engines, order, pinned):
    ops_of_chunk = ("h2d", "compute", "d2h")
    n = len(durations)
    if order == "depth-first":
        issued = [(i, k) for i in range(n) for k in range(3)]
    else:                                    # breadth-first
        issued = [(i, k) for k in range(3) for i in range(n)]
    engine_free, stream_free = {}, {}        # when each engine / stream is next free (ms)
    host_free = 0.0                          # pageable: the end of the last copy issued
    ops = []
    for i, k in issued:
        op = ops_of_chunk[k]
        engine = "compute" if op == "compute" else ("copy" if copy_engines == 1 else op)
        stream = i % streams
        start = max(engine_free.get(engine, 0.0), stream_free.get(stream, 0.0), host_free)
        end = start + durations[i][k]
        engine_free[engine] = stream_free[stream] = end
        if not pinned and op != "compute":
            host_free = end                  # the host is blocked in the copy until it ends
        ops.append({"chunk": i, "op": op, "start_ms": start, "end_ms": end})
    return ops


def best_chunks(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks):
    best = None
    for c in range(1, max_chunks + 1):
        each = (h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + overhead_ms)
        ops = schedule([each] * c, streams, copy_engines, "depth-first", True)
        span = max(op["end_ms"] for op in ops)
        if best is None or span < best[1] - 1e-6:   # a tie keeps the fewer chunks
            best = (c, span)
    return best


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------ planted mistakes: the chunks


def bounds_by_sizes(sizes_of, check=True, message="chunks must be in 1..n"):
    def run(n, chunks):
        if check and not 1 <= chunks <= n:
            raise ValueError(message)
        out, start = [], 0
        for size in sizes_of(n, chunks):
            out.append((start, min(start + size, n)))
            start = min(start + size, n)
        return out
    return run


def remainder_last(n, c):
    return [n // c] * (c - 1) + [n - (c - 1) * (n // c)]


def ceil_sizes(n, c):
    return [math.ceil(n / c)] * c


def larger_last(n, c):
    return [n // c + (1 if j >= c - n % c else 0) for j in range(c)]


def even(n, c):
    return [n // c + (1 if j < n % c else 0) for j in range(c)]


def ceil_stop_early(n, chunks):
    """ceil division, stopping once n is covered: fewer chunks than asked."""
    size = math.ceil(n / chunks)
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def off_by_one(n, chunks):
    return [(a, b - 1) for a, b in chunk_bounds(n, chunks)]


def asserts(n, chunks):
    assert 1 <= chunks <= n
    return chunk_bounds(n, chunks)


BOUNDS_MISTAKES = {
    "remainder all in the last chunk": (bounds_by_sizes(remainder_last), "as even as possible"),
    "ceil division: an empty trailing chunk": (bounds_by_sizes(ceil_sizes),
                                               "no chunk may be empty"),
    "ceil division, stopping at n": (ceil_stop_early, "exactly `chunks` ranges"),
    "off by one: stop inclusive": (off_by_one, "stop exclusive"),
    "the larger chunks last": (bounds_by_sizes(larger_last), "larger chunks come first"),
    "no error for chunks > n": (bounds_by_sizes(even, check=False), "instead of raising"),
    "an error that does not name the parameter": (
        bounds_by_sizes(even, message="bad value"), "does not name the parameter"),
    "assert instead of ValueError": (asserts, "expected a ValueError"),
    "zeros": (lambda n, chunks: [(0, 0)] * chunks, "stop exclusive"),
}


# ---------------------------------------------------------- planted mistakes: the schedule


def model(stream_order=True, exclusive=True, engines_as=None, fifo=True, serial=False,
          stream_of=None, pageable_rule=True, duration_index=(0, 1, 2), order_as=None,
          combine=max, pageable_serial=False, blocking=("h2d", "d2h")):
    """A schedule with one rule of lab7.RULES misread; the defaults are the rules.

    stream_order: False starts an operation without waiting for its stream.
    exclusive: False lets an engine run any number of operations at once.
    engines_as: a copy engine count used instead of the given one.
    fifo: False lets an operation overtake earlier ones on its engine (list scheduling: the
    stream-ready operation that can start first goes next).
    serial: True makes every operation wait for the one issued before (one stream).
    stream_of: stream of chunk i (default i % streams).
    pageable_rule: False treats pageable memory as pinned.
    pageable_serial: True reads rule 5 as "everything serialises" (each operation waits for
    the one issued before it), not "a copy blocks the host".
    blocking: the operations that block the host with pageable memory (rule 5: both copies).
    duration_index: which entry of durations[i] each op reads.
    order_as: an issue order used instead of the given one.
    combine: how the engine's and the stream's free times give the start (max: the rule).
    """
    def run(durations, streams, copy_engines, order, pinned):
        n = len(durations)
        engines = engines_as or copy_engines
        issued = lab7.issue_order(n, order_as or order)
        stream = stream_of or (lambda i, s: i % s)
        serial_here = serial or (not pinned and pageable_rule and pageable_serial)
        host_blocks = not pinned and pageable_rule and not pageable_serial

        def dur(key):
            return durations[key[0]][duration_index[lab7.OPS.index(key[1])]]

        def engine(key):
            return lab7.engine_of(key[1], engines)

        waits, host = {}, {}
        last, copy = {}, None
        for k, key in enumerate(issued):
            s = stream(key[0], streams)
            waits[key] = (issued[k - 1] if k else None) if serial_here else last.get(s)
            host[key] = copy
            last[s] = key
            if host_blocks and key[1] in blocking:
                copy = key
        times = {}

        def host_free(key):
            return times[host[key]][1] if host[key] else 0.0

        if fifo:
            free = {}
            for key in issued:
                before = waits[key]
                start = max(host_free(key), combine(
                    free.get(engine(key), 0.0) if exclusive else 0.0,
                    times[before][1] if before and stream_order else 0.0))
                times[key] = (start, start + dur(key))
                free[engine(key)] = start + dur(key)
        else:
            free, left = {}, list(issued)
            while left:
                options = []
                for k, key in enumerate(left):
                    before = waits[key]
                    if (before is None or before in times) and (not host[key]
                                                                 or host[key] in times):
                        start = max(free.get(engine(key), 0.0), host_free(key),
                                    times[before][1] if before else 0.0)
                        options.append((start, k, key))
                start, k, key = min(options)
                times[key] = (start, start + dur(key))
                free[engine(key)] = start + dur(key)
                left.pop(k)
        return [{"chunk": i, "op": op, "start_ms": times[(i, op)][0],
                 "end_ms": times[(i, op)][1]} for i, op in issued]
    return run


SCHEDULE_MISTAKES = {
    "stream order ignored: compute before its copy": (model(stream_order=False),
                                                      "waits until its images are copied in"),
    "engines not exclusive": (model(exclusive=False), "one operation at a time"),
    "one copy engine used as two": (model(engines_as=2), "queue on the same engine"),
    "FIFO ignored: a later operation overtakes": (model(fifo=False), "a FIFO"),
    "streams ignored: everything serial": (model(serial=True), "one stream for everything"),
    "a stream per chunk (stream = chunk)": (model(stream_of=lambda i, s: i), "i % streams"),
    "pageable treated as pinned": (model(pageable_rule=False), "pageable"),
    "pageable: everything serialises (computes block the host too)": (
        model(pageable_serial=True), "only the copies block the host"),
    "pageable: only a copy in blocks the host": (model(blocking=("h2d",)), "rule 5"),
    "durations read as (h2d, d2h, compute)": (model(duration_index=(0, 2, 1)), "own duration"),
    "two copy engines used as one": (model(engines_as=1), "copy_engines = 2"),
    "issue order ignored (always depth-first)": (model(order_as="depth-first"),
                                                 "the one for depth-first order"),
    "issue order ignored (always breadth-first)": (model(order_as="breadth-first"),
                                                   "the one for breadth-first order"),
    "stream = chunk // streams": (model(stream_of=lambda i, s: i // s), ""),
    "engine and stream waited for one after the other (sum, not max)": (
        model(combine=lambda a, b: a + b), "by your own times it could start"),
    "zeros": (lambda d, s, e, o, p: [{"chunk": i, "op": op, "start_ms": 0.0, "end_ms": 0.0}
                                     for i in range(len(d)) for op in lab7.OPS], "duration"),
    "an empty list": (lambda d, s, e, o, p: [], "missing"),
    "the durations returned": (lambda d, s, e, o, p: d, "item 0"),
    "tuples, not dicts": (lambda d, s, e, o, p: [(o["chunk"], o["op"], o["start_ms"],
                                                  o["end_ms"]) for o in schedule(d, s, e, o, p)],
                          "one dict per operation"),
    "'H2D' for 'h2d'": (lambda d, s, e, o, p: [dict(x, op=x["op"].upper())
                                               for x in schedule(d, s, e, o, p)], "op is one"),
}


# ---------------------------------------------------------- planted mistakes: chunk count


def best_by(overhead=True, ties_to_most=False, last=0, span=max, strict=False):
    def run(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks):
        o = overhead_ms if overhead else 0.0
        best = None
        for c in range(1, max_chunks + 1 - last):
            each = (h2d_ms / c + o, compute_ms / c + o, d2h_ms / c + o)
            ops = schedule([each] * c, streams, copy_engines, "depth-first", True)
            m = span(op["end_ms"] for op in ops)
            if best is None or (m <= best[1] + 1e-6 if ties_to_most
                                else m < best[1] if strict else m < best[1] - 1e-6):
                best = (c, m)
        return best
    return run


BEST_MISTAKES = {
    "overhead ignored": (best_by(overhead=False), "every operation pays overhead_ms"),
    "ties to the most chunks": (best_by(ties_to_most=True), "ties go to the fewest chunks"),
    "ties compared strictly (span < best, no tolerance)": (best_by(strict=True),
                                                           "span < best - 1e-6"),
    "max_chunks never tried": (best_by(last=1), "for each c in 1..max_chunks"),
    "the makespan as the sum of ends": (best_by(span=sum), ""),
    "always max_chunks": (lambda h, c, d, s, e, o, m: (m, 0.0), ""),
    "a chunk count only": (lambda *args: best_chunks(*args)[0], "return the pair"),
}


CHECKERS = {
    "bounds": (lab7.check_chunk_bounds, chunk_bounds, BOUNDS_MISTAKES),
    "schedule": (lab7.check_schedule, schedule, SCHEDULE_MISTAKES),
    "best": (lab7.check_best_chunks, best_chunks, BEST_MISTAKES),
}
PLANTED = [(kind, name) for kind, (_, _, wrongs) in CHECKERS.items() for name in wrongs]


@pytest.mark.parametrize("kind", CHECKERS)
def test_a_stub_is_not_implemented_yet(kind):
    report = CHECKERS[kind][0](stub)
    assert not report and report.status == "not implemented" and report.cases_run == 0
    assert "not implemented yet" in report._repr_html_()


@pytest.mark.parametrize("kind", CHECKERS)
def test_the_solution_passes_every_case(kind):
    checker, solution, _ = CHECKERS[kind]
    report = checker(solution)
    assert report and report.status == "passed", str(report)


@pytest.mark.parametrize("kind,name", PLANTED)
def test_a_planted_mistake_fails_naming_the_case_and_its_rule(kind, name):
    checker, _, wrongs = CHECKERS[kind]
    wrong, words = wrongs[name]
    report = checker(wrong)
    assert not report and report.status == "failed", (name, str(report))
    assert words in report.message, (name, report.message)
    case = {"bounds": "chunks = ", "schedule": "copy engine", "best": "max_chunks = "}[kind]
    assert case in report.message, report.message


def test_a_schedule_failure_names_the_case_the_operation_and_both_spans():
    report = lab7.check_schedule(SCHEDULE_MISTAKES["FIFO ignored: a later operation overtakes"][0])
    assert report.message.startswith("on 4 chunks, 2 streams, 1 copy engine, depth-first, pinned")
    assert "chunk 1's h2d: expected" in report.message and ", got " in report.message
    assert "the first operation, by expected start, whose times differ" in report.message


def test_each_schedule_rule_is_caught_by_its_own_case():
    """The rules each planted model breaks, and the case where it is caught first."""
    where = {
        "stream order ignored: compute before its copy": "one copy engine, depth-first",
        "one copy engine used as two": "one copy engine, depth-first",
        "FIFO ignored: a later operation overtakes": "one copy engine, depth-first",
        "streams ignored: everything serial": "one copy engine, breadth-first",
        "a stream per chunk (stream = chunk)": "one copy engine, breadth-first",
        "two copy engines used as one": "5 chunks sharing 2 streams",
        "pageable treated as pinned": "pageable memory",
    }
    for name, case in where.items():
        assert case in lab7.check_schedule(SCHEDULE_MISTAKES[name][0]).message, name


def test_a_learner_exception_is_reported_readably():
    def broken(durations, streams, copy_engines, order, pinned):
        return durations[99]

    report = lab7.check_schedule(broken)
    assert report.status == "error" and "IndexError" in report.message
    assert "durations[99]" in report.message
    report = lab7.check_best_chunks(lambda *args: 1 / 0)
    assert report.status == "error" and "ZeroDivisionError" in report.message


def test_the_simulation_agrees_with_the_solution_on_random_cases():
    import random

    rng = random.Random(7)
    for _ in range(400):
        n = rng.randint(1, 7)
        args = ([tuple(rng.choice([0.0, round(rng.uniform(0.05, 3), 3)]) for _ in range(3))
                 for _ in range(n)], rng.randint(1, 5), rng.choice([1, 2]),
                rng.choice(lab7.ORDERS), rng.random() < 0.7)
        want = lab7.simulate(*args)
        got = {(o["chunk"], o["op"]): o for o in schedule(*args)}
        for o in want:
            mine = got[(o["chunk"], o["op"])]
            assert mine["start_ms"] == pytest.approx(o["start_ms"], abs=1e-9), args
            assert mine["end_ms"] == pytest.approx(o["end_ms"], abs=1e-9), args


def test_the_pipeline_of_notebook_08_is_a_stream_per_chunk_on_two_copy_engines():
    """transfer_model.estimated_timeline's overlapped run (its three stage streams ordered by
    events) is the schedule of one stream per chunk, two copy engines, depth-first."""
    rows = [r for r in transfer_model.estimated_timeline("Conv5", 4) if r["run"] == "overlapped"]
    durations = [tuple(next(r["end_ms"] - r["start_ms"] for r in rows
                            if r["chunk"] == j and r["kind"] == op) for op in lab7.OPS)
                 for j in range(4)]
    sim = {(o["chunk"], o["op"]): o for o in lab7.simulate(durations, 4, 2, "depth-first", True)}
    for r in rows:
        assert sim[(r["chunk"], r["kind"])]["start_ms"] == pytest.approx(r["start_ms"])


def test_depth_first_on_one_copy_engine_is_serial_and_breadth_first_wins():
    """The Predict moment's answer holds for any positive durations."""
    durations = lab7.schedule_durations(4, 11)
    depth = lab7.makespan(lab7.simulate(durations, 2, 1, "depth-first", True))
    breadth = lab7.makespan(lab7.simulate(durations, 2, 1, "breadth-first", True))
    assert depth == pytest.approx(sum(map(sum, durations)))
    assert breadth < depth


def test_the_schedule_cases_separate_every_wrong_model():
    """No planted model gives the reference's times on every case (so each can fail)."""
    for name, (wrong, _) in SCHEDULE_MISTAKES.items():
        assert lab7.check_schedule(wrong).status != "passed", name


def test_the_best_chunk_cases_have_no_near_ties_but_true_ones():
    for h, c, d, s, e, o, m, _ in lab7.BEST_CASES:
        spans = []
        for k in range(1, m + 1):
            each = (h / k + o, c / k + o, d / k + o)
            spans.append(lab7.makespan(lab7.simulate([each] * k, s, e, "depth-first", True)))
        best = min(spans)
        gaps = [x - best for x in spans]
        assert all(g <= lab7.TIE_MS or g > 1e-4 for g in gaps), (h, c, d, s, e, o, m)
    ties = [case for case in lab7.BEST_CASES if "ties" in case[-1]]
    assert ties and lab7.reference_best(*ties[0][:7])[0] == 1


def test_the_rules_are_stated_once_and_numbered():
    for k in range(1, 6):
        assert f"\n{k}. " in lab7.RULES
    assert "i % streams" in lab7.RULES and "FIFO" in lab7.RULES


def test_the_simulation_refuses_bad_arguments():
    with pytest.raises(ValueError, match="copy_engines"):
        lab7.simulate([(1, 1, 1)], 1, 3, "depth-first", True)
    with pytest.raises(ValueError, match="order"):
        lab7.simulate([(1, 1, 1)], 1, 1, "sideways", True)
    with pytest.raises(ValueError, match="streams"):
        lab7.simulate([(1, 1, 1)], 0, 1, "depth-first", True)
    with pytest.raises(ValueError, match="durations"):
        lab7.simulate([], 1, 1, "depth-first", True)


def test_layer_stages_from_results_and_the_estimate_without_them(tmp_path):
    recorded = lab7_data.layer_stages("Conv5", 4)
    if recorded["source"] == "recorded":
        assert recorded["label"].startswith("GPU: ")
        assert len(recorded["durations"]) == 4 and recorded["fixed_copy_ms"] > 0
        assert sum(d[1] for d in recorded["durations"]) == pytest.approx(recorded["whole"][1])
    estimate = lab7_data.layer_stages("Conv5", 3, directory=tmp_path)
    assert estimate["source"] == "estimate" and estimate["label"].startswith("ESTIMATE")
    assert [b - a for a, b in estimate["bounds"]] == [43, 43, 42]
    assert estimate["whole_pageable"] is None and estimate["timeline"] == []
    assert sum(d[0] for d in estimate["durations"]) == pytest.approx(estimate["whole"][0])
    with pytest.raises(ValueError, match="chunks"):
        lab7_data.layer_stages("Conv5", 0)


def test_the_timeline_text_draws_each_operation_on_its_engine():
    ops = lab7.simulate([(1, 2, 1)] * 3, 3, 2, "depth-first", True)
    text = lab7_data.timeline_text(ops, 2, width=64)
    lines = text.splitlines()
    assert [line.split("  ")[0] for line in lines[:3]] == ["copy engine (in)", "compute engine",
                                                           "copy engine (out)"]
    assert all(f"[{label}" in text.replace("-", "") for label in ("h0", "c1", "d2"))
    assert lines[-1].strip().startswith("0 ms") and lines[-1].endswith("8 ms")
    one = lab7_data.timeline_text(lab7.simulate([(1, 2, 1)] * 2, 2, 1, "depth-first", True), 1)
    assert one.splitlines()[0].startswith("copy engine ") and "d1" in one
    with pytest.raises(ValueError, match="width"):
        lab7_data.timeline_text(ops, 2, width=5)

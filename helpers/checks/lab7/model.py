"""The model of Lab 7's pipeline: its rules, their event simulation, and what a schedule breaks.

:data:`RULES` states the model (also in the lab, word for word); :func:`simulate` computes the
schedule it gives, by an event simulation; :func:`parse_schedule` reads a learner's schedule and
:func:`broken_rule` names the first rule it breaks, with a hint. A schedule is a list of dicts
``{"chunk": int, "op": "h2d" | "compute" | "d2h", "start_ms": float, "end_ms": float}``;
``durations`` are ``(h2d_ms, compute_ms, d2h_ms)`` per chunk. Times in ms.

Source: CUDA C Programming Guide, "Asynchronous Concurrent Execution" (streams, copy engines,
pinned memory); CUDA Runtime API, "API synchronization behavior" (copies from pageable memory
block the host); Li et al., ICPP 2016, Section V-D (asynchronous transfers, pinned memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from helpers.checks import WrongResult

__all__ = ["RULES", "OPS", "ORDERS", "TOL_MS", "issue_order", "engine_of", "simulate",
           "makespan", "name_of", "span_of", "parse_schedule", "broken_rule"]

#: The three operations of a chunk, in stream order.
OPS = ("h2d", "compute", "d2h")
#: The two issue orders.
ORDERS = ("depth-first", "breadth-first")
#: Times that differ by at most this (ms) are equal in the checks.
TOL_MS = 1e-6

#: The model the schedule TODO follows, word for word as the lab states it.
RULES = """\
A batch is split into chunks. Chunk i is three operations, in this order: h2d (copy its
images from host to device), compute, d2h (copy its results back), with given durations (ms).
1. Streams. Chunk i goes to stream i % streams. A stream runs its operations in the order
   they were issued: an operation waits until the operation issued before it to the same
   stream has ended (whichever chunk that was).
2. Issue order. "depth-first": chunk by chunk (h2d, compute, d2h of chunk 0, then of
   chunk 1, ...). "breadth-first": the h2d of every chunk, then every compute, then every
   d2h, each in chunk order.
3. Engines. One compute engine runs every compute. Copies run on copy engines: with
   copy_engines = 1, h2d and d2h share one; with copy_engines = 2, h2d has one and d2h the
   other. An engine runs one operation at a time, in issue order (a FIFO: an operation never
   overtakes one issued earlier to the same engine, even one still waiting for its stream).
4. Start and end: an operation starts as soon as its engine has finished the operation
   issued to it before and its stream's previous operation has ended (at 0 ms if there is
   neither); it ends at its start + its duration. With pinned host memory (pinned=True)
   that is all: the host issues every operation at once and never waits.
5. Pageable host memory (pinned=False): a copy (h2d or d2h) also blocks the host until it
   has ended, so no operation issued after a copy starts before that copy has ended. A
   compute does not block the host, and work issued before a copy keeps running: a copy
   overlaps computes already issued to other streams (rules 1, 3 and 4 still hold).
The makespan is the end of the operation that finishes last."""


def issue_order(chunks: int, order: str) -> list[tuple[int, str]]:
    """The operations ``(chunk, op)`` in the order they are issued (rule 2 of :data:`RULES`).

    Raises:
        ValueError: ``chunks < 1`` or ``order`` not in :data:`ORDERS`.
    """
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be an int >= 1, got {chunks!r}")
    if order == "depth-first":
        return [(i, op) for i in range(chunks) for op in OPS]
    if order == "breadth-first":
        return [(i, op) for op in OPS for i in range(chunks)]
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def engine_of(op: str, copy_engines: int) -> str:
    """The engine that runs ``op`` (rule 3): ``"compute engine"``, ``"copy engine"`` (one,
    both directions) or ``"copy engine (in)"`` / ``"copy engine (out)"``."""
    if op == "compute":
        return "compute engine"
    if copy_engines == 1:
        return "copy engine"
    return "copy engine (in)" if op == "h2d" else "copy engine (out)"


def _check_args(durations, streams, copy_engines, order) -> None:
    if not durations:
        raise ValueError("durations must hold (h2d_ms, compute_ms, d2h_ms) for >= 1 chunk")
    for d in durations:
        if len(d) != 3 or not all(math.isfinite(v) and v >= 0 for v in d):
            raise ValueError(f"durations must be (h2d_ms, compute_ms, d2h_ms) >= 0, got {d!r}")
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"streams must be an int >= 1, got {streams!r}")
    if copy_engines not in (1, 2):
        raise ValueError(f"copy_engines must be 1 or 2, got {copy_engines!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def simulate(durations: Sequence[Sequence[float]], streams: int, copy_engines: int, order: str,
             pinned: bool) -> list[dict]:
    """The schedule :data:`RULES` give, by an event simulation independent of issue-order
    arithmetic: each engine has a queue in issue order; the next event is the queue head that
    can start earliest (its engine free, its stream's previous operation done and, for
    pageable memory, the last copy issued before it done: rule 5).

    Args:
        durations: ``(h2d_ms, compute_ms, d2h_ms)`` per chunk, each >= 0.
        streams: >= 1. copy_engines: 1 or 2. order: one of :data:`ORDERS`. pinned: bool.

    Returns:
        One dict ``{"chunk", "op", "start_ms", "end_ms"}`` per operation, in issue order.

    Raises:
        ValueError: a parameter outside the ranges above.
    """
    _check_args(durations, streams, copy_engines, order)
    issued = issue_order(len(durations), order)
    waits_for, last_in_stream, last_copy = {}, {}, None
    for i, op in issued:
        stream = i % streams
        waits_for[(i, op)] = [key for key in (last_in_stream.get(stream), last_copy)
                              if key is not None]
        last_in_stream[stream] = (i, op)
        if not pinned and op != "compute":
            last_copy = (i, op)        # the host is blocked in it until it has ended
    queues: dict[str, list] = {}
    for i, op in issued:
        queues.setdefault(engine_of(op, copy_engines), []).append((i, op))
    engine_free = dict.fromkeys(queues, 0.0)
    ended: dict[tuple[int, str], float] = {}
    started: dict[tuple[int, str], float] = {}
    while any(queues.values()):
        ready = []
        for engine, queue in queues.items():
            if not queue:
                continue
            head = queue[0]
            if all(key in ended for key in waits_for[head]):
                start = max([engine_free[engine]] + [ended[key] for key in waits_for[head]])
                ready.append((start, issued.index(head), engine))
        start, _, engine = min(ready)
        head = queues[engine].pop(0)
        started[head] = start
        ended[head] = engine_free[engine] = start + durations[head[0]][OPS.index(head[1])]
    return [{"chunk": i, "op": op, "start_ms": started[(i, op)], "end_ms": ended[(i, op)]}
            for i, op in issued]


def makespan(ops: Sequence[dict]) -> float:
    """The end of the operation that finishes last, ms."""
    return max(float(o["end_ms"]) for o in ops)


_FORMAT = ("return a list with one dict per operation: {'chunk': i, 'op': 'h2d' | 'compute' | "
           "'d2h', 'start_ms': float, 'end_ms': float}")


def name_of(key: tuple[int, str]) -> str:
    """``"chunk 2's h2d"`` for the key ``(2, "h2d")``."""
    return f"chunk {key[0]}'s {key[1]}"


def span_of(t: tuple[float, float]) -> str:
    """``"1.000 to 2.500 ms"`` for ``(start_ms, end_ms)``."""
    return f"{t[0]:.3f} to {t[1]:.3f} ms"


def parse_schedule(result, n: int) -> dict[tuple[int, str], tuple[float, float]]:
    """A learner's schedule of ``n`` chunks as ``{(chunk, op): (start_ms, end_ms)}``.

    Raises:
        WrongResult: not a list of dicts with the four keys, an unknown op or chunk, a time that
            is not a finite number, an operation given twice or missing.
    """
    if isinstance(result, (dict, str)) or not isinstance(result, (list, tuple)):
        raise WrongResult(f"your function returned {type(result).__name__}, expected a list of "
                          f"{3 * n} dicts", _FORMAT)
    got = {}
    for k, item in enumerate(result):
        if not isinstance(item, dict) or not {"chunk", "op", "start_ms", "end_ms"} <= item.keys():
            raise WrongResult(f"item {k} of your list is {item!r:.100}", _FORMAT)
        chunk, op = item["chunk"], item["op"]
        if op not in OPS:
            raise WrongResult(f"item {k} has op {op!r}", "op is one of 'h2d', 'compute', 'd2h'")
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) \
                or not 0 <= chunk < n:
            raise WrongResult(f"item {k} has chunk {chunk!r}", f"chunk is an int in 0..{n - 1}")
        try:
            start, end = float(item["start_ms"]), float(item["end_ms"])
        except (TypeError, ValueError):
            raise WrongResult(f"item {k} has start_ms {item['start_ms']!r:.40} and end_ms "
                              f"{item['end_ms']!r:.40}", "times are numbers (ms)") from None
        if not (math.isfinite(start) and math.isfinite(end)):
            raise WrongResult(f"{name_of((int(chunk), op))} has start_ms {start} and end_ms {end}",
                              "times are finite numbers (ms)")
        if (int(chunk), op) in got:
            raise WrongResult(f"{name_of((int(chunk), op))} appears twice", _FORMAT)
        got[(int(chunk), op)] = (start, end)
    missing = [(i, op) for i in range(n) for op in OPS if (i, op) not in got]
    if missing:
        raise WrongResult(f"{len(missing)} of the {3 * n} operations are missing, first "
                          f"{name_of(missing[0])}", _FORMAT)
    return got


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] - TOL_MS and b[0] < a[1] - TOL_MS


def _same_starts(got, ops) -> bool:
    return all(abs(got[(o["chunk"], o["op"])][0] - o["start_ms"]) <= TOL_MS for o in ops)


def _blocked_host(got, issued):
    """(copy, later operation) for the earliest start before a pageable copy issued before it
    has ended (rule 5), or None."""
    late = []
    for k, a in enumerate(issued):
        if a[1] != "compute":
            late += [(got[b][0], b, a) for b in issued[k + 1:] if got[b][0] < got[a][1] - TOL_MS]
    return min(late)[1:] if late else None


_RULE5 = ("with pageable memory a copy blocks the host until it has ended (rule 5): nothing "
          "issued after a copy starts before it ends. A compute does not block the host, so a "
          "copy still runs beside computes issued before it to other streams; keep the end of "
          "the last copy issued as one more time an operation waits for.")


def _pageable(got, durations, streams, copy_engines, order):
    """What a pageable schedule gets wrong about rule 5, before the other rules are checked."""
    if _same_starts(got, simulate(durations, streams, copy_engines, order, True)):
        return ("your schedule is the one for pinned memory",
                "pinned is False here: " + _RULE5)
    issued = issue_order(len(durations), order)
    blocked = _blocked_host(got, issued)
    if blocked:
        later, copy = blocked
        return (f"{name_of(later)} starts at {got[later][0]:.3f} ms, before {name_of(copy)}, a "
                f"copy from pageable memory issued before it, has ended ({got[copy][1]:.3f} ms)",
                _RULE5)
    if all(got[b][0] >= got[a][1] - TOL_MS for a, b in zip(issued, issued[1:])):
        return ("nothing in your schedule overlaps: every operation waits for the one issued "
                "just before it, but with pageable memory only the copies block the host",
                "rule 5: a compute is issued without waiting, so a copy issued after it to "
                "another stream can run while it computes (in breadth-first order, chunk 0's "
                "copy out runs beside chunk 1's compute). Wait for the last copy issued, not "
                "for every operation issued before.")
    return None


def _streams_and_engines(got, issued, streams, copy_engines):
    """The first break of rules 1 and 3 in the learner's own times, or None."""
    last, late = {}, []
    for key in issued:
        before = last.get(key[0] % streams)
        if before is not None and got[key][0] < got[before][1] - TOL_MS:
            late.append((got[key][0], key, before))
        last[key[0] % streams] = key
    if late:
        _, key, before = min(late)
        said = (f"{name_of(key)} starts at {got[key][0]:.3f} ms, before {name_of(before)} has "
                f"ended ({got[before][1]:.3f} ms)")
        if before[0] == key[0]:
            return (said, "a stream runs its operations in issue order (rule 1): a chunk's "
                    "compute waits until its images are copied in (its h2d has ended), "
                    "its d2h until its compute has ended.")
        return (f"{said}; both are in stream {key[0] % streams} (chunk i goes to stream "
                f"i % streams, {streams} streams), and {name_of(before)} was issued first",
                "with fewer streams than chunks, chunks share streams (stream = "
                "chunk % streams), and a stream runs everything issued to it in issue "
                "order (rule 1), across chunks too: in breadth-first order with 2 streams, "
                "chunk 0's compute waits for chunk 2's h2d.")
    engines = {}
    for key in issued:
        engines.setdefault(engine_of(key[1], copy_engines), []).append(key)
    for engine, keys in engines.items():
        for a in keys:
            for b in keys:
                if a[1] == b[1] and a < b and _overlap(got[a], got[b]):
                    return (f"{name_of(a)} ({span_of(got[a])}) and {name_of(b)} "
                            f"({span_of(got[b])}) overlap on the {engine}",
                            "an engine runs one operation at a time (rule 3): one compute "
                            "engine for every compute, and one copy engine per direction "
                            "at most; an operation starts only once its engine has finished "
                            "the operation issued to it before.")
    if copy_engines == 1:
        for a in issued:
            for b in issued:
                if (a[1], b[1]) == ("h2d", "d2h") and _overlap(got[a], got[b]):
                    return (f"{name_of(a)} ({span_of(got[a])}) and {name_of(b)} "
                            f"({span_of(got[b])}) overlap, but with copy_engines = 1 both "
                            "directions share one copy engine",
                            "with one copy engine, h2d and d2h queue on the same engine "
                            "(rule 3); only copy_engines = 2 gives each direction its own.")
    for engine, keys in engines.items():
        for a, b in zip(keys, keys[1:]):
            if got[b][0] < got[a][1] - TOL_MS:
                return (f"on the {engine}, {name_of(b)} starts at {got[b][0]:.3f} ms, before "
                        f"{name_of(a)}, issued to that engine before it, has run (it starts "
                        f"at {got[a][0]:.3f} ms)",
                        "an engine takes its operations in issue order, a FIFO (rule 3): "
                        "an operation never overtakes one issued earlier to the same "
                        "engine, even one still waiting for its stream. With one copy "
                        "engine and depth-first order, chunk 1's h2d queues behind chunk "
                        "0's d2h: the false dependency that breadth-first order avoids.")
    return None


def broken_rule(got, expected, first, durations, streams, copy_engines, order, pinned):
    """(what is wrong, hint) for a schedule that differs from ``expected``: the first rule of
    :data:`RULES` the learner's own times break, in a fixed order of the rules."""
    issued = issue_order(len(durations), order)
    for key in issued:
        d = durations[key[0]][OPS.index(key[1])]
        if abs(got[key][1] - got[key][0] - d) > TOL_MS:
            return (f"{name_of(key)} lasts {got[key][1] - got[key][0]:.3f} ms, but its duration is "
                    f"{d:.3f} ms", "an operation ends at its start + its own duration; "
                    "durations[i] is (h2d_ms, compute_ms, d2h_ms) of chunk i, in that order.")
    other = ORDERS[1 - ORDERS.index(order)]
    if _same_starts(got, simulate(durations, streams, copy_engines, other, pinned)):
        return (f"your schedule is the one for {other} order",
                f"issue the operations in the order given (rule 2): here {order}. The order "
                "decides what each stream and each engine runs first.")
    found = (None if pinned else _pageable(got, durations, streams, copy_engines, order)) \
        or _streams_and_engines(got, issued, streams, copy_engines)
    if found:
        return found
    keys = list(got)
    if copy_engines == 2 and _same_starts(got, simulate(durations, streams, 1, order, pinned)):
        return ("your schedule is the one for a single copy engine",
                "with copy_engines = 2, h2d and d2h each have an engine (rule 3) and run at "
                "the same time when their streams allow.")
    ref = {(o["chunk"], o["op"]): (o["start_ms"], o["end_ms"]) for o in expected}
    serial = not any(_overlap(got[a], got[b]) for a in keys for b in keys if a < b)
    if pinned and serial and any(_overlap(ref[a], ref[b]) for a in keys for b in keys if a < b):
        return ("nothing in your schedule overlaps, but the rules let operations on different "
                "engines run at the same time here",
                "with pinned memory, operations of different streams run at once when their "
                "engines are free (rules 1, 3, 4): did every operation wait for the one issued "
                "before it (one stream for everything, or rule 5 applied to pinned memory)?")
    before = {}
    for other_key in issued[:issued.index(first)]:
        if engine_of(other_key[1], copy_engines) == engine_of(first[1], copy_engines):
            before["its engine's previous operation"] = other_key
        if other_key[0] % streams == first[0] % streams:
            before["its stream's previous operation"] = other_key
        if not pinned and other_key[1] != "compute":
            before["the last copy issued before it (rule 5)"] = other_key
    allowed = max((got[k][1] for k in before.values()), default=0.0)
    waited = "; ".join(f"{role}, {name_of(k)}, ends at {got[k][1]:.3f} ms"
                       for role, k in before.items()) or "nothing comes before it"
    return (f"{name_of(first)} starts at {got[first][0]:.3f} ms, but by your own times it could "
            f"start at {allowed:.3f} ms ({waited})",
            "rule 4: an operation starts as soon as its engine has finished the operation "
            "issued to it before and its stream's previous operation has ended"
            + ("" if pinned else ", and (rule 5) the last copy issued before it has ended")
            + "; check what else you make it wait for.")

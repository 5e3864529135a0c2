"""Checkers for Lab 9: the ring all-reduce, the collective behind data parallelism.

One checker per TODO of ``labs/lab9_ring_all_reduce.ipynb``: :func:`check_ring_step` (the
schedule ``ring_step(rank, world, step, phase) -> (send_chunk, recv_chunk)``, validated by
simulating which contributions every chunk holds), :func:`check_ring_all_reduce` (a 1-D
float32 tensor summed in place over W ranks: simulated ranks (:mod:`.sim`), then real
gloo processes (:mod:`.real`)) and :func:`check_ring_seconds` (the model of
:data:`RING_MODEL`). Also :func:`schedule_table` and :func:`fit_latency_bandwidth` for the lab.

W ranks, chunk c of x is ``torch.tensor_split(x, W)[c]``; rank r sends to (r + 1) % W and
receives from (r - 1) % W. Seconds, bytes, GB/s (1e9 bytes/s).

Source: Patarasuk and Yuan, J. Parallel Distrib. Comput. 69(2), 2009 (the ring all-reduce);
Thakur, Rabenseifner and Gropp, IJHPCA 19(1), 2005 (its cost, 2(W-1) latencies + 2(W-1)/W n).
"""

from __future__ import annotations

import numbers
import traceback

import numpy as np
import torch

from helpers.checks import Case, Report, check_cases, compare
from helpers.checks.lab9 import real as lab9_real
from helpers.checks.lab9 import sim as lab9_sim
from helpers.experiments.parallel import ring_allreduce_seconds

__all__ = [
    "PHASES",
    "REAL_WORLDS",
    "RING_MODEL",
    "SCHEDULE_WORLDS",
    "SECONDS_CASES",
    "SIM_WORLDS",
    "SIZES",
    "check_ring_all_reduce",
    "check_ring_seconds",
    "check_ring_step",
    "chunk_sizes",
    "fit_latency_bandwidth",
    "ring_elements",
    "schedule_table",
]

#: The two phases, as ``ring_step``'s ``phase`` argument names them.
PHASES = ("reduce-scatter", "all-gather")
#: World sizes W the schedule is simulated for.
SCHEDULE_WORLDS = (2, 3, 4, 5, 8)
#: World sizes of the simulated all-reduce, and of the real run on gloo processes.
SIM_WORLDS = (2, 3, 4)
REAL_WORLDS = (2, 3)
#: Tensor lengths n: one element, fewer than W... and n not a multiple of W.
SIZES = (1, 7, 37, 1000)

#: The cost model TODO 3 follows, in words (also in the lab).
RING_MODEL = """\
ring all-reduce of nbytes over W ranks: 2 (W - 1) steps (W - 1 of reduce-scatter, W - 1 of
all-gather); in each step every rank sends one chunk of nbytes / W bytes to the next rank,
all at the same time, so a step costs one latency plus nbytes / W over the link's bandwidth:
  seconds = 2 (W - 1) * (latency_s + nbytes / W / (bandwidth_gbps * 1e9))
with GB/s = 1e9 bytes per second (not 2**30). One rank: 0 steps, 0 seconds."""

#: Cases of TODO 3: (nbytes, W, bandwidth GB/s, latency s, what the case is for).
SECONDS_CASES = [
    (4 * 2**20, 4, 10.0, 5e-6, "4 MiB over 4 ranks"),
    (100e6, 8, 25.0, 2e-6, "a 100 MB gradient over 8 ranks"),
    (1_000_000, 3, 1.5, 1e-4, "1 MB over 3 ranks, slow link, large latency"),
    (0, 5, 10.0, 3e-6, "an empty message: latency only"),
    (2**30, 2, 100.0, 0.0, "1 GiB over 2 ranks, no latency: bandwidth only"),
    (4096, 1, 10.0, 5e-6, "one rank: nothing to send"),
]


def chunk_sizes(n: int, world: int) -> list[int]:
    """Lengths of ``torch.tensor_split(x, world)`` for ``x`` of n elements: n // W or one
    more, the longer ones first; some are 0 when n < W."""
    return [n // world + (c < n % world) for c in range(world)]


def ring_elements(n: int, world: int) -> list[int]:
    """Elements rank r sends in the lab's ring (one chunk per step, 2 (W - 1) steps): all
    chunks but (r + 1) % W in the reduce-scatter, all but (r + 2) % W in the all-gather."""
    s = chunk_sizes(n, world)
    return [2 * n - s[(r + 1) % world] - s[(r + 2) % world] if world > 1 else 0
            for r in range(world)]


# ------------------------------------------------------------------------------ TODO 1


class _Bad(Exception):
    """A schedule that breaks a rule: the message and the hint."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def _parts(counts) -> str:
    """x0+x2, or x0+x0+x1 (a contribution counted twice), or 'nothing'."""
    return "+".join(f"x{r}" for r, k in enumerate(counts) for _ in range(k)) or "nothing"


def _steps(fn, world: int, step: int, phase: str) -> list[tuple[int, int]]:
    out = []
    for rank in range(world):
        got = fn(rank, world, step, phase=phase)
        call = f"ring_step({rank}, {world}, {step}, phase={phase!r})"
        if (not isinstance(got, (tuple, list)) or len(got) != 2
                or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                           for v in got)):
            raise _Bad(f"{call} returned {got!r}: expected a pair of ints "
                       "(send_chunk, recv_chunk)", "return a tuple: `return send, recv`.")
        if not all(0 <= v < world for v in got):
            raise _Bad(f"{call} returned {tuple(got)!r}: chunk indices must be in "
                       f"0..{world - 1}", "take every index modulo the world size, "
                       "`% world` (Python's % is never negative for a positive world).")
        out.append((int(got[0]), int(got[1])))
    return out


def _consistent(steps, world: int, step: int, phase: str) -> None:
    for r, (send, _) in enumerate(steps):
        nxt = (r + 1) % world
        if steps[nxt][1] != send:
            raise _Bad(
                f"{phase} step {step}: rank {r} sends chunk {send} to rank {nxt}, but rank "
                f"{nxt} receives chunk {steps[nxt][1]} (ring_step({r}, {world}, {step}) = "
                f"{steps[r]}, ring_step({nxt}, {world}, {step}) = {steps[nxt]}): the "
                "schedule is not consistent",
                "what rank r sends at a step is what rank (r + 1) % W receives at that step: "
                "compute recv_chunk as the chunk that rank - 1 sends, since the data flows "
                "from rank - 1 to rank.")


def _simulate_schedule(fn, world: int) -> None:
    """Raise :class:`_Bad` for the first rule the schedule breaks at ``world`` ranks."""
    full = (1,) * world
    held = [[tuple(int(i == r) for i in range(world)) for _ in range(world)]
            for r in range(world)]
    for step in range(world - 1):
        steps = _steps(fn, world, step, PHASES[0])
        _consistent(steps, world, step, PHASES[0])
        sent = [held[r][send] for r, (send, _) in enumerate(steps)]
        for r in range(world):
            nxt = (r + 1) % world
            c = steps[nxt][1]
            held[nxt][c] = tuple(a + b for a, b in zip(held[nxt][c], sent[r]))
    for c in range(world):
        owners = [r for r in range(world) if held[r][c] == full]
        if len(owners) != 1:
            where = "no rank" if not owners else f"{len(owners)} ranks ({owners})"
            raise _Bad(f"after the W - 1 = {world - 1} reduce-scatter steps, chunk {c} is "
                       f"fully reduced ({_parts(full)}) on {where}; the ranks hold "
                       + ", ".join(f"rank {r}: {_parts(held[r][c])}" for r in range(world)),
                       "at step 0 a rank sends its own chunk `rank`; at every later step it "
                       "sends the chunk it received and added to at the step before, so "
                       "each partial sum travels on and gains one contribution per step.")
    for step in range(world - 1):
        steps = _steps(fn, world, step, PHASES[1])
        _consistent(steps, world, step, PHASES[1])
        sent = [held[r][send] for r, (send, _) in enumerate(steps)]
        for r in range(world):
            nxt = (r + 1) % world
            c = steps[nxt][1]
            if held[nxt][c] == full and sent[r] != full:
                raise _Bad(f"all-gather step {step}: rank {r} sends chunk {c}, which it "
                           f"holds only partly reduced ({_parts(sent[r])}), and rank {nxt} "
                           f"overwrites its fully reduced chunk {c} with it",
                           "the all-gather starts from the chunk each rank owns fully after "
                           "the reduce-scatter (the one it received at the last "
                           "reduce-scatter step), and forwards what it receives.")
            held[nxt][c] = sent[r]
    for r in range(world):
        for c in range(world):
            if held[r][c] != full:
                raise _Bad(f"after the W - 1 = {world - 1} all-gather steps, rank {r} lacks "
                           f"the reduced chunk {c} (it holds {_parts(held[r][c])})",
                           "at each all-gather step a rank forwards the chunk it received at "
                           "the step before, so that every reduced chunk travels W - 1 hops.")


def _learner_line(exc: BaseException, fn) -> str:
    """'line N: code' of the innermost frame of ``exc`` in ``fn``'s file (the cell)."""
    frames = traceback.extract_tb(exc.__traceback__)
    home = getattr(getattr(fn, "__code__", None), "co_filename", None)
    where = next((f for f in reversed(frames) if f.filename == home), frames[-1])
    return f"line {where.lineno}: {(where.line or '').strip()}"


_TODO_STUB = ("Replace the `raise NotImplementedError` in the TODO cell with your code, run "
              "that cell, then run this check again.")


def check_ring_step(fn) -> Report:
    """Check the schedule ``fn(rank, world, step, phase=...) -> (send_chunk, recv_chunk)``.

    Args:
        fn: the learner's ``ring_step``; ``phase`` (a keyword) is ``"reduce-scatter"`` or
            ``"all-gather"``, ``step`` in 0..W-2; chunk indices are ints in 0..W-1.

    Returns:
        A :class:`Report`. For each W in :data:`SCHEDULE_WORLDS` it simulates which ranks'
        contributions each rank's copy of each chunk holds (a reduce-scatter step adds what
        arrives, an all-gather step overwrites) and enforces, in order: (a) what rank r sends
        at a step, rank (r + 1) % W receives at that step; (b) after W - 1 reduce-scatter
        steps every chunk is fully reduced (each rank's part once) on exactly one rank;
        (c) no all-gather step overwrites a fully reduced chunk with a partial one, and after
        W - 1 of them every rank holds every reduced chunk. Any schedule that does so passes.
        Never raises for what ``fn`` does.
    """
    name = "Lab 9, TODO 1: the ring's schedule"
    if not callable(fn):
        return Report(name, False, f"expected a function, got {type(fn).__name__}", 0, "error")
    for n, world in enumerate(SCHEDULE_WORLDS, start=1):
        try:
            _simulate_schedule(fn, world)
        except NotImplementedError:
            return Report(name, False, _TODO_STUB, n - 1, "not implemented")
        except _Bad as bad:
            return Report(name, False, f"with W = {world} ranks: {bad}.\nHint: {bad.hint}", n,
                          "failed")
        except Exception as exc:  # noqa: BLE001 - the learner's code, reported readably
            return Report(name, False, f"with W = {world} ranks: your code raised "
                          f"{type(exc).__name__}: {exc} ({_learner_line(exc, fn)})", n,
                          "error")
    return Report(name, True, f"the schedule is consistent and reduces and gathers every "
                  f"chunk for W = {', '.join(map(str, SCHEDULE_WORLDS))}.",
                  len(SCHEDULE_WORLDS), "passed")


def schedule_table(fn, world: int) -> str:
    """The schedule ``fn`` (a ``ring_step`` that passes :func:`check_ring_step`) gives W ranks,
    step by step, with what each rank's copy of each chunk holds after the step, as text."""
    held = [[[int(i == r) for i in range(world)] for _ in range(world)] for r in range(world)]
    lines = ["start: " + " | ".join(f"rank {r}: " + " ".join(
        f"c{c}={_parts(held[r][c])}" for c in range(world)) for r in range(world))]
    for phase in PHASES:
        for step in range(world - 1):
            steps = _steps(fn, world, step, phase)
            sent = [list(held[r][s]) for r, (s, _) in enumerate(steps)]
            for r in range(world):
                nxt, c = (r + 1) % world, steps[(r + 1) % world][1]
                held[nxt][c] = ([a + b for a, b in zip(held[nxt][c], sent[r])]
                                if phase == PHASES[0] else sent[r])
            moves = ", ".join(f"{r}->{(r + 1) % world}: c{s}" for r, (s, _) in enumerate(steps))
            lines.append(f"{phase} step {step}: sends {moves}")
            for r in range(world):
                lines.append(f"    rank {r}: " + " ".join(
                    f"c{c}={'ALL' if held[r][c] == [1] * world else _parts(held[r][c])}"
                    for c in range(world)))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ TODO 2


def _inputs(world: int, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(9000 + 100 * world + n)
    return [torch.randn(n, generator=g, dtype=torch.float32) for _ in range(world)]


def _sim_problem(fn, world: int, n: int, turn_timeout_s: float):
    """(status, message) of one simulated case, or None if it passed."""
    inputs = _inputs(world, n)
    expected = np.sum([t.double().numpy() for t in inputs], axis=0)
    assert all(not np.allclose(t.numpy(), expected) for t in inputs), "a case equal to its input"
    xs = [t.clone() for t in inputs]
    out = lab9_sim.run_ranks(fn, xs, turn_timeout_s=turn_timeout_s)
    for rank, exc in enumerate(out.errors):
        if isinstance(exc, NotImplementedError):
            return "not implemented", _TODO_STUB
    for rank, exc in enumerate(out.errors):
        if exc is not None:
            text = (f"rank {rank} raised {type(exc).__name__}: {exc} "
                    f"({_learner_line(exc, fn)})")
            if "process group" in str(exc).lower():
                text += ("\nHint: call comm.isend and comm.recv, not dist.isend: the check "
                         "passes its own comm (in the real run, comm is torch.distributed).")
            return "error", text
    if out.misuse:
        return "failed", (
            f"{out.misuse}.\nHint: keep the work that comm.isend (or comm.irecv) returns and "
            "call work.wait() before the buffer is written, received into or sent again, and "
            "before the function returns: isend, recv, then wait. Until wait() returns the "
            "transport may still read the buffer (or, for irecv, not have written it yet).")
    if out.deadlock:
        return "failed", (
            f"deadlock: every rank waits for another and none can go on: {out.deadlock}.\n"
            "Hint: a blocking send returns only once the receiver has taken the message, "
            "so if every rank sends first, no rank ever receives: start the send with "
            "comm.isend, then recv, then wait() for the send.")
    if out.stuck:
        return "failed", out.stuck
    unchanged = all(torch.equal(x, original) for x, original in zip(xs, inputs))
    for rank, x in enumerate(xs):
        problem = compare(x, expected, rtol=1e-5)
        if problem:
            text = f"rank {rank}'s x: {problem}"
            if unchanged:
                text += (" (every rank's x is unchanged: write the sum into x itself; the "
                         "chunks torch.tensor_split returns are views of x)")
            return "failed", text + (
                ".\nHint: after the reduce-scatter each rank holds one fully reduced chunk; "
                "the all-gather passes them around (overwriting, not adding). Chunks come "
                "from torch.tensor_split(x, world), which keeps every element when n is not "
                "a multiple of W. A tensor you isend must not change until its work.wait() "
                "returns: the data may be read that late.")
    ring, sent = ring_elements(n, world), out.sent
    if sum(sent) != sum(ring) or max(sent) > 2 * n - 2 * min(chunk_sizes(n, world)):
        return "failed", (
            f"the sum is right, but your ranks sent {sent} elements ({sum(sent)} in all, "
            f"{max(sent)} by the busiest); the ring sends {ring} (2(W - 1) = "
            f"{2 * (world - 1)} chunks each, about 2(W - 1)/W n = "
            f"{2 * (world - 1) / world * n:.0f}; {sum(ring)} in all)"
            ".\nHint: in the ring a rank sends one chunk per step, 2(W - 1) steps, and only "
            "to the next rank. Sending the whole tensor to every other rank, or to rank 0 "
            "which sends the sum back, gives the right sum but makes a rank send (W - 1) n "
            "elements: more, the larger W.")
    return None


def check_ring_all_reduce(fn, *, real: bool = True, real_timeout_s: float = 30.0,
                          turn_timeout_s: float = 5.0) -> Report:
    """Check ``fn(x, rank, world, comm)``: sum a 1-D float32 tensor over the ranks, in place.

    Args:
        fn: the learner's ring all-reduce. ``x``: (n,) float32; ``comm`` offers
            ``isend(tensor, dst)`` and ``irecv(tensor, src)`` (each a work with ``wait()``),
            ``send`` and ``recv(tensor, src)``.
        real: also run it on real gloo processes when the simulated cases pass.
        real_timeout_s: seconds a real group may run once its processes have joined (their
            start-up has a limit of its own). turn_timeout_s: seconds one simulated
            rank may run without waiting or returning.

    Returns:
        A :class:`Report`. First, for W in :data:`SIM_WORLDS` and n in :data:`SIZES`, W
        simulated ranks (:func:`helpers.checks.lab9.sim.run_ranks`): a raised exception, a
        misuse of the calls (a buffer written before its send completed, an isend or irecv
        never waited for), a deadlock (where each rank waits), every rank's x against the
        float64 sum of the inputs (relative tolerance 1e-5) and the ring's bandwidth (in all
        2(W - 1) n elements sent, no rank above 2n minus two smallest chunks: :func:`ring_elements`). Then the
        learner's source on gloo, W in :data:`REAL_WORLDS` (:func:`.real.run_on_gloo`)
        against ``dist.all_reduce``; where gloo cannot start, the report says so and stays
        passed. Never raises for what ``fn`` does.
    """
    name = "Lab 9, TODO 2: ring all-reduce"
    if not callable(fn):
        return Report(name, False, f"expected a function, got {type(fn).__name__}", 0, "error")
    n_cases = 0
    for world in SIM_WORLDS:
        for n in SIZES:
            n_cases += 1
            found = _sim_problem(fn, world, n, turn_timeout_s)
            if found:
                status, text = found
                if status == "not implemented":
                    return Report(name, False, text, n_cases - 1, status)
                return Report(name, False, f"on W = {world} simulated ranks, n = {n} (chunks "
                              f"of {chunk_sizes(n, world)}): {text}", n_cases, status)
    message = (f"all {n_cases} simulated cases (W = {', '.join(map(str, SIM_WORLDS))}; n = "
               f"{', '.join(map(str, SIZES))}) give the sum, each rank sending the ring's "
               "2(W - 1) chunks")
    if not real:
        return Report(name, True, message + ".", n_cases, "passed")
    outcome = lab9_real.run_on_gloo(fn, REAL_WORLDS, SIZES, timeout_s=real_timeout_s)
    if outcome.problem:
        return Report(name, False, f"the simulated cases pass, but {outcome.problem}.",
                      n_cases + outcome.cases, outcome.status)
    if outcome.note:
        return Report(name, True, message + f". (Not run on real processes: {outcome.note}.)",
                      n_cases, "passed")
    return Report(name, True, message + f"; and on real gloo processes (W = "
                  f"{' and '.join(map(str, REAL_WORLDS))}) your function matches "
                  "dist.all_reduce.", n_cases + outcome.cases, "passed")


# ------------------------------------------------------------------------------ TODO 3


def _seconds_cases() -> list[Case]:
    cases = []
    for nbytes, world, gbps, latency, what in SECONDS_CASES:
        expected = ring_allreduce_seconds(nbytes, world, gbps, latency)
        cases.append(Case((nbytes, world, gbps, latency), expected,
                          f"nbytes = {nbytes:,}, W = {world}, {gbps:g} GB/s, latency "
                          f"{latency:g} s ({what}; expected {expected:.6g} s)", rtol=1e-6))
    return cases


def check_ring_seconds(fn) -> Report:
    """Check ``fn(nbytes, world, bandwidth_gbps, latency_s) -> seconds`` against
    :data:`RING_MODEL` (the same as :func:`helpers.experiments.parallel.ring_allreduce_seconds`).

    Returns:
        A :class:`Report` over :data:`SECONDS_CASES` (relative tolerance 1e-6: a formula, not
        a measurement); never raises for what ``fn`` does.
    """
    return check_cases(
        "Lab 9, TODO 3: the ring's time", fn, _seconds_cases(),
        hint="2 (W - 1) steps, W - 1 per phase; each sends nbytes / W bytes (one chunk), "
             "at bandwidth_gbps * 1e9 bytes/s, after latency_s; one rank needs no step.")


def fit_latency_bandwidth(rows) -> tuple[float, float]:
    """Latency (s) and bandwidth (GB/s) of the ring model that best fit measured all-reduces.

    Args:
        rows: dicts with ``ranks`` (W >= 2), ``message_bytes`` and ``allreduce_s`` (the rows of
            :func:`helpers.experiments.parallel.recorded` with ``experiment == "allreduce"``).

    Returns:
        ``(latency_s, bandwidth_gbps)`` minimising the squared relative error of
        ``2(W-1) latency + 2(W-1)/W bytes / bandwidth`` over the rows (a linear least-squares
        fit, each row weighted by 1 / its time, since the sizes span decades); a term that
        would come out negative is left out.

    Raises:
        ValueError: fewer than two rows with W >= 2 and a positive time.
    """
    rows = [r for r in rows if r["ranks"] >= 2 and r["allreduce_s"] > 0]
    if len(rows) < 2:
        raise ValueError(f"need at least two all-reduce rows with W >= 2, got {len(rows)}")
    w = np.array([r["ranks"] for r in rows], dtype=float)
    t = np.array([r["allreduce_s"] for r in rows], dtype=float)
    a = np.stack([2 * (w - 1), 2 * (w - 1) / w * np.array([r["message_bytes"] for r in rows],
                                                              dtype=float)], axis=1)
    coef = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)[0]
    for k in (0, 1):
        if coef[k] <= 0:            # refit with the other term alone
            other = 1 - k
            col = a[:, other] / t
            coef = np.zeros(2)
            coef[other] = col @ np.ones_like(t) / (col @ col)
    latency, per_byte = float(coef[0]), float(coef[1])
    return latency, (1 / per_byte / 1e9 if per_byte > 0 else float("inf"))

"""Lab 9's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab9_ring_all_reduce.ipynb``. The
planted mistakes of the schedule: the receive chunk equal to the send chunk, the receive index
of the wrong neighbour, a step off by one, the all-gather starting from a chunk not yet
reduced (or one step late), either phase ignoring the step, indices without ``% world``, one
index returned. Of the all-reduce in the real gloo run: a notebook global (NameError), values
wrong only there, a deadlock only there (the planted all-reduces on simulated ranks are in
test_checks_lab9_sim.py). Of the time model: W - 1 steps, nbytes not divided by W, GB/s read
as GiB/s, the latency paid once, bits for bytes.
"""

from __future__ import annotations

import math
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist

from helpers.checks import lab9
from helpers.checks.lab9 import real as lab9_real
from helpers.experiments import parallel

# ------------------------------------------------------------------- the solution notebook's


def ring_step(rank, world, step, phase="reduce-scatter"):
    if phase == "reduce-scatter":
        return (rank - step) % world, (rank - step - 1) % world
    return (rank + 1 - step) % world, (rank - step) % world


def ring_all_reduce(x, rank, world, comm):
    chunks = torch.tensor_split(x, world)          # views of x: writing them writes x
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):                  # reduce-scatter
        send, recv = ring_step(rank, world, step)
        work = comm.isend(chunks[send], nxt)
        incoming = torch.empty_like(chunks[recv])
        comm.recv(incoming, prv)
        chunks[recv].add_(incoming)
        work.wait()
    for step in range(world - 1):                  # all-gather
        send, recv = ring_step(rank, world, step, "all-gather")
        work = comm.isend(chunks[send], nxt)
        comm.recv(chunks[recv], prv)
        work.wait()


def ring_seconds(nbytes, world, bandwidth_gbps, latency_s):
    return 2 * (world - 1) * (latency_s + nbytes / world / (bandwidth_gbps * 1e9))


def stub(*args, **kwargs):
    raise NotImplementedError


# ------------------------------------------------------------------ TODO 1: planted schedules


def schedule(rs, ag):
    """A ring_step from two formulas (rank, world, step) -> (send, recv), one per phase."""
    def run(rank, world, step, phase="reduce-scatter"):
        return (rs if phase == "reduce-scatter" else ag)(rank, world, step)
    return run


def right_rs(r, w, t):
    return (r - t) % w, (r - t - 1) % w


def right_ag(r, w, t):
    return (r + 1 - t) % w, (r - t) % w


#: name -> (ring_step, words the failure message must contain)
SCHEDULES = {
    "recv chunk = send chunk": (
        schedule(lambda r, w, t: ((r - t) % w, (r - t) % w), right_ag), "not consistent"),
    "recv index of the wrong neighbour (what rank + 1 sends)": (
        schedule(lambda r, w, t: ((r - t) % w, (r + 1 - t) % w), right_ag), "not consistent"),
    "recv index off by one in the step": (
        schedule(lambda r, w, t: ((r - t) % w, (r - t - 2) % w), right_ag), "not consistent"),
    "all-gather from a chunk not yet reduced": (
        schedule(right_rs, right_rs), "overwrites its fully reduced chunk"),
    "all-gather one step late": (
        schedule(right_rs, lambda r, w, t: ((r + 2 - t) % w, (r + 1 - t) % w)),
        "overwrites its fully reduced chunk"),
    "reduce-scatter ignores the step": (
        schedule(lambda r, w, t: (r % w, (r - 1) % w), right_ag), "fully reduced"),
    "all-gather ignores the step": (
        schedule(right_rs, lambda r, w, t: ((r + 1) % w, r % w)), "lacks the reduced chunk"),
    "no % world": (schedule(lambda r, w, t: (r - t, r - t - 1), right_ag), "must be in 0.."),
    "one index returned": (schedule(lambda r, w, t: (r - t) % w, right_ag), "a pair of ints"),
    "zeros": (schedule(lambda r, w, t: (0, 0), lambda r, w, t: (0, 0)),
              "fully reduced (x0+x1) on 2 ranks"),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_planted_schedule_fails_with_its_rule(name):
    fn, words = SCHEDULES[name]
    report = lab9.check_ring_step(fn)
    assert not report and report.status == "failed", (name, str(report))
    assert words in report.message and "W = " in report.message, report.message
    assert "Hint:" in report.message


def test_the_rules_name_the_step_and_the_ranks():
    report = lab9.check_ring_step(SCHEDULES["recv chunk = send chunk"][0])
    assert "with W = 2 ranks: reduce-scatter step 0: rank 0 sends chunk 0 to rank 1, but " \
           "rank 1 receives chunk 1" in report.message
    report = lab9.check_ring_step(SCHEDULES["reduce-scatter ignores the step"][0])
    assert "W = 3" in report.message and "x0+x1" in report.message
    report = lab9.check_ring_step(SCHEDULES["all-gather ignores the step"][0])
    assert "W = 3" in report.message and "rank" in report.message


def test_any_consistent_schedule_passes():
    """The check demands no particular schedule: the lab's, shifted by a chunk, passes."""
    shifted = schedule(lambda r, w, t: ((r - t + 1) % w, (r - t) % w),
                       lambda r, w, t: ((r + 2 - t) % w, (r + 1 - t) % w))
    assert lab9.check_ring_step(shifted).status == "passed"
    assert lab9.check_ring_step(ring_step).status == "passed"


def test_the_schedule_table_shows_every_chunk_reduced_then_gathered():
    text = lab9.schedule_table(ring_step, 3)
    assert text.startswith("start: rank 0: c0=x0") and text.count("step") == 4
    assert text.splitlines()[-3:] == ["    rank 0: c0=ALL c1=ALL c2=ALL",
                                      "    rank 1: c0=ALL c1=ALL c2=ALL",
                                      "    rank 2: c0=ALL c1=ALL c2=ALL"]


# ------------------------------------------------------------------ TODO 2: the real gloo run


@pytest.mark.slow
def test_the_solution_passes_on_real_gloo_processes_too():
    report = lab9.check_ring_all_reduce(ring_all_reduce)
    assert report and report.status == "passed", str(report)
    assert "on real gloo processes (W = 2 and 3)" in report.message
    assert report.cases_run == 12 + 8


SCALE = 1.0


def uses_a_notebook_global(x, rank, world, comm):
    ring_all_reduce(x, rank, world, comm)
    x.mul_(SCALE)


def wrong_only_on_gloo(x, rank, world, comm):
    ring_all_reduce(x, rank, world, comm)
    if comm is dist:
        x[-1:] += 1.0


def hangs_only_on_gloo(x, rank, world, comm):
    if comm is dist:
        comm.recv(torch.empty(1), (rank + 1) % world)  # every rank waits, none sends
    ring_all_reduce(x, rank, world, comm)


def _all_ended(pids):
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as fh:       # a zombie has ended too
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                return False
    return True


@pytest.mark.slow
def test_a_notebook_global_is_a_readable_name_error_and_every_child_ends():
    start = time.monotonic()
    out = lab9_real.run_on_gloo(uses_a_notebook_global, (2,), (7,), timeout_s=60)
    assert out.status == "error" and "NameError" in out.problem, out
    assert "SCALE" in out.problem and lab9_real.HEADER in out.problem
    assert "x.mul_(SCALE)" in out.problem
    assert time.monotonic() - start < 50 and _all_ended(out.pids)


@pytest.mark.slow
def test_values_wrong_only_on_gloo_fail_with_the_rank_and_index():
    out = lab9_real.run_on_gloo(wrong_only_on_gloo, (2,), (7,), timeout_s=60)
    assert out.status == "failed" and "on W = 2 gloo processes, n = 7" in out.problem
    assert "at index 6" in out.problem and _all_ended(out.pids)


@pytest.mark.slow
def test_a_deadlock_only_on_gloo_is_stopped_at_the_time_limit():
    out = lab9_real.run_on_gloo(hangs_only_on_gloo, (2,), (7,), timeout_s=8)
    assert out.status == "failed", out
    assert "on W = 2 gloo processes, rank(s) [0, 1] had not finished after 8 s" in out.problem
    assert out.seconds >= 8 and _all_ended(out.pids)


def test_the_module_copies_the_functions_it_calls():
    text = lab9_real.learner_module(ring_all_reduce)
    assert text.startswith(lab9_real.HEADER + "\n")
    assert text.index("def ring_step") < text.index("def ring_all_reduce")
    assert "SCALE" not in lab9_real.learner_module(ring_step)


# ------------------------------------------------------------------ TODO 3: the time model


SECONDS_MISTAKES = {
    "W - 1 steps": lambda nb, w, bw, lat: (w - 1) * (lat + nb / w / (bw * 1e9)),
    "nbytes not divided by W": lambda nb, w, bw, lat: 2 * (w - 1) * (lat + nb / (bw * 1e9)),
    "GB/s taken as GiB/s": lambda nb, w, bw, lat: 2 * (w - 1) * (lat + nb / w / (bw * 2**30)),
    "the latency paid once": lambda nb, w, bw, lat: lat + 2 * (w - 1) * nb / w / (bw * 1e9),
    "bits for bytes": lambda nb, w, bw, lat: 2 * (w - 1) * (lat + 8 * nb / w / (bw * 1e9)),
    "zeros": lambda nb, w, bw, lat: 0.0,
}


@pytest.mark.parametrize("name", SECONDS_MISTAKES)
def test_a_planted_time_model_fails_with_the_case(name):
    report = lab9.check_ring_seconds(SECONDS_MISTAKES[name])
    assert not report and report.status == "failed", (name, str(report))
    assert "nbytes = " in report.message and "W = " in report.message


def test_the_time_model_is_the_workbooks_and_the_solution_passes():
    assert lab9.check_ring_seconds(ring_seconds).status == "passed"
    for nbytes, w, bw, lat, _ in lab9.SECONDS_CASES:
        assert ring_seconds(nbytes, w, bw, lat) == pytest.approx(
            parallel.ring_allreduce_seconds(nbytes, w, bw, lat), rel=1e-12, abs=0)


def test_the_fit_recovers_a_planted_latency_and_bandwidth():
    rows = [{"ranks": w, "message_bytes": b, "allreduce_s": ring_seconds(b, w, 2.5, 1e-4)}
            for w in (2, 4, 8) for b in (1024, 2**16, 2**20, 2**22)]
    latency, bandwidth = lab9.fit_latency_bandwidth(rows)
    assert latency == pytest.approx(1e-4, rel=1e-6) and bandwidth == pytest.approx(2.5, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        lab9.fit_latency_bandwidth(rows[:1])
    noisy = [{"ranks": 2, "message_bytes": b, "allreduce_s": t} for b, t in ((1, 2e-3),
                                                                             (10**6, 1e-3))]
    latency, bandwidth = lab9.fit_latency_bandwidth(noisy)   # time falling with size
    assert math.isinf(bandwidth) and latency > 0


@pytest.mark.slow
def test_a_port_taken_before_gloo_binds_it_is_replaced(monkeypatch):
    """The first port handed to the ranks is held by another socket (as a process that took it
    between the choice and the bind would): the group cannot start there, and the run is made
    again on a new port, where the planted wrong values are found."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    free, handed = lab9_real._free_port, []

    def first_taken():
        handed.append(held.getsockname()[1] if not handed else free())
        return handed[-1]

    monkeypatch.setattr(lab9_real, "_free_port", first_taken)
    try:
        out = lab9_real.run_on_gloo(wrong_only_on_gloo, (2,), (7,), timeout_s=60, startup_s=60)
    finally:
        held.close()
    assert len(handed) == 2, (handed, out)
    assert out.note is None and out.status == "failed" and "at index 6" in out.problem, out
    assert _all_ended(out.pids)

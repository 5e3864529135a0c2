"""Lab 9's all-reduce checker on simulated ranks: it fails the planted all-reduces (every rank
sending its whole tensor to every other, reduce to rank 0 then broadcast, only the
reduce-scatter, a blocking send first on every rank (deadlock), one scratch buffer both sent and
received into (aliasing), chunks of n // W, the sum returned but x left unchanged,
torch.distributed called instead of comm, an endless loop) and passes the solution's, which
``test_checks_lab9`` holds with the real gloo run.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from test_checks_lab9 import ring_all_reduce, ring_step, stub

from helpers.checks import lab9
from helpers.checks.lab9 import sim as lab9_sim

# ---------------------------------------------------------------- TODO 2: planted all-reduces


def naive_all_to_all(x, rank, world, comm):
    works = [comm.isend(x, peer) for peer in range(world) if peer != rank]
    total = x.clone()
    for peer in range(world):
        if peer != rank:
            buf = torch.empty_like(x)
            comm.recv(buf, peer)
            total += buf
    for w in works:
        w.wait()
    x.copy_(total)


def reduce_then_broadcast(x, rank, world, comm):
    if rank == 0:
        buf = torch.empty_like(x)
        for peer in range(1, world):
            comm.recv(buf, peer)
            x += buf
        for w in [comm.isend(x, peer) for peer in range(1, world)]:
            w.wait()
    else:
        comm.isend(x, 0).wait()
        comm.recv(x, 0)


def reduce_scatter_only(x, rank, world, comm):
    chunks = torch.tensor_split(x, world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send, recv = ring_step(rank, world, step)
        work = comm.isend(chunks[send], nxt)
        incoming = torch.empty_like(chunks[recv])
        comm.recv(incoming, prv)
        chunks[recv].add_(incoming)
        work.wait()


def ring_with(send_first=False, one_buffer=False, chunking="tensor_split", copy_out=False):
    """The solution's ring with one change: a blocking send before the recv; one scratch
    buffer that is sent and received into; chunks of n // W; the result in a new tensor."""
    def run(x, rank, world, comm):
        if chunking == "n // W":
            size = x.numel() // world
            chunks = [x[i * size:(i + 1) * size] for i in range(world)]
        else:
            chunks = torch.tensor_split(x.clone() if copy_out else x, world)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        scratch = torch.empty(max(c.numel() for c in chunks))
        for step in range(world - 1):
            send, recv = ring_step(rank, world, step)
            if send_first:
                comm.send(chunks[send], nxt)
                incoming = torch.empty_like(chunks[recv])
                comm.recv(incoming, prv)
                chunks[recv].add_(incoming)
                continue
            if one_buffer:
                out = scratch[:chunks[send].numel()]
                out.copy_(chunks[send])
                work = comm.isend(out, nxt)
                incoming = scratch[:chunks[recv].numel()]     # the buffer still being sent
            else:
                work = comm.isend(chunks[send], nxt)
                incoming = torch.empty_like(chunks[recv])
            comm.recv(incoming, prv)
            chunks[recv].add_(incoming)
            work.wait()
        for step in range(world - 1):
            send, recv = ring_step(rank, world, step, "all-gather")
            work = comm.isend(chunks[send], nxt)
            comm.recv(chunks[recv], prv)
            work.wait()
        if copy_out:
            return torch.cat(chunks)
    return run


def calls_dist_directly(x, rank, world, comm):
    dist.isend(x, (rank + 1) % world)


def typo(x, rank, world, comm):
    chunks = torch.tensor_split(x, world)
    comm.isend(chunks[rank], rank + 1 % world).wait()   # precedence: rank + (1 % world)


def endless_on_rank_1(x, rank, world, comm):
    while rank == 1:
        pass
    ring_all_reduce(x, rank, world, comm)


#: name -> (function, words the failure message must contain)
ALL_REDUCES = {
    "naive: every rank sends its whole tensor to every other": (
        naive_all_to_all, "the ring sends"),
    "reduce to rank 0, then broadcast": (reduce_then_broadcast, "by the busiest"),
    "only the reduce-scatter": (reduce_scatter_only, "max error"),
    "a blocking send before recv on every rank": (ring_with(send_first=True), "deadlock"),
    "one scratch buffer, sent and received into (aliasing)": (
        ring_with(one_buffer=True), "before the send completed"),
    "chunks of n // W (the remainder dropped)": (ring_with(chunking="n // W"), "max error"),
    "the sum returned, x unchanged": (ring_with(copy_out=True), "every rank's x is unchanged"),
}


@pytest.mark.parametrize("name", ALL_REDUCES)
def test_a_planted_all_reduce_fails_in_the_simulation(name):
    fn, words = ALL_REDUCES[name]
    report = lab9.check_ring_all_reduce(fn, real=False)
    assert not report and report.status == "failed", (name, str(report))
    assert words in report.message, report.message
    assert "simulated ranks, n = " in report.message and "chunks of [" in report.message


def test_the_bandwidth_rule_gives_the_elements_sent_per_rank():
    report = lab9.check_ring_all_reduce(naive_all_to_all, real=False)
    # with W = 2 every rank sends n elements, as in the ring: W = 3 is the first to differ
    assert "on W = 3 simulated ranks, n = 1 (chunks of [1, 0, 0])" in report.message
    assert "your ranks sent [2, 2, 2] elements (6 in all" in report.message
    assert "the ring sends [2, 1, 1]" in report.message
    # reduce + broadcast sends as many in all as the ring, but rank 0 sends (W - 1) n; at
    # n = 1 a ring rank may send 2 elements too, so n = 7 is its first case
    report = lab9.check_ring_all_reduce(reduce_then_broadcast, real=False)
    assert "on W = 3 simulated ranks, n = 7 (chunks of [3, 2, 2])" in report.message
    assert "your ranks sent [14, 7, 7] elements (28 in all, 14 by the busiest)" in report.message
    assert "the ring sends [10, 9, 9]" in report.message


def test_a_deadlock_says_where_every_rank_waits():
    report = lab9.check_ring_all_reduce(ring_with(send_first=True), real=False)
    assert "on W = 2 simulated ranks, n = 1" in report.message
    for r in (0, 1):
        assert f"rank {r} waits in wait() for its isend to rank {1 - r}" in report.message
    assert "comm.send(chunks[send], nxt)" in report.message
    assert "isend" in report.message.split("Hint:")[1]


def test_only_the_reduce_scatter_is_not_taken_for_x_left_unchanged():
    report = lab9.check_ring_all_reduce(reduce_scatter_only, real=False)
    assert "max error" in report.message and "unchanged" not in report.message


def test_chunks_of_n_over_w_fail_where_the_remainder_is_dropped():
    report = lab9.check_ring_all_reduce(ring_with(chunking="n // W"), real=False)
    assert "n = 1 (chunks of [1, 0])" in report.message    # n // W = 0: nothing summed


def test_aliasing_is_caught_every_time():
    """The ranks run in the same order every time, reading the data late: the scratch buffer
    fails on the same case each run."""
    messages = {lab9.check_ring_all_reduce(ring_with(one_buffer=True), real=False).message
                for _ in range(3)}
    assert len(messages) == 1


def test_a_stub_is_not_implemented_yet():
    for checker in (lab9.check_ring_step, lab9.check_ring_all_reduce, lab9.check_ring_seconds):
        report = checker(stub)
        assert not report and report.status == "not implemented" and report.cases_run == 0
        assert "not implemented yet" in report._repr_html_()


@pytest.mark.parametrize("fn,words", [
    (calls_dist_directly, "rank 0 raised"),
    (typo, "rank 1 raised CommError: isend's dst = 2 on rank 1: a peer must be another rank"),
])
def test_an_exception_in_the_learners_code_is_reported_readably(fn, words):
    report = lab9.check_ring_all_reduce(fn, real=False)
    assert report.status == "error", str(report)
    assert words in report.message, report.message
    if fn is calls_dist_directly:
        assert "not dist.isend" in report.message
    assert "(line " in report.message


def test_a_schedule_exception_is_reported_readably():
    def broken(rank, world, step, phase="reduce-scatter"):
        return (rank - step) // 0, 0
    report = lab9.check_ring_step(broken)
    assert report.status == "error" and "ZeroDivisionError" in report.message
    assert "(rank - step) // 0" in report.message


def test_an_endless_loop_is_stopped():
    start = time.monotonic()
    report = lab9.check_ring_all_reduce(endless_on_rank_1, real=False, turn_timeout_s=0.5)
    assert report.status == "failed" and "rank 1 ran for 0.5 s" in report.message
    assert time.monotonic() - start < 10


def test_the_fake_comm_is_a_rendezvous():
    """An isend completes only when the receiver has taken the message; a buffer written
    before then is reported, naming the sender and its isend."""
    log = []

    def fn(x, rank, world, comm, write=False):
        if rank == 0:
            work = comm.isend(x, 1)
            if write:
                x.fill_(7.0)                       # written before the receiver ran
            log.append(("taken before wait", work.is_completed()))
            work.wait()
            log.append(("taken after wait", work.is_completed()))
        else:
            comm.recv(x, 0)

    xs = [torch.zeros(3), torch.ones(3)]
    out = lab9_sim.run_ranks(fn, xs)
    assert out.deadlock is None and out.errors == [None, None] and out.misuse is None
    assert xs[1].tolist() == [0.0, 0.0, 0.0]
    assert log == [("taken before wait", False), ("taken after wait", True)]
    assert out.sent == [3, 0] and out.messages == [1, 0]
    out = lab9_sim.run_ranks(lambda *a: fn(*a, write=True), [torch.zeros(3), torch.ones(3)])
    assert out.misuse.startswith("rank 0 changed the tensor it had sent to rank 1 with isend "
                                 "before the send completed"), out.misuse
    assert "work = comm.isend(x, 1)" in out.misuse


def test_the_solution_passes_the_simulation():
    report = lab9.check_ring_all_reduce(ring_all_reduce, real=False)
    assert report and "12 simulated cases" in report.message, str(report)


def test_the_ring_elements_are_2_w_minus_1_chunks():
    for n, w in [(1000, 4), (7, 3), (1, 4), (37, 2)]:
        ring = lab9.ring_elements(n, w)
        assert sum(ring) == 2 * (w - 1) * n
        assert max(ring) <= 2 * n - 2 * min(lab9.chunk_sizes(n, w))
        assert lab9.chunk_sizes(n, w) == [len(c) for c in torch.tensor_split(torch.empty(n), w)]
    assert lab9.ring_elements(1000, 4) == [1500] * 4


def test_the_scratch_buffer_fails_only_because_the_data_is_read_late(monkeypatch):
    """With a comm that copied the data at isend, the one-buffer ring would pass: the failure
    is the late read, the aliasing a real transport allows."""
    late = lab9_sim.RankComm.isend

    def eager(self, tensor, dst=None, group=None, tag=0):
        return late(self, tensor.clone(), dst, group, tag)

    monkeypatch.setattr(lab9_sim.RankComm, "isend", eager)
    assert lab9.check_ring_all_reduce(ring_with(one_buffer=True), real=False).status == "passed"

"""Lab 9's simulated comm keeps torch.distributed's rules for requests: an isend that is never
waited for fails in the simulation (not only on gloo, after its time-out), with the message
that names it; ``irecv`` exists, writes into its tensor when waited, and lets a correct
``irecv`` + ``send`` ring pass, as a correct ``isend`` + ``recv`` + ``wait`` ring does.
"""

from __future__ import annotations

import pytest
import torch
from test_checks_lab9 import ring_all_reduce, ring_step

from helpers.checks import lab9
from helpers.checks.lab9 import sim as lab9_sim


def ring_isend_no_wait(x, rank, world, comm):
    """The solution's ring with every work.wait() left out."""
    chunks = torch.tensor_split(x, world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send, recv = ring_step(rank, world, step)
        comm.isend(chunks[send], nxt)
        incoming = torch.empty_like(chunks[recv])
        comm.recv(incoming, prv)
        chunks[recv].add_(incoming)
    for step in range(world - 1):
        send, recv = ring_step(rank, world, step, "all-gather")
        comm.isend(chunks[send], nxt)
        comm.recv(chunks[recv], prv)


def ring_irecv_send(x, rank, world, comm):
    """Post the receive first, then a blocking send, then wait for the receive (the schedule
    written out, so that the real run's module holds all it calls)."""
    chunks = torch.tensor_split(x, world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):                  # reduce-scatter
        send, recv = (rank - step) % world, (rank - step - 1) % world
        incoming = torch.empty_like(chunks[recv])
        req = comm.irecv(incoming, prv)
        comm.send(chunks[send], nxt)
        req.wait()
        chunks[recv].add_(incoming)
    for step in range(world - 1):                  # all-gather
        send, recv = (rank + 1 - step) % world, (rank - step) % world
        req = comm.irecv(chunks[recv], prv)
        comm.send(chunks[send], nxt)
        req.wait()


def ring_irecv_no_wait(x, rank, world, comm):
    """irecv whose request is dropped: the data is never waited for."""
    chunks = torch.tensor_split(x, world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send, recv = ring_step(rank, world, step, "all-gather")
        comm.irecv(chunks[recv], prv)
        comm.send(chunks[send], nxt)


ISEND_MESSAGE = ("sent with isend and never waited for it (req.wait()): the buffer may be "
                 "reused before the send completes")


def test_an_isend_never_waited_for_fails_in_the_simulation():
    report = lab9.check_ring_all_reduce(ring_isend_no_wait, real=False)
    assert report.status == "failed", str(report)
    assert "on W = 2 simulated ranks, n = 1" in report.message
    assert f"rank 0 {ISEND_MESSAGE}" in report.message, report.message
    assert "comm.isend(chunks[send], nxt)" in report.message     # the line of the isend
    assert "work.wait()" in report.message.split("Hint:")[1]


def test_an_isend_completed_but_never_waited_for_still_fails():
    """The verdict does not depend on whether the receiver happened to run first."""
    def fn(x, rank, world, comm):
        if rank == 0:
            comm.isend(x, 1)
            comm.recv(x, 1)                      # rank 1 takes the message meanwhile
        else:
            comm.recv(x, 0)
            comm.send(x, 0)

    out = lab9_sim.run_ranks(fn, [torch.zeros(2), torch.ones(2)])
    assert out.misuse and out.misuse.startswith(f"rank 0 {ISEND_MESSAGE}"), out.misuse


@pytest.mark.parametrize("fn", [ring_all_reduce, ring_irecv_send],
                         ids=["isend + recv + wait", "irecv + send"])
def test_a_correct_ring_passes_the_simulation(fn):
    report = lab9.check_ring_all_reduce(fn, real=False)
    assert report and "12 simulated cases" in report.message, str(report)


@pytest.mark.slow
def test_a_correct_irecv_and_send_ring_passes_on_real_gloo_processes_too():
    """torch.distributed's irecv behaves as the simulated one: the same answer passes both."""
    report = lab9.check_ring_all_reduce(ring_irecv_send)
    assert report and report.status == "passed", str(report)
    assert "on real gloo processes (W = 2 and 3)" in report.message


def test_an_irecv_never_waited_for_fails_with_its_line():
    report = lab9.check_ring_all_reduce(ring_irecv_no_wait, real=False)
    assert report.status == "failed", str(report)
    assert "received with irecv and never waited for it (req.wait())" in report.message
    assert "comm.irecv(chunks[recv], prv)" in report.message


def test_irecv_writes_into_its_tensor_when_waited():
    log = []

    def fn(x, rank, world, comm):
        if rank == 1:
            buf = torch.zeros(3)
            req = comm.irecv(buf, 0)
            log.append(("before the send", req.is_completed(), buf.tolist()))
            comm.send(torch.ones(1), 0)          # rank 0 sends in the meantime
            log.append(("before wait", buf.tolist()))
            req.wait()
            log.append(("after wait", req.is_completed(), buf.tolist()))
            x.copy_(buf)
        else:
            comm.send(torch.full((3,), 5.0), 1)  # completes: the receive is posted
            comm.recv(torch.zeros(1), 1)

    xs = [torch.zeros(3), torch.zeros(3)]
    out = lab9_sim.run_ranks(fn, xs)
    assert out.misuse is None and out.deadlock is None and out.errors == [None, None]
    assert log == [("before the send", False, [0.0, 0.0, 0.0]),
                   ("before wait", [0.0, 0.0, 0.0]),
                   ("after wait", True, [5.0, 5.0, 5.0])]
    assert xs[1].tolist() == [5.0, 5.0, 5.0]


def test_receives_take_messages_in_the_order_they_were_posted():
    def fn(x, rank, world, comm):
        if rank == 0:
            first, second = torch.zeros(1), torch.zeros(1)
            reqs = [comm.irecv(first, 1), comm.irecv(second, 1)]
            for req in reversed(reqs):
                req.wait()
            x.copy_(torch.cat([first, second]))
        else:
            for value in (1.0, 2.0):
                comm.send(torch.tensor([value]), 0)

    xs = [torch.zeros(2), torch.zeros(2)]
    out = lab9_sim.run_ranks(fn, xs)
    assert out.misuse is None and out.errors == [None, None]
    assert xs[0].tolist() == [1.0, 2.0]


def test_a_mismatched_irecv_is_a_comm_error_on_wait():
    def fn(x, rank, world, comm):
        if rank == 0:
            comm.irecv(torch.zeros(2), 1).wait()
        else:
            comm.send(torch.zeros(3), 0)

    out = lab9_sim.run_ranks(fn, [torch.zeros(1), torch.zeros(1)])
    assert isinstance(out.errors[0], lab9_sim.CommError)
    assert "received 3 torch.float32 elements from rank 1 into a tensor of 2" in str(out.errors[0])


def test_irecv_without_a_source_and_unknown_calls_are_refused_readably():
    def no_src(x, rank, world, comm):
        comm.irecv(x)

    out = lab9_sim.run_ranks(no_src, [torch.zeros(1), torch.zeros(1)])
    assert "irecv(tensor, src)" in str(out.errors[0])

    def broadcast(x, rank, world, comm):
        comm.broadcast(x, 0)

    out = lab9_sim.run_ranks(broadcast, [torch.zeros(1), torch.zeros(1)])
    assert isinstance(out.errors[0], AttributeError)
    assert "irecv(tensor, src)" in str(out.errors[0])

"""Simulated ranks for Lab 9: W threads, one process, a stand-in for torch.distributed.

:func:`run_ranks` calls ``fn(x_r, r, W, comm_r)`` for every rank r in a thread of its own, with
a :class:`RankComm` offering ``isend(tensor, dst)`` and ``irecv(tensor, src)`` (each a work with
``.wait()``), ``send`` and ``recv(tensor, src)``. One rank runs at a time, each until it must
wait, in turn: the runs are the same every time. A send completes when the transport reads its
data, as late as a real one may: when the receiver takes it, or when the sender waits once the
receive is posted. A send whose buffer changed before then, and an isend or irecv never waited
for, are reported (:attr:`Outcome.misuse`); a deadlock (every unfinished rank waiting) with
where each waits; a rank that runs past ``turn_timeout_s`` without waiting is stopped.

Source: the point-to-point calls of torch.distributed (``isend``, ``irecv``, ``send``,
``recv``), whose buffers must not be touched until the work completes (PyTorch documentation,
"Distributed communication package").
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import os
import threading
import time
import traceback

import torch

__all__ = ["CommError", "Outcome", "RankComm", "run_ranks"]

_HERE = os.path.abspath(__file__)


class CommError(Exception):
    """A call the stand-in comm (like torch.distributed) refuses: a bad rank, a tensor of
    another size or dtype than the message, a method it does not offer."""


class _Abort(BaseException):
    """Raised inside a rank's thread to stop it (a deadlock, a time-out, a misuse): not an
    Exception, so that the learner's ``except Exception`` does not swallow it."""


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same values (NaN equal to NaN)."""
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all())


@dataclasses.dataclass(eq=False)
class _Message:
    src: int
    dst: int
    seq: int                      # the how-many-th message from src to dst it is
    tensor: torch.Tensor          # the sender's buffer
    at_isend: torch.Tensor        # its values when isend was called
    line: str                     # the learner's isend, " (line N: code)"
    data: torch.Tensor | None = None   # what the transport read: the send has completed


@dataclasses.dataclass(eq=False)
class _Receive:
    src: int
    dst: int
    seq: int                      # the how-many-th message from src to dst it takes
    tensor: torch.Tensor
    line: str
    done: bool = False


class _Work:
    """What ``isend`` and ``irecv`` return: ``wait()`` returns once the send's data has been
    read, or once the received data is in the tensor; ``is_completed()`` says if it has."""

    def __init__(self, ring: _Ring, rank: int, message: _Message | None = None,
                 receive: _Receive | None = None):
        self._ring, self._rank = ring, rank
        self._message, self._receive = message, receive
        self.waited = False
        ring.works[rank].append(self)

    def wait(self, timeout=None) -> bool:
        ring = self._ring
        if self._message is not None:
            m = self._message
            ring.block_until(m.src, lambda: m.data is not None or ring.matched(m),
                             f"wait() for its isend to rank {m.dst}")
            ring.read(m)
        else:
            ring.complete(self._receive, f"wait() for its irecv from rank {self._receive.src}")
        self.waited = True
        return True

    def is_completed(self) -> bool:
        done = (self._message.data is not None if self._message is not None
                else self._receive.done)
        self.waited = self.waited or done
        return done

    def unwaited(self) -> str | None:
        """The misuse of a work never waited for (nor seen completed), or None."""
        if self.waited:
            return None
        if self._message is not None:
            return (f"rank {self._rank} sent with isend and never waited for it (req.wait()): "
                    f"the buffer may be reused before the send completes{self._message.line}")
        return (f"rank {self._rank} received with irecv and never waited for it (req.wait()): "
                f"the tensor may not hold the message yet{self._receive.line}")


def _caller_line() -> str:
    """' (line N: code)' of the innermost frame outside this module: the learner's call."""
    for frame in reversed(traceback.extract_stack()):
        if os.path.abspath(frame.filename) != _HERE:
            return f" (line {frame.lineno}: {(frame.line or '').strip()})"
    return ""


class RankComm:
    """The comm one simulated rank is given: a stand-in for ``torch.distributed``.

    Methods: ``isend(tensor, dst)`` -> a work with ``wait()``; ``irecv(tensor, src)`` -> a work
    whose ``wait()`` returns once the message is in ``tensor`` (written then, as torch's may be
    as late as that); ``send(tensor, dst)`` (isend, then wait); ``recv(tensor, src)`` (irecv,
    then wait; returns ``src``); ``get_rank()``, ``get_world_size()``. Ranks are ints in [0, W),
    not this rank; messages between two ranks arrive in the order sent and are taken in the
    order their receives were posted (as torch.distributed's with tag 0).

    Raises:
        CommError: a rank out of range or this rank's own, a non-tensor, a received tensor
            whose size or dtype differs from the message, a method it does not offer.
    """

    def __init__(self, ring: _Ring, rank: int):
        self._ring, self._rank = ring, rank

    def _peer(self, peer, what: str) -> int:
        world = self._ring.world
        if isinstance(peer, bool) or not isinstance(peer, int):
            raise CommError(f"{what} must be an int rank, got {peer!r}")
        if not 0 <= peer < world or peer == self._rank:
            raise CommError(f"{what} = {peer} on rank {self._rank}: a peer must be another rank "
                            f"in 0..{world - 1} (use % world)")
        return peer

    @staticmethod
    def _tensor(tensor, what: str) -> torch.Tensor:
        if not isinstance(tensor, torch.Tensor):
            raise CommError(f"{what} takes a torch tensor, got {type(tensor).__name__}")
        return tensor

    def get_rank(self) -> int:
        return self._rank

    def get_world_size(self) -> int:
        return self._ring.world

    def isend(self, tensor, dst=None, group=None, tag=0):
        tensor = self._tensor(tensor, "isend")
        dst = self._peer(dst, "isend's dst")
        ring = self._ring
        queue = ring.messages_to[(self._rank, dst)]
        message = _Message(self._rank, dst, len(queue), tensor, tensor.detach().clone(),
                           _caller_line())
        queue.append(message)
        ring.sent[self._rank] += tensor.numel()
        ring.messages[self._rank] += 1
        return _Work(ring, self._rank, message=message)

    def irecv(self, tensor, src=None, group=None, tag=0):
        tensor = self._tensor(tensor, "irecv")
        if src is None:
            raise CommError("give irecv the rank to receive from: irecv(tensor, src)")
        src = self._peer(src, "irecv's src")
        ring = self._ring
        pair = (src, self._rank)
        receive = _Receive(src, self._rank, ring.posted[pair], tensor, _caller_line())
        ring.posted[pair] += 1
        return _Work(ring, self._rank, receive=receive)

    def send(self, tensor, dst=None, group=None, tag=0) -> None:
        self.isend(tensor, dst, group, tag).wait()

    def recv(self, tensor, src=None, group=None, tag=0) -> int:
        tensor = self._tensor(tensor, "recv")
        if src is None:
            raise CommError("give recv the rank to receive from: recv(tensor, src)")
        src = self._peer(src, "recv's src")
        ring = self._ring
        pair = (src, self._rank)
        receive = _Receive(src, self._rank, ring.posted[pair], tensor, _caller_line())
        ring.posted[pair] += 1
        ring.complete(receive, f"recv(from rank {src})")
        return src

    def __getattr__(self, name):
        raise AttributeError(f"comm.{name}: the lab's comm offers isend(tensor, dst) and "
                             "irecv(tensor, src) (each returns a work: work.wait()), "
                             "send(tensor, dst) and recv(tensor, src); torch.distributed has "
                             "more, but the check does not offer it")


@dataclasses.dataclass
class Outcome:
    """What :func:`run_ranks` saw.

    Attributes:
        errors: the exception each rank raised (None if it returned), by rank.
        misuse: None, or a sentence naming a rank that broke a rule of the point-to-point
            calls: it wrote into a buffer it had sent before the send completed, or returned
            with an isend or irecv never waited for (with the line of that call).
        deadlock: None, or where each rank waited when none could go on (one line each).
        stuck: None, or a sentence naming the rank that ran past the time limit.
        sent: elements each rank sent (all its isend/send calls). messages: calls, by rank.
    """

    errors: list
    misuse: str | None
    deadlock: str | None
    stuck: str | None
    sent: list[int]
    messages: list[int]


class _Ring:
    """The scheduler: one rank runs at a time (``turn``), until it waits or returns."""

    def __init__(self, world: int):
        self.world = world
        self.cv = threading.Condition()
        self.turn: int | None = None
        self.ready: list = [None] * world       # what a waiting rank waits for
        self.where = [""] * world
        self.done = [False] * world
        self.aborted = False
        self.misuse: str | None = None
        self.messages_to = collections.defaultdict(list)   # (src, dst) -> messages, in order
        self.posted = collections.Counter()                # (src, dst) -> receives posted
        self.works: list[list[_Work]] = [[] for _ in range(world)]
        self.sent = [0] * world
        self.messages = [0] * world
        self.errors: list = [None] * world

    def block_until(self, rank: int, ready, where: str) -> None:
        if self.aborted:
            raise _Abort
        if ready():
            return
        with self.cv:
            self.ready[rank], self.where[rank] = ready, where + _caller_line()
            self.turn = None
            self.cv.notify_all()
            while self.turn != rank and not self.aborted:
                self.cv.wait()
            self.ready[rank] = None
            if self.aborted:
                raise _Abort

    def fail(self, misuse: str) -> None:
        """Stop the run for a misuse of the calls (the first one found is reported)."""
        if self.misuse is None:
            self.misuse = misuse
        raise _Abort

    def matched(self, message: _Message) -> bool:
        """Whether the receive that takes ``message`` has been posted."""
        return self.posted[(message.src, message.dst)] > message.seq

    def read(self, message: _Message) -> torch.Tensor:
        """The transport reads the sender's buffer (once): the send completes. A buffer
        changed since isend is a misuse."""
        if message.data is None:
            if not _same(message.tensor.detach(), message.at_isend):
                self.fail(f"rank {message.src} changed the tensor it had sent to rank "
                          f"{message.dst} with isend before the send completed (it wrote or "
                          f"received into it before req.wait() returned): the buffer was "
                          f"reused, so rank {message.dst} may receive the new "
                          f"values{message.line}")
            message.data = message.tensor.detach().clone()
        return message.data

    def complete(self, receive: _Receive, where: str) -> None:
        """Wait for the message ``receive`` takes, then copy it into its tensor (once)."""
        if receive.done:
            return
        queue = self.messages_to[(receive.src, receive.dst)]
        self.block_until(receive.dst, lambda: len(queue) > receive.seq, where)
        data = self.read(queue[receive.seq])
        tensor = receive.tensor
        if data.numel() != tensor.numel() or data.dtype != tensor.dtype:
            raise CommError(f"rank {receive.dst} received {data.numel()} {data.dtype} elements "
                            f"from rank {receive.src} into a tensor of {tensor.numel()} "
                            f"{tensor.dtype}: the sizes (and dtypes) of a send and its recv "
                            "must match")
        with torch.no_grad():
            tensor.copy_(data.reshape(tensor.shape))
        receive.done = True

    def rank_main(self, rank: int, fn, x, comm) -> None:
        with self.cv:
            while self.turn != rank and not self.aborted:
                self.cv.wait()
        try:
            if not self.aborted:
                fn(x, rank, self.world, comm)
                unwaited = next((u for u in map(_Work.unwaited, self.works[rank]) if u), None)
                if unwaited:
                    self.fail(unwaited)
        except _Abort:
            pass
        except BaseException as exc:  # noqa: BLE001 - the learner's code, reported by the check
            self.errors[rank] = exc
        finally:
            with self.cv:
                self.done[rank] = True
                if self.turn == rank:
                    self.turn = None
                self.cv.notify_all()

    def runnable(self, rank: int) -> bool:
        if self.done[rank]:
            return False
        ready = self.ready[rank]
        return ready is None or bool(ready())

    def describe_deadlock(self) -> str:
        lines = []
        for r in range(self.world):
            lines.append(f"rank {r} has returned" if self.done[r] else
                         f"rank {r} waits in {self.where[r]}")
        return "; ".join(lines)


def _stop_thread(thread: threading.Thread) -> None:
    """Raise _Abort in a thread that runs Python code (an endless loop): best effort."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(_Abort))


def run_ranks(fn, inputs: list[torch.Tensor], *, turn_timeout_s: float = 5.0,
              total_timeout_s: float = 30.0) -> Outcome:
    """Run ``fn(inputs[r], r, W, comm_r)`` for every rank r of W = len(inputs), in threads.

    Args:
        fn: the learner's all-reduce. inputs: one tensor per rank, handed over as they are
            (``fn`` works on them in place). turn_timeout_s: seconds one rank may run without
            waiting or returning. total_timeout_s: seconds for the whole run.

    Returns:
        An :class:`Outcome`; ``inputs`` hold what ``fn`` left in them. Never raises for what
        ``fn`` does. The first rank to raise, or to misuse the calls, stops the run (the others
        are stopped).
    """
    world = len(inputs)
    ring = _Ring(world)
    threads = [threading.Thread(target=ring.rank_main, args=(r, fn, inputs[r],
                                                             RankComm(ring, r)),
                                name=f"lab9-rank-{r}", daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    deadlock = stuck = None
    last = world - 1
    end = time.monotonic() + total_timeout_s
    with ring.cv:
        while True:
            if ring.misuse or any(e is not None for e in ring.errors):
                break
            order = [(last + 1 + i) % world for i in range(world)]
            nxt = next((r for r in order if ring.runnable(r)), None)
            if nxt is None:
                if not all(ring.done):
                    deadlock = ring.describe_deadlock()
                break
            if time.monotonic() > end:
                stuck = (f"the ranks had not finished after {total_timeout_s:g} s (they were "
                         "still sending and receiving): far too many messages?")
                break
            ring.turn = nxt
            ring.cv.notify_all()
            if not ring.cv.wait_for(lambda: ring.turn is None, timeout=turn_timeout_s):
                stuck = (f"rank {nxt} ran for {turn_timeout_s:g} s without returning or "
                         "waiting for a message: an endless loop?")
                _stop_thread(threads[nxt])
                break
            last = nxt
        ring.aborted = True
        ring.cv.notify_all()
    for t in threads:
        t.join(timeout=1.0)
    return Outcome(list(ring.errors), ring.misuse, deadlock, stuck, list(ring.sent),
                   list(ring.messages))

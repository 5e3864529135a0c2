"""A child process that runs measurements one at a time and can be stopped in the middle of one.

A call into torch or a compiled kernel cannot be interrupted from another thread, so the live
explorers measure in a :class:`Worker`: ``python -m helpers.device.worker``, started once and
given a function by module and name (pickled over its standard input and output). A call no
longer wanted, or past its time, is asked to stop (:mod:`helpers.device.cancel`: the timer
stops at its next timed call) and the process goes on; only a call that ignores the request
for longer than the grace is killed, and a warm spare, started ahead, takes its place.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib
import inspect
import math
import os
import pathlib
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from helpers.device import cancel

__all__ = ["Outcome", "Worker", "command"]

#: Whether a child gets a process group of its own, killed whole (POSIX).
_GROUPS = os.name == "posix"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one call in the worker.

    Attributes:
        status: ``"ok"``; ``"did not finish"`` (still running when its ``timeout_s`` was up:
            it was stopped, or killed after the grace); ``"stopped"`` (no longer wanted:
            stopped, or killed after the grace); ``"failed"`` (it raised, or the process died:
            ``error`` says how).
        value: the function's return value (``"ok"`` only; it must pickle).
        seconds: wall-clock seconds from the call's beginning in the child (or its sending,
            if it never began) to its end or its stop.
        error: ``"TypeName: message"`` for ``"failed"``, else "".
    """

    status: str
    value: Any = None
    seconds: float = 0.0
    error: str = ""
    #: True when the call ignored the request to stop and its process was killed.
    killed: bool = False


def _send(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    """The next message, or EOFError when the other end is gone."""
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the other end closed the pipe")
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed the pipe")
    return pickle.loads(data)


#: Seconds a warming child waits after a call before its next warm-up step.
WARM_UP_PAUSE_S = 0.5


def _serve(warm_up: tuple[str, str] | None) -> None:
    """The child's loop (after ``warm_up``: a function, or a generator function run to its
    first ``yield`` before the child reports ready and then one step at a time while no call
    waits, never in the :data:`WARM_UP_PAUSE_S` after a call): ``(module, name, args,
    kwargs)`` in; out, ``("began", None)`` when the call begins, then ``(status, value)``, where
    status is ``"ok"``, ``"failed"`` or ``"stopped"`` (the call raised
    :class:`helpers.device.cancel.Cancelled`). A control thread reads the standard input, so
    that ``"cancel"`` reaches the call in progress (:func:`helpers.device.cancel.request`).
    Its standard output is the parent's pipe; anything printed goes to standard error.

    The pipes are read and written through descriptors of their own, and standard input becomes
    ``/dev/null``: a process a call forks (a DataLoader's workers, under the ``fork`` start
    method) closes ``sys.stdin`` first, which would wait forever for the lock the control
    thread held, blocked on the pipe, when the fork happened."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    requests = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, sys.stdin.fileno())
    os.close(null)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    jobs: queue.Queue = queue.Queue()

    def control() -> None:
        while True:
            try:
                message = _receive(requests)
            except EOFError:
                message = None
            if message == "cancel":
                cancel.request()
                continue
            # a new call: forget a request for the one before (the parent sends a call only
            # once the one before has answered, so a request that follows is for this one,
            # even if it arrives before the call begins)
            cancel.clear()
            jobs.put(message)
            if message is None:
                return

    threading.Thread(target=control, daemon=True, name="workbook-measure-control").start()
    warming = None  # a warm-up generator's remaining steps, taken while no call waits
    if warm_up is not None:
        try:
            warming = getattr(importlib.import_module(warm_up[0]), warm_up[1])()
            if inspect.isgenerator(warming):
                next(warming)
            else:
                warming = None
        except Exception:  # noqa: BLE001  (each call reports its own errors)
            warming = None
    _send(replies, ("ready", None))
    ended = -math.inf   # when the last call ended
    while True:
        if warming is not None:
            # a step waits while a call is queued, and for a moment after a call (the next
            # point of an update follows at once: it must not wait for a step to end)
            pause = ended + WARM_UP_PAUSE_S - time.monotonic()
            try:
                job = jobs.get(timeout=pause) if pause > 0 else jobs.get_nowait()
            except queue.Empty:
                try:
                    next(warming)
                except Exception:  # noqa: BLE001  (StopIteration: warm; else each call reports)
                    warming = None
                continue
        else:
            job = jobs.get()
        if job is None:
            return
        _send(replies, ("began", None))   # the call's time starts now, not when it was sent
        _send(replies, _answer(*job))
        ended = time.monotonic()


def _answer(module: str, name: str, args: tuple, kwargs: dict) -> tuple[str, Any]:
    """One call's reply: ``(status, value)``."""
    try:
        value = getattr(importlib.import_module(module), name)(*args, **kwargs)
    except cancel.Cancelled:
        return ("stopped", None)
    except BaseException as exc:  # noqa: BLE001  (sent back as the call's failure)
        return ("failed", f"{type(exc).__name__}: {exc}")
    return ("ok", value)


def command(warm_up: tuple[str, str] | None = None) -> list[str]:
    """The measuring process's command line: ``[python, "-m", "helpers.device.worker"]``, then
    the warm-up's module and function name, if any."""
    return [sys.executable, "-m", "helpers.device.worker", *(warm_up or ())]


class _Child:
    """One child process, the thread that reads its replies, and whether it is ready."""

    def __init__(self, warm_up: tuple[str, str] | None):
        root = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding helpers/
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
        # a session of its own, so that a kill takes the processes a call forked with it
        self.process = subprocess.Popen(command(warm_up), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, cwd=root,
                                        start_new_session=_GROUPS)
        self.replies: queue.Queue = queue.Queue()
        self.ready = False
        threading.Thread(target=self._read, daemon=True,
                         name="workbook-measure-reader").start()

    def _read(self) -> None:
        """Move the child's replies into ``replies``; ``("gone", None)`` when it ends."""
        with self.process.stdout:
            while True:
                try:
                    self.replies.put(_receive(self.process.stdout))
                except Exception:  # noqa: BLE001  (EOF, a closed pipe: the child is gone)
                    self.replies.put(("gone", None))
                    return

    def reply(self, timeout_s: float):
        """The child's next reply, or None when none came within ``timeout_s``."""
        try:
            return self.replies.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the child and whatever it forked (its process group), and close its input.
        Its output is left to the reader thread, which ends at the end of the file: closing
        it here would wait for that thread, and so for every process that holds the pipe."""
        if _GROUPS:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.process.stdin.close()


class Worker:
    """A measuring process, started on first use, with a warm spare where asked.

    Args:
        warm_up: ``(module, function)`` the child calls once before its first call (imports,
            kernel compilation), or None.
        start_timeout_s: seconds a child may take to start before :meth:`run` reports the
            call as failed (> 0).
        spare: keep a second child warming up, to take the place of one that is killed (so
            that the next call waits for no import). It starts once the first child has
            been idle for :data:`SPARE_IDLE_S` after a call (or :meth:`wait_ready` is
            called), so that its imports do not slow the calls of an update (a widget's first
            chart) on a machine with few cores.
        grace_s: seconds a call asked to stop (no longer wanted, or past its ``timeout_s``)
            may take to stop before its process is killed (> 0).

    Calls are run one at a time, in the order threads ask (a lock); :meth:`run` is safe to call
    from any thread. A child is killed when this process exits, and ends by itself when its
    standard input closes.
    """

    #: Default seconds a call asked to stop may take before it is killed.
    GRACE_S = 1.0

    #: Seconds without a call after which the spare starts warming up.
    SPARE_IDLE_S = 0.3

    def __init__(self, warm_up: tuple[str, str] | None = None, start_timeout_s: float = 300.0,
                 spare: bool = False, grace_s: float | None = None):
        if not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be > 0 seconds, got {start_timeout_s!r}")
        grace_s = self.GRACE_S if grace_s is None else grace_s
        if not grace_s > 0:
            raise ValueError(f"grace_s must be > 0 seconds, got {grace_s!r}")
        self.warm_up = warm_up
        self.start_timeout_s = start_timeout_s
        self.spare = bool(spare)
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._spare: _Child | None = None
        self._start_error = ""
        self._idle_since = time.monotonic()
        #: How many child processes were started (the first, spares, and one after a failure).
        self.starts = 0
        #: How many calls were killed because they ignored a request to stop.
        self.kills = 0
        atexit.register(self._kill_all)

    def _new_child(self) -> _Child:
        self.starts += 1
        return _Child(self.warm_up)

    def start(self) -> None:
        """Start a child now (if none is running), without waiting for it to be ready. Safe
        from any thread: while a call is in progress there is a child already."""
        if self._lock.acquire(blocking=False):
            try:
                self._start()
            finally:
                self._lock.release()

    def _start(self) -> None:
        if self._child is not None and self._child.alive():
            return
        if self._child is not None:
            self._child.kill()
        if self._spare is not None and self._spare.alive():
            self._child, self._spare = self._spare, None
        else:
            self._child = self._new_child()

    def _start_spare(self) -> None:
        if self.spare and (self._spare is None or not self._spare.alive()):
            self._spare = self._new_child()

    def wait_ready(self, timeout_s: float | None = None, start_spare: bool = True) -> bool:
        """Start a child if needed and wait up to ``timeout_s`` seconds (default
        ``start_timeout_s``) until it is ready; whether it is. Once it is, the spare (if
        asked for, and ``start_spare``) starts warming up."""
        self._start()
        child = self._child
        if not child.ready:
            wait = self.start_timeout_s if timeout_s is None else timeout_s
            reply = child.reply(wait)
            if reply is None:
                self._start_error = f"the measuring process did not start within {wait:g} s"
                return False
            if reply[0] == "ready":
                child.ready = True
            else:
                code = child.process.wait(timeout=10)
                self._start_error = (f"the measuring process ended before it was ready "
                                     f"(exit code {code}; its error is on standard error)")
                self._kill()
                return False
        if start_spare:
            self._start_spare()
        return True

    def run(self, module: str, name: str, *args: Any, timeout_s: float,
            cancelled: Callable[[], bool] = lambda: False, poll_s: float = 0.02,
            **kwargs: Any) -> Outcome:
        """Call ``module.name(*args, **kwargs)`` in the child and wait for its result.

        Args:
            module, name: the function, importable in a fresh interpreter.
            timeout_s: seconds the call may run once it begins (the child's start, and the
                end of a warm-up step it is taking, are not counted, up to
                ``start_timeout_s``); then it is asked to stop, and killed if it has not
                within ``grace_s``: the outcome is ``"did not finish"``.
            cancelled: asked every ``poll_s`` seconds; once it returns True the call is asked
                to stop, and killed if it has not within ``grace_s`` (outcome ``"stopped"``).

        Returns:
            An :class:`Outcome` (``killed`` says whether the process had to be killed). Never
            raises for what the call does.
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        with self._lock:
            if cancelled():
                return Outcome("stopped")
            if not self.wait_ready(start_spare=False):
                self._kill()
                return Outcome("failed", error=f"RuntimeError: {self._start_error}")
            self._idle_since = math.inf
            try:
                return self._call(module, name, args, kwargs, timeout_s, cancelled, poll_s)
            except BaseException:
                # interrupted while waiting (KeyboardInterrupt): the child may still be in the
                # call, and its late reply would be taken for the next call's
                self._replace()
                raise
            finally:  # the spare warms up once no call has come for a while, not during one
                self._idle_since = time.monotonic()
                if self.spare and (self._spare is None or not self._spare.alive()):
                    self._spare_when_idle()

    def _spare_when_idle(self) -> None:
        """Start the spare (if still missing) once no call has run for SPARE_IDLE_S seconds
        and none is running; checked from a timer thread."""
        def attempt() -> None:
            idle = time.monotonic() - self._idle_since
            if idle < self.SPARE_IDLE_S or not self._lock.acquire(blocking=False):
                wait = self.SPARE_IDLE_S - idle if idle < self.SPARE_IDLE_S else self.SPARE_IDLE_S
                if math.isfinite(wait):
                    timer = threading.Timer(max(wait, 0.01), attempt)
                    timer.daemon = True
                    timer.start()
                return   # a call is running: its own end schedules the next attempt
            try:
                if self._child is not None and self._child.ready and self._child.alive():
                    self._start_spare()
            finally:
                self._lock.release()

        timer = threading.Timer(self.SPARE_IDLE_S, attempt)
        timer.daemon = True
        timer.start()

    def _call(self, module, name, args, kwargs, timeout_s, cancelled, poll_s) -> Outcome:
        """The body of :meth:`run`, with the lock held and a ready child."""
        child = self._child
        sent = time.monotonic()
        try:
            _send(child.process.stdin, (module, name, args, kwargs))
        except (OSError, ValueError, pickle.PicklingError) as exc:
            self._kill()
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
        # Until the child says the call began, it is finishing a warm-up step: that time is
        # the child's start (up to start_timeout_s), not the call's.
        start, limit = sent, self.start_timeout_s
        why, kill_at = "", None
        while True:
            now = time.monotonic()
            if not why:
                why = ("did not finish" if now - start >= limit
                       else "stopped" if cancelled() else "")
                if why:
                    kill_at = now + self.grace_s
                    try:
                        _send(child.process.stdin, "cancel")
                    except (OSError, ValueError):
                        kill_at = now
            if kill_at is not None and now >= kill_at:
                self.kills += 1
                self._replace()
                return Outcome(why, seconds=now - start, killed=True)
            wait = (kill_at if kill_at is not None else start + limit) - now
            reply = child.reply(min(poll_s, max(wait, 0.0)))
            if reply is None:
                continue
            status, value = reply
            if status == "began":
                start, limit = time.monotonic(), timeout_s
                continue
            seconds = time.monotonic() - start
            if status == "gone":
                code = child.process.wait(timeout=5)
                self._replace()
                return Outcome("failed", seconds=seconds,
                               error=f"RuntimeError: the measuring process ended "
                                     f"(exit code {code})")
            if why:  # asked to stop: whatever it answers, it is not wanted
                return Outcome(why, seconds=seconds)
            if status == "ok":
                return Outcome("ok", value, seconds)
            if status == "stopped":  # stopped by itself (cancel.Cancelled): not asked
                return Outcome("failed", seconds=seconds,
                               error="Cancelled: the call stopped itself")
            return Outcome("failed", seconds=seconds, error=value)

    def close(self) -> None:
        """Stop the children (a child is started again by the next :meth:`run`)."""
        with self._lock:
            for child in (self._child, self._spare):
                if child is not None and child.alive():
                    try:
                        _send(child.process.stdin, None)
                        child.process.wait(timeout=2)
                    except (OSError, ValueError, subprocess.TimeoutExpired):
                        pass
            self._kill_all()

    def _kill(self) -> None:
        if self._child is not None:
            self._child.kill()
        self._child = None

    def _kill_all(self) -> None:
        self._kill()
        if self._spare is not None:
            self._spare.kill()
        self._spare = None

    def _replace(self) -> None:
        """Kill the child and put the spare (or a new child, importing while nobody waits)
        in its place; the next spare starts once that one is ready (:meth:`wait_ready`)."""
        self._kill()
        self._start()


if __name__ == "__main__":
    _serve(tuple(sys.argv[1:3]) if len(sys.argv) >= 3 else None)
    # the parent is gone or done (its pipe closed): leave at once, as multiprocessing's workers
    # do, without Python's teardown of torch and Numba (over a second of CPU, for nothing)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)

"""A child process that runs measurements one at a time and can be stopped in the middle of one.

A call into torch or a compiled kernel cannot be interrupted from another thread, so the live
explorers measure in a :class:`Worker`: ``python -m helpers.device.worker``, started once,
given a function by module and name (pickled over its standard input and output), and killed
when its time is up or its result is no longer wanted; a fresh one is started at once.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import os
import pathlib
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Outcome", "Worker"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one call in the worker.

    Attributes:
        status: ``"ok"``; ``"did not finish"`` (still running when its ``timeout_s`` was up:
            the process was killed); ``"stopped"`` (no longer wanted: killed); ``"failed"``
            (it raised, or the process died: ``error`` says how).
        value: the function's return value (``"ok"`` only; it must pickle).
        seconds: wall-clock seconds from sending the call to its end or its stop.
        error: ``"TypeName: message"`` for ``"failed"``, else "".
    """

    status: str
    value: Any = None
    seconds: float = 0.0
    error: str = ""


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


def _serve(warm_up: tuple[str, str] | None) -> None:
    """The child's loop: ``(module, name, args, kwargs)`` in, ``(status, value)`` out. Its
    standard output is the parent's pipe; anything printed goes to standard error."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    if warm_up is not None:
        try:
            getattr(importlib.import_module(warm_up[0]), warm_up[1])()
        except Exception:  # noqa: BLE001  (each call reports its own errors)
            pass
    _send(replies, ("ready", None))
    while True:
        try:
            job = _receive(requests)
        except EOFError:
            return
        if job is None:
            return
        module, name, args, kwargs = job
        try:
            value = getattr(importlib.import_module(module), name)(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001  (sent back as the call's failure)
            _send(replies, ("failed", f"{type(exc).__name__}: {exc}"))
            continue
        _send(replies, ("ok", value))


class Worker:
    """A measuring process, started on first use and replaced after every kill.

    Args:
        warm_up: ``(module, function)`` the child calls once before its first call (imports,
            kernel compilation), or None.
        start_timeout_s: seconds a child may take to start before :meth:`run` reports the
            call as failed (> 0).

    Calls are run one at a time, in the order threads ask (a lock); :meth:`run` is safe to call
    from any thread. A child is killed when this process exits, and ends by itself when its
    standard input closes.
    """

    #: Seconds a call that is no longer wanted may take to end by itself before it is killed.
    GRACE_S = 0.2

    def __init__(self, warm_up: tuple[str, str] | None = None, start_timeout_s: float = 300.0):
        if not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be > 0 seconds, got {start_timeout_s!r}")
        self.warm_up = warm_up
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._replies: queue.Queue = queue.Queue()
        self._ready = False
        self._start_error = ""
        #: How many child processes were started (the first one, and one after every kill).
        self.starts = 0
        atexit.register(self._kill)

    def start(self) -> None:
        """Start a child now (if none is running), without waiting for it to be ready."""
        if self._process is not None and self._process.poll() is None:
            return
        root = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding helpers/
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
        command = [sys.executable, "-m", "helpers.device.worker", *(self.warm_up or ())]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         env=env, cwd=root)
        self._replies = queue.Queue()
        threading.Thread(target=self._read, args=(self._process.stdout, self._replies),
                         daemon=True, name="workbook-measure-reader").start()
        self._ready = False
        self.starts += 1

    @staticmethod
    def _read(stream, replies: queue.Queue) -> None:
        """Move the child's replies into ``replies``; ``("gone", None)`` when it ends."""
        while True:
            try:
                replies.put(_receive(stream))
            except Exception:  # noqa: BLE001  (EOF, a closed pipe: the child is gone)
                replies.put(("gone", None))
                return

    def _reply(self, timeout_s: float):
        """The child's next reply, or None when none came within ``timeout_s``."""
        try:
            return self._replies.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Start a child if needed and wait up to ``timeout_s`` seconds (default
        ``start_timeout_s``) until it is ready; whether it is."""
        self.start()
        if not self._ready:
            wait = self.start_timeout_s if timeout_s is None else timeout_s
            reply = self._reply(wait)
            if reply is None:
                self._start_error = f"the measuring process did not start within {wait:g} s"
            elif reply[0] == "ready":
                self._ready = True
            else:
                code = self._process.wait(timeout=10)
                self._start_error = (f"the measuring process ended before it was ready "
                                     f"(exit code {code}; its error is on standard error)")
                self._kill()
        return self._ready

    def run(self, module: str, name: str, *args: Any, timeout_s: float,
            cancelled: Callable[[], bool] = lambda: False, poll_s: float = 0.02,
            **kwargs: Any) -> Outcome:
        """Call ``module.name(*args, **kwargs)`` in the child and wait for its result.

        Args:
            module, name: the function, importable in a fresh interpreter.
            timeout_s: seconds the call may run (the child's start is not counted, up to
                ``start_timeout_s``); then it is killed and the outcome is
                ``"did not finish"``.
            cancelled: asked every ``poll_s`` seconds; once it returns True the call has
                :data:`GRACE_S` to end, then is killed (outcome ``"stopped"``).

        Returns:
            An :class:`Outcome`. Never raises for what the call does.
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        with self._lock:
            if cancelled():
                return Outcome("stopped")
            if not self.wait_ready():
                self._kill()
                return Outcome("failed", error=f"RuntimeError: {self._start_error}")
            start = time.monotonic()
            try:
                _send(self._process.stdin, (module, name, args, kwargs))
            except (OSError, ValueError, pickle.PicklingError) as exc:
                self._kill()
                return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
            stop_at = None
            while True:
                now = time.monotonic()
                if now - start >= timeout_s:
                    self._replace()
                    return Outcome("did not finish", seconds=now - start)
                if stop_at is None and cancelled():
                    stop_at = now + self.GRACE_S
                if stop_at is not None and now >= stop_at:
                    self._replace()
                    return Outcome("stopped", seconds=now - start)
                reply = self._reply(min(poll_s, timeout_s - (now - start)))
                if reply is None:
                    continue
                status, value = reply
                if status == "gone":
                    code = self._process.wait(timeout=5)
                    self._replace()
                    return Outcome("failed", seconds=time.monotonic() - start,
                                   error=f"RuntimeError: the measuring process ended "
                                         f"(exit code {code})")
                seconds = time.monotonic() - start
                if stop_at is not None:
                    return Outcome("stopped", seconds=seconds)
                if status == "ok":
                    return Outcome("ok", value, seconds)
                return Outcome("failed", seconds=seconds, error=value)

    def close(self) -> None:
        """Stop the child (it is started again by the next :meth:`run`)."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                try:
                    _send(self._process.stdin, None)
                    self._process.wait(timeout=2)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    def _kill(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait(timeout=10)
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self._process = None
        self._ready = False

    def _replace(self) -> None:
        """Kill the child and start the next one at once (it imports while nobody waits)."""
        self._kill()
        self.start()


if __name__ == "__main__":
    _serve(tuple(sys.argv[1:3]) if len(sys.argv) >= 3 else None)

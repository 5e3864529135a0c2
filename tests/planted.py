"""A stand-in for the explorers' measuring process: each point runs here, in the test's process
(so its row is real), and takes as long as the test says, or fails, or runs until stopped."""

from __future__ import annotations

import importlib
import threading
import time

from helpers.device.worker import Outcome


class PlantedWorker:
    """Has :class:`helpers.device.worker.Worker`'s ``run``; nothing is measured in a child.

    A point is named by its key: the strategy for ``conv_point``, ``(backend, size)`` for
    ``throughput_point``.

    Args:
        seconds: planted seconds by key (default 0.01): a point planted longer than its
            ``timeout_s`` does not finish (the outcome a kill gives), without running.
        errors: the error text by key of points that fail.
        blocking: keys of points that run until the caller stops them (``cancelled``).

    Attributes:
        calls: ``(key, timeout_s)`` of every point asked for, in order.
        requests: ``(function name, args)`` of the same points.
        started: set when a blocking point has begun.
        stopped: keys of the points that were stopped.
    """

    def __init__(self, seconds=None, errors=None, blocking=()):
        self.seconds = dict(seconds or {})
        self.errors = dict(errors or {})
        self.blocking = set(blocking)
        self.calls: list[tuple] = []
        self.requests: list[tuple] = []
        self.started = threading.Event()
        self.stopped: list = []
        self._lock = threading.Lock()

    @staticmethod
    def key(name: str, args: tuple):
        return args[1] if name == "conv_point" else (args[2], args[5])

    def run(self, module, name, *args, timeout_s, cancelled=lambda: False, poll_s=0.02,
            **kwargs):
        with self._lock:
            key = self.key(name, args)
            self.calls.append((key, timeout_s))
            self.requests.append((name, args))
            if key in self.blocking:
                self.started.set()
                while not cancelled():
                    time.sleep(poll_s)
                self.stopped.append(key)
                return Outcome("stopped")
            if key in self.errors:
                return Outcome("failed", seconds=0.01, error=self.errors[key])
            planted = self.seconds.get(key, 0.01)
            if planted > timeout_s:
                return Outcome("did not finish", seconds=timeout_s)
            value = getattr(importlib.import_module(module), name)(*args, **kwargs)
            return Outcome("ok", value, planted)

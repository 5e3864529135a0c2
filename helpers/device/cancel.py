"""Cooperative cancellation of a measurement in a measuring process.

The parent of a :class:`helpers.device.worker.Worker` asks its child to stop the call in
progress; the child's control thread calls :func:`request`, and the measuring code calls
:func:`check` between timed calls (:func:`helpers.device.timing.benchmark` does), which raises
:class:`Cancelled`. Code that never calls :func:`check` is killed after the worker's grace.
"""

from __future__ import annotations

import threading

__all__ = ["Cancelled", "check", "clear", "request", "requested"]

_REQUESTED = threading.Event()


class Cancelled(BaseException):
    """The call in progress is no longer wanted. A ``BaseException``, like
    ``KeyboardInterrupt``, so that ``except Exception`` around a measurement (which turns an
    error into a failed row) lets it through."""


def request() -> None:
    """Ask the call in progress to stop at its next :func:`check`."""
    _REQUESTED.set()


def clear() -> None:
    """Forget an earlier request (a new call begins)."""
    _REQUESTED.clear()


def requested() -> bool:
    """Whether the call in progress has been asked to stop."""
    return _REQUESTED.is_set()


def check() -> None:
    """Raise :class:`Cancelled` if the call in progress has been asked to stop."""
    if _REQUESTED.is_set():
        raise Cancelled("the measurement is no longer wanted")

"""Work counted in steps instead of seconds, for tests that a call is refused before any work.

A clock says as much about the machine's load as about the call; the number of Python lines
it executes and of C functions it calls does not depend on the load (though a first call that
compiles a kernel takes far more steps than a later one, and work inside one C call is one).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


class Steps:
    """The count, read after the ``with`` block: ``lines`` run, ``c_calls`` made."""

    lines = 0
    c_calls = 0

    @property
    def total(self) -> int:
        return self.lines + self.c_calls


@contextlib.contextmanager
def counted() -> Iterator[Steps]:
    """Count the steps this thread takes inside the block (``sys.settrace`` and
    ``sys.setprofile``); any tracer or profiler already set is put back afterwards."""
    steps = Steps()

    def trace(frame, event, arg):
        if event == "line":
            steps.lines += 1
        return trace

    def profile(frame, event, arg):
        if event == "c_call":
            steps.c_calls += 1

    old_trace, old_profile = sys.gettrace(), sys.getprofile()
    sys.settrace(trace)
    sys.setprofile(profile)
    try:
        yield steps
    finally:
        sys.setprofile(old_profile)
        sys.settrace(old_trace)

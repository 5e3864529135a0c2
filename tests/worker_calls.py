"""Calls for a measuring process in the tests (imported by name in the child, with ``tests/`` on
its PYTHONPATH): one that stops when asked, one that ignores the request, a slow warm-up, and a
warm-up in steps that counts them."""

from __future__ import annotations

import os
import pathlib
import time

from helpers.device import cancel
from helpers.device.timing import benchmark


def cooperative(seconds: float) -> str:
    """Time ``time.sleep(0.01)`` for ``seconds`` through the workbook's timer, which stops at
    its next timed block once asked (helpers.device.cancel)."""
    benchmark(time.sleep, 0.01, min_run_time=seconds, warmup=0)
    return "finished"


def ignores_cancel(seconds: float) -> str:
    """Sleep ``seconds`` without ever looking at a request to stop."""
    time.sleep(seconds)
    return "finished"


#: Seconds a slow warm-up adds: a replacement that had to start cold would take longer.
SLOW_S = 8.0


def slow_warm_up() -> None:
    """A warm-up as slow as importing torch and compiling kernels on a busy machine: the
    explorers' own (helpers.experiments.live.warm_up), then :data:`SLOW_S` seconds more."""
    from helpers.experiments import live

    for _ in live.warm_up():
        pass
    time.sleep(SLOW_S)


def requested_now() -> bool:
    """Whether a request to stop is pending in this process (it must not be, at a call's start)."""
    return cancel.requested()


#: Seconds of :func:`sleepy_warm_up`, far above a call of the standard library.
SLEEPY_S = 3.0


def sleepy_warm_up() -> None:
    """A warm-up of :data:`SLEEPY_S` seconds that imports nothing (for calls of the standard
    library only)."""
    time.sleep(SLEEPY_S)


#: Seconds each step of :func:`stepped_warm_up` sleeps (no request to stop ends a step).
STEP_S = 3.0

#: Steps of :func:`stepped_warm_up` taken so far in this process.
steps = 0


#: The environment variable naming a file each step of :func:`stepped_warm_up` writes as it
#: begins (the number of steps taken before it), so that a test can send a call during a step.
STEP_FILE = "WORKER_CALLS_STEP_FILE"


def stepped_warm_up():
    """A warm-up generator: ready at once, then ten steps of :data:`STEP_S` seconds, counted in
    :data:`steps`; each step begins by writing the file named in ``$WORKER_CALLS_STEP_FILE``
    (when set)."""
    global steps
    yield
    for _ in range(10):
        if os.environ.get(STEP_FILE):
            pathlib.Path(os.environ[STEP_FILE]).write_text(str(steps))
        time.sleep(STEP_S)
        steps += 1
        yield


def steps_taken() -> int:
    """How many steps of :func:`stepped_warm_up` this process has taken."""
    return steps


def forks_and_joins() -> int | None:
    """Start a process with multiprocessing's ``fork`` start method, as a DataLoader's workers
    start on Linux, and wait up to 60 s for it: its exit code, or None if it never ended."""
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=int)
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    return child.exitcode


def forks_a_sleeper_and_sleeps(pid_file: str, seconds: float) -> None:
    """Fork a process that sleeps ``seconds`` holding this process's pipes, write its pid to
    ``pid_file``, then sleep as long, never looking at a request to stop."""
    pid = os.fork()
    if pid == 0:
        time.sleep(seconds)
        os._exit(0)
    pathlib.Path(pid_file).write_text(str(pid))
    time.sleep(seconds)

"""helpers.device.worker: a call no longer wanted is asked to stop and stops at its next timed
block, in the same process; one that ignores the request is killed after the grace, and a warm
spare takes its place at once. A call's time counts from when it begins, not from the warm-up
step it waited for, and the calls of an update get no warm-up step between them.

What is checked is the outcome and the process's life (starts, kills), with bounds far from
this machine's speed: a call that should stop cooperatively would otherwise run ten minutes.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time

import pytest
import worker_calls

from helpers.device import cancel
from helpers.device import worker as worker_mod
from helpers.device.worker import Worker

TESTS = str(pathlib.Path(__file__).resolve().parent)


@pytest.fixture
def tests_importable(monkeypatch):
    """The child imports the tests' own calls (tests/worker_calls.py)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))


def _unwanted_after(seconds: float):
    wanted = threading.Event()
    wanted.set()
    threading.Timer(seconds, wanted.clear).start()
    return lambda: not wanted.is_set()


@pytest.mark.slow
def test_a_timed_call_no_longer_wanted_stops_without_killing_its_process(tests_importable):
    worker = Worker(grace_s=60.0)
    try:
        assert worker.wait_ready()
        starts = worker.starts
        begun = time.monotonic()
        out = worker.run("worker_calls", "cooperative", 600.0, timeout_s=3000,
                         cancelled=_unwanted_after(0.5))
        assert out.status == "stopped" and not out.killed
        assert time.monotonic() - begun < 60  # not the grace: it stopped by itself
        assert (worker.starts, worker.kills) == (starts, 0)  # the same process goes on
        # and the next call does not see the old request
        assert worker.run("worker_calls", "requested_now", timeout_s=120).value is False
        assert worker.run("math", "sqrt", 4.0, timeout_s=120).value == 2.0
    finally:
        worker.close()


@pytest.mark.slow
def test_a_timed_call_past_its_time_stops_cooperatively_too(tests_importable):
    worker = Worker(grace_s=60.0)
    try:
        worker.wait_ready()
        out = worker.run("worker_calls", "cooperative", 600.0, timeout_s=0.5)
        assert out.status == "did not finish" and not out.killed
        assert worker.kills == 0
    finally:
        worker.close()


@pytest.mark.slow
def test_a_call_that_ignores_the_request_is_killed_and_the_spare_takes_over(tests_importable):
    """The spare warmed up while the first child worked: after the kill the next call waits
    for no start, though every start here takes SLEEPY_S seconds."""
    worker = Worker(warm_up=("worker_calls", "sleepy_warm_up"), spare=True, grace_s=0.5)
    try:
        assert worker.wait_ready()
        assert worker.starts == 2  # the first child, and its spare started once it was ready
        assert worker._spare.reply(120) == ("ready", None)  # the spare's own warm-up
        worker._spare.replies.put(("ready", None))
        begun = time.monotonic()
        out = worker.run("worker_calls", "ignores_cancel", 600.0, timeout_s=3000,
                         cancelled=_unwanted_after(0.2))
        assert out.status == "stopped" and out.killed
        assert out.seconds < 30  # the grace, not the ten minutes
        assert worker.kills == 1
        begun = time.monotonic()
        assert worker.run("math", "sqrt", 9.0, timeout_s=120).value == 3.0
        assert time.monotonic() - begun < worker_calls.SLEEPY_S  # the spare was ready
        # a new spare behind the promoted one, started once no call has come for a moment
        end = time.monotonic() + 30
        while worker.starts < 3 and time.monotonic() < end:
            time.sleep(0.05)
        assert worker.starts == 3
    finally:
        worker.close()


def test_a_hanging_call_past_its_time_is_killed_after_the_grace(tests_importable):
    worker = Worker(grace_s=0.5)
    try:
        worker.wait_ready()
        out = worker.run("worker_calls", "ignores_cancel", 600.0, timeout_s=0.5)
        assert out.status == "did not finish" and out.killed
        assert out.seconds < 30
        assert worker.run("math", "sqrt", 16.0, timeout_s=120).value == 4.0
    finally:
        worker.close()


def test_the_timer_stops_at_its_next_block_once_asked():
    cancel.request()
    try:
        with pytest.raises(cancel.Cancelled):
            from helpers.device.timing import benchmark
            benchmark(time.sleep, 0.001, min_run_time=600.0)
    finally:
        cancel.clear()
    assert issubclass(cancel.Cancelled, BaseException)
    assert not issubclass(cancel.Cancelled, Exception)  # passes `except Exception` in a row


def test_bad_grace_raises():
    with pytest.raises(ValueError, match="grace_s"):
        Worker(grace_s=0)


@pytest.mark.slow
def test_a_request_that_arrives_before_its_call_begins_is_kept(tests_importable):
    """Asked to stop at once, the call stops without its process being killed (the request is
    not forgotten when the call begins after it)."""
    worker = Worker(grace_s=60.0)
    try:
        assert worker.wait_ready()
        asked = iter([False, True])  # wanted when sent, unwanted at the first poll
        out = worker.run("worker_calls", "cooperative", 600.0, timeout_s=3000,
                         cancelled=lambda: next(asked, True), poll_s=0.0)
        assert out.status == "stopped" and not out.killed
        assert worker.kills == 0
        assert worker.run("worker_calls", "requested_now", timeout_s=120).value is False
    finally:
        worker.close()


@pytest.mark.slow
def test_the_spare_waits_until_no_call_runs(tests_importable):
    """A spare started in the middle of an update would import torch beside its measurements:
    it starts only after SPARE_IDLE_S seconds without a call."""
    worker = Worker(spare=True)
    try:
        for _ in range(3):   # back-to-back calls, as an update makes them
            assert worker.run("time", "sleep", 2 * Worker.SPARE_IDLE_S, timeout_s=60).status == "ok"
            assert worker.starts == 1 and worker._spare is None
        end = time.monotonic() + 30
        while worker._spare is None and time.monotonic() < end:
            time.sleep(0.02)
        assert worker.starts == 2 and worker._spare is not None
    finally:
        worker.close()


@pytest.mark.slow
def test_a_call_is_timed_from_its_beginning_not_from_the_warm_up_step_it_waited_for(
        tests_importable, tmp_path, monkeypatch):
    """A call that arrives while the child takes a warm-up step begins once the step ends;
    its ``timeout_s`` (here a third of the step) counts from then."""
    step = tmp_path / "step"
    monkeypatch.setenv(worker_calls.STEP_FILE, str(step))
    worker = Worker(warm_up=("worker_calls", "stepped_warm_up"), grace_s=60.0)
    try:
        assert worker.wait_ready()
        end = time.monotonic() + 120
        while not step.exists() and time.monotonic() < end:   # the first step has begun
            time.sleep(0.02)
        assert step.exists()
        out = worker.run("worker_calls", "steps_taken", timeout_s=worker_calls.STEP_S / 3)
        assert out.status == "ok" and out.value >= 1 and not out.killed
        assert out.seconds < worker_calls.STEP_S / 3
        assert worker.kills == 0
    finally:
        worker.close()


@pytest.mark.slow
def test_calls_that_follow_each_other_take_no_warm_up_step_between_them(tests_importable):
    """The points of an update come one after the other: the child takes no step between them
    (one is allowed, should this machine hold the parent back past the pause), and warms up
    again once no call has come for WARM_UP_PAUSE_S."""
    worker = Worker(warm_up=("worker_calls", "stepped_warm_up"))
    try:
        assert worker.wait_ready()
        taken = [worker.run("worker_calls", "steps_taken", timeout_s=120).value
                 for _ in range(4)]
        assert taken[-1] - taken[0] <= 1, taken   # one step each between them, without it
        time.sleep(worker_mod.WARM_UP_PAUSE_S + 1.5)
        assert worker.run("worker_calls", "steps_taken", timeout_s=120).value > taken[-1]
    finally:
        worker.close()

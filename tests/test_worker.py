"""helpers.device.worker.Worker: a child process that runs one call at a time, and is killed
and replaced when a call runs out of time or is no longer wanted.

The calls are the standard library's (math.sqrt, time.sleep, os._exit): what is checked is
the outcome and the process's life, never how fast this machine is. A call that "does not
finish" sleeps ten minutes and is given a second: if the worker waited for it, the test would
hang for ten minutes rather than pass.
"""

from __future__ import annotations

import pathlib
import pickle
import struct
import subprocess
import sys
import threading
import time

import pytest

from helpers.device.worker import Outcome, Worker


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


def test_a_call_returns_its_value(worker):
    out = worker.run("math", "sqrt", 6.25, timeout_s=120)
    assert out == Outcome("ok", 2.5, out.seconds)
    assert out.seconds >= 0
    assert worker.run("builtins", "divmod", 17, 5, timeout_s=120).value == (3, 2)


def test_an_error_is_reported_not_raised(worker):
    out = worker.run("math", "sqrt", -1.0, timeout_s=120)
    assert out.status == "failed" and out.value is None
    assert out.error == "ValueError: math domain error"
    assert worker.run("math", "sqrt", 4.0, timeout_s=120).value == 2.0  # the same child goes on


@pytest.mark.slow
def test_a_call_past_its_time_is_killed_and_the_next_one_runs(worker):
    worker.wait_ready()
    starts = worker.starts
    begun = time.monotonic()
    out = worker.run("time", "sleep", 600, timeout_s=1.0)
    assert out.status == "did not finish"
    assert time.monotonic() - begun < 300  # it did not wait for the sleep
    assert out.seconds >= 1.0
    assert worker.starts == starts + 1  # killed and replaced at once
    assert worker.run("math", "sqrt", 9.0, timeout_s=120).value == 3.0


@pytest.mark.slow
def test_a_call_no_longer_wanted_is_stopped(worker):
    worker.wait_ready()
    wanted = threading.Event()
    wanted.set()
    threading.Timer(0.5, wanted.clear).start()
    out = worker.run("time", "sleep", 600, timeout_s=3000, cancelled=lambda: not wanted.is_set())
    assert out.status == "stopped"
    assert out.seconds < 300
    assert worker.run("math", "sqrt", 16.0, timeout_s=120).value == 4.0
    # a call not wanted before it begins is not sent at all
    assert worker.run("time", "sleep", 600, timeout_s=3000, cancelled=lambda: True) == \
        Outcome("stopped")


def test_a_child_that_dies_is_reported_and_replaced(worker):
    out = worker.run("os", "_exit", 3, timeout_s=120)
    assert out.status == "failed"
    assert "exit code 3" in out.error
    assert worker.run("math", "sqrt", 25.0, timeout_s=120).value == 5.0


def test_calls_from_two_threads_take_turns(worker):
    values = []
    threads = [threading.Thread(target=lambda x=x: values.append(
        worker.run("math", "sqrt", x, timeout_s=120).value)) for x in (1.0, 4.0, 9.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(values) == [1.0, 2.0, 3.0]


def test_printing_in_the_child_does_not_break_the_pipe(worker):
    out = worker.run("builtins", "print", "noise on standard output", timeout_s=120)
    assert (out.status, out.value) == ("ok", None)
    assert worker.run("math", "sqrt", 36.0, timeout_s=120).value == 6.0


def test_a_child_that_cannot_start_says_so():
    broken = Worker(warm_up=("sys", "exit"))  # its warm-up ends the child before it is ready
    out = broken.run("math", "sqrt", 1.0, timeout_s=120)
    assert out.status == "failed"
    assert "ended before it was ready" in out.error
    broken.close()


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="start_timeout_s"):
        Worker(start_timeout_s=0)
    with pytest.raises(ValueError, match="timeout_s"):
        Worker().run("math", "sqrt", 1.0, timeout_s=0)


def test_a_child_whose_parent_has_gone_leaves_at_once(tmp_path):
    """When its input closes (the parent ended or was killed), the child's loop returns and the
    module leaves at once, without Python's teardown of torch and Numba (over a second of CPU);
    an exit handler never runs. The loop alone, called from a script, returns as usual."""
    root = pathlib.Path(__file__).resolve().parent.parent
    script = ("import atexit, pathlib, runpy, sys\n"
              "atexit.register(pathlib.Path(sys.argv[1]).touch)\n"
              "if sys.argv[2] == 'main':\n"
              "    runpy.run_module('helpers.device.worker', run_name='__main__')\n"
              "else:\n"
              "    from helpers.device import worker\n"
              "    worker._serve(None)\n")
    for how, torn_down in (("main", False), ("loop", True)):
        marker = tmp_path / f"torn_down_{how}"
        proc = subprocess.run([sys.executable, "-c", script, str(marker), how], input=b"",
                              capture_output=True, cwd=root, timeout=120)
        assert proc.returncode == 0, proc.stderr
        (size,) = struct.unpack("<Q", proc.stdout[:8])   # it said it was ready first
        assert pickle.loads(proc.stdout[8:8 + size]) == ("ready", None)
        assert marker.exists() == torn_down, (how, proc.stderr)

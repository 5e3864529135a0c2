"""helpers.device.worker: a call may fork processes of its own (a DataLoader's workers, in
notebook 09's training experiment): they start, and a kill of the measuring process takes them
with it and returns at once, even while they hold its pipes.

Without either, the call or the kill waits for as long as the forked process lives (60 s and
120 s here), far past the bounds below."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from helpers.device.worker import Worker

TESTS = str(pathlib.Path(__file__).resolve().parent)


@pytest.fixture
def worker(monkeypatch):
    """A measuring process that imports the tests' own calls (tests/worker_calls.py)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    w = Worker(grace_s=0.2)
    yield w
    w.close()


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (no such process, or a zombie not yet reaped)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_call_can_fork_a_process_that_closes_its_standard_input(worker):
    # multiprocessing's child closes sys.stdin first: it must not wait for the lock of the
    # thread that reads the parent's requests
    out = worker.run("worker_calls", "forks_and_joins", timeout_s=120)
    assert out.status == "ok" and out.value == 0, out
    assert out.seconds < 30, out


@pytest.mark.slow
@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_kill_takes_the_processes_the_call_forked_and_returns_at_once(worker, tmp_path):
    pid_file = tmp_path / "pid"
    worker.wait_ready()
    begun = time.monotonic()
    out = worker.run("worker_calls", "forks_a_sleeper_and_sleeps", str(pid_file), 120.0,
                     timeout_s=1.0)
    assert out.status == "did not finish" and out.killed, out
    assert time.monotonic() - begun < 60
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), f"the forked process {pid} outlived the kill"
    assert worker.run("math", "sqrt", 4.0, timeout_s=120).value == 2.0

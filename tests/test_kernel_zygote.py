"""The test run's notebook kernels, measuring processes and lab 9's ranks forked from a preloaded
process (tools/kernel_zygote.py): a forked kernel is the kernel a fresh start gives (working
folder, path, environment, the workbook's choice of simulator or GPU), Jupyter's interrupt
reaches it, killing the process Jupyter started kills it, and its exit status is that process's;
a forked measuring process answers, and dies with the process its Worker started; forked gloo
ranks give lab 9's check its verdict and die when it stops them."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
import uuid

import pytest

from helpers.checks.lab9 import real as lab9_real
from helpers.device import worker
from tools import kernel_zygote

jupyter_client = pytest.importorskip("jupyter_client.manager")
psutil = pytest.importorskip("psutil")

PROBE = """
import json, os, sys
import helpers.device.backend as _b
print(json.dumps({"pid": os.getpid(), "cwd": os.getcwd(), "path": sys.path,
                  "argv0": os.path.basename(sys.argv[0]), "mark": os.environ.get("ZYGOTE_MARK"),
                  "mode": _b.MODE, "name": __name__, "torch_at_start": TORCH_AT_START}))
"""


def test_only_a_kernel_a_measuring_process_or_a_rank_is_rewritten(monkeypatch, tmp_path):
    cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"]
    measuring = [sys.executable, "-m", "helpers.device.worker", "mod", "fn"]
    rank = [sys.executable, str(pathlib.Path(lab9_real.__file__).with_name("rank.py")), "m"]
    elsewhere = tmp_path / "rank.py"          # a script of the same name, not the workbook's
    elsewhere.write_text("")
    monkeypatch.delenv("WORKBOOK_KERNEL_ZYGOTE", raising=False)
    assert kernel_zygote.command(cmd) == [sys.executable, kernel_zygote.__file__, "launch", *cmd]
    assert kernel_zygote.command(measuring)[2:] == ["launch", *measuring]
    assert kernel_zygote.command(rank)[2:] == ["launch", *rank]
    for other in ([sys.executable, "-m", "other", "-f", "k.json"],
                  [sys.executable, "-m", "helpers.device"], [sys.executable, "script.py"],
                  [sys.executable, str(elsewhere)], [sys.executable, "-m", rank[1]],
                  [sys.executable, "-c", "ipykernel_launcher"], [sys.executable]):
        assert kernel_zygote.command(other) == other
    monkeypatch.setenv("WORKBOOK_KERNEL_ZYGOTE", "0")
    assert kernel_zygote.command(cmd) == cmd and kernel_zygote.command(measuring) == measuring
    assert kernel_zygote.command(rank) == rank


def test_the_tests_measuring_processes_and_ranks_start_through_the_zygote(monkeypatch):
    monkeypatch.delenv("WORKBOOK_KERNEL_ZYGOTE", raising=False)
    assert worker.command(("m", "f"))[1:3] == [kernel_zygote.__file__, "launch"]
    assert worker.command(("m", "f"))[-3:] == ["helpers.device.worker", "m", "f"]
    assert lab9_real.command(["m", "f"])[1:3] == [kernel_zygote.__file__, "launch"]
    assert lab9_real.command(["m", "f"])[-3:] == [str(lab9_real._WORKER), "m", "f"]


def test_a_per_kernel_variable_does_not_change_the_zygote_but_any_other_does():
    env = {"HOME": "/h", "OMP_NUM_THREADS": "1"}
    key = kernel_zygote._key(sys.executable, env)
    assert kernel_zygote._key(sys.executable, {**env, "JPY_PARENT_PID": "7", "_": "x",
                                                "PYTEST_CURRENT_TEST": "t",
                                                "TORCHINDUCTOR_CACHE_DIR": "/c"}) == key
    assert kernel_zygote._key(sys.executable, {**env, "OMP_NUM_THREADS": "2"}) != key
    assert kernel_zygote._key(sys.executable, {**env, "NUMBA_ENABLE_CUDASIM": "1"}) != key


def test_a_client_stops_waiting_for_a_zygote_that_ended_or_never_listens(tmp_path, monkeypatch):
    """The client then starts the process on its own (``_launch`` execs it): at once when the
    lock stays free (the zygote it waited for ended), at :data:`START_S` while another holds
    it."""
    import fcntl
    import subprocess

    monkeypatch.setattr(kernel_zygote, "_GONE_S", 0.5)
    monkeypatch.setattr(kernel_zygote, "START_S", 2.0)
    sock, lock = str(tmp_path / "z.sock"), str(tmp_path / "z.lock")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="ended before it listened"):
        kernel_zygote._connect_when_started(ended, sock, lock)
    assert time.monotonic() - began < 1.8
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)   # a zygote starting (its imports take long)
        with pytest.raises(RuntimeError, match="did not listen within 2 s"):
            kernel_zygote._connect_when_started(None, sock, lock)
        assert kernel_zygote._start_zygote(sys.executable, sock, lock) is None


def _restore_and_stop(before: dict, key: str) -> None:
    """Give the process back the environment ``before`` and stop the zygote of ``key``."""
    os.environ.clear()
    os.environ.update(before)
    try:
        with open(kernel_zygote._paths(key)[1]) as lock:
            os.kill(int(lock.read().split()[0]), signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        pass


@pytest.fixture(scope="module")
def private_zygote():
    """An environment of this module's own (a mark no other kernel has), so that its kernels
    meet a zygote of their own; the zygote is stopped at the end. numpy's OpenBLAS gets one
    thread, as under make test: a zygote with a second thread would refuse to fork."""
    mark, before = uuid.uuid4().hex, dict(os.environ)
    os.environ.update(ZYGOTE_MARK=mark, OPENBLAS_NUM_THREADS="1")
    key = kernel_zygote._key(sys.executable, dict(os.environ))
    try:
        yield mark
    finally:
        _restore_and_stop(before, key)


def _start(cwd):
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(cwd),
                                             startup_timeout=120)
    return km, kc


def _run(kc, code: str, timeout: float = 120) -> tuple[str, dict]:
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = kc.execute_interactive(code, output_hook=hook, timeout=timeout)
    return "".join(out), reply["content"]


def _probe(cwd) -> tuple[dict, object, object]:
    km, kc = _start(cwd)
    _run(kc, "import sys\nTORCH_AT_START = 'torch' in sys.modules")
    text, _ = _run(kc, PROBE)
    return json.loads(text), km, kc


@pytest.mark.slow
def test_a_forked_kernel_is_the_kernel_a_fresh_start_gives(private_zygote, tmp_path):
    os.environ["WORKBOOK_KERNEL_ZYGOTE"] = "0"   # a kernel started on its own, to compare with
    try:
        fresh, km, kc = _probe(tmp_path)
    finally:
        del os.environ["WORKBOOK_KERNEL_ZYGOTE"]
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    assert not fresh["torch_at_start"]
    forked, km, kc = _probe(tmp_path)  # the first through the zygote: starts it, waits for it
    try:
        assert forked["torch_at_start"], "the first kernel was not forked from the zygote"
        assert forked["pid"] != km.provisioner.process.pid
        assert {k: v for k, v in forked.items() if k not in ("pid", "torch_at_start")} == {
            k: v for k, v in fresh.items() if k not in ("pid", "torch_at_start")}
        assert forked["mark"] == private_zygote and forked["cwd"] == str(tmp_path)

        # Jupyter's interrupt (SIGINT to the process it started) reaches the forked kernel
        asked = kc.execute("import time; time.sleep(60)")
        time.sleep(1)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["parent_header"]["msg_id"] == asked
        assert reply["content"].get("ename") == "KeyboardInterrupt"

        # killing the process Jupyter started kills the kernel
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        end = time.monotonic() + 10
        while _alive(forked["pid"]) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(forked["pid"])

        # the kernel's exit status is the status of the process Jupyter started
        km, kc = _start(tmp_path)
        kc.execute("import os; os._exit(3)")
        assert km.provisioner.process.wait(timeout=30) == 3
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_a_measuring_process_is_forked_answers_and_dies_with_the_process_started(
        private_zygote):
    """The first measuring process of an environment is forked from the zygote it starts (the
    pid that answers is not the pid of the process the Worker started), answers a call, and is
    gone once the Worker kills the process it started (in a call that ignores a stop, its
    standard input still open)."""
    w = worker.Worker(grace_s=1)
    try:
        outcome = w.run("os", "getpid", timeout_s=120)
        assert outcome.status == "ok"
        assert outcome.value != w._child.process.pid, "not forked from the zygote"
        # a call that ignores the request to stop: the Worker kills the process it started
        began = time.monotonic()
        hung = w.run("time", "sleep", 60, timeout_s=1)
        assert hung.status == "did not finish" and hung.killed
        assert time.monotonic() - began < 30, "the forked process outlived its kill"
        end = time.monotonic() + 10
        while _alive(outcome.value) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(outcome.value)
    finally:
        w.close()


def noting_all_reduce(x, rank, world, comm):
    """A right all-reduce that notes the pid of the process running it (a file in $LAB9_PIDS)."""
    open(os.path.join(os.environ["LAB9_PIDS"], f"{os.getpid()}"), "w").close()
    comm.all_reduce(x)


def hanging_all_reduce(x, rank, world, comm):
    """Notes its pid, then waits for a message no rank sends."""
    open(os.path.join(os.environ["LAB9_PIDS"], f"{os.getpid()}"), "w").close()
    comm.recv(x, (rank + 1) % world)


@pytest.mark.slow
def test_lab9_ranks_are_forked_judge_and_die_when_the_check_stops_them(tmp_path):
    """Two runs of lab 9's real check in one environment of this test's own: the first's ranks,
    started at the same moment, meet one zygote (started by one of them) and are forked (the
    processes running the learner's function are not those the check started), and pass; the
    second's hang, and the forked ranks are gone once the check returns at its time limit."""
    before = dict(os.environ)
    os.environ.update(LAB9_PIDS=str(tmp_path), OPENBLAS_NUM_THREADS="1",
                      WORKBOOK_KERNEL_ZYGOTE="1")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", MASTER_ADDR="127.0.0.1")
    key = kernel_zygote._key(sys.executable, env)       # as real.py starts the ranks

    def run(fn, timeout_s=60):
        for f in tmp_path.iterdir():
            f.unlink()
        out = lab9_real.run_on_gloo(fn, (2,), (7,), timeout_s=timeout_s)
        return out, sorted(int(f.name) for f in tmp_path.iterdir())

    try:
        first, ran = run(noting_all_reduce)
        assert first.status == "passed" and len(ran) == 2, (first, ran)
        assert not set(ran) & set(first.pids), "the ranks were not forked from the zygote"
        second, ran = run(hanging_all_reduce, timeout_s=5)
        assert second.status == "failed" and "had not finished after 5 s" in second.problem, second
        assert len(ran) == 2 and not set(ran) & set(second.pids), ran
        end = time.monotonic() + 10
        while any(_alive(p) for p in ran) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(p) for p in ran), "a forked rank outlived the check's stop"
    finally:
        _restore_and_stop(before, key)


def _alive(pid: int) -> bool:
    """The process runs (a zombie waiting for its parent to read its status does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

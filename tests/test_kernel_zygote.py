"""The test run's notebook kernels and measuring processes forked from a preloaded process
(tools/kernel_zygote.py): a forked kernel is the kernel a fresh start gives (working folder,
path, environment, the workbook's choice of simulator or GPU), Jupyter's interrupt reaches it,
killing the process Jupyter started kills it, and its exit status is that process's; a forked
measuring process answers, and dies with the process its Worker started."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time
import uuid

import pytest

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


def test_only_a_kernel_or_a_measuring_process_is_rewritten(monkeypatch):
    cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"]
    measuring = [sys.executable, "-m", "helpers.device.worker", "mod", "fn"]
    monkeypatch.delenv("WORKBOOK_KERNEL_ZYGOTE", raising=False)
    assert kernel_zygote.command(cmd) == [sys.executable, kernel_zygote.__file__, "launch", *cmd]
    assert kernel_zygote.command(measuring)[2:] == ["launch", *measuring]
    for other in ([sys.executable, "-m", "other", "-f", "k.json"],
                  [sys.executable, "-m", "helpers.device"], [sys.executable, "script.py"],
                  [sys.executable, "-c", "ipykernel_launcher"], [sys.executable]):
        assert kernel_zygote.command(other) == other
    monkeypatch.setenv("WORKBOOK_KERNEL_ZYGOTE", "0")
    assert kernel_zygote.command(cmd) == cmd and kernel_zygote.command(measuring) == measuring


def test_the_tests_measuring_processes_start_through_the_zygote(monkeypatch):
    monkeypatch.delenv("WORKBOOK_KERNEL_ZYGOTE", raising=False)
    assert worker.command(("m", "f"))[1:3] == [kernel_zygote.__file__, "launch"]
    assert worker.command(("m", "f"))[-3:] == ["helpers.device.worker", "m", "f"]


def test_a_per_kernel_variable_does_not_change_the_zygote_but_any_other_does():
    env = {"HOME": "/h", "OMP_NUM_THREADS": "1"}
    key = kernel_zygote._key(sys.executable, env)
    assert kernel_zygote._key(sys.executable, {**env, "JPY_PARENT_PID": "7", "_": "x",
                                                "PYTEST_CURRENT_TEST": "t"}) == key
    assert kernel_zygote._key(sys.executable, {**env, "OMP_NUM_THREADS": "2"}) != key
    assert kernel_zygote._key(sys.executable, {**env, "NUMBA_ENABLE_CUDASIM": "1"}) != key


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
        os.environ.clear()
        os.environ.update(before)
        try:
            with open(kernel_zygote._paths(key)[1]) as lock:
                os.kill(int(lock.read().split()[0]), signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass


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


def _socket_ready(timeout_s: float = 90, env: dict | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    sock, _ = kernel_zygote._paths(kernel_zygote._key(sys.executable, env))
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if os.path.exists(sock):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_forked_kernel_is_the_kernel_a_fresh_start_gives(private_zygote, tmp_path):
    fresh, km, kc = _probe(tmp_path)  # the first of its environment: started on its own
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    assert not fresh["torch_at_start"]
    km, kc = _start(tmp_path)  # the second starts the zygote (and on its own too)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    assert _socket_ready(), "no zygote started for the second kernel"
    forked, km, kc = _probe(tmp_path)
    try:
        assert forked["torch_at_start"], "the third kernel was not forked from the zygote"
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
    """Three measuring processes in one environment: the third is forked from the zygote (the
    pid that answers is not the pid of the process the Worker started), answers a call, and is
    gone once the Worker kills the process it started (in a call that ignores a stop, its
    standard input still open)."""
    for _ in range(2):
        w = worker.Worker()
        try:
            assert w.run("os", "getpid", timeout_s=120).status == "ok"
        finally:
            w.close()
    root = str(pathlib.Path(worker.__file__).resolve().parents[2])  # as the Worker sets it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    assert _socket_ready(env=env), "no zygote started for the second measuring process"
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


def _alive(pid: int) -> bool:
    """The process runs (a zombie waiting for its parent to read its status does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

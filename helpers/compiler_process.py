"""The child process that runs the real compiler without a GPU, kept between compilations.

Starting it costs about a second of CPU (Python, Numba's CUDA target, NVVM and nvJitLink), more
than compiling a small kernel, and a lab's checks compile one kernel at a time: :func:`run`
keeps one child per process (``python -m helpers.compiler_worker --serve``) and hands it each
batch of jobs. A new child is started when the last one died or did not answer in time, after a
fork, and when what it compiled with changed: a module of :mod:`helpers` edited, or the
``NUMBA_``, ``CUDA``, ``NVIDIA`` or ``PYTHON`` environment variables. After a compilation the
child holds a few hundred MB (the compiler's libraries and their state), so it is ended
:data:`IDLE_S` seconds after its last batch, and when its parent ends (its standard input
closes).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
import time

from helpers import compile_cache

__all__ = ["CHILD_TIMEOUT_S", "IDLE_S", "run", "stop"]

#: Seconds a batch of jobs may take before the child is stopped (plus 20 s per job).
CHILD_TIMEOUT_S = 60

#: Seconds a child is kept after its last batch (a lab's checks, a notebook's table of kernels
#: come in bursts), then ended to give its memory back.
IDLE_S = 120.0

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The environment variables whose change starts a new child (it was started with them).
_ENV_PREFIXES = ("NUMBA_", "CUDA", "NVIDIA", "PYTHON")


def _signature() -> tuple:
    """What a child compiles with: every module of helpers (path, modification time) and the
    environment variables that steer Python, Numba and the CUDA libraries."""
    stamps = []
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        try:
            stamps.append((str(path), path.stat().st_mtime_ns))
        except OSError:   # removed meanwhile: the next call sees the change
            pass
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    return tuple(stamps), tuple(env)


class _Child:
    """One ``--serve`` child, with threads that read its answers and keep its last stderr
    lines (a pipe nobody reads would fill and stop it)."""

    #: The child's command line, after the Python that runs it.
    COMMAND = ("-m", "helpers.compiler_worker", "--serve")

    def __init__(self, signature: tuple) -> None:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_DISABLE_PERFORMANCE_WARNINGS="1",
                   PYTHONWARNINGS="ignore")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in sys.path if p])
        self.signature, self.parent, self.last = signature, os.getpid(), time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, *self.COMMAND], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1)
        self.answers: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=50)
        for stream, keep in ((self.proc.stdout, self.answers.put),
                             (self.proc.stderr, self.stderr.append)):
            threading.Thread(target=self._read, args=(stream, keep), daemon=True).start()

    @staticmethod
    def _read(stream, keep) -> None:
        try:
            for line in stream:
                keep(line)
        except (OSError, ValueError):   # closed under us
            pass
        keep(None)   # the end of the stream: the child has gone

    def alive(self) -> bool:
        return self.parent == os.getpid() and self.proc.poll() is None

    def ask(self, jobs: list[dict], timeout: float) -> dict:
        try:
            where = compile_cache.folder()   # where the child keeps front ends, as here
            self.proc.stdin.write(json.dumps({"path": sys.path,
                                              "cache": str(where) if where else "off",
                                              "jobs": jobs}) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):   # it died after the last answer
            return self._failed()
        while True:
            try:
                line = self.answers.get(timeout=timeout)
            except queue.Empty:
                self.kill()
                return {"unavailable": f"the compiler process took over {timeout:g} s and "
                                       "was stopped", "results": []}
            if line is None:
                return self._failed()
            if line.startswith("{"):
                return json.loads(line)

    def _failed(self) -> dict:
        self.kill()
        tail = [s.strip() for s in self.stderr if s and s.strip()][-3:]
        return {"unavailable": "the compiler process failed: " + " | ".join(tail),
                "results": []}

    def kill(self) -> None:
        if self.parent != os.getpid():   # a fork's copy: the child is its parent's
            return
        for close in (self.proc.stdin.close, self.proc.kill):
            try:
                close()
            except (OSError, ValueError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


_LOCK = threading.Lock()
_CHILD: _Child | None = None
_TIMER: threading.Timer | None = None


def run(jobs: list[dict]) -> dict:
    """Compile the described jobs (:func:`helpers.compiler_worker.describe_kernel`'s jobs) in
    the kept child: ``{"unavailable": None or why not, "results": [one dict per job]}``, as
    :func:`helpers.compiler_worker.run_jobs` answers. One batch at a time per process."""
    global _CHILD
    with _LOCK:
        signature = _signature()
        if _CHILD is not None and not (_CHILD.alive() and _CHILD.signature == signature):
            _CHILD.kill()
            _CHILD = None
        if _CHILD is None:
            _CHILD = _Child(signature)
        answer = _CHILD.ask(jobs, CHILD_TIMEOUT_S + 20 * len(jobs))
        if answer.get("unavailable"):   # dead or stopped: the next batch gets a new child
            _CHILD.kill()
            _CHILD = None
        else:
            _CHILD.last = time.monotonic()
            _end_when_idle(_CHILD)
        return answer


def _end_when_idle(child: _Child) -> None:
    """(Re)arm the timer that ends ``child`` :data:`IDLE_S` seconds after its last batch."""
    global _TIMER
    if _TIMER is not None:
        _TIMER.cancel()

    def end() -> None:
        with _LOCK:
            if _CHILD is child and time.monotonic() - child.last >= IDLE_S * 0.99:
                _end(child)

    _TIMER = threading.Timer(IDLE_S, end)
    _TIMER.daemon = True
    _TIMER.start()


def _end(child: _Child) -> None:
    """End the kept ``child`` (under the lock): its input closed, it finishes and exits."""
    global _CHILD
    if _CHILD is child:
        _CHILD = None
    if child.parent != os.getpid():
        return
    try:
        child.proc.stdin.close()
        child.proc.wait(timeout=5)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        child.kill()


def stop() -> None:
    """End the kept child, if any (it would end with this process, or when idle, anyway)."""
    with _LOCK:
        if _CHILD is not None:
            _end(_CHILD)


atexit.register(stop)

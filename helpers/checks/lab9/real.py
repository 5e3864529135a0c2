"""Lab 9's real run: a learner's ring all-reduce on gloo, in W separate CPU processes.

:func:`learner_module` writes the function's source (and the source of the functions of the
same module it calls by name, such as ``ring_step``) below ``import math, torch,
torch.distributed as dist`` and an import of every module it names (``np``, say), so that a
child process can import it. :func:`run_on_gloo` starts max(W) children, each
:mod:`helpers.checks.lab9.rank` run by this interpreter (``sys.executable``), which join one
gloo group per W in turn (MASTER_ADDR 127.0.0.1, a free port each), and compares their results
with ``dist.all_reduce``; every child is killed on error, on time-out and on return. Seconds.

Source: torch.distributed's gloo backend and its point-to-point calls (``isend``, ``recv``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import types

__all__ = ["HEADER", "RealOutcome", "command", "learner_module", "run_on_gloo"]

#: The first line of the module the learner's function is copied into.
HEADER = "import math, torch, torch.distributed as dist"

_WORKER = pathlib.Path(__file__).with_name("rank.py")


@dataclasses.dataclass
class RealOutcome:
    """What :func:`run_on_gloo` found.

    Attributes:
        problem: None if every rank of every world matched ``dist.all_reduce``, else a sentence
            naming the world size, n and rank. status: ``"passed"``, ``"failed"`` or
            ``"error"`` (the learner's code raised). note: why the run could not be made here
            (then ``problem`` is None): no source, gloo failing or slow to start.
        cases: (world, n) pairs compared.
        pids: every child process started (all ended when this returns). seconds: wall time.
    """

    problem: str | None = None
    status: str = "passed"
    note: str | None = None
    cases: int = 0
    pids: list[int] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def _called_functions(fn, seen: dict) -> None:
    """Functions of ``fn``'s own module that ``fn`` names (recursively), into ``seen``."""
    names, todo = set(), [fn.__code__]
    while todo:
        code = todo.pop()
        names.update(code.co_names)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    for name in sorted(names):
        obj = fn.__globals__.get(name)
        if (isinstance(obj, types.FunctionType) and obj.__module__ == fn.__module__
                and name not in seen and obj is not fn):
            seen[name] = obj
            _called_functions(obj, seen)


def learner_module(fn) -> str:
    """The text of a module that defines ``fn`` on its own: :data:`HEADER`, an import of each
    module ``fn`` names by a global (``np`` -> ``import numpy as np``), the functions of its
    module that it calls by name, then ``fn`` itself.

    Raises:
        OSError, TypeError: the source of ``fn`` (or of a function it calls) cannot be read.
    """
    helpers: dict = {}
    _called_functions(fn, helpers)
    lines = [HEADER]
    for f in [fn, *helpers.values()]:
        for name in f.__code__.co_names:
            obj = f.__globals__.get(name)
            if isinstance(obj, types.ModuleType) and name not in ("math", "torch", "dist"):
                lines.append(f"import {obj.__name__} as {name}")
    parts = ["\n".join(dict.fromkeys(lines))]
    parts += [textwrap.dedent(inspect.getsource(f)) for f in [*helpers.values(), fn]]
    return "\n\n\n".join(parts) + "\n"


def command(args: list[str]) -> list[str]:
    """The command line of one rank: this interpreter running :mod:`helpers.checks.lab9.rank`
    (a script) with ``args`` (``MODULE FUNCTION RANK GROUPS SIZES SEED OUT``, all strings)."""
    return [sys.executable, str(_WORKER), *args]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass


def _read(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: pathlib.Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if "Error" in ln]
    return (errors or lines or [""])[-1].strip()[:300]


def _error_text(err: dict, rank: int) -> str:
    when = ("loading your function" if err["world"] is None else
            f"on W = {err['world']} gloo processes, n = {err['n']}")
    text = (f"{when}: rank {rank} raised {err['type']}: {err['message']}"
            + (f" (in {err['function']}: {err['line'].strip()})" if err.get("line") else ""))
    if err["type"] == "NameError":
        text += (f". The real run copies your function, and the functions of yours it calls "
                 f"by name, into a module of its own that starts with `{HEADER}`: a global "
                 "variable of the notebook is not there; define it inside the function")
    return text


def _stop_reason(states, started: float, timeout_s: float, startup_s: float, now: float):
    """(status, text) once the children must be stopped for time, else None. A rank counts
    as stuck ``timeout_s`` after it entered a group (all its ranks had joined: the learner's
    part), as not started ``startup_s`` after the processes began."""
    running = [(r, s) for r, s in enumerate(states) if s and s["stage"] == "running"]
    stuck = [(r, s) for r, s in running if now - s["time"] > timeout_s]
    if stuck:
        world = stuck[0][1]["world"]
        ranks = [r for r, s in running if s["world"] == world]
        return "failed", (f"on W = {world} gloo processes, rank(s) {ranks} had not finished "
                          f"after {timeout_s:g} s and were stopped: a deadlock on the real "
                          "transport (the simulated ranks did finish)? Every rank must isend "
                          "before it recvs")
    late = [r for r, s in enumerate(states) if not s or s["stage"] in ("starting", "joining")]
    if late and now - started > startup_s:
        return "note", (f"the gloo processes had not all started after {startup_s:g} s (rank(s) "
                        f"{late}): is this machine very busy?")
    return None


#: How many times the gloo processes are started when another process took a port chosen for
#: them (chosen free, then bound by the processes a moment later) before they bound it.
PORT_TRIES = 3
_PORT_TAKEN = ("eaddrinuse", "address already in use")


def run_on_gloo(fn, worlds=(2, 3), sizes=(1, 7, 37, 1000), *, seed: int = 9,
                rtol: float = 1e-5, timeout_s: float = 30.0,
                startup_s: float = 120.0) -> RealOutcome:
    """Run ``fn(x, rank, world, torch.distributed)`` on real gloo ranks; compare with
    ``dist.all_reduce``. Ranks whose group could not start because its port was taken are
    started again on new ports, up to :data:`PORT_TRIES` times.

    Args:
        fn: the learner's ring all-reduce (its source must be readable). worlds: the world
            sizes W; max(worlds) processes are started, and join one group per W in turn
            (largest first). sizes: the lengths n, in turn, in each group.
        seed: inputs as :func:`helpers.checks.lab9.rank.inputs`. rtol: allowed difference,
            relative to the largest value of the sum. timeout_s: seconds a group may run once
            its ranks have joined. startup_s: seconds for the processes to start and join.

    Returns:
        A :class:`RealOutcome`; never raises for what ``fn`` does. Every child has ended.
    """
    start = time.monotonic()
    for _ in range(PORT_TRIES):
        outcome = _run_once(fn, worlds, sizes, seed, rtol, timeout_s, startup_s)
        if not (outcome.note and any(t in outcome.note.lower() for t in _PORT_TAKEN)):
            break
    outcome.seconds = time.monotonic() - start
    return outcome


def _run_once(fn, worlds, sizes, seed, rtol, timeout_s, startup_s) -> RealOutcome:
    """One start of the gloo processes, on ports free a moment before: :func:`run_on_gloo`."""
    start = time.monotonic()
    outcome = RealOutcome()
    try:
        source = learner_module(fn)
    except (OSError, TypeError) as exc:
        outcome.note = f"the source of your function could not be read ({exc})"
        return outcome
    folder = pathlib.Path(tempfile.mkdtemp(prefix="lab9-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs: list = []
    try:
        module_path = folder / "lab9_learner.py"
        module_path.write_text(source)
        groups = ",".join(f"{w}:{_free_port()}" for w in sorted(set(worlds), reverse=True))
        outs, logs = [], []
        for rank in range(max(worlds)):
            outs.append(folder / f"rank{rank}.json")
            logs.append(folder / f"rank{rank}.log")
            cmd = command([str(module_path), fn.__name__, str(rank), groups,
                           ",".join(map(str, sizes)), str(seed), str(outs[-1])])
            with open(logs[-1], "w") as fh:
                procs.append(subprocess.Popen(
                    cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=dict(env, MASTER_ADDR="127.0.0.1"), cwd=folder))
        outcome.pids = [p.pid for p in procs]
        wall = time.time() - time.monotonic()      # the children stamp their files in time.time()
        while True:
            states = [_read(out) for out in outs]
            for r, (p, state) in enumerate(zip(procs, states)):
                if p.poll() is None or p.returncode == 0:
                    continue
                state = _read(outs[r]) or {}
                if state.get("setup_error"):
                    outcome.note = f"gloo could not start here ({state['setup_error']})"
                    return outcome
                if state.get("error"):
                    outcome.problem, outcome.status = _error_text(state["error"], r), "error"
                    return outcome
                outcome.problem, outcome.status = (
                    f"on real gloo processes, rank {r} ended with exit status {p.returncode}: "
                    f"{_tail(logs[r]) or 'no output'}"), "error"
                return outcome
            if all(p.poll() == 0 for p in procs):
                break
            stop = _stop_reason(states, start + wall, timeout_s, startup_s,
                                time.monotonic() + wall)
            if stop:
                if stop[0] == "note":
                    outcome.note = stop[1]
                else:
                    outcome.status, outcome.problem = stop
                return outcome
            time.sleep(0.05)
        for r, out in enumerate(outs):
            for case in (_read(out) or {}).get("cases", []):
                outcome.cases += r == 0
                problem = _compare(case, r, rtol)
                if problem:
                    outcome.problem, outcome.status = problem, "failed"
                    return outcome
        return outcome
    finally:
        _kill(procs)
        outcome.seconds = time.monotonic() - start
        shutil.rmtree(folder, ignore_errors=True)


def _compare(case: dict, rank: int, rtol: float) -> str | None:
    where = f"on W = {case['world']} gloo processes, n = {case['n']}: rank {rank}'s x"
    if not case["finite"]:
        return f"{where} holds NaN or infinite values"
    scale = max(case["scale"], 1e-6)
    if case["max_err"] <= rtol * scale:
        return None
    text = (f"{where} differs from dist.all_reduce's: max error {case['max_err']:.3g} "
            f"(relative {case['max_err'] / scale:.2g}, allowed {rtol:g}) at index "
            f"{case['index']}: expected {case['expected']:.6g}, got {case['got']:.6g}")
    if case["unchanged"]:
        text += " (x is unchanged: the sum must be written into x itself)"
    return text

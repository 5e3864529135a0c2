"""The tests marked ``gpu`` with a machine's own ``python3`` and pytest alone, within a budget.

``python3 -m tools.gpu_tests [--budget-s 170] [--log FILE]`` runs, from the repository root,
every test marked ``gpu`` (real kernels, timings, the recording commands on a GPU) without the
workbook's environment: no ``.venv``, no nbval, no hypothesis, no plugin loaded but pytest's
own. It is for a GPU server that has python3 with numpy, numba, numba-cuda, torch and pytest and
no network (``make test-gpu`` needs the full environment). Every module that holds such a test
imports only what that server has (tests/test_gpu_measurements.py keeps those of the commands
whose other tests draw figures). Without a GPU the tests are collected and skipped.

At ``--budget-s`` seconds pytest is interrupted (it then prints what passed and failed so far),
and killed 15 s later. The exit status is pytest's: 0 when every test passed or was skipped,
2 when it was interrupted at the budget.
"""

from __future__ import annotations

import argparse
import ast
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Seconds pytest has to print its summary after it is interrupted at the budget.
_GRACE_S = 15.0
#: Seconds between two looks at the budget and at ``stop``.
_POLL_S = 0.2


def _marks_gpu(source: str) -> bool:
    """Whether ``source`` uses ``pytest.mark.gpu`` in its code (not in a string or comment)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "gpu"
               and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
               and isinstance(n.value.value, ast.Name) and n.value.value.id == "pytest"
               for n in ast.walk(ast.parse(source)))


def gpu_test_modules(tests: pathlib.Path = ROOT / "tests") -> list[pathlib.Path]:
    """The test modules in ``tests`` that mark a test ``gpu``, sorted by name."""
    return sorted(p for p in tests.glob("test_*.py") if _marks_gpu(p.read_text()))


def command(modules: list[pathlib.Path], python: str = sys.executable) -> list[str]:
    """The pytest command line: only the ``gpu`` tests of ``modules``, none of pyproject.toml's
    ``addopts`` (they name nbval and hypothesis options), no cache written."""
    return [python, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-ra",
            "--durations=10", "-m", "gpu", "--rootdir", str(ROOT),
            *(str(m.relative_to(ROOT)) for m in modules)]


def environment() -> dict[str, str]:
    """This environment, with the repository on ``PYTHONPATH`` and no pytest plugin loaded
    automatically (those installed beside pytest are not needed and may not import)."""
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _interruptible() -> None:
    """In the child before pytest starts: SIGINT's default action. A command started in the
    background by a script (``cmd &``), and what it starts, inherits SIGINT ignored, and so
    would a child of a test worker that ignores it; pytest would then run on past the budget
    until it is killed after the grace time, and its log would end without its summary."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(budget_s: float, log: pathlib.Path | None = None, *, argv: list[str] | None = None,
        out=sys.stdout, stop: threading.Event | None = None) -> int:
    """Run ``argv`` (default: :func:`command` on :func:`gpu_test_modules`) from the repository
    root, its output copied to ``out`` and to ``log``; interrupted at ``budget_s`` seconds, or
    once ``stop`` is set.

    Returns:
        pytest's exit status (2 when it was interrupted; -9 when killed after the grace time).

    Raises:
        ValueError: ``budget_s`` is not > 0 (before anything runs).
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    argv = argv or command(gpu_test_modules())
    begun = time.monotonic()
    sink = open(log, "w", encoding="utf-8") if log else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(argv, cwd=ROOT, env=environment(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1,
                                # between fork and exec only signal.signal runs, which takes
                                # no lock another thread could hold
                                preexec_fn=(_interruptible  # noqa: PLW1509
                                            if os.name == "posix" else None))

        def copy():
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if sink:
                    sink.write(line)
                    sink.flush()

        copier = threading.Thread(target=copy, daemon=True)
        copier.start()
        why = None
        while proc.poll() is None and why is None:
            left = budget_s - (time.monotonic() - begun)
            if left <= 0:
                why = f"budget of {budget_s:g} s reached"
            elif stop is not None and stop.is_set():
                why = "stopped by a signal"
            else:
                try:
                    proc.wait(timeout=min(left, _POLL_S))
                except subprocess.TimeoutExpired:
                    pass
        if why:
            note = f"\n== {why}: pytest interrupted ==\n"
            out.write(note)
            if sink:
                sink.write(note)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        copier.join(timeout=5)
        return proc.returncode
    finally:
        if sink:
            sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.gpu_tests",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=170.0,
                        help="seconds before pytest is interrupted (default 170)")
    parser.add_argument("--log", type=pathlib.Path, default=None,
                        help="also write pytest's output to this file")
    parser.add_argument("--list", action="store_true",
                        help="print the modules and the pytest command, run nothing")
    args = parser.parse_args(argv)
    if not args.budget_s > 0:
        parser.error(f"--budget-s must be > 0 seconds, got {args.budget_s:g}")
    modules = gpu_test_modules()
    if args.list:
        print("\n".join(str(m.relative_to(ROOT)) for m in modules))
        print(" ".join(command(modules)))
        return 0
    return run(args.budget_s, args.log, argv=command(modules))


if __name__ == "__main__":
    sys.exit(main())

"""The tests that depend on the Python and numpy a learner has, on every Python 3.12+ found here,
and on a GPU server's own combination: ``make test-pythons`` (CI runs it beside ``make test``).

For each of Python 3.12 and 3.13 found (on PATH, under pyenv, or known to uv): an environment
``.venv-pyX.Y`` synced from uv.lock, then the tests marked ``each_python`` (every kernel and
lab solution through the real compiler, the lab 1 and 2 compile checks, the numpy 2.5 fix, the
GPU recording's dry run except on 3.12, where the GPU server's steps below run it) and
notebooks 03 and 07 under nbval. Then, with Python 3.12, an
environment like a bare GPU server's, ``.venv-gpu-server``: numpy 2.5, numba, numba-cuda
0.30.4 and torch only (no plotly, no Jupyter), where the compute layers must import and every
kernel compile for an H100 (sm_90; the other targets are compiled on each Python above) through
``PYTHONPATH=.`` alone; the numpy 2.5 fix's tests run against it; then,
with the server's other packages added (pytest among them), the GPU tests' command
(tools/gpu_tests.py), which collects them and skips them here, and the dry run of a lent GPU's
one call (tools/gpu_lease.py: the GPU recording, those tests, tier two).

Usage: ``python -m tools.test_pythons [--pythons 3.12 3.13] [--no-gpu-server]``. Exit status 0
when every step passed (a Python not found is reported and skipped), 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYTHONS = ("3.12", "3.13")
NOTEBOOKS = ("notebooks/03_direct_convolution.ipynb", "notebooks/07_inside_the_gpu.ipynb")
#: A bare GPU server's numerical stack (as on an H100 image with Python 3.12), and what else
#: that server has that the recording uses when present.
SERVER_CORE = ("numpy>=2.5,<2.6", "numba>=0.67", "numba-cuda[cu13]==0.30.4")
SERVER_EXTRAS = ("psutil", "tqdm", "nvidia-ml-py", "py-cpuinfo", "scikit-image", "pytest")

#: Run in the bare environment: import every module of the compute layers (pyproject.toml's
#: compute-without-jupyter contract) and check that none of the forbidden ones came with them.
IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import helpers
sources, forbidden = json.loads(sys.argv[1]), json.loads(sys.argv[2])
names = []
for name in sources:
    module = importlib.import_module(name)
    names.append(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
            names.append(info.name)
loaded = sorted(m for m in forbidden if m in sys.modules)
assert not loaded, f"the compute layers imported {loaded}"
import numpy
assert not hasattr(numpy, "row_stack"), f"numpy {numpy.__version__} is not the 2.5 of a server"
print(f"{len(names)} compute-layer modules imported with numpy {numpy.__version__}, "
      f"none of {', '.join(forbidden)}")
"""


#: Set for every step: the environments share the real compiler's answers (keyed by Python and
#: compiler versions, so only what truly matches is reused) with each other and with ``make test``.
SHARED = {"WORKBOOK_COMPILE_CACHE": os.environ.get("WORKBOOK_COMPILE_CACHE")
          or str(ROOT / "build" / "compile-cache")}
#: pytest on both cores, each file on one worker (a notebook's cells stay in order).
WORKERS = ("-n", "2", "--dist", "loadfile")

# The environments are installed without compiling their bytecode (uv's --compile-bytecode,
# which `make env` uses for learners): on two cores that compiles every module of torch and the
# rest, about 55 s an environment, where the steps here import a small part of it and, with
# PYTHONDONTWRITEBYTECODE empty (as `make test-pythons` sets it), write that part as they go.


def uv() -> str:
    """The uv to use: $UV, else uv on PATH, else the copy ``make`` fetches into .tools/."""
    found = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not pathlib.Path(found).exists() and not shutil.which(found):
        raise SystemExit(f"uv not found ({found}); run `make env` first, which fetches it")
    return found


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` ("3.12") that runs: ``pythonX.Y`` on PATH (a pyenv shim
    of a version that is not selected does not), pyenv's installs, or what uv finds."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT") or str(pathlib.Path.home() / ".pyenv")
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"),
                         reverse=True)
    try:
        out = subprocess.run([uv(), "python", "find", "--no-python-downloads", version],
                             capture_output=True, text=True, timeout=60)
        candidates.append(out.stdout.strip() if out.returncode == 0 else None)
    except (OSError, subprocess.TimeoutExpired, SystemExit):
        pass
    return next((c for c in candidates if c and _version_of(c) == version), None)


def locked_version(name: str) -> str:
    """The version uv.lock pins for package ``name``."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["version"] for p in lock["package"] if p["name"] == name}
    if len(versions) != 1:
        raise SystemExit(f"uv.lock pins {len(versions)} versions of {name}: {sorted(versions)}")
    return versions.pop()


class Steps:
    """Runs commands, each a named step, and keeps the outcome of each."""

    def __init__(self):
        self.results: list[tuple[str, str, float]] = []

    def run(self, name: str, cmd: list[str], env: dict | None = None) -> bool:
        shown = " ".join("<script>" if "\n" in a else a for a in cmd)
        print(f"\n== {name}\n$ {shown}", flush=True)
        start = time.monotonic()
        code = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **SHARED, **(env or {})}).returncode
        took = time.monotonic() - start
        self.results.append((name, "ok" if code == 0 else f"FAILED (exit {code})", took))
        return code == 0

    def skip(self, name: str, why: str) -> None:
        print(f"\n== {name}: skipped, {why}", flush=True)
        self.results.append((name, f"skipped: {why}", 0.0))

    def report(self) -> bool:
        print("\nstep" + " " * 52 + "result")
        for name, result, took in self.results:
            print(f"{name:<55} {result} ({took:.0f} s)" if took else f"{name:<55} {result}")
        return all(not r.startswith("FAILED") for _, r, _ in self.results)


#: The GPU server's Python: its lease dry run records on it, so on the learner's environment of
#: the same Python the recording's dry run (tests/test_gpu_reference.py) would repeat that.
SERVER_PYTHON = "3.12"
RECORDING_TESTS = "tests/test_gpu_reference.py"


def learner_python(steps: Steps, version: str, python: str, recording: bool = True) -> None:
    """Sync ``.venv-pyX.Y`` from uv.lock with ``python``, then run the subset there; without
    the recording's dry run where ``recording`` is False (the GPU server's steps run it on this
    Python)."""
    venv = ROOT / f".venv-py{version}"
    env = {"UV_PROJECT_ENVIRONMENT": str(venv)}
    if not steps.run(f"Python {version}: environment from uv.lock",
                     [uv(), "sync", "--frozen", "--quiet", "--python", python], env):
        return
    py = str(venv / "bin" / "python")
    steps.run(f"Python {version}: tests marked each_python",
              [py, "-m", "pytest", "-p", "no:cacheprovider", "-q", *WORKERS, "-m", "each_python",
               "tests", *([] if recording else ["--ignore", RECORDING_TESTS])])
    steps.run(f"Python {version}: notebooks 03 and 07 under nbval",
              [py, "-m", "pytest", "-p", "no:cacheprovider", "-q", *WORKERS, *NOTEBOOKS])


def gpu_server(steps: Steps, python: str) -> None:
    """The bare GPU server's combination, in ``.venv-gpu-server`` (see the module docstring)."""
    venv = ROOT / ".venv-gpu-server"
    py = str(venv / "bin" / "python")
    torch = f"torch=={locked_version('torch')}"
    if not (steps.run("GPU server: bare environment (Python 3.12, numpy 2.5, torch)",
                      [uv(), "venv", "--quiet", "--clear", "--python", python, str(venv)])
            and steps.run("GPU server: numpy 2.5, numba, numba-cuda 0.30.4, torch",
                          [uv(), "pip", "install", "--quiet", "--python", py, *SERVER_CORE,
                           torch])):
        return
    bare = {"PYTHONPATH": str(ROOT)}
    contract = next(c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())
                    ["tool"]["importlinter"]["contracts"] if c["id"] == "compute-without-jupyter")
    steps.run("GPU server: every compute-layer module imports",
              [py, "-c", IMPORT_ALL, json.dumps(contract["source_modules"]),
               json.dumps(contract["forbidden_modules"])], bare)
    steps.run("GPU server: python -m helpers.kernels (every kernel, for an H100)",
              [py, "-m", "helpers.kernels", "--targets", "sm_90"], bare)
    steps.run("GPU server: the numpy 2.5 fix, both ways",
              [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
               "tests/test_numpy_compat.py"], {"WORKBOOK_NUMPY25_PYTHON": py})
    if steps.run("GPU server: its other packages (torchvision, psutil, tqdm, ...)",
                 [uv(), "pip", "install", "--quiet", "--python", py, *SERVER_EXTRAS,
                  f"torchvision=={locked_version('torchvision')}", torch]):
        steps.run("GPU server: numpy is still 2.5 beside them",
                  [py, "-c", "import numpy as np; assert not hasattr(np, 'row_stack'), "
                             "np.__version__; print('numpy', np.__version__)"])
        steps.run("GPU server: the GPU tests with python3 and pytest alone (they skip here)",
                  [py, "-m", "tools.gpu_tests", "--budget-s", "170"], bare)
        out = ROOT / "build" / "gpu-server-dry-run"
        shutil.rmtree(out, ignore_errors=True)
        steps.run("GPU server: a lent GPU's one call, dry run (recording, GPU tests, tier two)",
                  [py, "-m", "tools.gpu_lease", "--dry-run", "--out", str(out)], bare)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.test_pythons",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--pythons", nargs="+", default=list(PYTHONS), metavar="X.Y")
    parser.add_argument("--no-gpu-server", action="store_true",
                        help="skip the bare GPU server's combination")
    args = parser.parse_args(argv)
    steps = Steps()
    found = {v: find_python(v) for v in args.pythons}
    for version, python in found.items():
        if python is None:
            steps.skip(f"Python {version}", "not found on this machine")
        else:
            print(f"Python {version}: {python}", flush=True)
            learner_python(steps, version, python,
                           recording=args.no_gpu_server or version != SERVER_PYTHON)
    if not args.no_gpu_server:
        python = found.get(SERVER_PYTHON) or find_python(SERVER_PYTHON)
        if python is None:
            steps.skip("GPU server (Python 3.12)", "no Python 3.12 on this machine")
        else:
            gpu_server(steps, python)
    return 0 if steps.report() else 1


if __name__ == "__main__":
    sys.exit(main())

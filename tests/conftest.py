"""Shared fixtures and markers for the helpers tests.

``import helpers`` must come before anything imports ``numba.cuda`` (see helpers.device.backend), so
it is the first import here after the thread setting: pytest imports conftest.py before any test
module.
"""

from __future__ import annotations

import os
import sys

# Under pytest-xdist, each worker (with the notebook kernels and processes it starts) gets its
# share of the cores for torch's OpenMP thread pool. Two workers that each size their pool to
# the whole machine oversubscribe it and run several times slower. An OMP_NUM_THREADS that is
# already set wins. It must be set before torch is first imported (by ``import helpers``).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(max(1, (_CORES or 1) // _WORKERS))

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest

from helpers.device import backend
from helpers.device import worker as _worker
from tools import kernel_zygote

try:
    from hypothesis import settings
except ImportError:  # a bare GPU server (tools/gpu_tests.py): no property tests run there
    settings = None

#: The property tests' profile, the same locally and in CI (no example database). Their seed is
#: fixed too, by ``--hypothesis-seed`` in pyproject.toml's ``addopts``; another one on the
#: command line wins (``pytest --hypothesis-seed=7``), and a failure prints how to reproduce it.
if settings is not None:
    settings.register_profile("workbook", deadline=None, print_blob=True, database=None)
    settings.load_profile("workbook")

# The measuring processes the tests start (some thirty) and lab 9's gloo ranks (some twenty) are
# forked from a process that has already imported torch and Numba, as the notebooks' kernels are
# (the root conftest.py); a learner's explorer or check, and the tests that start one from a
# script or a notebook, start ordinary processes. Lab 9's checker imports torch: its command is
# wrapped once the tests are collected, if a test module imported it.
def _through_zygote(module) -> None:
    if getattr(module.command, "zygote", False):
        return
    own = module.command

    def command(*args, **kwargs):
        return kernel_zygote.command(own(*args, **kwargs))

    command.zygote = True
    module.command = command


_through_zygote(_worker)


def pytest_collection_finish(session):
    lab9_real = sys.modules.get("helpers.checks.lab9.real")
    if lab9_real is not None:
        _through_zygote(lab9_real)

#: Tests of the no-GPU behaviour (simulator mode) are skipped on a machine with a real GPU.
simulator_only = pytest.mark.skipif(backend.MODE != "simulator",
                                    reason="checks simulator-mode behaviour; a GPU is present")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, fresh for every test (deterministic data)."""
    return np.random.default_rng(20160816)


#: Seconds a test may take (setup, call and teardown) and still run in ``make test-fast``, which
#: leaves out the tests marked ``slow``; a longer one is named at the end of such a run, to be
#: made faster or marked ``slow``. Above the few seconds the first test of a worker may pay
#: once for what later tests share (the measuring process's start, a simulator's imports).
FAST_LIMIT_S = 5.0

_seconds: dict[str, float] = {}
_fast_run: list[bool] = []


def pytest_configure(config) -> None:
    _fast_run.append("not slow" in (config.getoption("markexpr", "") or ""))


def pytest_runtest_logreport(report) -> None:
    if _fast_run and _fast_run[0]:
        _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """In a run without the slow tests, name the tests that took over FAST_LIMIT_S."""
    over = sorted(((s, n) for n, s in _seconds.items() if s > FAST_LIMIT_S), reverse=True)
    if over:
        terminalreporter.section("slower than make test-fast allows")
        terminalreporter.write_line(
            f"{len(over)} tests took over {FAST_LIMIT_S:g} s: make them faster or mark them "
            "@pytest.mark.slow (they then run in make test only)")
        for seconds, nodeid in over:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")

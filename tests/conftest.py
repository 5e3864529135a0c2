"""Shared fixtures and markers for the helpers tests.

``import helpers`` must come before anything imports ``numba.cuda`` (see helpers.device.backend), so
it is the first import here: pytest imports conftest.py before any test module.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
from hypothesis import settings

from helpers.device import backend

#: The property tests' profile, the same locally and in CI (no example database). Their seed is
#: fixed too, by ``--hypothesis-seed`` in pyproject.toml's ``addopts``; another one on the
#: command line wins (``pytest --hypothesis-seed=7``), and a failure prints how to reproduce it.
settings.register_profile("workbook", deadline=None, print_blob=True, database=None)
settings.load_profile("workbook")

#: Tests of the no-GPU behaviour (simulator mode) are skipped on a machine with a real GPU.
simulator_only = pytest.mark.skipif(backend.MODE != "simulator",
                                    reason="checks simulator-mode behaviour; a GPU is present")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, fresh for every test (deterministic data)."""
    return np.random.default_rng(20160816)


"""Shared fixtures and markers for the helpers tests.

``import helpers`` must come before anything imports ``numba.cuda`` (see helpers.device.backend), so
it is the first import here: pytest imports conftest.py before any test module.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest

from helpers.device import backend

#: Tests of the no-GPU behaviour (simulator mode) are skipped on a machine with a real GPU.
simulator_only = pytest.mark.skipif(backend.MODE != "simulator",
                                    reason="checks simulator-mode behaviour; a GPU is present")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, fresh for every test (deterministic data)."""
    return np.random.default_rng(20160816)


"""helpers.device.numpy_compat: kernels compile under numpy 2.5 with the fix and fail without it,
the fix is inert on older numpy, and this file fails the day numba-cuda no longer needs it.

Each case runs in a fresh interpreter (the fix must act before numba.cuda loads). Where that
interpreter's numpy is older than 2.5, numpy 2.5 is imitated there: ``np.__version__`` reads
2.5.0 and ``row_stack`` is gone from the module and its ``__all__``, as in numpy 2.5. Set
``WORKBOOK_NUMPY25_PYTHON`` to a Python with a real numpy 2.5 (CI does, in a bare environment
like a GPU server's) to run the same cases there.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from helpers.device import numpy_compat

pytestmark = pytest.mark.each_python

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("WORKBOOK_NUMPY25_PYTHON") or sys.executable

#: Run in the child: imitate numpy 2.5 if needed, optionally import helpers (the fix), then
#: compile a float32 kernel with the real compiler and report what happened as JSON.
CHILD = r"""
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
report = {"numpy": np.__version__, "imitated": hasattr(np, "row_stack")}
if report["imitated"]:
    np.__version__ = "2.5.0"
    del np.row_stack
    np.__all__ = [n for n in np.__all__ if n != "row_stack"]
import warnings
warnings.simplefilter("ignore")
if sys.argv[1] == "with-fix":
    import helpers
    report["installed"] = helpers.device.numpy_compat.installed()
from numba import cuda, float32, types
import importlib.metadata as md
report["numba_cuda"] = md.version("numba-cuda")

def scale(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * float32(2.0)

try:
    ptx, _ = cuda.compile_ptx(scale, (types.float32[::1],), cc=(7, 5))
    report["compiled"] = ".entry" in ptx
except Exception as exc:
    report["compiled"] = False
    report["error"] = f"{type(exc).__name__}: {exc}"
report["row_stack_after"] = hasattr(np, "row_stack")
print("REPORT " + json.dumps(report))
"""


def _child(mode: str) -> dict:
    out = subprocess.run([PYTHON, "-c", CHILD, mode], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"the child printed no report (exit {out.returncode}):\n{out.stderr[-3000:]}"
    return json.loads(lines[-1][len("REPORT "):])


@pytest.fixture(scope="module")
def without_fix() -> dict:
    return _child("without-fix")


@pytest.fixture(scope="module")
def with_fix() -> dict:
    return _child("with-fix")


def test_numba_cuda_still_needs_the_fix(without_fix):
    """The day this fails, numba-cuda compiles under numpy 2.5 by itself: delete
    helpers/device/numpy_compat.py, its call in helpers/device/backend.py and this file, and
    lift the numpy<2.5 bound in pyproject.toml, environment.yml and uv.lock."""
    assert not without_fix["compiled"], (
        f"numba-cuda {without_fix['numba_cuda']} compiles a kernel under numpy 2.5 without "
        "helpers/device/numpy_compat.py: remove the fix (see this test's docstring)")
    assert "row_stack" in without_fix["error"], without_fix


@pytest.mark.slow
def test_with_the_fix_a_kernel_compiles_under_numpy_2_5(with_fix):
    assert with_fix["installed"], with_fix
    assert with_fix["compiled"], with_fix.get("error")


def test_the_lent_name_is_taken_back(with_fix):
    """Learner code under numpy 2.5 sees numpy 2.5: ``np.row_stack`` is missing after the
    compile, as it was before."""
    assert with_fix["row_stack_after"] is False


@pytest.mark.skipif(not hasattr(np, "row_stack"), reason="this numpy has no row_stack")
def test_inert_where_numpy_has_row_stack():
    row_stack = np.row_stack
    assert not numpy_compat.needed()
    assert not numpy_compat.installed()
    assert numpy_compat.install() is False
    assert not numpy_compat.installed()
    assert np.row_stack is row_stack and np.row_stack is not np.vstack


@pytest.mark.skipif(hasattr(np, "row_stack"), reason="this numpy still has row_stack")
def test_installed_where_numpy_lacks_row_stack():
    assert numpy_compat.needed() and numpy_compat.installed()
    assert not hasattr(np, "row_stack")

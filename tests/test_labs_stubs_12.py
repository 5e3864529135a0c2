"""Labs 1 and 2 beside their solutions: the same check cells, and no stub left in a solution.

The stubs are run, with every other lab's, by tests/test_labs_stubs.py; the solutions
themselves are checked by ``pytest --nbval labs/solutions``.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LABS = ["lab1_first_kernels.ipynb", "lab2_tiled_gemm.ipynb"]


def _check_cells(nb) -> list:
    """Code cells that call a checker (a line starting with ``check_``) on the learner's code."""
    return [c for c in nb.cells if c.cell_type == "code"
            and any(line.startswith("check_") for line in c.source.splitlines())]


def _todo_cells(nb) -> list:
    return [c for c in nb.cells
            if c.cell_type == "code" and "raise NotImplementedError" in c.source]


@pytest.mark.parametrize("name", LABS)
def test_solution_has_the_same_check_cells_and_no_stub_left(name):
    stub = nbformat.read(ROOT / "labs" / name, as_version=4)
    solution = nbformat.read(ROOT / "labs" / "solutions" / name, as_version=4)
    assert [c.source for c in _check_cells(stub)] == [c.source for c in _check_cells(solution)]
    assert not _todo_cells(solution)
    assert len([c for c in stub.cells if c.cell_type == "code"]) == len(
        [c for c in solution.cells if c.cell_type == "code"])

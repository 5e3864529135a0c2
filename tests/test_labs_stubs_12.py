"""Labs 1 and 2 as learners get them: the stub notebooks run top to bottom without an error, and
every check cell reports "not implemented yet"; the solutions have the same check cells.

The stubs are executed by :func:`tools.run_notebooks.execute`, as ``make run`` executes notebooks
(in this interpreter's kernel, errors not allowed). The solutions themselves are checked by
``pytest --nbval labs/solutions``.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest

from tools import run_notebooks

ROOT = pathlib.Path(__file__).resolve().parent.parent
LABS = ["lab1_first_kernels.ipynb", "lab2_tiled_gemm.ipynb"]


def _check_cells(nb) -> list:
    """Code cells that call a checker (a line starting with ``check_``) on the learner's code."""
    return [c for c in nb.cells if c.cell_type == "code"
            and any(line.startswith("check_") for line in c.source.splitlines())]


def _todo_cells(nb) -> list:
    return [c for c in nb.cells
            if c.cell_type == "code" and "raise NotImplementedError" in c.source]


@pytest.mark.notebook
@pytest.mark.parametrize("name", LABS)
def test_stub_lab_runs_and_every_check_says_not_implemented_yet(name):
    path = ROOT / "labs" / name
    nb = nbformat.read(path, as_version=4)
    run_notebooks.execute(nb, path.parent, timeout=300, name=name)
    checks = _check_cells(nb)
    assert checks and len(checks) == len(_todo_cells(nb))
    for cell in checks:
        html = [o["data"]["text/html"] for o in cell.outputs
                if o.get("output_type") == "execute_result" and "text/html" in o.get("data", {})]
        assert len(html) == 1 and "not implemented yet" in html[0], cell.source


@pytest.mark.parametrize("name", LABS)
def test_solution_has_the_same_check_cells_and_no_stub_left(name):
    stub = nbformat.read(ROOT / "labs" / name, as_version=4)
    solution = nbformat.read(ROOT / "labs" / "solutions" / name, as_version=4)
    assert [c.source for c in _check_cells(stub)] == [c.source for c in _check_cells(solution)]
    assert not _todo_cells(solution)
    assert len([c for c in stub.cells if c.cell_type == "code"]) == len(
        [c for c in solution.cells if c.cell_type == "code"])

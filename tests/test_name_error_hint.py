"""helpers.notebook.setup: a name used before the cell that defines it ran gets a hint."""

from __future__ import annotations

import pathlib

import nbformat
import pytest

from tools import run_notebooks

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(*sources: str) -> list:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    run_notebooks.execute(nb, ROOT, timeout=300, allow_errors=True)
    return nb.cells


def _text(cell) -> str:
    parts = []
    for o in cell.outputs:
        parts += [o.get("text", ""), o.get("ename", ""), str(o.get("data", {}).get(
            "text/plain", ""))]
    return "\n".join(parts)


@pytest.mark.slow
def test_a_check_run_before_its_todo_cell_says_what_to_run():
    cells = _run("import helpers\nfrom helpers import notebook\nnotebook.setup()",
                 "check(relu_kernel)", "1 + 1")
    text = _text(cells[1])
    assert "NameError" in text                        # the traceback is still there
    assert "`check` is not defined yet: run the cell that defines it first" in text
    assert "TODO cell above this check" in text
    assert _text(cells[2]).strip() == "2"            # other cells are untouched


def test_without_setup_a_name_error_is_plain():
    cells = _run("undefined_name")
    assert "NameError" in _text(cells[0]) and "not defined yet" not in _text(cells[0])

"""Each notebook 01-12 asks the learner to predict a measurement before it runs, then reveals the
answer folded (``notebook.reveal`` or a ``<details>`` block) after it."""

from __future__ import annotations

import pathlib

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("[01][0-9]_*.ipynb")
                   if "01" <= p.name[:2] <= "12")


def _moments(nb) -> list[tuple[int, int]]:
    """(question cell, answer cell) pairs: a markdown **Predict.** and the first later cell that
    reveals an answer folded."""
    pairs = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and "**Predict.**" in cell.source:
            for j in range(i + 1, len(nb.cells)):
                later = nb.cells[j]
                if "**Predict.**" in later.source and later.cell_type == "markdown":
                    break
                if ("notebook.reveal(" in later.source and later.cell_type == "code") or (
                        later.cell_type == "markdown" and "<details" in later.source):
                    pairs.append((i, j))
                    break
    return pairs


def test_there_are_twelve_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{n:02d}" for n in range(1, 13)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_a_prediction_comes_before_its_measurement_and_the_answer_after(path):
    nb = nbformat.read(path, as_version=4)
    pairs = _moments(nb)
    assert pairs, f"{path.name}: no **Predict.** cell followed by a folded answer"
    for i, j in pairs:
        answer = nb.cells[j]
        if answer.cell_type == "code":
            # the answer is worked out by code after the question, and stored folded
            html = [o["data"]["text/html"] for o in answer.get("outputs", [])
                    if "text/html" in o.get("data", {})]
            assert html and html[0].startswith("<details") and "<details open" not in html[0], (
                path.name, j)


def test_a_question_without_an_answer_is_not_counted():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("**Predict.** How fast?"),
                nbformat.v4.new_code_cell("measure()"),
                nbformat.v4.new_markdown_cell("The answer, in the open.")]
    assert _moments(nb) == []
    nb.cells.append(nbformat.v4.new_code_cell("notebook.reveal(answer)"))
    assert _moments(nb) == [(0, 3)]

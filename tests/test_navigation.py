"""The workbook's map and links: notebook 00 lists every notebook, each notebook's last cell
links to the one before and after it, and every lab is linked from a notebook."""

from __future__ import annotations

import pathlib
import re

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LABS = sorted((ROOT / "labs").glob("lab*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+\.ipynb)\)")


def _links(source: str) -> list[str]:
    return LINK.findall(source)


def _last_cell(path: pathlib.Path) -> str:
    return nbformat.read(path, as_version=4).cells[-1].source


def test_the_map_lists_every_notebook():
    start = nbformat.read(NOTEBOOKS[0], as_version=4)
    linked = {link for c in start.cells if c.cell_type == "markdown" for link in _links(c.source)}
    assert {p.name for p in NOTEBOOKS} <= linked
    assert {f"../labs/{p.name}" for p in LABS} <= linked


@pytest.mark.parametrize("index", range(1, len(NOTEBOOKS)))
def test_each_notebook_ends_with_its_neighbours(index):
    links = _links(_last_cell(NOTEBOOKS[index]))
    assert NOTEBOOKS[index - 1].name in links, NOTEBOOKS[index].name
    if index + 1 < len(NOTEBOOKS):
        assert NOTEBOOKS[index + 1].name in links, NOTEBOOKS[index].name
    else:
        assert "last notebook" in _last_cell(NOTEBOOKS[index])


def test_no_notebook_but_the_last_calls_itself_the_last():
    for path in NOTEBOOKS[:-1]:
        assert "last notebook" not in _last_cell(path), path.name


def test_every_lab_is_linked_from_the_end_of_a_notebook():
    linked = {link for p in NOTEBOOKS for link in _links(_last_cell(p))}
    assert {f"../labs/{p.name}" for p in LABS} <= linked


def test_every_link_points_at_a_file_that_exists():
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                for link in _links(cell.source):
                    if not link.startswith("http"):
                        assert (path.parent / link).exists(), (path.name, link)

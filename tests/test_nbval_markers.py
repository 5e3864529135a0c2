"""Every nbval marker comment in the notebooks, labs and solutions is one nbval reads.

nbval takes a comment line as a marker only when, stripped of ``#`` and spaces, it is exactly a
marker (``nbval.plugin.find_comment_markers``): ``# NBVAL_IGNORE_OUTPUT (why)`` is no marker,
and the cell's output is then compared. Put the reason on a line of its own.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbval.plugin import comment_markers, find_comment_markers

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted([*ROOT.glob("notebooks/[0-9]*.ipynb"), *ROOT.glob("labs/*.ipynb"),
                    *ROOT.glob("labs/solutions/*.ipynb")])


def unread_markers(source: str) -> list[str]:
    """Lines with a comment that names an nbval marker but that nbval does not read as one."""
    return [line.strip() for line in source.splitlines()
            if "#" in line and any(m in line.split("#", 1)[1] for m in comment_markers)
            and not list(find_comment_markers(line))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.relative_to(ROOT).as_posix() for p in NOTEBOOKS])
def test_every_nbval_comment_is_a_marker_nbval_reads(path):
    nb = nbformat.read(path, as_version=4)
    bad = [(k, line) for k, cell in enumerate(nb.cells) if cell.cell_type == "code"
           for line in unread_markers(cell.source)]
    assert not bad, ("cells whose nbval comment is not a marker (put the reason on a line of its "
                     f"own): {bad}")


@pytest.mark.parametrize("source, bad", [
    ("# NBVAL_IGNORE_OUTPUT\nx = 1", []),
    ("#NBVAL_SKIP\n", []),
    ("# NBVAL_IGNORE_OUTPUT   (round-off digits differ)\nx = 1",
     ["# NBVAL_IGNORE_OUTPUT   (round-off digits differ)"]),
    ("x = 1  # NBVAL_IGNORE_OUTPUT", ["x = 1  # NBVAL_IGNORE_OUTPUT"]),   # after code: ignored
    ("# NBVAL_CHECK_OUTPUT: compared\n", ["# NBVAL_CHECK_OUTPUT: compared"]),
])
def test_a_marker_with_trailing_text_is_caught(source, bad):
    assert unread_markers(source) == bad

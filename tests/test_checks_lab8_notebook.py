"""Lab 8's cells can be re-run in any order once each has run: every name a cell reads from
another cell is bound by exactly one cell, so re-running one cell cannot hand another a value of
the wrong kind (the 1-D tile count and the F(m, 3) matrices were once both ``tiles``, an int and
a dict, and the float32 cell failed after the 1-D cell was re-run). Also: the timing cell pins
the threads and prints a conclusion only where every round agrees.
"""

from __future__ import annotations

import contextlib
import io
import os

import nbformat
import notebook_slice
import pytest

from tools.run_notebooks import ROOT

FOLDERS = ("labs", "labs/solutions")
NAME = "lab8_winograd.ipynb"


def _code(folder: str) -> list[str]:
    nb = nbformat.read(ROOT / folder / NAME, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_name_a_cell_reads_from_another_is_bound_by_one_cell(folder):
    cells = _code(folder)
    parsed = [notebook_slice.names(source) for source in cells]
    for i, (_, free) in enumerate(parsed):
        for name in sorted(free):
            # the setup cell (the first) imports what the imports cell imports again
            binders = [j for j, (bound, _) in enumerate(parsed)
                       if j not in (0, i) and name in bound]
            assert len(binders) == 1, (f"code cell {i} reads {name!r}, which code cells "
                                       f"{binders} bind")


def _run(source: str, namespace: dict) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - the lab's own cells


def test_the_solution_cells_rerun_out_of_order(monkeypatch):
    """Run the solution's cells in order (all but the timing and the GPU table), then the 1-D
    demonstration cell again, then the float32 cells: as a learner who goes back would."""
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", os.environ.get("NUMBA_ENABLE_CUDASIM", "1"))
    monkeypatch.chdir(ROOT / "labs" / "solutions")
    cells = _code("labs/solutions")
    skip = ("per_round", "algorithm_choice.recorded()")
    ns: dict = {"__name__": "__lab8__"}
    for source in cells:
        if not any(s in source for s in skip):
            _run(source, ns)
    again = [s for s in cells if "y_long = winograd_1d" in s]
    later = [s for s in cells if "filt32 = rng" in s or "AT6, G6, BT6" in s]
    assert len(again) == 1 and len(later) == 2
    for source in again + later:
        _run(source, ns)
    assert set(ns["errors"]) == {2, 4, 6}


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_timing_cell_pins_threads_and_concludes_from_every_round(folder):
    timing = [s for s in _code(folder) if "per_round" in s]
    assert len(timing) == 1
    source = timing[0]
    assert source.startswith("# NBVAL_IGNORE_OUTPUT")
    assert "with cpu_threads(CPU_THREADS):" in source
    assert "statistics.median" in source and "from {min(ratios):.2f}x" in source
    assert "less time in every round" in source and "more time in every round" in source

"""The labs as a learner first opens them: every stub lab runs top to bottom without an error,
and every check cell says "not implemented yet".

The labs are executed with nbclient as ``python -m tools.run_notebooks`` does, in ``labs/``,
all in one kernel (see :func:`stub_runs`); the stored notebooks are not touched. A check cell
is a code cell that calls ``labN.check_...`` (in labs 1 and 2, a ``check_...`` it imported).
"""

from __future__ import annotations

import re

import nbformat
import pytest

from tools.run_notebooks import ROOT, execute, run_notebook

from notebook_slice import FRESH_NAMESPACE

#: Every lab, run as a learner first opens it.
STUBS = [p.name for p in sorted((ROOT / "labs").glob("lab*.ipynb"))]
#: Every lab but labs 1 and 2, whose check cells call checkers imported by name
#: (tests/test_labs_stubs_12.py compares those with their solutions).
LABS = [name for name in STUBS if not name.startswith(("lab1_", "lab2_"))]
CHECK_CALL = re.compile(r"\blab\d+\.check_\w+\(")


def _is_check(cell) -> bool:
    """A code cell that calls a checker: ``labN.check_...(``, or, in labs 1 and 2, a line
    that starts with ``check_``."""
    return cell.cell_type == "code" and (CHECK_CALL.search(cell.source) is not None or any(
        line.startswith("check_") for line in cell.source.splitlines()))


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return "".join(str(data.get(kind, "")) for kind in ("text/html", "text/plain"))


@pytest.fixture(scope="module")
def stub_runs(tmp_path_factory) -> dict[str, tuple[object, str]]:
    """Every stub lab executed: ``{name: (the executed notebook, "" or why it failed)}``.

    The labs run one after another in one kernel, each after a cell that empties the
    namespace (:data:`notebook_slice.FRESH_NAMESPACE`): a kernel's start and the imports of
    torch, Numba and the helpers cost seconds a lab. When a cell fails, that lab and every lab
    after it run again, each in a kernel of its own (:func:`tools.run_notebooks.run_notebook`,
    as ``python -m tools.run_notebooks`` runs them), so that a failure is told by its own
    lab's run.
    """
    folder = ROOT / "labs"
    labs = [nbformat.read(folder / name, as_version=4) for name in STUBS]
    combined = nbformat.v4.new_notebook(metadata=labs[0].metadata)
    starts = []
    for nb in labs:
        starts.append(len(combined.cells))
        combined.cells.append(nbformat.v4.new_code_cell(FRESH_NAMESPACE.format(
            folder=str(folder))))
        # code cells without their stored outputs and timings (which tell where a run stopped)
        combined.cells += [nbformat.v4.new_code_cell(cell.source, metadata={
            k: v for k, v in cell.metadata.items() if k != "execution"})
            if cell.cell_type == "code" else cell for cell in nb.cells]
    ran = len(STUBS)
    try:
        execute(combined, folder, timeout=300, name="the stub labs")
    except Exception:  # noqa: BLE001 - the labs from the failed one on run each on its own
        began = [i for i, cell in enumerate(combined.cells) if "execution" in cell.metadata]
        ran = sum(start <= began[-1] for start in starts) - 1 if began else 0
    runs = {}
    for k, (name, nb) in enumerate(zip(STUBS, labs)):
        if k < ran:
            cells = combined.cells[starts[k] + 1:starts[k] + 1 + len(nb.cells)]
            runs[name] = nbformat.v4.new_notebook(cells=cells, metadata=nb.metadata), ""
            continue
        out = tmp_path_factory.mktemp("stub_lab")
        ok, seconds, error = run_notebook(folder / name, out, timeout=300)
        why = f"failed after {seconds:.0f} s, in a kernel of its own: {error}"
        runs[name] = nbformat.read(out / name, as_version=4), "" if ok else why
    return runs


@pytest.mark.notebook
@pytest.mark.parametrize("name", STUBS)
def test_the_stub_lab_runs_and_every_check_says_not_implemented_yet(name, stub_runs):
    nb, error = stub_runs[name]
    assert not error, f"{name} {error}"
    checks = [c for c in nb.cells if _is_check(c)]
    assert checks, f"{name} has no check cell"
    todo = [c for c in nb.cells
            if c.cell_type == "code" and "raise NotImplementedError" in c.source]
    assert len(checks) == len(todo), f"{name}: {len(checks)} check cells, {len(todo)} TODO cells"
    for cell in checks:
        shown = "".join(_text(o) for o in cell.outputs)
        assert "not implemented yet" in shown, (name, cell.source, shown[:300])
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)


WHY = "**Why it is written this way.**"


def _without_notes(cells):
    """The solution's cells without its "why" notes (markdown cells only the solution has)."""
    return [c for c in cells if not (c.cell_type == "markdown" and c.source.startswith(WHY))]


@pytest.mark.parametrize("name", LABS)
def test_the_lab_and_its_solution_differ_only_in_the_todo_cells(name):
    lab = nbformat.read(ROOT / "labs" / name, as_version=4)
    solution = nbformat.read(ROOT / "labs" / "solutions" / name, as_version=4)
    solution.cells = _without_notes(solution.cells)
    assert len(lab.cells) == len(solution.cells)
    stubs = 0
    for i, (a, b) in enumerate(zip(lab.cells, solution.cells)):
        assert a.cell_type == b.cell_type
        if a.source != b.source:
            if a.cell_type == "markdown":    # only the title cell gains the instructor's note
                assert b.source.startswith(a.source) and "Instructor's copy" in b.source
                continue
            assert "raise NotImplementedError" in a.source
            assert "raise NotImplementedError" not in b.source
            assert CHECK_CALL.search(lab.cells[i + 1].source), "a check cell right after a TODO"
            stubs += 1
    checks = sum(bool(CHECK_CALL.search(c.source)) for c in lab.cells if c.cell_type == "code")
    assert stubs == checks >= 1          # one check cell per TODO cell


def test_the_stub_labs_are_stored_executed():
    for name in LABS:
        nb = nbformat.read(ROOT / "labs" / name, as_version=4)
        checks = [c for c in nb.cells if c.cell_type == "code" and CHECK_CALL.search(c.source)]
        assert all("not implemented yet" in "".join(_text(o) for o in c.outputs) for c in checks)


def test_the_labs_state_the_rules_their_checkers_apply():
    """Lab 4's FLOP model, lab 5's picking rules, lab 6's SM fields and lab 7's scheduling
    rules are written once, in the checker modules, and must appear word for word in the labs
    (stub and solution)."""
    from helpers.checks import lab4, lab5, lab6, lab7

    for folder in ("labs", "labs/solutions"):
        for name, text in (("lab4_fft_convolution.ipynb", lab4.FLOP_MODEL),
                           ("lab5_pick_the_fastest.ipynb", lab5.RULES.replace("``", "`")),
                           ("lab6_transpose_and_occupancy.ipynb", lab6.SM_FIELDS),
                           ("lab7_overlap_copies.ipynb", lab7.RULES)):
            nb = nbformat.read(ROOT / folder / name, as_version=4)
            assert any(text in c.source for c in nb.cells if c.cell_type == "markdown"), name


def _def_line(source: str) -> str | None:
    """The first line of a cell that defines a function (a TODO cell's signature)."""
    return next((line for line in source.splitlines() if line.startswith("def ")), None)


@pytest.mark.parametrize("folder", ["labs/solutions"])
@pytest.mark.parametrize("name", LABS + ["lab1_first_kernels.ipynb", "lab2_tiled_gemm.ipynb"])
def test_every_solved_todo_is_followed_by_a_note_saying_why(name, folder):
    """After each solved TODO cell and its check, the solution says why it is written so: the
    choice, the alternative and why not."""
    lab = nbformat.read(ROOT / "labs" / name, as_version=4)
    solution = nbformat.read(ROOT / folder / name, as_version=4)
    todos = [_def_line(c.source) for c in lab.cells
             if c.cell_type == "code" and "raise NotImplementedError" in c.source]
    assert todos
    cells = solution.cells
    for first_line in todos:
        k = next(i for i, c in enumerate(cells)
                 if c.cell_type == "code" and _def_line(c.source) == first_line)
        note = cells[k + 2] if k + 2 < len(cells) else None
        assert note is not None and note.cell_type == "markdown" and note.source.startswith(WHY), \
            (name, first_line)
        assert "alternative" in note.source.lower(), (name, first_line)
    assert not any(c.source.startswith(WHY) for c in lab.cells)    # learners do not see them


def test_each_lab_has_a_predict_moment():
    for name in LABS + ["lab1_first_kernels.ipynb", "lab2_tiled_gemm.ipynb"]:
        nb = nbformat.read(ROOT / "labs" / name, as_version=4)
        assert any(c.cell_type == "markdown" and "**Predict.**" in c.source for c in nb.cells), name

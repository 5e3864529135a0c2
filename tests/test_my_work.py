"""The learner's copies in ``my-work/`` (tools/lab.py's copy step, run by ``make lab``): what a
copy holds, what notebook 00 says about updated originals, and what a new session reopens.
``tests/test_browser_my_work.py`` checks the same in JupyterLab."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from helpers.notebook import SETUP_CELL
from tools import lab

ROOT = lab.ROOT
START = "notebooks/00_start_here.ipynb"
LAB = "labs/lab1_first_kernels.ipynb"


def clone(root, names=(START, LAB, "labs/solutions/lab1_first_kernels.ipynb")):
    """``root`` laid out like a clone holding the workbook's notebooks ``names``."""
    for rel in names:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    return root


def without_markers(source: str) -> str:
    return "".join(ln for ln in source.splitlines(keepends=True)
                   if not re.match(r"\s*#\s*NBVAL_", ln))


def test_a_copy_leaves_out_nbval_markers_and_keeps_everything_else(tmp_path):
    clone(tmp_path)
    lab.prepare_work(tmp_path)
    for rel in (START, LAB):
        text = (tmp_path / lab.WORK_DIR / rel).read_text()
        assert "NBVAL_" not in text, rel
        assert "# NBVAL_IGNORE_OUTPUT" in (ROOT / rel).read_text(), rel  # there were markers
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes()  # original untouched
        original, copy = (nbformat.read(p, as_version=4)
                          for p in (tmp_path / rel, tmp_path / lab.WORK_DIR / rel))
        nbformat.validate(copy)
        assert len(copy.cells) == len(original.cells)
        setup = [k for k, c in enumerate(original.cells) if c.cell_type == "code"][0]
        for k, (o, c) in enumerate(zip(original.cells, copy.cells)):
            assert (c.cell_type, c.get("outputs"), c.metadata) == \
                (o.cell_type, o.get("outputs"), o.metadata), (rel, k)
            if k != setup:
                expected = without_markers(o.source) if o.cell_type == "code" else o.source
                assert c.source == expected, (rel, k)
    assert not (tmp_path / lab.WORK_DIR / "labs" / "solutions").exists()


@pytest.mark.slow
def test_a_copys_setup_cell_is_one_line_that_does_the_local_job(tmp_path):
    """The setup cell of every original starts with SETUP_MARK (helpers.notebook.SETUP_CELL,
    which tests/test_colab.py holds them to); a copy's is SETUP_LINE, which imports helpers (as
    installed in the environment, from the copy's own folder) and runs notebook.setup()."""
    assert SETUP_CELL.startswith(lab.SETUP_MARK)
    clone(tmp_path)
    lab.prepare_work(tmp_path)
    for rel in (START, LAB):
        copy = nbformat.read(tmp_path / lab.WORK_DIR / rel, as_version=4)
        first = next(c for c in copy.cells if c.cell_type == "code")
        assert first.source == lab.SETUP_LINE and "\n" not in first.source, rel
    assert "notebook.setup()" in SETUP_CELL and "notebook.setup()" in lab.SETUP_LINE
    done = subprocess.run(
        [sys.executable, "-c", lab.SETUP_LINE + "\nimport helpers; print(helpers.__file__)"],
        cwd=tmp_path / lab.WORK_DIR / "labs", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(str(ROOT / "helpers" / "__init__.py")), done.stdout


def test_a_notebook_that_is_not_nbformat_4_json_is_copied_unchanged():
    for data in (b"not json", b'{"original": 1}', b"[]", b'{"cells": 3}',
                 b'{"nbformat": 4, "cells": [1]}', b'{"nbformat": 3, "worksheets": []}'):
        assert lab.learner_copy(data) == data


def test_counts_say_one_notebook_and_two_notebooks(tmp_path):
    assert (lab.plural(1, "notebook"), lab.plural(2, "notebook"), lab.plural(0, "notebook")) == \
        ("1 notebook", "2 notebooks", "0 notebooks")
    clone(tmp_path, [START])
    assert lab.prepare_work(tmp_path)[0].startswith("copied 1 notebook into my-work/ ")
    clone(tmp_path / "two", [START, LAB])
    assert lab.prepare_work(tmp_path / "two")[0].startswith("copied 2 notebooks into my-work/ ")
    assert lab.prepare_work(tmp_path / "two") == []    # nothing new: nothing said


def updates_cell(path):
    """Notebook 00's cell that prints make lab's list of updated originals."""
    (cell,) = [c for c in nbformat.read(path, as_version=4).cells
               if c.cell_type == "code" and lab.UPDATES in c.source]
    return cell.source


def run_in(folder, source, monkeypatch, capsys) -> str:
    monkeypatch.chdir(folder)           # a notebook's kernel runs in the notebook's folder
    exec(compile(source, "cell", "exec"), {})
    return capsys.readouterr().out


def test_notebook_00_lists_the_originals_updated_by_a_pull(tmp_path, monkeypatch, capsys):
    clone(tmp_path)
    lab.prepare_work(tmp_path)
    work = tmp_path / lab.WORK_DIR
    source = updates_cell(work / START)
    assert "No notebook or lab has been updated" in run_in(work / "notebooks", source,
                                                           monkeypatch, capsys)
    # a pull changes lab 1's original and the solution; the learner's copy of lab 1 is theirs
    for rel in (LAB, "labs/solutions/lab1_first_kernels.ipynb"):
        nb = nbformat.read(tmp_path / rel, as_version=4)
        nb.cells.append(nbformat.v4.new_markdown_cell("A new exercise."))
        nbformat.write(nb, tmp_path / rel)
    mine = (work / LAB).read_bytes()
    lines = lab.prepare_work(tmp_path)
    assert [ln.split()[0] for ln in lines] == [LAB]
    assert (work / LAB).read_bytes() == mine
    out = run_in(work / "notebooks", source, monkeypatch, capsys)
    assert f"  {LAB}\n" in out and "updated (by git pull)" in out and START not in out
    assert lab.updated_originals(tmp_path) == [LAB]
    # in the original (the repository's notebooks/, or Colab) there is nothing to list
    out = run_in(tmp_path / "notebooks", updates_cell(tmp_path / START), monkeypatch, capsys)
    assert out.startswith("Not a copy made by make lab")
    # a copy deleted by the learner comes back as the new version, and is listed no more
    (work / LAB).unlink()
    assert lab.prepare_work(tmp_path)[0].startswith("copied 1 notebook ")
    assert "No notebook or lab has been updated" in run_in(work / "notebooks", source,
                                                           monkeypatch, capsys)


def workspace(tabs: list[str]) -> str:
    """A JupyterLab workspace whose main area shows the notebooks ``tabs`` (paths in the served
    folder), as JupyterLab 4 saves one."""
    ids = [f"notebook:{t}" for t in tabs]
    return json.dumps({
        "data": {"layout-restorer:data": {"main": {
            "dock": {"type": "tab-area", "currentIndex": 0, "widgets": ids},
            "current": ids[0]}},
            **{i: {"data": {"path": t, "factory": "Notebook"}} for i, t in zip(ids, tabs)}},
        "metadata": {"id": "default"}})


def test_each_start_forgets_the_tabs_of_the_last_session(tmp_path):
    """JupyterLab reopens the tabs its workspace lists, starting a kernel for each notebook:
    make lab keeps the workspace in my-work/ and empties it at each start."""
    # imported here: 1.4 s of JupyterLab's server that every test worker would pay collecting
    from jupyterlab_server.workspaces_handler import WorkspacesManager

    clone(tmp_path)
    lab.prepare_work(tmp_path)
    folder = tmp_path / lab.WORK_DIR / lab.WORKSPACES
    assert f"--LabApp.workspaces_dir={folder}" in lab.arguments(tmp_path)
    spaces = WorkspacesManager(str(folder))
    spaces.save("default", workspace([LAB, START]))
    assert [w["metadata"]["id"] for w in spaces.list_workspaces()] == ["default"]
    lab.prepare_work(tmp_path)
    assert WorkspacesManager(str(folder)).list_workspaces() == []

"""``make lab`` in a real, headless browser: the learner sees and runs only their copies.

JupyterLab is started as ``make lab`` starts it (:mod:`tools.lab`) on a small clone after a
simulated ``git pull`` that changed lab 1's original, with a workspace left by an earlier session
that had lab 1 open. Run alone with ``pytest tests/test_browser_my_work.py``; see
``tests/browser.py`` for what it needs.
"""

from __future__ import annotations

import json
import shutil
import urllib.request

import nbformat
import pytest

from tools import lab

from browser import ROOT, SCREENSHOTS, LabServer, PageErrors, chromium, require_browser
from test_my_work import LAB, START, workspace

pytestmark = pytest.mark.browser


def test_make_lab_shows_only_the_learners_copies_and_lists_an_updated_original(tmp_path):
    """The file browser's top folder is my-work/ (labs/ and notebooks/ there are the copies; no
    README, no originals beside them), the one tab is the copy of notebook 00 and its one kernel
    (the earlier session's lab 1 tab is not reopened), the copy shows no nbval marker and a
    one-line setup cell, and its updates cell, run, names lab 1."""
    # JupyterLab's server, imported here: every test process imports this module to collect it
    from jupyterlab_server.workspaces_handler import WorkspacesManager

    path = require_browser()
    root = tmp_path / "root"
    for rel in (START, LAB, "README.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    lab.prepare_work(root)                                  # the first make lab
    nb = nbformat.read(root / LAB, as_version=4)            # a pull changes lab 1's original
    nb.cells.append(nbformat.v4.new_markdown_cell("A new exercise."))
    nbformat.write(nb, root / LAB)
    WorkspacesManager(str(root / lab.WORK_DIR / lab.WORKSPACES)).save(
        "default", workspace([LAB, START]))                 # the earlier session's tabs

    server = LabServer(root, tmp_path / "home", workbook=True)
    try:
        with chromium(path) as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors = PageErrors(page)
            page.goto(server.printed_url())
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
            tabs = page.locator("#jp-main-dock-panel .lm-TabBar-tab .lm-TabBar-tabLabel")
            assert [t.strip() for t in tabs.all_inner_texts()] == ["00_start_here.ipynb"]
            server.wait_kernel_idle(timeout_s=60, pause=lambda s: page.wait_for_timeout(s * 1e3))

            page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").first.click()
            items = page.locator(".jp-FileBrowser .jp-DirListing-content .jp-DirListing-itemText")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-FileBrowser .jp-DirListing-itemText')]"
                ".some(e => e.textContent.trim() === 'labs')", timeout=30_000)
            assert [t.strip() for t in items.all_inner_texts()] == ["labs", "notebooks"]

            notebook = page.locator(".jp-Notebook")
            assert "NBVAL" not in notebook.inner_text()
            editors = notebook.locator(".jp-CodeCell .jp-InputArea-editor")
            assert editors.first.inner_text().strip() == lab.SETUP_LINE
            cell = notebook.locator(".jp-CodeCell").filter(has_text=lab.UPDATES)
            cell.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            output = cell.locator(".jp-OutputArea-output")
            output.filter(has_text=LAB).wait_for(timeout=60_000)
            assert "updated (by git pull)" in output.inner_text()

            with urllib.request.urlopen(f"{server.url}/api/sessions?token={server.token}") as r:
                assert [s["path"] for s in json.load(r)] == [START]     # one kernel, for 00
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "make_lab_my_work.png"))
            assert errors.lines == []
    finally:
        server.stop()

"""The explorers in JupyterLab, and the book's pages, in a real headless browser.

What nbval cannot see: that the widgets and plotly charts render in JupyterLab, that moving a
control reaches the kernel and redraws the chart, and that nothing fails in the page while it
happens. Each test starts its own JupyterLab on 127.0.0.1 over copies of the notebooks cut to
their setup and explorer cells (the stored notebooks are never saved over, and nbval runs the
rest), runs every cell from the Run menu as a student would, works a control (notebook 06's
under two CPU-bound processes), and saves a screenshot under ``build/browser/``.
The book's pages are opened in the browser by ``tests/test_browser_book.py``.

Run alone with ``pytest -m browser``; see ``tests/browser.py`` for what they need.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import shutil
import subprocess
import sys
import time

import nbformat
import psutil
import pytest

from helpers.conv import STRATEGIES, config_for

from browser import (ROOT, SCREENSHOTS, SLOW_PLOTLY_WIDGET, LabServer, PageErrors, cell_with,
                     chart_state, chromium, error_outputs, require_browser, run_all_cells,
                     wait_for_change)

pytestmark = pytest.mark.browser

WIDGET_FAILURES = ("Error displaying widget", "Error rendering", "Model not found")

#: What the notebooks fetch from the internet: the "Open in Colab" badge, and plotly.js for
#: front ends that render the charts' HTML fallback instead of plotly's own mime type.
EXTERNAL_HOSTS = {"colab.research.google.com", "cdn.plot.ly"}


@pytest.fixture(scope="module")
def browser():
    with chromium(require_browser()) as b:
        yield b


#: A cell the tests add after the explorer: how many measuring processes the kernel started.
STARTS_CELL = ("from helpers.widgets.live import measuring_worker\n"
               "print('measuring processes started:', measuring_worker().starts)")


def explorer_only(name: str) -> nbformat.NotebookNode:
    """Notebook ``name`` cut to its setup cell and its explorer's cell, outputs cleared, and
    :data:`STARTS_CELL` after them: the rest of the notebook is executed by nbval already, and
    here only the widget is worked."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    (explorer,) = [c for c in code if "Explorer(" in c.source]
    nb.cells = [code[0], explorer, nbformat.v4.new_code_cell(STARTS_CELL)]
    for cell in nb.cells:
        cell.outputs, cell.execution_count = [], None
    return nb


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server over a folder holding notebooks 01 and 06, each cut to its setup
    cell and its explorer (:func:`explorer_only`), under their own names."""
    root = tmp_path / "root"
    root.mkdir()
    for name in ("01_cpu_vs_gpu_throughput.ipynb", "06_head_to_head.ipynb"):
        nbformat.write(explorer_only(name), root / name)
    server = LabServer(root, tmp_path / "home")
    yield server
    server.stop()


@pytest.fixture
def page(browser, lab):
    # Tall enough that an explorer's controls and first chart fit on screen together.
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.add_init_script(SLOW_PLOTLY_WIDGET)   # the charts stay live on a busy machine
    yield page
    page.close()


def open_and_run(page, lab, name: str) -> PageErrors:
    """Open notebook ``name``, run all its cells, and check that every one ran cleanly."""
    errors = PageErrors(page)
    page.goto(lab.notebook_url(name))
    prompts = run_all_cells(page, lab, timeout_s=600)
    not_run = [i for i, p in enumerate(prompts) if not p[1:-2].isdigit()]
    assert not not_run, f"code cells {not_run} did not run: {prompts}"
    assert error_outputs(page) == []
    text = page.locator(".jp-Notebook").inner_text()
    assert not [w for w in WIDGET_FAILURES if w in text]
    return errors


def has_times(state: dict) -> bool:
    """Whether a chart's state holds at least one point."""
    return any(trace["y"] for trace in state["traces"])


def check_times(state: dict) -> None:
    """A runtime chart with at least one time, all of them finite and positive."""
    ys = [y for trace in state["traces"] for y in trace["y"]]
    assert ys and all(isinstance(y, (int, float)) and math.isfinite(y) and y > 0 for y in ys)


def explorer_runtime_chart(page, lab, notebook: str, selector: str, text: str):
    """Open and run ``notebook``; return its explorer cell (found by a control, see
    :func:`cell_with`), the explorer's runtime chart (its first) and that chart's state once
    it shows a first point: an explorer that draws as points arrive may still be measuring
    its first ones when its cell has finished, the more so on a busy machine."""
    errors = open_and_run(page, lab, notebook)
    cell = cell_with(page, selector, text)
    cell.scroll_into_view_if_needed()
    runtime = cell.locator(".js-plotly-plot").first
    # drawn once the widget's view has rendered: on a busy machine, past Playwright's default
    # of 30 s (it took longer once, with the other test workers busy)
    runtime.wait_for(state="attached", timeout=180_000)
    runtime.scroll_into_view_if_needed()
    before = wait_for_change(runtime, {"title": "", "traces": []}, until=has_times, cell=cell)
    check_times(before)
    return errors, cell, runtime, before


def finish(page, cell, errors: PageErrors, screenshot: str) -> None:
    """Save the explorer cell's screenshot; check that nothing failed meanwhile."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    cell.screenshot(path=str(SCREENSHOTS / screenshot))
    assert error_outputs(page) == []
    assert errors.lines == []
    assert errors.external_hosts <= EXTERNAL_HOSTS


def readme_picture(page, cell, before: dict, after: dict, busy_processes: int = 0) -> None:
    """The README's picture (published by ``make readme-picture``, :mod:`tools.readme_picture`):
    JupyterLab from its menu bar down to the bottom of the explorer's memory chart, with the
    explorer's cell at the top, and beside it the facts its caption states, read from the
    charts themselves."""
    layer = r"\(b, i, f, k, s\) = (\([\d, ]+\))"
    memory = cell.locator(".js-plotly-plot").nth(1)
    memory_state = chart_state(memory)
    assert re.search(layer, memory_state["title"]).group(1) == \
        re.search(layer, after["title"]).group(1), "the memory chart must show the new layer too"
    device = re.search(r"measured on ([^;<]+?)\s*(;|<|$)", after["title"])
    assert device, after["title"]
    status = re.search(r"(\d+ of \d+) strategies measured on (.+?) in ([\d.]+) s\.",
                       cell.inner_text())
    assert status and status.group(2) == device.group(1).strip(), cell.inner_text()
    # the file browser lists the test's temporary folder, not the workbook: fold it away
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()
    page.locator("#jp-left-stack").wait_for(state="hidden")
    cell.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)
    box = memory.bounding_box()
    assert box and box["height"] > 100, box
    width = page.viewport_size["width"]
    page.screenshot(path=str(SCREENSHOTS / "readme_explorer.png"),
                    clip={"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 16})
    facts = {"device": device.group(1).strip(), "date": datetime.date.today().isoformat(),
             "notebook": "notebooks/06_head_to_head.ipynb",
             "layer_before": re.search(layer, before["title"]).group(1),
             "layer_after": re.search(layer, after["title"]).group(1),
             "measured": status.group(1), "seconds": float(status.group(3)),
             "busy_processes": busy_processes}
    (SCREENSHOTS / "readme_explorer.json").write_text(json.dumps(facts, indent=1) + "\n")


def test_checks_catch_a_failing_notebook(browser, tmp_path):
    """The checks above can fail: a cell that raises shows up, and the cells after it do not run."""
    require_browser()
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print('fine')"),
        nbformat.v4.new_code_cell("raise ValueError('planted failure')"),
        nbformat.v4.new_code_cell("print('never reached')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, root / "failing.ipynb")
    server = LabServer(root, tmp_path / "home")
    page = browser.new_page()
    try:
        page.goto(server.notebook_url("failing.ipynb"))
        prompts = run_all_cells(page, server, timeout_s=120)
        assert prompts == ["[1]:", "[2]:", "[ ]:"]
        errors = error_outputs(page)
        assert len(errors) == 1 and "ValueError: planted failure" in errors[0]
    finally:
        page.close()
        server.stop()


NEWS_PROMPT = "official Jupyter news"


def fresh_clone(root):
    """A folder laid out like a fresh clone after ``make env``: the start notebook, the learner's
    folders and files, and the build and packaging folders that the file browser should hide."""
    (root / "notebooks").mkdir(parents=True)
    start = "notebooks/00_start_here.ipynb"   # the original: make lab copies it into my-work/
    shutil.copy(ROOT / start, root / start)
    for folder in ("labs", "helpers", "gpu_cnn_workbook.egg-info", "build"):
        (root / folder).mkdir()
        (root / folder / "README.md").write_text("placeholder\n")
    shutil.copy(ROOT / "README.md", root / "README.md")


def root_listing(page, shown: str = "README.md") -> list[str]:
    """The names the file browser shows at the served folder's root (once ``shown`` is)."""
    page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").first.click()
    items = page.locator(".jp-FileBrowser .jp-DirListing-content .jp-DirListing-itemText")
    page.wait_for_function(
        "name => [...document.querySelectorAll('.jp-FileBrowser .jp-DirListing-itemText')]"
        ".some(e => e.textContent.trim() === name)", arg=shown, timeout=30_000)
    return [t.strip() for t in items.all_inner_texts()]


def main_tabs(page) -> list[str]:
    """The labels of the main area's tabs, the current one first."""
    tabs = page.locator("#jp-main-dock-panel .lm-TabBar-tab")
    current = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
    labels = [t.strip() for t in tabs.locator(".lm-TabBar-tabLabel").all_inner_texts()]
    first = current.first.inner_text().strip()
    return [first] + [t for t in labels if t != first]


def test_make_lab_opens_the_start_notebook_and_hides_build_folders(browser, tmp_path):
    """JupyterLab started as ``make lab`` starts it, on a fresh clone with fresh settings: the
    URL it prints opens 00_start_here.ipynb as the one tab, the file browser shows the learner's
    copies in my-work/ only (no originals, no build or *.egg-info folder), and no news prompt
    appears. The same folder served by a JupyterLab with its defaults (run first, the control)
    shows all three things, so these checks can fail; the news prompt is awaited twice as long as
    the control took to show it."""
    require_browser()
    root = tmp_path / "root"
    fresh_clone(root)

    control = LabServer(root, tmp_path / "home_control",
                        settings={"@jupyterlab/apputils-extension:notification": {}})
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        start = time.monotonic()
        page.goto(control.printed_url())
        page.get_by_text(NEWS_PROMPT).first.wait_for(timeout=60_000)
        prompt_after_s = time.monotonic() - start
        assert main_tabs(page)[0] != "00_start_here.ipynb"
        listing = root_listing(page)
        assert "gpu_cnn_workbook.egg-info" in listing and "build" in listing, listing
    finally:
        page.close()
        control.stop()

    server = LabServer(root, tmp_path / "home", workbook=True)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        errors = PageErrors(page)
        url = server.printed_url()
        assert url.split("?")[0].endswith("/lab/tree/notebooks/00_start_here.ipynb"), url
        start = time.monotonic()
        page.goto(url)
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
        server.wait_kernel_idle(timeout_s=120, pause=lambda s: page.wait_for_timeout(s * 1e3))
        assert main_tabs(page) == ["00_start_here.ipynb"]
        assert root_listing(page, "notebooks") == ["notebooks"]    # my-work/: the copy of 00
        left_s = 2 * prompt_after_s - (time.monotonic() - start)
        page.wait_for_timeout(max(left_s, 1.0) * 1000)
        assert page.get_by_text(NEWS_PROMPT).count() == 0
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "make_lab_start.png"))
        assert errors.lines == []
        assert errors.external_hosts <= EXTERNAL_HOSTS
    finally:
        page.close()
        server.stop()


def busy_elsewhere(sample_s: float = 1.0) -> int:
    """How many processes outside this test's own tree (JupyterLab, its kernels, the measuring
    processes and Chromium are ours) are CPU-bound, that is used at least a quarter of a core
    over ``sample_s`` seconds: other tests, CPU hogs started by whoever runs the suite. (Two
    spinning processes that share two cores with our own work get about half a core each.)"""
    me = psutil.Process()
    ours = {me.pid, *(c.pid for c in me.children(recursive=True))}
    before: dict[int, tuple[psutil.Process, float]] = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid not in ours:
                times = proc.cpu_times()
                before[proc.pid] = proc, times.user + times.system
        except psutil.Error:  # gone, or not ours to read
            pass
    time.sleep(sample_s)
    bound = 0
    for proc, start in before.values():
        try:
            times = proc.cpu_times()
            bound += times.user + times.system - start >= 0.25 * sample_s
        except psutil.Error:
            pass
    return bound


@pytest.fixture
def cpu_hogs():
    """Keeps ``count`` CPU-bound processes running beside the test until it ends: called with
    a count, finds how many run already (:func:`busy_elsewhere`) and starts one that spins on a
    core for each one missing. Returns the processes it started and the number found."""
    hogs: list[subprocess.Popen] = []

    def start(count: int) -> tuple[list[subprocess.Popen], int]:
        busy = busy_elsewhere()
        hogs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(max(0, count - busy)))
        return hogs, busy

    yield start
    for hog in hogs:
        hog.kill()
        hog.wait()


def wait_for_status(cell, pattern: str, timeout_s: float = 300.0) -> re.Match:
    """Poll the explorer cell's text until ``pattern`` matches it; the match."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = cell.locator(".jp-Cell-outputArea").inner_text()
        found = re.search(pattern, text)
        if found:
            return found
        cell.page.wait_for_timeout(500)
    raise AssertionError(f"no {pattern!r} within {timeout_s:.0f} s in: {text}")


def measuring_starts(page) -> int:
    """Run :data:`STARTS_CELL` again, in place (Ctrl+Enter); the count it prints."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(has_text="measuring_worker().starts")
    prompt = cell.locator(".jp-InputPrompt").inner_text().strip()
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+Enter")
    deadline = time.monotonic() + 120
    text = ""
    while time.monotonic() < deadline:
        now = cell.locator(".jp-InputPrompt").inner_text().strip()
        text = cell.locator(".jp-Cell-outputArea").inner_text()
        found = re.search(r"measuring processes started: (\d+)", text)
        if found and now not in (prompt, "[*]:"):
            return int(found.group(1))
        page.wait_for_timeout(100)
    raise AssertionError(f"the counting cell did not print its count: {text!r}")


#: Seconds from the last of six quick key presses to the final chart, with two CPU hogs on a
#: 2-core machine (issue target; quiet, the target is 1 s).
BURST_TARGET_S = 4.0

#: On a machine too slow for :data:`BURST_TARGET_S` (measuring one update of those strategies
#: takes longer there; each is bounded by its own budget), the burst is held to what one press
#: costs under the same load: at most this many times it, plus :data:`BURST_SLACK_S` (stopping
#: the strategy a stale update was measuring).
BURST_RATIO = 1.5
BURST_SLACK_S = 1.0

#: The explorer's status once the update of batch ``b`` is drawn (``{b}`` filled in).
DONE_AT_B = (r"y: \(N, K, P, Q\) = \({b}, 16, 28, 28\); \d+ of \d+ strategies measured on .+ "
             r"in [\d.]+ s\.")


def one_press(page, cell, key: str, b: int) -> float:
    """Seconds from one press of ``key`` on the focused slider to the explorer's status for
    batch ``b``."""
    page.keyboard.press(key)
    pressed = time.monotonic()
    wait_for_status(cell, DONE_AT_B.format(b=b))
    return time.monotonic() - pressed


@pytest.mark.alone
def test_conv_explorer_slider_redraws_runtime_chart(page, lab, cpu_hogs):
    """Notebook 06, both cores busy with other work: six quick presses on the batch slider
    (2 -> 8) are one update, of b = 8: every ticked strategy that supports the layer is
    measured and drawn for it, the library's bar included, none stopped or refused for time,
    within :data:`BURST_TARGET_S` of the last press (on a slower machine: as one press costs
    there, :data:`BURST_RATIO`); the measuring process is not replaced
    (started at most once more: a spare). Marked ``alone``: other tests beside it would add to
    the load it sets up."""
    errors, cell, runtime, before = explorer_runtime_chart(
        page, lab, "06_head_to_head.ipynb", ".widget-slider", "kernel size k")
    assert "(b, i, f, k, s) = (2, 32, 16, 5, 1)" in before["title"]
    starts = measuring_starts(page)
    # from here on, two CPU-bound processes run beside the explorer: both cores of a 2-core
    # machine have other work (where the suite runs beside hogs already, fewer are started)
    hogs, busy = cpu_hogs(2)

    slider = cell.locator(".widget-slider", has_text="batch b")
    slider.locator(".noUi-handle").focus()
    for _ in range(6):
        page.keyboard.press("ArrowRight")
    pressed = time.monotonic()
    wait_for_status(cell, DONE_AT_B.format(b=8))
    took = time.monotonic() - pressed
    after = chart_state(runtime)
    assert "(b, i, f, k, s) = (8, 32, 16, 5, 1)" in after["title"]
    check_times(after)
    drawn = {x for t in after["traces"] for x in t["x"]}
    ticked = [n for n, st in STRATEGIES.items() if "cpu" in st.devices]  # ticked on a CPU
    layer = config_for((8, 3, 32, 32), (16, 3, 5, 5))
    notes = cell.locator(".jp-Cell-outputArea").inner_text()
    assert "reference" in drawn, (drawn, notes)
    for name in ticked:
        reason = STRATEGIES[name].supports(layer, "cpu")
        if reason:  # winograd: 3 x 3 only
            assert name not in drawn and f"{name}: {reason}" in notes, (name, notes)
        else:
            assert name in drawn, (name, drawn, notes)
    assert not re.search(r"did not finish|refused|skipped|did not stop", notes), notes
    print(f"six presses -> final chart: {took:.1f} s after the last press ({len(hogs)} hogs "
          f"started, {busy} CPU-bound processes running before them)")
    if took > BURST_TARGET_S:   # a slower machine: one press under the same load is the yardstick
        one = one_press(page, cell, "ArrowRight", 9)
        one_press(page, cell, "ArrowLeft", 8)   # back to b = 8 for the pictures
        print(f"one press under the same load: {one:.1f} s")
        assert took <= BURST_RATIO * one + BURST_SLACK_S, (
            f"{took:.1f} s after the last of six presses, {one:.1f} s after one: {notes}")
    assert measuring_starts(page) <= starts + 1
    assert all(p.poll() is None for p in hogs)  # the cores were busy all along
    for hog in hogs:  # the rest (screenshots) needs no busy cores
        hog.kill()
    finish(page, cell, errors, "06_conv_explorer.png")
    readme_picture(page, cell, before, after, busy_processes=len(hogs) + busy)


def test_throughput_explorer_operation_redraws_runtime_chart(page, lab):
    """Notebook 01: choose GEMM instead of ReLU; the runtime chart is re-measured for GEMM."""
    errors, cell, runtime, before = explorer_runtime_chart(
        page, lab, "01_cpu_vs_gpu_throughput.ipynb", ".widget-text", "smallest size")
    assert before["title"].startswith("relu: median time per call")

    def finished(state: dict) -> bool:   # the explorer draws after each backend's sizes
        text = cell.inner_text()
        return "points measured in" in text and "measuring..." not in text

    before = wait_for_change(runtime, {}, until=finished, cell=cell)
    cell.locator(".widget-dropdown", has_text="operation").locator("select").select_option(
        label="GEMM (n x n)")
    after = wait_for_change(runtime, before, cell=cell,
                            until=lambda s: s["title"].startswith("gemm") and finished(s))
    assert after["title"].startswith("gemm: median time per call")
    check_times(after)
    # GEMM's own sizes (n = 64 .. 512) instead of ReLU's element counts.
    sizes = {x for t in after["traces"] for x in t["x"]}
    assert sizes and max(sizes) <= 512 < max(x for t in before["traces"] for x in t["x"])
    finish(page, cell, errors, "01_throughput_explorer.png")

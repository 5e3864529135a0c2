"""The book's pages (``make book``) in a real headless browser, opened from their files as a
reader would: their charts must be drawn by the book's own plotly.js, with JavaScript off their
static images must show instead, and their formulas must be laid out with nothing fetched.

Run alone with ``pytest -m browser``; see ``tests/browser.py`` for what they need.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from tools import book, book_outputs

from browser import ROOT, SCREENSHOTS, PageErrors, chart_state, chromium, require_browser

pytestmark = pytest.mark.browser

#: What a book page fetches from the internet: nothing (its formulas are MathML, its charts use
#: the book's plotly.js, and the Colab badge is a plain link).
BOOK_EXTERNAL_HOSTS: set[str] = set()


@pytest.fixture(scope="module")
def browser():
    with chromium(require_browser()) as b:
        yield b


@pytest.fixture(scope="module")
def book_06(tmp_path_factory):
    """The book's page of notebook 06 (and the index), with its static images."""
    out = tmp_path_factory.mktemp("book")
    pages = book.build_book(out, ROOT / "notebooks", ROOT / "labs", only=["06"])
    (page,) = pages
    assert page.charts >= 1
    return out, page


def test_book_page_draws_its_charts(browser, book_06):
    """With JavaScript: every chart of the page is drawn by plotly.js, with its data."""
    require_browser()
    out, info = book_06
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        errors = PageErrors(page)
        page.goto((out / info.href).as_uri())
        page.wait_for_function(
            "n => document.querySelectorAll('.js-plotly-plot .main-svg').length >= n",
            arg=info.charts, timeout=60_000)
        charts = page.locator(".js-plotly-plot")
        assert charts.count() == info.charts
        # Each chart draws the stored figure's traces, point for point.
        stored = book_outputs.chart_figures(nbformat.read(info.source, as_version=4))
        drawn = [chart_state(charts.nth(k)) for k in range(info.charts)]
        assert [[len(t.get("y", [])) for t in f["data"]] for f in stored] == \
               [[len(t["y"]) for t in d["traces"]] for d in drawn]
        assert sum(len(t["y"]) for d in drawn for t in d["traces"]) > 0
        first = charts.first
        first.scroll_into_view_if_needed()
        assert first.locator(".main-svg").first.bounding_box()["height"] > 100
        assert "needs" not in page.locator(".book-chart").first.inner_text()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        first.screenshot(path=str(SCREENSHOTS / "book_06_chart.png"))
        assert errors.lines == []
        assert errors.external_hosts <= BOOK_EXTERNAL_HOSTS
    finally:
        page.close()


def test_book_page_without_javascript_shows_static_images(browser, book_06):
    """With JavaScript off: each chart's static SVG image is shown and has loaded."""
    require_browser()
    out, info = book_06
    assert info.images == info.charts
    context = browser.new_context(java_script_enabled=False,
                                  viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto((out / info.href).as_uri())
        images = page.locator("img[alt='chart (static image)']")
        images.first.wait_for(timeout=30_000)
        assert images.count() == info.charts
        for k in range(info.charts):
            image = images.nth(k)
            image.scroll_into_view_if_needed()
            box = image.bounding_box()
            assert box and box["width"] > 200 and box["height"] > 100, box
        assert page.locator(".js-plotly-plot").count() == 0
        images.first.screenshot(path=str(SCREENSHOTS / "book_06_static.png"))
    finally:
        context.close()


def test_book_page_draws_its_formulas_offline(browser, tmp_path):
    """Notebook 05's page opened from its files with every web request refused: each formula is
    MathML that the browser lays out (math display, a real size), and no TeX source is shown."""
    require_browser()
    (info,) = book.build_book(tmp_path, ROOT / "notebooks", ROOT / "labs", only=["05"],
                              images=False)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        asked: list[str] = []
        page.route(re.compile(r"^https?://"), lambda route: (asked.append(route.request.url),
                                                             route.abort()))
        page.goto((tmp_path / info.href).as_uri())
        formulas = page.evaluate("""() => Array.from(document.querySelectorAll('math')).map(m => {
            const box = m.getBoundingClientRect();
            return {display: getComputedStyle(m).display, block: m.getAttribute('display'),
                    width: box.width, height: box.height}; })""")
        written = (tmp_path / info.href).read_text().count("<math ")
        assert len(formulas) == written > 50
        assert all(f["display"] == ("block math" if f["block"] == "block" else "math")
                   for f in formulas), {f["display"] for f in formulas}
        assert all(f["width"] > 0 and f["height"] > 0 for f in formulas)
        prose = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.jp-RenderedMarkdown')).map(el => { const c = el.cloneNode(true);
            c.querySelectorAll('code, pre, math').forEach(x => x.remove());
            return c.textContent; }).join(' ')""")
        assert "$" not in prose and "\\times" not in prose and "\\sum" not in prose
        assert asked == []
        block = page.locator("math[display='block']").first
        block.scroll_into_view_if_needed()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        block.screenshot(path=str(SCREENSHOTS / "book_05_formula.png"))
    finally:
        page.close()

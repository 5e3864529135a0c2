"""Charts in Colab draw however their output is inserted (colabtools#5889).

Colab shows a widget's output by setting its HTML into the output frame after the page has
loaded and re-creating its scripts, as every widget manager does: a re-created
``<script src>`` loads asynchronously, an inline script runs at once. These tests take the
outputs the workbook's Colab path produces (a figure stored in notebook 01, then notebook 07's
occupancy explorer's first draw and its redraw after a slider move), insert them that way into
a blank page in headless Chromium, offline except that the plotly.js address is served from
plotly's own copy, slowly, and check that each chart draws: an SVG holding its traces. A
control run inserts the same figures through plotly's stock ``colab`` renderer and shows what
the test catches there: no chart, and ``Plotly is not defined``.
"""

from __future__ import annotations

import json
import pathlib
import time

import nbformat
import plotly
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from helpers.device import backend
from helpers.figures import colab_renderer, style
from helpers.widgets import live
from helpers.widgets.occupancy_explorer import OccupancyExplorer

from browser import ROOT, chromium, require_browser

pytestmark = pytest.mark.browser

PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: How long the local "CDN" takes to answer: longer than any inline script takes to run.
CDN_DELAY_S = 1.5
FRAME = "https://frame.colab.test/output"

#: What a widget manager does with an output's HTML: set it into the output area after the
#: page has loaded, then replace each script by a fresh copy so that the browser runs it.
INSERT = """([id, html]) => {
  let host = document.getElementById(id);
  if (!host) { host = document.createElement('div'); host.id = id;
               document.body.appendChild(host); }
  host.innerHTML = html;
  for (const old of Array.from(host.querySelectorAll('script'))) {
    const s = document.createElement('script');
    for (const a of Array.from(old.attributes)) s.setAttribute(a.name, a.value);
    s.textContent = old.textContent;
    old.replaceWith(s);
  }
}"""

#: Per chart in ``#id``: traces in the figure, trace groups drawn in its SVG.
DRAWN = """id => Array.from(document.querySelectorAll('#' + id + ' .plotly-graph-div')).map(
  el => ({data: (el.data || []).length,
          svg: el.querySelectorAll('svg.main-svg').length,
          drawn: el.querySelectorAll('svg.main-svg g.trace').length}))"""


def drawn_traces(figure: go.Figure) -> int:
    """Trace groups plotly.js draws in the SVG for ``figure`` (scatter and bar traces shown)."""
    return sum(1 for t in figure.data if t.type in ("scatter", "bar")
               and t.visible not in (False, "legendonly"))


def stored_figure() -> go.Figure:
    """The first stored chart of notebook 01 with line traces, as the notebook shows it."""
    nb = nbformat.read(ROOT / "notebooks" / "01_cpu_vs_gpu_throughput.ipynb", as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            figure = (output.get("data") or {}).get(PLOTLY_MIME)
            if figure and any(t.get("type") == "scatter" for t in figure["data"]):
                return go.Figure(figure)
    raise AssertionError("notebook 01 stores no chart with line traces")


@pytest.fixture(scope="module")
def colab_outputs():
    """The HTML the Colab path displays: (static figure, explorer draw, explorer redraw), with
    the figures behind them; made with ``in_colab()`` true, as in Colab."""
    shown: list[tuple[go.Figure, str]] = []

    def record(obj, **_):
        if isinstance(obj, go.Figure):
            shown.append((go.Figure(obj), obj._repr_mimebundle_()["text/html"]))

    patch = pytest.MonkeyPatch()
    default = pio.renderers.default
    try:
        patch.setattr(backend, "in_colab", lambda: True)
        patch.setattr(live, "display", record)
        patch.setattr(live, "clear_output", lambda wait=False: None)
        assert style.setup_notebook() == colab_renderer.NAME
        static = stored_figure()
        record(static)
        explorer = OccupancyExplorer(gpu="K40c", threads_per_block=128, regs_per_thread=116)
        assert not explorer.chart.use_figurewidget        # Colab: the Output-widget path
        drawn = len(shown)
        explorer.regs.value = 64                          # a slider move redraws
    finally:
        pio.renderers.default = default
        patch.undo()
    # The chart's empty placeholder may come first; then the first draw, then the redraw.
    assert len(shown) == drawn + 1 and drawn >= 2, [f.layout.title.text for f, _ in shown]
    return [shown[0], shown[drawn - 1], shown[drawn]]


@pytest.fixture(scope="module")
def browser():
    path = require_browser()
    with chromium(path) as b:
        yield b


class Frame:
    """A blank page at a Colab-like address, offline but for plotly.js from its CDN address,
    served from plotly's package after :data:`CDN_DELAY_S`."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        self.errors: list[str] = []
        self.cdn_requests = 0
        self.other_requests: list[str] = []
        url, _ = colab_renderer.plotly_js_source()
        self.plotly_url = url
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.route("**/*", self._serve)
        self.page.goto(FRAME)

    def _serve(self, route) -> None:
        url = route.request.url
        if url == FRAME:
            route.fulfill(status=200, content_type="text/html",
                          body="<!DOCTYPE html><html><head></head><body></body></html>")
        elif url == self.plotly_url:
            self.cdn_requests += 1
            time.sleep(CDN_DELAY_S)
            js = pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
            route.fulfill(status=200, body=js.read_bytes(), content_type="text/javascript",
                          headers={"access-control-allow-origin": "*"})
        else:
            self.other_requests.append(url)
            route.abort()

    def insert(self, host: str, html: str) -> None:
        self.page.evaluate(INSERT, [host, html])

    def charts(self, host: str, wait_s: float = 20.0, expect_drawn: bool = True) -> list[dict]:
        """The charts in ``host`` once drawn (or after ``wait_s`` if ``expect_drawn`` is False)."""
        if expect_drawn:
            self.page.wait_for_function(
                "id => { const c = document.querySelectorAll('#' + id + ' .plotly-graph-div');"
                " return c.length > 0 && Array.from(c).every("
                "   el => el.querySelector('svg.main-svg g.trace')); }",
                arg=host, timeout=wait_s * 1000)
        else:
            self.page.wait_for_timeout(wait_s * 1000)
        return self.page.evaluate(DRAWN, host)

    def close(self) -> None:
        self.page.close()


@pytest.mark.slow
def test_every_colab_output_draws_when_inserted_after_load(browser, colab_outputs):
    (static, static_html), (first, first_html), (second, second_html) = colab_outputs

    frame = Frame(browser)          # one output frame: a static figure
    try:
        frame.insert("output", static_html)
        (chart,) = frame.charts("output")
        assert chart == {"data": len(static.data), "svg": chart["svg"],
                         "drawn": drawn_traces(static)} and chart["svg"] >= 1
        assert frame.cdn_requests == 1 and frame.errors == [] and frame.other_requests == []
    finally:
        frame.close()

    frame = Frame(browser)          # the explorer's frame: its first draw, then a redraw
    try:
        frame.insert("explorer", first_html)
        (chart,) = frame.charts("explorer")
        assert (chart["data"], chart["drawn"]) == (len(first.data), drawn_traces(first))
        frame.insert("explorer", second_html)           # clear_output(wait=True) + display
        (chart,) = frame.charts("explorer")
        assert (chart["data"], chart["drawn"]) == (len(second.data), drawn_traces(second))
        drawn_x = frame.page.evaluate(
            "() => document.querySelector('#explorer .js-plotly-plot').data[1].x")
        assert list(drawn_x) == list(second.data[1].x)    # the redraw's marker, not the first's
        assert frame.cdn_requests == 1, "the redraw loaded plotly.js again"
        assert frame.errors == [] and frame.other_requests == []
    finally:
        frame.close()


@pytest.mark.slow
def test_control_plotly_colab_renderer_draws_nothing_when_inserted_after_load(
        browser, colab_outputs):
    """The same figures through plotly's own ``colab`` renderer, each in a fresh frame (as a
    first draw is): the inline script runs before plotly.js has loaded, and nothing draws."""
    stock = pio.renderers["colab"]
    for figure, _ in colab_outputs[:2]:
        frame = Frame(browser)
        try:
            frame.insert("control", stock.to_mimebundle(json.loads(figure.to_json()))["text/html"])
            charts = frame.charts("control", wait_s=CDN_DELAY_S + 2, expect_drawn=False)
            assert charts and all(c["drawn"] == 0 for c in charts), charts
            assert frame.cdn_requests == 1          # plotly.js did arrive, too late
            assert any("Plotly is not defined" in e for e in frame.errors), frame.errors
        finally:
            frame.close()

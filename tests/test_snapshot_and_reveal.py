"""Explorers leave a static copy of their charts (for readers without a kernel), and
``helpers.notebook.reveal`` folds the answer to a prediction until the reader opens it."""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import json
import pathlib

import nbformat
import plotly.graph_objects as go
import pytest

from helpers import notebook, widgets
from helpers.device import timing
from tools import book, book_outputs

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Budgets far past what the layer needs: these tests judge the outputs of a measured explorer,
#: and the default 2 s per strategy left nothing measured once under two busy processes.
SMALL_CONV = dict(b=1, i=16, f=8, k=3, s=1, c=3, padding=0, device="cpu", min_run_time=0.005,
                  strategies=["im2col-gemm", "fft"], use_figurewidget=False, budget_s=60.0,
                  update_budget_s=120.0)


def _displayed(monkeypatch, module) -> list:
    """Replace ``display`` in ``module`` and return the list it appends to."""
    shown: list = []
    monkeypatch.setattr(module, "display", lambda obj, raw=False: shown.append(obj))
    return shown


@pytest.mark.parametrize("make", [
    lambda: widgets.ConvExplorer(**SMALL_CONV),
    lambda: widgets.OccupancyExplorer(use_figurewidget=False),
    lambda: widgets.ThroughputExplorer(size_range=(1_000, 10_000), min_run_time=0.005,
                                       use_figurewidget=False,
                                       reference_prefix="__no_reference_results__"),
], ids=["conv", "occupancy", "throughput"])
@pytest.mark.slow
def test_an_explorer_is_one_output_whose_fallback_is_a_static_copy(make):
    """Displayed, an explorer is one output: the widget, and for front ends without widgets
    (the book, notebook viewers) a static copy of each chart, as the widget's own fallback;
    never a second set of charts below the live ones."""
    explorer = make()
    bundle = explorer._repr_mimebundle_()
    mime = book_outputs.WIDGET_MIME
    assert bundle[mime] == explorer.widget._repr_mimebundle_()[mime]
    page = bundle["text/html"]
    assert explorer.made_on and explorer.made_on in page
    assert explorer.made_on in bundle["text/plain"]
    embedded = [json.loads(m.group(2)) for m in book_outputs._STATIC_CHART.finditer(page)]
    live = [chart.figure for chart in explorer.live_charts()]
    assert len(embedded) == len(live) >= 1
    for copy, chart in zip(embedded, live):
        assert copy["layout"]["title"]["text"] == chart.layout.title.text
        assert [t.get("name") for t in copy["data"]] == [t.name for t in chart.data]
        title = chart.layout.title.text.split("<br>")[0]
        assert f"[chart: {title}" in bundle["text/plain"]
        assert "<br>" not in bundle["text/plain"]
    # the copies are copies: changing one leaves the live chart alone
    figures = explorer.snapshot_figures()
    figures[0].update_layout(title_text="changed")
    assert live[0].layout.title.text != "changed"


def test_the_static_copy_cannot_close_its_script_early():
    explorer = widgets.OccupancyExplorer(use_figurewidget=False)
    explorer.chart.update(go.Figure(go.Bar(x=["</script><b>x</b>"], y=[1])))
    page = explorer._repr_mimebundle_()["text/html"]
    (match,) = book_outputs._STATIC_CHART.finditer(page)
    assert json.loads(match.group(2))["data"][0]["x"] == ["</script><b>x</b>"]


@pytest.mark.slow
def test_the_conv_explorer_says_which_device_measured():
    explorer = widgets.ConvExplorer(**SMALL_CONV)
    assert explorer.made_on == f"measured on {timing.device_label('cpu')}"


def test_the_occupancy_explorer_says_it_calculated():
    explorer = widgets.OccupancyExplorer(gpu="K40c", use_figurewidget=False)
    assert "K40c" in explorer.made_on and "not measured" in explorer.made_on


@pytest.mark.slow
def test_a_message_in_place_of_the_charts_is_what_the_copy_shows():
    explorer = widgets.ConvExplorer(**SMALL_CONV)
    explorer.set(i=8, k=15)  # a kernel larger than the input: an invalid layer
    assert explorer.body.children[0] is explorer.message
    figures = explorer.snapshot_figures()
    assert len(figures) == 1
    text = " ".join(a.text for a in figures[0].layout.annotations)
    assert "kernel" in text.lower()
    assert "kernel 15x15" in explorer._repr_mimebundle_()["text/plain"]


def test_every_explorer_in_the_notebooks_stores_a_static_chart():
    """The stored outputs (and so the book) show each explorer's starting charts, as the
    widget output's own fallback: one output, no second set of charts after it."""
    found = 0
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code" or "Explorer(" not in cell.source:
                continue
            widget = [o for o in cell.outputs if book_outputs.WIDGET_MIME in o.get("data", {})]
            if not widget:
                continue
            found += 1
            assert len(widget) == 1, path.name
            assert not [o for o in cell.outputs if book_outputs.PLOTLY_MIME in o.get("data", {})], \
                f"{path.name}: charts stored beside the explorer"
            charts = book_outputs._output_figures(widget[0])
            assert charts, f"{path.name}: the explorer cell stores no static chart"
            assert all(c["data"] for c in charts), path.name
            assert "measured on" in book_outputs._text(widget[0]["data"]["text/html"]) or \
                "calculated" in book_outputs._text(widget[0]["data"]["text/html"]), path.name
    assert found >= 3


@pytest.mark.slow
def test_the_book_draws_the_explorers_static_charts(tmp_path):
    pages = book.build_book(tmp_path / "book", ROOT / "notebooks", ROOT / "labs",
                            only=["01", "06", "07"], images=False)
    for page in pages:
        text = (tmp_path / "book" / page.href).read_text(encoding="utf-8")
        assert book_outputs.WIDGET_NOTE in text, page.href
        assert "A static copy of what the explorer showed" in text, page.href
        assert "workbook-static-chart" not in text, page.href  # re-drawn by the book
        assert text.count('class="plotly-graph-div"') >= page.charts, page.href


# ------------------------------------------------------------------------------ reveal


def _bundle(monkeypatch, **kwargs) -> dict:
    shown = _displayed(monkeypatch, notebook)
    notebook.reveal(**kwargs)
    assert len(shown) == 1
    return shown[0]


def test_reveal_folds_the_answer(monkeypatch):
    out = _bundle(monkeypatch, answer="**FFT** wins at k = 11.\n\nDirect wins at k = 3.",
                  why="FFT's cost does not grow with `k`.")
    page = out["text/html"]
    assert page.startswith("<details") and "<details open" not in page
    assert page.index("<summary") < page.index("<b>FFT</b>")
    assert "<code>k</code>" in page and page.count("<p>") == 3
    assert out["text/plain"].splitlines()[1:] == [
        "FFT wins at k = 11.", "Direct wins at k = 3.", "FFT's cost does not grow with k."]


def test_reveal_escapes_and_echoes_the_guess(monkeypatch):
    out = _bundle(monkeypatch, answer="a < b & c", guess="<script>")
    assert "<script>" not in out["text/html"] and "&lt;script&gt;" in out["text/html"]
    assert "a &lt; b &amp; c" in out["text/html"]
    assert "Your prediction: <script>." in out["text/plain"]


def test_reveal_without_a_guess_says_nothing_of_one(monkeypatch):
    out = _bundle(monkeypatch, answer="42")
    assert "prediction:" not in out["text/html"].split("</summary>")[1]
    assert "Your prediction" not in out["text/plain"]

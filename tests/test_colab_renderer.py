"""helpers.figures.colab_renderer: what Colab is sent for each figure (the browser test,
tests/test_colab_charts.py, shows that it draws)."""

from __future__ import annotations

import json
import re

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from helpers.device import backend
from helpers.figures import colab_renderer, style


@pytest.fixture
def restore_renderer():
    default = pio.renderers.default
    yield
    pio.renderers.default = default


def test_colab_gets_the_waiting_renderer_and_jupyterlab_keeps_its_own(monkeypatch,
                                                                     restore_renderer):
    monkeypatch.setattr(backend, "in_colab", lambda: True)
    assert style.setup_notebook() == colab_renderer.NAME == pio.renderers.default
    monkeypatch.setattr(backend, "in_colab", lambda: False)
    assert style.setup_notebook() == "plotly_mimetype+notebook_connected"


def test_the_figure_script_waits_for_plotly_js_and_nothing_loads_before_it():
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[4.5, 5.5, 6.5], name="planted"))
    html = colab_renderer.WaitingColabRenderer().to_mimebundle(fig.to_plotly_json())["text/html"]
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.S)
    assert len(scripts) == 1 and "<script src" not in html and "mathjax" not in html.lower()
    script = scripts[0]
    # The draw is a function, called at once only when plotly.js is there, else after it loads.
    draw = script.index("function draw()")
    assert script.index("Plotly.newPlot") > draw
    assert "if (window.Plotly) { draw(); return; }" in script
    url, integrity = colab_renderer.plotly_js_source()
    assert re.fullmatch(r"https://cdn\.plot\.ly/plotly-[0-9.]+\.min\.js", url)
    assert f's.src = "{url}"' in script and (integrity is None or integrity in script)
    assert ".then(draw," in script
    # The figure itself is plotly's own JSON, in the div the script draws into.
    div = re.search(r'<div id="(workbook-[0-9a-f-]+)" class="plotly-graph-div"', html).group(1)
    assert f'document.getElementById("{div}")' in script and f'"{div}",' in script
    assert json.dumps([4.5, 5.5, 6.5]).replace(" ", "") in script.replace(" ", "")


def test_each_figure_gets_its_own_div():
    renderer = colab_renderer.WaitingColabRenderer()
    ids = {re.search(r'id="(workbook-[^"]+)"', renderer.to_mimebundle({"data": []})["text/html"])
           .group(1) for _ in range(3)}
    assert len(ids) == 3

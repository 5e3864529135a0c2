"""The book's stored outputs made static: plotly charts re-drawn from their JSON, widgets noted.

:func:`chart_figures` lists the plotly figures a notebook shows (its own charts and the static
copies inside explorers' widget outputs); :func:`adapt_outputs` replaces each chart by a div
that a local plotly.js draws, with a ``<noscript>`` image (the output's PNG, else a static SVG,
else a note), and each widget by a note; :func:`write_static_images` draws those SVGs with
kaleido. Used by :mod:`tools.book`.
"""

from __future__ import annotations

import copy
import html
import json
import pathlib
import re

__all__ = ["chart_figures", "adapt_outputs", "write_static_images", "PLOTLY_MIME", "WIDGET_MIME",
           "WIDGET_NOTE", "PLOTLY_JS", "STATIC_WIDTH", "STATIC_HEIGHT"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: Size in pixels of the static chart images where a figure does not set its own.
STATIC_WIDTH, STATIC_HEIGHT = 1100, 450
#: File name of the local plotly.js copy, at the top of the book's folder.
PLOTLY_JS = "plotly.min.js"
WIDGET_NOTE = ("Interactive widget: it needs a running Python kernel, so the book cannot show it "
               "live. Open this notebook in JupyterLab or Colab to use it.")
_CHART_NOTE = "This interactive chart needs JavaScript; open the page in a browser with it enabled."
_NO_PLOTLY_NOTE = f"This chart needs {PLOTLY_JS}, which was not found beside the book's index."


def _chart_html(figure: dict, div_id: str, png: str | None, image: str | None = None) -> str:
    """A plotly figure (its stored JSON) as a div, a ``Plotly.newPlot`` call and a fallback:
    ``png`` (base64) inline, else the image file at relative URL ``image``, else a note."""
    data = figure.get("data", [])
    layout = figure.get("layout", {})
    config = {"responsive": True, **figure.get("config", {})}
    height = layout.get("height") or 450
    args = ", ".join(json.dumps(part, separators=(",", ":")).replace("</", "<\\/")
                     for part in (data, layout, config))
    no_plotly = json.dumps(f'<p class="book-note">{_NO_PLOTLY_NOTE}</p>')
    if png:
        fallback = f'<img alt="chart (static image)" src="data:image/png;base64,{png.strip()}">'
    elif image:
        fallback = (f'<img alt="chart (static image)" src="{html.escape(image)}" '
                    f'style="max-width:100%">')
    else:
        fallback = f'<p class="book-note">{_CHART_NOTE}</p>'
    return (f'<div class="book-chart">\n'
            f'<div id="{div_id}" class="plotly-graph-div" style="height:{int(height)}px; '
            f'width:100%;"></div>\n'
            f'<script>(function () {{\n'
            f'  var el = document.getElementById("{div_id}");\n'
            f'  if (window.Plotly) {{ Plotly.newPlot(el, {args}); }}\n'
            f'  else {{ el.outerHTML = {no_plotly}; }}\n'
            f'}})();</script>\n'
            f'<noscript>{fallback}</noscript>\n'
            f'</div>')


def _is_plotly_loader(output) -> bool:
    """Whether an output is plotly's set-up script (loads plotly.js from a CDN, shows nothing)."""
    data = output.get("data") or {}
    page = data.get("text/html", "")
    if isinstance(page, list):
        page = "".join(page)
    return (set(data) <= {"text/html", "text/plain"} and "cdn.plot.ly" in page
            and "<div" not in page and "plotly-graph-div" not in page)


def _figure(data: dict) -> dict:
    figure = data[PLOTLY_MIME]
    return json.loads(figure) if isinstance(figure, str) else figure


#: An explorer's static copy inside its widget output (helpers.widgets.live.static_html): an
#: empty div, the figure's JSON, and the script that draws it.
_STATIC_CHART = re.compile(
    r'<div id="(workbook-static-[0-9a-f]+)" class="workbook-static-chart"></div>'
    r'<script type="application/vnd\.plotly\.v1\+json" data-for="\1">(.*?)</script>'
    r'<script>.*?</script>', flags=re.S)


def _output_figures(output) -> list[dict]:
    """The plotly figures an output shows: its own chart, or an explorer's static copies."""
    data = output.get("data") or {}
    if PLOTLY_MIME in data:
        return [_figure(data)]
    if WIDGET_MIME in data and "text/html" in data:
        return [json.loads(m.group(2)) for m in _STATIC_CHART.finditer(_text(data["text/html"]))]
    return []


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def chart_figures(nb) -> list[dict]:
    """The plotly figures (stored JSON) among ``nb``'s outputs, in the order
    :func:`adapt_outputs` numbers them (chart 1 first)."""
    return [fig for cell in nb.cells for o in cell.get("outputs", [])
            for fig in _output_figures(o)]


def adapt_outputs(nb, prefix: str = "chart",
                  images: dict[int, str] | None = None) -> tuple[object, int, int]:
    """A copy of ``nb`` whose outputs render statically: plotly charts and widgets replaced.

    Args:
        nb: the notebook (not modified).
        prefix: the charts' ``div`` ids are ``PREFIX-N``, N counting from 1.
        images: static image URL (relative to the page) by chart number N, for the fallback
            shown without JavaScript; charts without one fall back to their stored PNG or a note.

    Returns:
        (new notebook, number of plotly charts, number of widget outputs replaced).
    """
    nb = copy.deepcopy(nb)
    images = images or {}
    charts = widgets = 0
    for cell in nb.cells:
        if "outputs" not in cell:
            continue
        # plotly's "notebook_connected" set-up output only imports plotly.js from its CDN
        cell.outputs = [o for o in cell.outputs if not _is_plotly_loader(o)]
        for output in cell.outputs:
            data = output.get("data")
            if not data:
                continue
            if PLOTLY_MIME in data:
                charts += 1
                output["data"] = {
                    "text/html": _chart_html(_figure(data), f"{prefix}-{charts}",
                                             data.get("image/png"), images.get(charts)),
                    "text/plain": "<plotly chart>"}
                output["metadata"] = {}
            elif WIDGET_MIME in data:
                widgets += 1
                note = f'<p class="book-note book-widget">{WIDGET_NOTE}</p>'
                page = note
                if _output_figures(output):  # an explorer: its static copy, charts re-drawn
                    def chart(match) -> str:
                        nonlocal charts
                        charts += 1
                        return _chart_html(json.loads(match.group(2)), f"{prefix}-{charts}",
                                           None, images.get(charts))

                    page = note + _STATIC_CHART.sub(chart, _text(data["text/html"]))
                output["data"] = {"text/html": page, "text/plain": WIDGET_NOTE}
                output["metadata"] = {}
    nb.metadata.pop("widgets", None)        # no stored widget state: no widget manager script
    return nb, charts, widgets



def write_static_images(figures: list[dict], paths: list[pathlib.Path]) -> str | None:
    """Draw each figure as an SVG file with plotly's static export (kaleido).

    kaleido drives a Chrome or Chromium that is already installed (it downloads nothing here).

    Returns:
        None when every image was written, else why none were (no kaleido, no browser found):
        the caller falls back to a note.
    """
    if not figures:
        return None
    try:
        import plotly.io as pio

        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
        # The figure's own size where it sets one, else a page's width: plotly's default for a
        # static image (700 x 500 px) crowds the subplots.
        layouts = [f.get("layout", {}) for f in figures]
        pio.write_images([dict(f) for f in figures], paths, format="svg",
                         width=[lay.get("width") or STATIC_WIDTH for lay in layouts],
                         height=[lay.get("height") or STATIC_HEIGHT for lay in layouts])
    except Exception as exc:  # noqa: BLE001 - no browser or no kaleido: the book still builds
        for path in paths:
            path.unlink(missing_ok=True)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}"[:300]
    return None

"""The plotly renderer for Google Colab: every figure waits for plotly.js before it draws.

plotly's own ``colab`` renderer puts ``<script src=".../plotly.min.js">`` before the figure's
inline script. That holds when the HTML is the page being loaded, but an ``Output`` widget's
content is set after the page has loaded, and a script element created then loads
asynchronously while the inline one runs at once: ``Plotly is not defined`` and an empty box
(colabtools#5889). Here each figure's script draws at once when ``window.Plotly`` exists and
otherwise loads plotly.js (once per output frame, shared by the figures of that frame) and
draws when it has loaded. The figure's JSON and config are plotly's own (``plotly.io.to_html``).
"""

from __future__ import annotations

import functools
import re

import plotly.io as pio
from plotly.io.base_renderers import MimetypeRenderer

__all__ = ["NAME", "WaitingColabRenderer", "plotly_js_source", "register"]

#: The renderer's name in ``plotly.io.renderers``.
NAME = "workbook_colab"

#: Where the frame keeps the promise of plotly.js having loaded (one load per frame).
_PROMISE = "__workbookPlotlyLoaded"


@functools.lru_cache(maxsize=1)
def plotly_js_source() -> tuple[str, str | None]:
    """(URL, integrity hash or None) of the plotly.js that this plotly version loads from its
    CDN, read from plotly's own ``include_plotlyjs="cdn"`` output."""
    page = pio.to_html({"data": [], "layout": {}}, include_plotlyjs="cdn", full_html=False)
    tag = re.search(r"<script[^>]*\bsrc=\"(https://cdn\.plot\.ly/[^\"]+)\"[^>]*>", page)
    if tag is None:  # pragma: no cover - plotly's output changed
        raise RuntimeError("plotly's CDN script tag was not found in its own HTML output")
    integrity = re.search(r"\bintegrity=\"([^\"]+)\"", tag.group(0))
    return tag.group(1), integrity.group(1) if integrity else None


def _wrap(script: str, div_id: str) -> str:
    """``script`` (plotly's figure script) run now if plotly.js is there, else after it loads."""
    url, integrity = plotly_js_source()
    set_integrity = (f's.integrity = "{integrity}"; s.crossOrigin = "anonymous"; '
                     if integrity else "")
    return (
        "(function () {\n"
        f"  function draw() {{\n{script}\n  }}\n"
        "  if (window.Plotly) { draw(); return; }\n"
        f"  if (!window.{_PROMISE}) {{\n"
        f"    window.{_PROMISE} = new Promise(function (resolve, reject) {{\n"
        "      var s = document.createElement('script');\n"
        f'      s.src = "{url}"; s.charset = "utf-8"; {set_integrity}\n'
        "      s.onload = resolve;\n"
        f"      s.onerror = function () {{ window.{_PROMISE} = null; reject(s.src); }};\n"
        "      document.head.appendChild(s);\n"
        "    });\n"
        "  }\n"
        f"  window.{_PROMISE}.then(draw, function (src) {{\n"
        f'    var el = document.getElementById("{div_id}");\n'
        "    if (el) { el.textContent = 'This chart needs plotly.js, which could not be "
        "loaded from ' + src + '.'; }\n"
        "  });\n"
        "})();")


class WaitingColabRenderer(MimetypeRenderer):
    """A ``text/html`` renderer whose figures draw however their output is inserted (see the
    module docstring). Registered as :data:`NAME` by :func:`register`."""

    def __init__(self, config: dict | None = None):
        self.config = dict(config or {})

    def to_mimebundle(self, fig_dict: dict) -> dict:
        import uuid

        div_id = f"workbook-{uuid.uuid4()}"
        page = pio.to_html(fig_dict, config=self.config, include_plotlyjs=False,
                           include_mathjax=False, full_html=False, div_id=div_id,
                           default_width="100%", default_height=525, validate=False)
        scripts = list(re.finditer(r"<script([^>]*)>(.*?)</script>", page, flags=re.S))
        if len(scripts) != 1:  # pragma: no cover - plotly's output changed
            raise RuntimeError(f"expected one figure script in plotly's HTML, got {len(scripts)}")
        match = scripts[0]
        wrapped = f"<script{match.group(1)}>{_wrap(match.group(2), div_id)}</script>"
        return {"text/html": page[:match.start()] + wrapped + page[match.end():]}


def register() -> str:
    """Add :class:`WaitingColabRenderer` to ``plotly.io.renderers`` as :data:`NAME`; returns
    the name."""
    if NAME not in pio.renderers:
        pio.renderers[NAME] = WaitingColabRenderer()
    return NAME

"""Render the workbook as a static HTML book from the notebooks' stored outputs: ``make book``.

Nothing is executed: each notebook in ``notebooks/`` and each lab in ``labs/`` (not the
solutions) becomes one page through nbconvert's HTMLExporter; ``index.html`` lists them with the
first sentence of each. The pages need no network: formulas are turned from TeX into MathML when
the book is built (browsers draw MathML themselves), plotly charts are re-drawn from their JSON
with a local plotly.js and a ``<noscript>`` static image (the output's PNG, else an SVG from
kaleido, else a note); widget outputs, which need a kernel, get a short note; links between
notebooks point to the pages. What only a running notebook needs is folded away: the setup
cell, the nbval markers, the Colab badge's image.

Output: ``index.html``, ``plotly.min.js``, ``notebooks/NAME.html``, ``labs/NAME.html`` and the
images ``notebooks/NAME/chart-N.svg``.

Usage: ``python -m tools.book [--out build/book] [--only 00 06 ...] [--no-images]``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import html
import json
import pathlib
import re
import shutil
import sys
import time

__all__ = ["Page", "collect", "describe", "chart_figures", "adapt_outputs", "fold_for_reading",
           "tex_to_mathml", "write_static_images", "build_book", "main",
           "PLOTLY_MIME", "WIDGET_MIME", "WIDGET_NOTE", "PLOTLY_JS"]

ROOT = pathlib.Path(__file__).resolve().parent.parent

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

#: Sections of the book, in order: (folder name, heading, file pattern).
SECTIONS = (("notebooks", "Notebooks", "[0-9]*.ipynb"), ("labs", "Labs", "*.ipynb"))


@dataclasses.dataclass
class Page:
    """One page of the book.

    Attributes:
        section: ``"notebooks"`` or ``"labs"``.
        source: the notebook it was rendered from.
        href: the page's path relative to the book's folder (``notebooks/00_start_here.html``).
        title: the first markdown cell's first heading (or the file name).
        summary: the first sentence after that heading (plain text, may be empty).
        charts: plotly charts on the page.
        widgets: widget outputs replaced by a note.
        images: static images of its charts written for readers without JavaScript.
    """

    section: str
    source: pathlib.Path
    href: str
    title: str
    summary: str
    charts: int = 0
    widgets: int = 0
    images: int = 0


def collect(notebooks_dir: pathlib.Path = ROOT / "notebooks",
            labs_dir: pathlib.Path = ROOT / "labs",
            only: list[str] | None = None) -> list[tuple[str, pathlib.Path]]:
    """The notebooks of the book, in reading order: ``(section, path)`` pairs.

    ``notebooks_dir/[0-9]*.ipynb`` in name order, then ``labs_dir/*.ipynb`` in name order. Only
    the folders' own files are taken, so ``labs/solutions/`` is never part of the book. A folder
    that does not exist contributes nothing. ``only`` keeps the notebooks whose file name starts
    with one of the given prefixes (``["00", "06", "lab1"]``).
    """
    found = []
    for (section, _, pattern), folder in zip(SECTIONS, (notebooks_dir, labs_dir)):
        folder = pathlib.Path(folder)
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(pattern)):
            if not path.is_file() or ".ipynb_checkpoints" in path.parts:
                continue
            if only and not any(path.name.startswith(prefix) for prefix in only):
                continue
            found.append((section, path))
    return found


def _plain(markdown: str) -> str:
    """Markdown to plain text, enough for a title or a sentence: links, emphasis, code marks."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", markdown)          # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)           # links keep their text
    text = re.sub(r"<[^>]+>", "", text)                            # inline HTML tags
    text = re.sub(r"(\*\*|__|\*|`)", "", text)
    text = re.sub(r"\$([^$]*)\$", r"\1", text)
    return " ".join(text.split())


def describe(nb, fallback: str) -> tuple[str, str]:
    """``(title, first sentence)`` of a notebook, from its first markdown cell.

    The title is the cell's first heading line (without the ``#`` marks); the sentence is the
    first sentence of the first paragraph after it. Falls back to ``fallback`` and ``""``.
    """
    cell = next((c for c in nb.cells if c.cell_type == "markdown" and c.source.strip()), None)
    if cell is None:
        return fallback, ""
    title, paragraph, in_paragraph = None, [], False
    for line in cell.source.splitlines():
        stripped = line.strip()
        if title is None and stripped.startswith("#"):
            title = _plain(stripped.lstrip("#"))
            continue
        if not stripped:
            if in_paragraph:
                break
            continue
        if not in_paragraph and (stripped.startswith(("#", "|", "```", ">", "<", "- ", "* ", "1. "))
                                 or not _plain(stripped)):     # a badge line, a table, a list
            continue
        paragraph.append(stripped)
        in_paragraph = True
    text = _plain(" ".join(paragraph))
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    sentence = match.group(1) if match else text
    return title or fallback, sentence


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


#: The first line of the setup cell every notebook starts with (helpers.notebook.SETUP_CELL).
SETUP_FIRST_LINE = "# Setup: run this cell first"
_SETUP_SUMMARY = ("Setup cell: run it first in JupyterLab or Colab (it finds, or in Colab fetches "
                  "and installs, the workbook); nothing to read here")
_NBVAL_LINE = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+\b.*(\n|$)", flags=re.M)
_COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]+)\)")


def fold_for_reading(nb):
    """A copy of ``nb`` without what only a running notebook needs: the setup cell folded into
    a closed ``<details>`` (its stored outputs, none from a local run, are dropped), nbval
    marker lines (``# NBVAL_...``) removed from code, and the "Open in Colab" badge's image (fetched
    from the web) turned into a plain link."""
    nb = copy.deepcopy(nb)
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cell.source = _COLAB_BADGE.sub(r"[Open in Colab](\1)", cell.source)
        elif cell.cell_type == "code" and cell.source.startswith(SETUP_FIRST_LINE):
            import nbformat

            nb.cells[k] = nbformat.v4.new_markdown_cell(
                f'<details class="book-setup"><summary>{html.escape(_SETUP_SUMMARY)}</summary>'
                f"\n\n```python\n{cell.source}\n```\n\n</details>")
        elif cell.cell_type == "code":
            cell.source = _NBVAL_LINE.sub("", cell.source)
    return nb


def tex_to_mathml(tex: str, display: str = "inline") -> str:
    """``tex`` (the body of a ``$...$`` or ``$$...$$``) as a MathML ``<math>`` element, with
    the TeX kept in its ``alttext``; ``display`` is ``"inline"`` or ``"block"``.

    Raises:
        ValueError: the converter (latex2mathml) cannot read ``tex``.
    """
    from latex2mathml.converter import convert

    try:
        mathml = convert(tex, display=display)
    except Exception as exc:  # noqa: BLE001 - the converter raises many kinds
        raise ValueError(f"cannot convert the formula {tex!r}: {exc}") from exc
    alt = html.escape(" ".join(tex.split()), quote=True)
    return mathml.replace("<math ", f'<math alttext="{alt}" ', 1)


def _exporter(failures: list[str]):
    """nbconvert's HTMLExporter, with markdown math rendered as MathML by :func:`tex_to_mathml`;
    a formula it cannot convert is shown as its TeX in ``<code>`` and added to ``failures``."""
    from jinja2 import pass_context
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    def math(tex: str, display: str) -> str:
        try:
            return tex_to_mathml(tex, display)
        except ValueError as exc:
            failures.append(str(exc))
            return f'<code class="book-tex">{html.escape(tex)}</code>'

    class MathMLRenderer(IPythonRenderer):
        def block_math(self, body: str) -> str:
            return math(body, "block")

        def inline_math(self, body: str) -> str:
            return math(body, "inline")

        def latex_environment(self, name: str, body: str) -> str:
            return math(f"\\begin{{{name}}}{body}\\end{{{name}}}", "block")

    class BookExporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            path = context.get("resources", {}).get("metadata", {}).get("path", "")
            renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}),
                                      embed_images=self.embed_images, path=path,
                                      anchor_link_text=self.anchor_link_text,
                                      exclude_anchor_links=self.exclude_anchor_links,
                                      **self.lexer_options)
            return MarkdownWithMath(renderer=renderer).render(source)

    return BookExporter()


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


_STYLE = """<style>
.book-note { border-left: 4px solid #999; background: #f5f5f5; padding: 0.5em 0.8em; color: #333;
             font-style: italic; }
.book-nav { font-family: sans-serif; padding: 0.6em 1em; border-bottom: 1px solid #ddd; }
.book-setup { margin: 0.5em 0; color: #555; } .book-setup summary { cursor: pointer; }
math[display="block"] { margin: 0.6em 0; }
</style>"""
#: What nbconvert's page template loads from the web and the book does without: MathJax (the
#: formulas are MathML) and require.js (no output of the book needs it).
_WEB_SCRIPTS = (re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->",
                           flags=re.S),
                re.compile(r'<script src="https://[^"]*/require(\.min)?\.js"></script>'))


def _fix_links(body: str, targets: dict[str, str], depth_prefix: str) -> str:
    """Point relative ``.ipynb`` links at the book's pages where the book has that notebook."""
    def repl(match: re.Match) -> str:
        href, anchor = match.group(1), match.group(2) or ""
        if "://" in href:
            return match.group(0)
        name = pathlib.PurePosixPath(href).name
        if name not in targets:
            return match.group(0)
        return f'href="{depth_prefix}{targets[name]}{anchor}"'
    return re.sub(r'href="([^"#]+\.ipynb)(#[^"]*)?"', repl, body)


def _render(nb, title: str, plotly: bool, nav: str, failures: list[str] | None = None) -> str:
    """The page of ``nb`` (already adapted): nbconvert's, with math as MathML, no MathJax or
    require.js, plotly.js from the book's folder when ``plotly``, and ``nav`` on top. Formulas
    that could not be converted are added to ``failures``."""
    body, _ = _exporter(failures if failures is not None else []).from_notebook_node(
        nb, resources={"metadata": {"name": title}})
    for pattern in _WEB_SCRIPTS:
        body = pattern.sub("", body, count=1)
    head = _STYLE
    if plotly:
        head = f'<script charset="utf-8" src="../{PLOTLY_JS}"></script>\n' + head
    body = re.sub(r"(<head[^>]*>)", lambda m: m.group(1) + "\n" + head, body, count=1)
    body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + "\n" + nav, body, count=1)
    return body


def _index_html(pages: list[Page]) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>GPU CNN workbook</title>",
             "<style>body{font-family:sans-serif;max-width:52em;margin:2em auto;line-height:1.45;"
             "padding:0 1em} li{margin:0.5em 0} .summary{color:#444}</style></head><body>",
             "<h1>GPU CNN workbook</h1>",
             "<p>Why and how GPUs make convolutional networks fast, after the ICPP 2016 study "
             "<em>Performance Analysis of GPU-based Convolutional Neural Networks</em>. "
             "These pages "
             "show the notebooks with their stored outputs; charts are interactive, widgets need "
             "a running notebook (JupyterLab or Colab).</p>"]
    for section, heading, _ in SECTIONS:
        members = [p for p in pages if p.section == section]
        if not members:
            continue
        parts.append(f"<h2>{heading}</h2>\n<ol>")
        for page in members:
            summary = (f' <span class="summary">{html.escape(page.summary)}</span>'
                       if page.summary else "")
            parts.append(f'<li><a href="{page.href}">{html.escape(page.title)}</a>{summary}</li>')
        parts.append("</ol>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def build_book(out: pathlib.Path, notebooks_dir: pathlib.Path = ROOT / "notebooks",
               labs_dir: pathlib.Path = ROOT / "labs", only: list[str] | None = None,
               log=None, images: bool = True) -> list[Page]:
    """Write the book into ``out``: one page per notebook, ``index.html`` and ``plotly.min.js``.

    Args:
        out: output folder (created; existing pages are overwritten).
        notebooks_dir, labs_dir: where the notebooks and labs are (see :func:`collect`).
        only: file-name prefixes to keep (all when ``None``).
        log: called with one line per page (e.g. ``print``), or ``None``.
        images: draw every chart as a static SVG for readers without JavaScript (about half a
            second a chart; skipped with a logged reason where no Chrome or Chromium is found).

    Returns:
        The pages written, in order (``Page.images``: static images written for the page).

    Raises:
        ValueError: if no notebook was found.
    """
    import nbformat

    sources = collect(notebooks_dir, labs_dir, only)
    if not sources:
        raise ValueError(f"no notebooks found in {notebooks_dir} or {labs_dir}")
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    targets = {path.name: f"{section}/{path.with_suffix('.html').name}"
               for section, path in sources}
    notebooks = [nbformat.read(path, as_version=4) for _, path in sources]

    # Static images first, all in one batch (one browser start), so each page knows its own.
    image_urls: list[dict[int, str]] = [{} for _ in sources]
    if images:
        figures, paths, where = [], [], []
        for k, ((section, path), nb) in enumerate(zip(sources, notebooks)):
            for n, figure in enumerate(chart_figures(nb), start=1):
                figures.append(figure)
                paths.append(out / section / path.stem / f"chart-{n}.svg")
                where.append((k, n, f"{path.stem}/chart-{n}.svg"))
        problem = write_static_images(figures, paths)
        if problem is None:
            for k, n, url in where:
                image_urls[k][n] = url
        elif log:
            log(f"static images skipped ({problem}); pages without JavaScript show a note")

    pages = []
    for (section, path), nb, urls in zip(sources, notebooks, image_urls):
        title, summary = describe(nb, path.stem)
        adapted, charts, widgets = adapt_outputs(fold_for_reading(nb), images=urls)
        page = Page(section, path, targets[path.name], title, summary, charts, widgets,
                    len(urls))
        nav = (f'<nav class="book-nav"><a href="../index.html">&larr; contents</a> &middot; '
               f'{html.escape(title)}</nav>')
        failures: list[str] = []
        body = _fix_links(_render(adapted, title, charts > 0, nav, failures), targets, "../")
        if failures and log:
            log(f"{page.href}: {len(failures)} formulas shown as TeX: {failures[0]}")
        target = out / page.href
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
        pages.append(page)
        if log:
            log(f"{page.href:<45} {charts:3d} charts {widgets:2d} widgets {len(urls):3d} images")
    if any(p.charts for p in pages):
        import plotly

        shutil.copyfile(pathlib.Path(plotly.__file__).parent / "package_data" / PLOTLY_JS,
                        out / PLOTLY_JS)
    (out / "index.html").write_text(_index_html(pages), encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.book",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "build" / "book")
    parser.add_argument("--notebooks", type=pathlib.Path, default=ROOT / "notebooks")
    parser.add_argument("--labs", type=pathlib.Path, default=ROOT / "labs")
    parser.add_argument("--only", nargs="*", help="file-name prefixes to include (e.g. 00 06 lab1)")
    parser.add_argument("--no-images", action="store_true",
                        help="skip the static SVG images of the charts (faster; pages without "
                             "JavaScript then show a note instead)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        pages = build_book(args.out, args.notebooks, args.labs, args.only, log=print,
                           images=not args.no_images)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{len(pages)} pages in {args.out}/ ({size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - start:.1f} s; open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

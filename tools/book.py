"""Render the workbook as a static HTML book from the notebooks' stored outputs: ``make book``.

Nothing is executed: each notebook in ``notebooks/`` and each lab in ``labs/`` (not the
solutions) becomes one page through nbconvert's HTMLExporter; ``index.html`` lists them with the
first sentence of each. The pages need no network: formulas are turned from TeX into MathML when
the book is built (browsers draw MathML themselves), plotly charts are re-drawn from their JSON
with a local plotly.js and a ``<noscript>`` static image (the output's PNG, else an SVG from
kaleido, else a note); widget outputs, which need a kernel, get a short note (both in
:mod:`tools.book_outputs`); links between notebooks point to the pages. What only a running notebook needs is folded away: the setup
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
import pathlib
import re
import shutil
import sys
import time

from tools.book_outputs import PLOTLY_JS, adapt_outputs, chart_figures, write_static_images

__all__ = ["Page", "collect", "describe", "fold_for_reading", "tex_to_mathml", "build_book",
           "main"]

ROOT = pathlib.Path(__file__).resolve().parent.parent

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

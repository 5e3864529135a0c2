import helpers  # noqa: F401

# Tests of tools.book: the static HTML book built from stored outputs (`make book`).

import pathlib

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import book, book_outputs

ROOT = pathlib.Path(__file__).resolve().parent.parent

FIGURE = {"data": [{"type": "scatter", "x": [1, 2, 3], "y": [4, 1, 9], "name": "direct"}],
          "layout": {"title": {"text": "runtime"}, "height": 300}}
WIDGET = {"model_id": "0123456789abcdef", "version_major": 2, "version_minor": 0}
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
       "rkJggg==")


def _notebook(title: str, sentence: str, outputs: list) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(f"# {title}\n\n{sentence} More text follows here.\n\n"
                                  "See [the other one](01_widget.ipynb)."),
                new_code_cell("show()", outputs=outputs, execution_count=1)]
    return nb


def _write(folder: pathlib.Path, name: str, nb) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)


@pytest.fixture
def sources(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    notebooks, labs = tmp_path / "notebooks", tmp_path / "labs"
    stored = '<script src="https://cdn.plot.ly/x.js"></script><div>stored</div>'
    plotly_out = new_output("display_data",
                            data={book_outputs.PLOTLY_MIME: FIGURE, "text/html": stored})
    loader = new_output("display_data", data={
        "text/html": '<script type="module">import "https://cdn.plot.ly/p.min"</script>'})
    _write(notebooks, "00_chart.ipynb",
           _notebook("00 · A chart", "Charts teach runtime.", [loader, plotly_out]))
    widget_out = new_output("display_data", data={book_outputs.WIDGET_MIME: WIDGET,
                                                  "text/plain": "VBox(children=(IntSlider()))"})
    png_chart = new_output("display_data",
                           data={book_outputs.PLOTLY_MIME: FIGURE, "image/png": PNG})
    _write(notebooks, "01_widget.ipynb",
           _notebook("01 · A widget", "Widgets teach sweeps.", [widget_out, png_chart]))
    _write(labs, "lab1_kernels.ipynb", _notebook("Lab 1 · Kernels", "Write a kernel.", []))
    _write(labs / "solutions", "lab1_kernels.ipynb",
           _notebook("Lab 1 · SOLUTION", "The answer.", []))
    return notebooks, labs


def test_book_pages_index_and_plotly(sources, tmp_path):
    notebooks, labs = sources
    out = tmp_path / "book"
    pages = book.build_book(out, notebooks, labs, images=False)
    assert [p.href for p in pages] == ["notebooks/00_chart.html", "notebooks/01_widget.html",
                                       "labs/lab1_kernels.html"]
    for page in pages:
        assert (out / page.href).is_file()
    assert (out / book_outputs.PLOTLY_JS).stat().st_size > 1_000_000  # the local plotly.js copy
    index = (out / "index.html").read_text(encoding="utf-8")
    order = [index.index(href) for href in (p.href for p in pages)]
    assert order == sorted(order)
    assert "00 · A chart" in index and "Charts teach runtime." in index
    assert "More text follows" not in index                       # first sentence only

    chart = (out / "notebooks/00_chart.html").read_text(encoding="utf-8")
    assert pages[0].charts == 1
    assert 'class="plotly-graph-div"' in chart and "Plotly.newPlot" in chart
    assert chart.count(f'src="../{book_outputs.PLOTLY_JS}"') == 1  # plotly.js once, local
    assert chart.index(f'src="../{book_outputs.PLOTLY_JS}"') < chart.index("</head>")
    assert "cdn.plot.ly" not in chart                              # stored CDN loaders dropped
    assert "<noscript>" in chart and "needs JavaScript" in chart
    assert 'href="../notebooks/01_widget.html"' in chart           # .ipynb links point to pages


def test_book_widget_note_and_png_fallback(sources, tmp_path):
    notebooks, labs = sources
    out = tmp_path / "book"
    pages = book.build_book(out, notebooks, labs, images=False)
    page = (out / "notebooks/01_widget.html").read_text(encoding="utf-8")
    assert pages[1].widgets == 1
    assert book_outputs.WIDGET_NOTE in page
    assert WIDGET["model_id"] not in page and book_outputs.WIDGET_MIME not in page
    assert f"data:image/png;base64,{PNG}" in page                  # static fallback uses the png
    labs_page = (out / "labs/lab1_kernels.html").read_text(encoding="utf-8")
    assert book_outputs.PLOTLY_JS not in labs_page                # no charts, no plotly.js


def test_book_excludes_solutions(sources, tmp_path):
    notebooks, labs = sources
    out = tmp_path / "book"
    pages = book.build_book(out, notebooks, labs, images=False)
    assert all("solutions" not in p.source.parts for p in pages)
    assert not (out / "labs" / "solutions").exists()
    assert not any("SOLUTION" in f.read_text(encoding="utf-8") for f in out.rglob("*.html"))


def test_book_cli_and_empty(sources, tmp_path, capsys):
    notebooks, labs = sources
    out = tmp_path / "cli"
    assert book.main(["--out", str(out), "--notebooks", str(notebooks), "--labs", str(labs),
                      "--only", "01", "--no-images"]) == 0
    assert sorted(p.name for p in out.rglob("*.html")) == ["01_widget.html", "index.html"]
    assert "1 pages" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no notebooks"):
        book.build_book(tmp_path / "none", tmp_path / "missing", tmp_path / "missing")


def test_book_from_real_notebooks_00_and_06(tmp_path):
    out = tmp_path / "book"
    pages = book.build_book(out, ROOT / "notebooks", ROOT / "labs", only=["00", "06"],
                            images=False)
    assert [p.source.name[:2] for p in pages] == ["00", "06"]
    assert pages[0].title.startswith("00") and pages[0].summary
    page = (out / pages[1].href).read_text(encoding="utf-8")
    assert pages[1].charts >= 1
    assert 'class="plotly-graph-div"' in page and "Plotly.newPlot" in page
    assert f'src="../{book_outputs.PLOTLY_JS}"' in page and (out / book_outputs.PLOTLY_JS).is_file()
    assert book_outputs.WIDGET_MIME not in page


def test_static_images_fall_back_to_a_note_without_a_browser(sources, tmp_path, monkeypatch):
    """No Chrome for kaleido: the book still builds, says why, and pages show the note."""
    import plotly.io as pio

    def no_browser(figures, paths, **kwargs):
        paths[0].write_text("<svg>partial</svg>")     # a half-written batch is cleaned up
        raise RuntimeError("Could not find Chrome\nmore detail")

    monkeypatch.setattr(pio, "write_images", no_browser)
    notebooks, labs = sources
    out = tmp_path / "book"
    lines: list[str] = []
    pages = book.build_book(out, notebooks, labs, log=lines.append)
    assert [p.images for p in pages] == [0, 0, 0]
    assert any(line.startswith("static images skipped (RuntimeError: Could not find Chrome)")
               for line in lines)
    assert not list(out.rglob("*.svg"))
    chart = (out / "notebooks/00_chart.html").read_text(encoding="utf-8")
    assert "needs JavaScript" in chart and ".svg" not in chart


def test_chart_figures_and_image_fallback_order(sources):
    notebooks, _ = sources
    nb = nbformat.read(notebooks / "01_widget.ipynb", as_version=4)
    assert book_outputs.chart_figures(nb) == [FIGURE]
    adapted, charts, _ = book_outputs.adapt_outputs(nb, images={1: "01_widget/chart-1.svg"})
    html = adapted.cells[1].outputs[1]["data"]["text/html"]
    assert charts == 1 and f"data:image/png;base64,{PNG}" in html and ".svg" not in html
    nb.cells[1].outputs[1]["data"].pop("image/png")          # no stored PNG: the drawn SVG
    adapted, _, _ = book_outputs.adapt_outputs(nb, images={1: "01_widget/chart-1.svg"})
    html = adapted.cells[1].outputs[1]["data"]["text/html"]
    assert '<img alt="chart (static image)" src="01_widget/chart-1.svg"' in html


def _math_notebook() -> nbformat.NotebookNode:
    from helpers.notebook import SETUP_CELL, colab_badge

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell(f"{colab_badge('notebooks/05_x.ipynb')}\n\n# 05 · Math\n\n"
                          "Inline $N \\times C$ and a price of 5 dollars.\n\n"
                          "$$y = \\sum_{k} x_k \\cdot w_k \\qquad \\tfrac{1}{2}$$\n\n"
                          "Code keeps `$HOME` and\n\n```bash\necho $PATH\n```"),
        new_code_cell(SETUP_CELL),
        new_code_cell("# NBVAL_IGNORE_OUTPUT\nx = 1\n# NBVAL_IGNORE_OUTPUT (round-off)\ny = 2\n"
                      "print('# NBVAL_SKIP stays in a string')", execution_count=1)]
    return nb


def test_formulas_become_mathml_and_the_page_loads_nothing_from_the_web(tmp_path):
    _write(tmp_path / "notebooks", "05_x.ipynb", _math_notebook())
    lines: list[str] = []
    (page,) = book.build_book(tmp_path / "book", tmp_path / "notebooks", tmp_path / "labs",
                              images=False, log=lines.append)
    body = (tmp_path / "book" / page.href).read_text()
    assert body.count("<math ") == 2 and 'display="block"' in body and "<mfrac>" in body
    assert 'alttext="N \\times C"' in body                   # the TeX stays, for copying
    assert "$$" not in body and "$N" not in body and "\\qquad" not in body.replace(
        'alttext="y = \\sum_{k} x_k \\cdot w_k \\qquad \\tfrac{1}{2}"', "")
    assert "$HOME" in body and "$PATH" in body               # code is not math
    assert "mathjax" not in body.lower() and "require.min.js" not in body
    assert "colab-badge.svg" not in body and ">Open in Colab</a>" in body
    assert not any("shown as TeX" in ln for ln in lines), lines


def test_setup_cell_is_folded_and_nbval_markers_are_removed():
    nb = book.fold_for_reading(_math_notebook())
    setup = nb.cells[1]
    assert setup.cell_type == "markdown" and setup.source.startswith("<details")
    assert "```python\n# Setup: run this cell first" in setup.source
    code = nb.cells[2].source
    assert "NBVAL_IGNORE_OUTPUT" not in code and code.startswith("x = 1\ny = 2\n")
    assert "'# NBVAL_SKIP stays in a string'" in code


def test_a_formula_the_converter_cannot_read_is_shown_as_tex_and_reported(tmp_path):
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# 05 · Bad\n\nBroken $\\frac{1}{$ here.")]
    _write(tmp_path / "notebooks", "05_bad.ipynb", nb)
    lines: list[str] = []
    book.build_book(tmp_path / "book", tmp_path / "notebooks", tmp_path / "labs", images=False,
                    log=lines.append)
    body = (tmp_path / "book" / "notebooks" / "05_bad.html").read_text()
    assert '<code class="book-tex">\\frac{1}{</code>' in body
    assert any("1 formulas shown as TeX" in ln and "\\\\frac{1}{" in ln for ln in lines), lines
    with pytest.raises(ValueError, match="frac"):
        book.tex_to_mathml("\\frac{1}{")


@pytest.mark.slow
def test_every_formula_of_the_notebooks_converts(tmp_path):
    lines: list[str] = []
    pages = book.build_book(tmp_path / "book", ROOT / "notebooks", ROOT / "labs", images=False,
                            log=lines.append, only=["05", "10", "11"])
    assert len(pages) == 3
    assert not [ln for ln in lines if "shown as TeX" in ln]
    counts = [(tmp_path / "book" / p.href).read_text().count("<math ") for p in pages]
    assert all(c > 10 for c in counts), counts

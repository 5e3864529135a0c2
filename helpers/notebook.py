"""Small conveniences for the notebooks: chart set-up and showing the workbook's own code.

Notebooks show the kernels from :mod:`helpers` rather than copying them, so what a learner
reads is what runs.
"""

from __future__ import annotations

import html
import inspect
import re
import textwrap
import warnings

from IPython import get_ipython
from IPython.display import Code, display

from helpers.device import backend
from helpers.figures import style

__all__ = [
    "COLAB_REPO",
    "SETUP_CELL",
    "colab_url",
    "colab_badge",
    "badge_target",
    "name_error_hint",
    "setup",
    "source_of",
    "show_source",
    "source_lines",
    "show_lines",
    "reveal",
    "reveal_html",
]

#: The workbook's public GitHub repository, "OWNER/REPO". A PLACEHOLDER: set it when publishing,
#: then run ``python -m tools.colab`` to rewrite every notebook's Colab badge and setup cell
#: (tests/test_colab.py checks that they all agree with this value).
COLAB_REPO = "gpu-cnn-workbook/gpu-cnn-workbook"

_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"

#: The first code cell of every notebook and lab. In Colab it fetches the workbook (once per
#: session), installs only what Colab lacks, never its torch (``tools/colab_bootstrap.py``, run
#: by path: nothing of the workbook is importable yet), and turns on Colab's widget manager;
#: elsewhere it only finds the repository's ``helpers`` by walking up from the notebook's folder
#: (labs/ is one level down, labs/solutions/ two).
SETUP_CELL = f"""\
# Setup: run this cell first (locally and in Google Colab).
import os, pathlib, subprocess, sys
if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
    # Colab: fetch the workbook, install what Colab lacks (never its own torch), enable widgets.
    repo = "{COLAB_REPO}"  # helpers.notebook.COLAB_REPO
    root = pathlib.Path("/content") / repo.split("/")[1]
    if not (root / "tools" / "colab_bootstrap.py").exists():  # not cloned yet, or cut short
        import shutil
        shutil.rmtree(root, ignore_errors=True)
        url = f"https://github.com/{{repo}}"
        subprocess.run(["git", "clone", "-q", "--depth", "1", url, str(root)], check=True)
    import runpy
    runpy.run_path(str(root / "tools" / "colab_bootstrap.py"))["bootstrap"](root)
    from google.colab import output
    output.enable_custom_widget_manager()
else:
    here = pathlib.Path.cwd().resolve()
    root = next((p for p in (here, *here.parents) if (p / "helpers").is_dir()), None)
if root is not None and str(root) not in sys.path:
    sys.path.insert(0, str(root))
import helpers  # decides, before numba.cuda is imported, whether kernels run on a GPU or in the simulator
from helpers import notebook
notebook.setup()"""


def colab_url(path: str) -> str:
    """The "Open in Colab" address of a notebook, ``path`` relative to the repository root."""
    return f"https://colab.research.google.com/github/{COLAB_REPO}/blob/main/{path}"


def colab_badge(path: str) -> str:
    """A Markdown "Open in Colab" badge for the notebook at ``path`` (relative to the root)."""
    return f"[![Open In Colab]({_BADGE_IMAGE})]({colab_url(path)})"


def badge_target(path: str) -> str:
    """The notebook a notebook's badge opens: itself, except that an instructor's solution
    (``labs/solutions/X``) opens the learners' lab ``labs/X``, whose title cell it repeats."""
    prefix = "labs/solutions/"
    return "labs/" + path[len(prefix):] if path.startswith(prefix) else path


def setup() -> None:
    """Prepare charts for this front end (JupyterLab, Colab, or a static export).

    On a GPU, also launch a trivial kernel first, and warn with the fix if the driver is too old
    for the CUDA that Numba compiles for (see :func:`helpers.device.backend.ptx_check`).
    """
    style.setup_notebook()
    problem = backend.ptx_check()
    if problem:
        warnings.warn(problem, backend.BackendWarning, stacklevel=2)
    shell = get_ipython()
    if shell is not None:   # a name used before the cell defining it ran: say what to run
        shell.set_custom_exc((NameError,), name_error_hint)


def name_error_hint(shell, etype, value, tb, tb_offset=None):
    """IPython's custom handler for a NameError (:meth:`set_custom_exc`): the usual traceback,
    then which cell to run. Running a lab's check cell before its TODO cell, or any cell after a
    kernel restart, raises one."""
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    name = getattr(value, "name", None) or "a name"
    hint = (f"`{name}` is not defined yet: run the cell that defines it first. In a lab that "
            f"is the TODO cell above this check; after a restart of the kernel, run the cells "
            f"from the top.")
    display({"text/html": f"<div style='border-left:4px solid #d62728;padding:0.4em 0.8em'>"
                          f"{_inline(hint)}</div>", "text/plain": hint}, raw=True)
    return None


def source_of(obj) -> str:
    """The Python source of a function, a Numba ``@cuda.jit`` kernel or ``@njit`` function.

    Raises:
        TypeError: ``obj`` has no retrievable Python source.
    """
    for attr in ("py_func", "fn", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if callable(inner):
            obj = inner
            break
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as exc:
        raise TypeError(f"no Python source for {obj!r}: {exc}") from exc


def show_source(*objs) -> None:
    """Display the source of each object, syntax-highlighted."""
    display(Code("\n\n".join(source_of(o) for o in objs), language="python"))


def source_lines(obj, first: str, last: str) -> str:
    """The lines of ``obj``'s source (:func:`source_of`) from the first line containing
    ``first`` through the next line containing ``last``, dedented: the few lines that matter.

    Raises:
        TypeError: no source. ValueError: ``first``, or ``last`` after it, not found.
    """
    lines = source_of(obj).splitlines()
    start = next((i for i, ln in enumerate(lines) if first in ln), None)
    if start is None:
        raise ValueError(f"no line of {getattr(obj, '__name__', obj)!r} contains {first!r}")
    end = next((i for i in range(start, len(lines)) if last in lines[i]), None)
    if end is None:
        raise ValueError(f"no line after {first!r} contains {last!r}")
    return textwrap.dedent("\n".join(lines[start:end + 1]))


def show_lines(obj, first: str, last: str) -> None:
    """Display :func:`source_lines` of ``obj``, syntax-highlighted."""
    display(Code(source_lines(obj, first, last), language="python"))



def _inline(text: str) -> str:
    """Escape ``text`` as HTML, then turn ``**bold**`` and ```code``` marks into tags."""
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def reveal_html(answer: str, why: str = "", guess: str | None = None,
                summary: str = "Answer: open when you have made your prediction") -> str:
    """The HTML of :func:`reveal`: a closed ``<details>`` element. Paragraphs of ``answer`` and
    ``why`` are separated by blank lines; ``**bold**`` and ```code``` are kept."""
    parts = []
    if guess:
        parts.append(f"<p>Your prediction: <b>{html.escape(str(guess))}</b>.</p>")
    for block in (answer, why):
        for paragraph in (p.strip() for p in block.split("\n\n")):
            if paragraph:
                parts.append(f"<p>{_inline(' '.join(paragraph.split()))}</p>")
    return (f"<details style='margin:0.4em 0;padding:0.4em 0.6em;border-left:4px solid #1f77b4'>"
            f"<summary style='cursor:pointer'><b>{html.escape(summary)}</b></summary>"
            f"{''.join(parts)}</details>")


def reveal(answer: str, why: str = "", guess: str | None = None,
           summary: str = "Answer: open when you have made your prediction") -> None:
    """Show the answer to a prediction, folded until the reader opens it.

    Notebooks ask the learner to predict a measurement, run it, then call this with an answer
    worked out from the numbers just measured (so it holds on any machine) and ``why``, the
    explanation of a likely miss. In JupyterLab, Colab and the book the text is hidden in a
    ``<details>`` element until clicked; plain-text front ends get the text after a heading.

    Args:
        answer: what the measurement shows, as text (blank lines separate paragraphs).
        why: why it comes out that way, and what a wrong prediction missed.
        guess: the learner's prediction, if the notebook asked for one in a variable; echoed.
        summary: the line shown while the answer is folded.
    """
    plain = [summary.split(":")[0] + ":"]
    if guess:
        plain.append(f"Your prediction: {guess}.")
    plain += [" ".join(re.sub(r"\*\*|`", "", p).split()) for block in (answer, why)
              for p in block.split("\n\n") if p.strip()]
    display({"text/html": reveal_html(answer, why, guess, summary),
             "text/plain": "\n".join(plain)}, raw=True)

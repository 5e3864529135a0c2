"""Small conveniences for the notebooks: chart set-up and showing the workbook's own code.

Notebooks show the kernels from :mod:`helpers` rather than copying them, so what a learner
reads is what runs.
"""

from __future__ import annotations

import inspect
import pathlib
import re
import textwrap
import warnings

__all__ = [
    "COLAB_REPO",
    "SETUP_CELL",
    "colab_url",
    "colab_badge",
    "badge_target",
    "sync_colab",
    "setup",
    "source_of",
    "show_source",
]

#: The workbook's public GitHub repository, "OWNER/REPO". A PLACEHOLDER: set it when publishing,
#: then run ``python -m helpers.notebook`` to rewrite every notebook's Colab badge and setup cell
#: (tests/test_colab.py checks that they all agree with this value).
COLAB_REPO = "gpu-cnn-workbook/gpu-cnn-workbook"

_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
_BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\s*$", re.MULTILINE)

#: The first code cell of every notebook and lab. In Colab it fetches the workbook (once per
#: session) and turns on Colab's widget manager; elsewhere it only finds the repository's
#: ``helpers`` by walking up from the notebook's folder (labs/ is one level down,
#: labs/solutions/ two).
SETUP_CELL = f"""\
# Setup: run this cell first (locally and in Google Colab).
import os, pathlib, subprocess, sys
if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
    # Colab: fetch the workbook and install what it needs (once per session), enable widgets.
    repo = "{COLAB_REPO}"  # helpers.notebook.COLAB_REPO
    root = pathlib.Path("/content") / repo.split("/")[1]
    if not root.exists():
        url = f"https://github.com/{{repo}}"
        subprocess.run(["git", "clone", "-q", "--depth", "1", url, str(root)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(root)], check=True)
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


def _notebook_paths(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(
        [*root.glob("notebooks/*.ipynb"), *root.glob("labs/*.ipynb"),
         *root.glob("labs/solutions/*.ipynb")]
    )


def sync_colab(root: str | pathlib.Path | None = None) -> list[pathlib.Path]:
    """Write :data:`SETUP_CELL` and a Colab badge (from :data:`COLAB_REPO`) into every notebook.

    Only the source of the first code cell and of the first Markdown cell change (the badge goes
    on the line after the title, replacing an existing badge; see :func:`badge_target` for the
    solutions); outputs are kept as stored.

    Returns:
        The notebooks rewritten.
    """
    import nbformat

    if root is None:
        root = pathlib.Path(__file__).resolve().parent.parent
    root = pathlib.Path(root)
    changed = []
    for path in _notebook_paths(root):
        nb = nbformat.read(path, as_version=4)
        code = next(c for c in nb.cells if c.cell_type == "code")
        md = next(c for c in nb.cells if c.cell_type == "markdown")
        badge = colab_badge(badge_target(path.relative_to(root).as_posix()))
        lines = [ln for ln in md.source.split("\n") if not _BADGE_LINE.match(ln)]
        if len(lines) > 1 and lines[1] == "" and (len(lines) < 3 or lines[2] == ""):
            del lines[1]  # the blank line left by a removed badge
        new_md = "\n".join([lines[0], "", badge, *lines[1:]])
        if code.source != SETUP_CELL or md.source != new_md:
            code.source, md.source = SETUP_CELL, new_md
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def setup() -> None:
    """Prepare charts for this front end (JupyterLab, Colab, or a static export).

    On a GPU, also launch a trivial kernel first, and warn with the fix if the driver is too old
    for the CUDA that Numba compiles for (see :func:`helpers.backend.ptx_check`).
    """
    from . import backend, plots

    plots.setup_notebook()
    problem = backend.ptx_check()
    if problem:
        warnings.warn(problem, backend.BackendWarning, stacklevel=2)


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
    from IPython.display import Code, display

    display(Code("\n\n".join(source_of(o) for o in objs), language="python"))


if __name__ == "__main__":
    for rewritten in sync_colab():
        print("rewrote", rewritten)

"""Small conveniences for the notebooks: chart set-up and showing the workbook's own code.

Notebooks show the kernels from :mod:`helpers` rather than copying them, so what a learner
reads is what runs.
"""

from __future__ import annotations

import inspect
import textwrap
import warnings

from IPython.display import Code, display

from helpers.device import backend
from helpers.figures import style

__all__ = [
    "COLAB_REPO",
    "SETUP_CELL",
    "colab_url",
    "colab_badge",
    "badge_target",
    "setup",
    "source_of",
    "show_source",
]

#: The workbook's public GitHub repository, "OWNER/REPO". A PLACEHOLDER: set it when publishing,
#: then run ``python -m tools.colab`` to rewrite every notebook's Colab badge and setup cell
#: (tests/test_colab.py checks that they all agree with this value).
COLAB_REPO = "gpu-cnn-workbook/gpu-cnn-workbook"

_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"

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


def setup() -> None:
    """Prepare charts for this front end (JupyterLab, Colab, or a static export).

    On a GPU, also launch a trivial kernel first, and warn with the fix if the driver is too old
    for the CUDA that Numba compiles for (see :func:`helpers.device.backend.ptx_check`).
    """
    style.setup_notebook()
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
    display(Code("\n\n".join(source_of(o) for o in objs), language="python"))


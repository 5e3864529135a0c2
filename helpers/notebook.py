"""Small conveniences for the notebooks: chart set-up and showing the workbook's own code.

Notebooks show the kernels from :mod:`helpers` rather than copying them, so what a learner
reads is what runs.
"""

from __future__ import annotations

import inspect
import textwrap

__all__ = ["setup", "source_of", "show_source"]


def setup() -> None:
    """Prepare charts for this front end (JupyterLab, Colab, or a static export)."""
    from . import plots

    plots.setup_notebook()


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

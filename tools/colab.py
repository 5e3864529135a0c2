"""Write the setup cell and the "Open in Colab" badge into every notebook and lab.

``python -m tools.colab``: run after changing :data:`helpers.notebook.COLAB_REPO` or
:data:`helpers.notebook.SETUP_CELL`; tests/test_colab.py checks that the notebooks agree.
"""

from __future__ import annotations

import pathlib
import re

import nbformat

from helpers.notebook import SETUP_CELL, badge_target, colab_badge

__all__ = ["sync_colab"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
_BADGE_LINE = re.compile(r"^\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\s*$", re.MULTILINE)


def _notebook_paths(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(
        [*root.glob("notebooks/*.ipynb"), *root.glob("labs/*.ipynb"),
         *root.glob("labs/solutions/*.ipynb")]
    )


def sync_colab(root: str | pathlib.Path | None = None) -> list[pathlib.Path]:
    """Write :data:`helpers.notebook.SETUP_CELL` and a Colab badge (from
    :data:`helpers.notebook.COLAB_REPO`) into every notebook.

    Only the source of the first code cell and of the first Markdown cell change (the badge goes
    on the line after the title, replacing an existing badge; see :func:`badge_target` for the
    solutions); outputs are kept as stored.

    Returns:
        The notebooks rewritten.
    """
    if root is None:
        root = ROOT
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


if __name__ == "__main__":
    for rewritten in sync_colab():
        print("rewrote", rewritten)

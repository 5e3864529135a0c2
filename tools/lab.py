"""Start the workbook's JupyterLab on the repository: ``make lab``.

The printed URL opens ``notebooks/00_start_here.ipynb`` (JupyterLab 4 redirects to its own
``LabApp.default_url``, so that is the one set). The configuration folder ``tools/jupyter_config/``
is added to ``JUPYTER_CONFIG_PATH``: the file browser hides build and packaging folders
(``build``, ``*.egg-info``), and JupyterLab neither asks about news nor checks for updates. These
are defaults only: a learner's own JupyterLab settings and ``~/.jupyter`` configuration win.

Usage: ``python -m tools.lab [--port 8888] [--no-browser] [other jupyter lab options ...]``
"""

from __future__ import annotations

import os
import pathlib
import sys

from jupyter_core.paths import jupyter_config_dir

__all__ = ["START_NOTEBOOK", "CONFIG_DIR", "arguments", "environment", "main"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The notebook the printed URL opens, relative to the served folder.
START_NOTEBOOK = "notebooks/00_start_here.ipynb"
#: Jupyter configuration for the workbook's JupyterLab (file browser, news, update checks).
CONFIG_DIR = ROOT / "tools" / "jupyter_config"


def arguments(root: pathlib.Path = ROOT, start: str = START_NOTEBOOK) -> list[str]:
    """``jupyter lab`` options serving ``root`` and opening ``start`` (a path under ``root``).

    Raises:
        FileNotFoundError: if ``root / start`` does not exist (checked before any server starts).
    """
    if not (pathlib.Path(root) / start).is_file():
        raise FileNotFoundError(f"start: {pathlib.Path(root) / start} does not exist")
    args = [f"--ServerApp.root_dir={root}", f"--LabApp.default_url=/lab/tree/{start}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # containers often run as root; JupyterLab refuses unless told
    return args


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default: this process's) with :data:`CONFIG_DIR` on
    ``JUPYTER_CONFIG_PATH``: behind the learner's own configuration folder (``~/.jupyter`` or
    ``JUPYTER_CONFIG_DIR``) and any ``JUPYTER_CONFIG_PATH`` already set, which Jupyter would
    otherwise rank below it, and ahead of the environment's and the system's."""
    env = dict(os.environ if env is None else env)
    user = env.get("JUPYTER_CONFIG_DIR") or jupyter_config_dir()
    rest = [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([user, *rest, str(CONFIG_DIR)])
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = [sys.executable, "-m", "jupyter", "lab", *arguments(), *argv]
    os.execve(sys.executable, cmd, environment())
    return 0  # not reached: the process is now JupyterLab


if __name__ == "__main__":
    raise SystemExit(main())

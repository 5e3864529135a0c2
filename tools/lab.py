"""Start the workbook's JupyterLab on the repository: ``make lab``.

A learner works in copies: the notebooks and labs (not the solutions) are copied into
``my-work/`` (ignored by git) when missing, so filling in a lab or running a notebook never
changes a tracked file and ``git pull`` always applies; an original updated since its copy is
named at start-up, the learner's copy left as it is. The printed URL opens
``my-work/notebooks/00_start_here.ipynb`` (JupyterLab 4 redirects to its own
``LabApp.default_url``, so that is the one set). The configuration folder ``tools/jupyter_config/``
is added to ``JUPYTER_CONFIG_PATH``: the file browser hides build and packaging folders
(``build``, ``*.egg-info``), and JupyterLab neither asks about news nor checks for updates. These
are defaults only: a learner's own JupyterLab settings and ``~/.jupyter`` configuration win.

Usage: ``python -m tools.lab [--port 8888] [--no-browser] [other jupyter lab options ...]``
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import sys

from jupyter_core.paths import jupyter_config_dir

__all__ = ["START_NOTEBOOK", "CONFIG_DIR", "WORK_DIR", "ORIGINALS", "arguments", "environment",
           "main", "prepare_work"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The learner's own copies of the notebooks and labs (ignored by git).
WORK_DIR = "my-work"
#: The folders whose notebooks are copied into :data:`WORK_DIR` (the solutions are not).
ORIGINALS = ("notebooks", "labs")
#: Where :func:`prepare_work` remembers each copy's original (its SHA-256 when copied).
_MANIFEST = ".originals.json"
#: The notebook the printed URL opens, relative to the served folder.
START_NOTEBOOK = f"{WORK_DIR}/notebooks/00_start_here.ipynb"
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


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prepare_work(root: pathlib.Path = ROOT) -> list[str]:
    """Copy every notebook of :data:`ORIGINALS` under ``root`` that has no copy yet into
    ``root / WORK_DIR`` (same relative path, so the notebooks' links between each other hold),
    and never touch a copy that exists.

    Returns:
        One line per notebook copied now and per original changed since its copy was made
        (compared by SHA-256 with the one recorded then), for the learner to read.
    """
    root = pathlib.Path(root)
    work = root / WORK_DIR
    manifest_path = work / _MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    copied, changed = [], []
    for folder in ORIGINALS:
        for original in sorted((root / folder).glob("*.ipynb")):
            rel = original.relative_to(root).as_posix()
            copy = work / rel
            if not copy.exists():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(original, copy)
                manifest[rel] = _sha256(original)
                copied.append(rel)
            elif manifest.get(rel) not in (None, _sha256(original)):
                changed.append(rel)
    work.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    lines = [f"copied {len(copied)} notebooks into {WORK_DIR}/ (your own copies: git pull "
             "never touches them)"] if copied else []
    lines += [f"{rel} was updated after you copied it: your {WORK_DIR}/{rel} is as you left it; "
              f"to start from the new version, rename or delete yours and run make lab again"
              for rel in changed]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for line in prepare_work():
        print(line, flush=True)
    cmd = [sys.executable, "-m", "jupyter", "lab", *arguments(), *argv]
    os.execve(sys.executable, cmd, environment())
    return 0  # not reached: the process is now JupyterLab


if __name__ == "__main__":
    raise SystemExit(main())

"""Start the workbook's JupyterLab on the learner's own copies: ``make lab``.

The notebooks and labs (not the solutions) are copied into ``my-work/`` (ignored by git) when
missing, and JupyterLab serves ``my-work/`` alone: the originals are out of reach, so running a
notebook never changes a tracked file and ``git pull`` applies. A copy leaves out nbval's marker
lines and has a one-line setup cell (the originals keep theirs: Colab opens them). An original
updated since its copy was made is named at start-up and in ``my-work/.updated_originals.txt``,
which notebook 00 prints; the copy is left as it is. The printed URL opens
``notebooks/00_start_here.ipynb`` (JupyterLab 4 redirects to ``LabApp.default_url``), and no tab
of an earlier session reopens (the workspace, ``my-work/.workspaces/``, is emptied at each start).
``tools/jupyter_config/`` is added to ``JUPYTER_CONFIG_PATH`` (no news, no update checks, build
folders hidden); a learner's own JupyterLab settings and ``~/.jupyter`` configuration win.

Usage: ``python -m tools.lab [--port 8888] [--no-browser] [other jupyter lab options ...]``
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import sys

from jupyter_core.paths import jupyter_config_dir

__all__ = ["START_NOTEBOOK", "CONFIG_DIR", "WORK_DIR", "ORIGINALS", "UPDATES", "WORKSPACES",
           "SETUP_MARK", "SETUP_LINE", "arguments", "environment", "learner_copy", "main",
           "plural", "prepare_work", "updated_originals"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The learner's own copies of the notebooks and labs (ignored by git): the served folder.
WORK_DIR = "my-work"
#: The folders whose notebooks are copied into :data:`WORK_DIR` (the solutions are not).
ORIGINALS = ("notebooks", "labs")
#: Where :func:`prepare_work` remembers each copy's original (its SHA-256 when copied).
_MANIFEST = ".originals.json"
#: The file in :data:`WORK_DIR` naming the originals updated since their copy was made
#: (written at each start; notebook 00 prints it).
UPDATES = ".updated_originals.txt"
#: JupyterLab's workspace folder in :data:`WORK_DIR` (open tabs), emptied at each start.
WORKSPACES = ".workspaces"
#: The notebook the printed URL opens, relative to the served folder :data:`WORK_DIR`.
START_NOTEBOOK = "notebooks/00_start_here.ipynb"
#: Jupyter configuration for the workbook's JupyterLab (file browser, news, update checks).
CONFIG_DIR = ROOT / "tools" / "jupyter_config"
#: The first line of every original's setup cell (``helpers.notebook.SETUP_CELL``).
SETUP_MARK = "# Setup: run this cell first"
#: The setup cell of a learner's copy: what the original's does outside Colab (``helpers`` is
#: installed in the environment, and imported before ``numba.cuda``).
SETUP_LINE = "from helpers import notebook; notebook.setup()  # run this cell first"
#: A line of nbval's markers (``# NBVAL_IGNORE_OUTPUT`` ...), as tools/book.py leaves them out.
_NBVAL_LINE = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+\b.*(\n|$)", flags=re.M)


def plural(count: int, noun: str) -> str:
    """``"1 notebook"``, ``"3 notebooks"``: ``count`` and ``noun``, plural unless one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def arguments(root: pathlib.Path = ROOT, start: str = START_NOTEBOOK) -> list[str]:
    """``jupyter lab`` options serving ``root / WORK_DIR`` (only the learner's copies) and
    opening ``start`` (a path under it) in a workspace kept in ``WORK_DIR / WORKSPACES``.

    Raises:
        FileNotFoundError: if ``root / WORK_DIR / start`` does not exist (checked before any
            server starts: :func:`prepare_work` makes it).
    """
    work = pathlib.Path(root) / WORK_DIR
    if not (work / start).is_file():
        raise FileNotFoundError(f"start: {work / start} does not exist")
    args = [f"--ServerApp.root_dir={work}", f"--LabApp.default_url=/lab/tree/{start}",
            f"--LabApp.workspaces_dir={work / WORKSPACES}"]
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


def learner_copy(original: bytes) -> bytes:
    """The learner's copy of a notebook (its file's bytes, nbformat 4 JSON): nbval's marker
    lines (``# NBVAL_...``) left out of every code cell, and the setup cell (the first code
    cell, starting with :data:`SETUP_MARK`) replaced by :data:`SETUP_LINE`. Outputs, metadata
    and every other line are kept. A file that is not a notebook is copied unchanged."""
    try:
        nb = json.loads(original)
    except ValueError:
        return original
    if not (isinstance(nb, dict) and nb.get("nbformat") == 4 and isinstance(nb.get("cells"), list)
            and all(isinstance(c, dict) for c in nb["cells"])):
        return original
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    for k, cell in enumerate(code):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if k == 0 and source.startswith(SETUP_MARK):
            source = SETUP_LINE
        source = _NBVAL_LINE.sub("", source)
        lines = source.split("\n")
        cell["source"] = [ln + "\n" for ln in lines[:-1]] + [ln for ln in lines[-1:] if ln]
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode()


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(work: pathlib.Path) -> dict[str, str]:
    try:
        manifest = json.loads((work / _MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def updated_originals(root: pathlib.Path = ROOT) -> list[str]:
    """The originals (paths relative to ``root``, in :data:`ORIGINALS` order) whose learner's
    copy exists and that changed since it was made (SHA-256 against the one recorded then)."""
    root = pathlib.Path(root)
    work, manifest = root / WORK_DIR, _manifest(root / WORK_DIR)
    return [rel for folder in ORIGINALS for original in sorted((root / folder).glob("*.ipynb"))
            if (rel := original.relative_to(root).as_posix()) in manifest
            and (work / rel).exists() and manifest[rel] != _sha256(original)]


def _updates_text(changed: list[str]) -> str:
    if not changed:
        return f"No notebook or lab has been updated since make lab copied it into {WORK_DIR}/.\n"
    return "".join(
        ["The original of each notebook or lab below was updated (by git pull) after make lab "
         f"copied it into {WORK_DIR}/; your copy is as you left it:\n"]
        + [f"  {rel}\n" for rel in changed]
        + [f"To start one afresh from the new version, rename or delete your copy in {WORK_DIR}/ "
           "and run make lab again.\n"])


def prepare_work(root: pathlib.Path = ROOT) -> list[str]:
    """Make ``root / WORK_DIR`` ready for a JupyterLab session: copy every notebook of
    :data:`ORIGINALS` that has no copy yet (same relative path, so the notebooks' links between
    each other hold; made by :func:`learner_copy`), never touch a copy that exists, write
    :data:`UPDATES` and empty :data:`WORKSPACES` (no tab of an earlier session reopens).

    Returns:
        One line for the notebooks copied now, if any, and one per original changed since its
        copy was made, for the learner to read in the terminal.
    """
    root = pathlib.Path(root)
    work = root / WORK_DIR
    manifest = _manifest(work)
    copied = []
    for folder in ORIGINALS:
        for original in sorted((root / folder).glob("*.ipynb")):
            rel = original.relative_to(root).as_posix()
            copy = work / rel
            if not copy.exists():
                copy.parent.mkdir(parents=True, exist_ok=True)
                data = original.read_bytes()
                copy.write_bytes(learner_copy(data))
                manifest[rel] = hashlib.sha256(data).hexdigest()
                copied.append(rel)
    work.mkdir(parents=True, exist_ok=True)
    (work / _MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    changed = updated_originals(root)
    (work / UPDATES).write_text(_updates_text(changed))
    shutil.rmtree(work / WORKSPACES, ignore_errors=True)
    lines = [f"copied {plural(len(copied), 'notebook')} into {WORK_DIR}/ (yours to change: "
             f"git pull never touches {WORK_DIR}/)"] if copied else []
    lines += [f"{rel} was updated after you copied it: your {WORK_DIR}/{rel} is as you left it "
              f"(notebook 00 lists it too); to start from the new version, rename or delete "
              f"yours and run make lab again" for rel in changed]
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

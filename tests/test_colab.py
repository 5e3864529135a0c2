import helpers  # noqa: F401

# Colab support: the shared first cell, the "Open in Colab" badges, and the driver/PTX check.

import os
import pathlib
import re
import subprocess
import sys
import types

import nbformat
import pytest

from helpers.device import backend
from helpers import notebook
from helpers.figures import style
from tools import colab

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(
    [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("labs/*.ipynb"),
     *ROOT.glob("labs/solutions/*.ipynb")]
)
BADGE = re.compile(
    r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]"
    r"\(https://colab\.research\.google\.com/github/([^/\s)]+/[^/\s)]+)/blob/main/([^)\s]+)\)"
)


def _first(nb, kind):
    return next(c for c in nb.cells if c.cell_type == kind)


def _read(path):
    return nbformat.read(path, as_version=4)


# ---------------------------------------------------------------------------- the first cell


def test_there_are_notebooks_and_labs():
    names = {p.parent.name for p in NOTEBOOKS}
    assert {"notebooks", "labs", "solutions"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_first_code_cell_is_the_shared_setup_cell(path):
    cell = _first(_read(path), "code")
    assert cell.source == notebook.SETUP_CELL
    assert cell.outputs == []  # the setup cell prints nothing


def test_setup_cell_names_the_colab_repo():
    assert f'repo = "{notebook.COLAB_REPO}"' in notebook.SETUP_CELL
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", notebook.COLAB_REPO)


def test_sync_colab_is_idempotent(tmp_path):
    for path in NOTEBOOKS[:2]:
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(path.read_bytes())
    assert colab.sync_colab(tmp_path) == []  # the stored notebooks are already in sync


class _Recorder:
    """Stands in for subprocess.run: records each command; ``git clone`` makes the clone (a link
    to this repository, so the cell finds tools/colab_bootstrap.py in it)."""

    def __init__(self):
        self.commands = []
        self.widget_manager_enabled = 0

    def run(self, cmd, *args, **kwargs):
        self.commands.append(list(cmd))
        if cmd[:2] == ["git", "clone"]:
            pathlib.Path(cmd[-1]).symlink_to(ROOT, target_is_directory=True)
        return subprocess.CompletedProcess(cmd, 0)

    def enable_custom_widget_manager(self):
        self.widget_manager_enabled += 1


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(subprocess, "run", rec.run)
    monkeypatch.setattr(subprocess, "check_call", rec.run)
    monkeypatch.setattr(notebook, "setup", lambda: None)  # charts are set up elsewhere in tests
    monkeypatch.setattr(sys, "path", list(sys.path))
    return rec


def _fake_colab(monkeypatch, rec):
    google = sys.modules.get("google") or types.ModuleType("google")
    colab = types.ModuleType("google.colab")
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = rec.enable_custom_widget_manager
    colab.output = output
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setattr(google, "colab", colab, raising=False)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)


class _Dist:
    def __init__(self, name, version):
        self.metadata, self.version = {"Name": name}, version


#: A fresh Colab GPU runtime: its own torch for a CUDA 12.4 driver, no numba-cuda, old widgets.
COLAB_PACKAGES = {"torch": "2.5.1+cu124", "torchvision": "0.20.1+cu124", "numpy": "2.0.2",
                  "numba": "0.60.0", "plotly": "5.24.1", "ipywidgets": "7.7.1",
                  "ipykernel": "6.17.1", "tqdm": "4.67.1", "psutil": "5.9.5",
                  "scikit-image": "0.25.2"}


class _Libcuda:
    def cuDriverGetVersion(self, ref):
        ref._obj.value = 12040  # CUDA 12.4
        return 0


def _colab_runtime(monkeypatch, gpu: bool):
    """What the bootstrap reads: Colab's installed packages, and a CUDA 12.4 driver or none."""
    import ctypes
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "distributions",
                        lambda: [_Dist(k, v) for k, v in COLAB_PACKAGES.items()])

    def cdll(name, *args, **kwargs):
        if gpu and name == "libcuda.so.1":
            return _Libcuda()
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", cdll)


def _content_is(monkeypatch, folder):
    """Make the cell's ``pathlib.Path("/content")`` mean ``folder``."""
    base = type(pathlib.Path())

    class _Path(base):
        def __new__(cls, *parts):
            if parts and str(parts[0]) == "/content":
                parts = (str(folder), *parts[1:])
            return super().__new__(cls, *parts)

    monkeypatch.setattr(pathlib, "Path", _Path)


def _pip_args(commands):
    return [c for c in commands if c[:4] == [sys.executable, "-m", "pip", "install"]]


@pytest.mark.parametrize("gpu", [True, False], ids=["T4 with a CUDA 12.4 driver", "CPU runtime"])
def test_colab_branch_clones_installs_what_is_missing_and_enables_widgets(
        monkeypatch, recorder, tmp_path, capsys, gpu):
    """The Colab branch of the first cell, run against a stand-in google.colab, a recorder for
    git and pip, and Colab's packages: it clones, installs only what is missing with the
    numba-cuda extra of the driver, never torch, then the workbook without its dependencies."""
    _fake_colab(monkeypatch, recorder)
    _content_is(monkeypatch, tmp_path)
    _colab_runtime(monkeypatch, gpu)
    namespace = {}
    exec(notebook.SETUP_CELL, namespace)

    target = str(tmp_path / notebook.COLAB_REPO.split("/")[1])
    assert recorder.commands[0] == [
        "git", "clone", "-q", "--depth", "1", f"https://github.com/{notebook.COLAB_REPO}", target]
    pip = _pip_args(recorder.commands)
    assert len(pip) == 2 == len(recorder.commands) - 1
    extra = "cu12" if gpu else "cu13"
    assert f"numba-cuda[{extra}]>=0.30" in pip[0] and "plotly>=6.0" in pip[0]
    assert not [a for c in pip for a in c if a.split("[")[0].split(">")[0] in
                ("torch", "torchvision")]
    assert pip[1] == [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", target]
    out = capsys.readouterr().out.splitlines()
    if not gpu:
        assert "Runtime > Change runtime type > T4 GPU" in out.pop(0)
    assert len(out) == 1 and out[0].startswith("Colab setup (")
    assert "keeping Colab's torch 2.5.1+cu124" in out[0]
    assert recorder.widget_manager_enabled == 1
    assert sys.path[0] == target
    assert namespace["helpers"] is helpers


def test_colab_branch_on_a_warm_runtime_installs_nothing(monkeypatch, recorder, tmp_path, capsys):
    """The next notebook in the same session: the clone is there and so is everything the
    workbook needs (this environment, with its CUDA 13 pieces, on a runtime without a GPU), so
    only the plan's line is printed."""
    import ctypes

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    _fake_colab(monkeypatch, recorder)
    (tmp_path / notebook.COLAB_REPO.split("/")[1]).symlink_to(ROOT, target_is_directory=True)
    _content_is(monkeypatch, tmp_path)
    exec(notebook.SETUP_CELL, {})
    assert recorder.commands == []
    assert "nothing to install" in capsys.readouterr().out
    assert recorder.widget_manager_enabled == 1


def test_colab_branch_clones_again_after_a_clone_cut_short(monkeypatch, recorder, tmp_path,
                                                          capsys):
    """A clone interrupted (or from before the installer existed) is replaced, not used."""
    import ctypes

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    _fake_colab(monkeypatch, recorder)
    partial = tmp_path / notebook.COLAB_REPO.split("/")[1]
    (partial / ".git").mkdir(parents=True)
    (partial / "README.md").write_text("half a clone\n")
    _content_is(monkeypatch, tmp_path)
    exec(notebook.SETUP_CELL, {})
    assert recorder.commands == [["git", "clone", "-q", "--depth", "1",
                                  f"https://github.com/{notebook.COLAB_REPO}", str(partial)]]
    assert os.path.islink(partial)  # the recorder's clone, not the half one
    assert "nothing to install" in capsys.readouterr().out


def test_colab_is_detected_by_module_or_environment_variable(monkeypatch):
    lines = notebook.SETUP_CELL.splitlines()
    line = next(ln for ln in lines if ln.startswith("if ") and "colab" in ln)
    condition = line[len("if "):].rstrip(":")
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert not eval(condition, {"sys": sys, "os": os})
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    assert eval(condition, {"sys": sys, "os": os})
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert eval(condition, {"sys": sys, "os": os})


@pytest.mark.parametrize("folder", ["notebooks", "labs", "labs/solutions"])
def test_local_branch_finds_the_repository_and_installs_nothing(monkeypatch, recorder, folder):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.chdir(ROOT / folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(ROOT)])
    namespace = {}
    exec(notebook.SETUP_CELL, namespace)
    assert recorder.commands == []
    assert recorder.widget_manager_enabled == 0
    assert namespace["root"] == ROOT
    assert sys.path[0] == str(ROOT)


# ---------------------------------------------------------------------------- badges


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_notebook_has_a_colab_badge_under_its_title(path):
    md = _first(_read(path), "markdown").source
    found = BADGE.findall(md)
    assert len(found) == 1, f"{path}: expected one Colab badge in the first Markdown cell"
    repo, target = found[0]
    assert repo == notebook.COLAB_REPO
    rel = path.relative_to(ROOT).as_posix()
    # Itself; an instructor's solution repeats its lab's title cell, so it opens the learners' lab.
    assert target == (rel.replace("labs/solutions/", "labs/") if "solutions" in rel else rel)
    assert md.split("\n")[2] == notebook.colab_badge(target)  # just under the title


def test_readme_badges_point_at_existing_notebooks():
    found = BADGE.findall((ROOT / "README.md").read_text())
    assert found, "README.md has no Open in Colab badge"
    for repo, target in found:
        assert repo == notebook.COLAB_REPO
        assert (ROOT / target).is_file(), target


def test_all_badges_point_at_existing_files():
    for path in [ROOT / "README.md", *NOTEBOOKS]:
        for repo, target in BADGE.findall(path.read_text()):
            assert repo == notebook.COLAB_REPO, path
            assert (ROOT / target).is_file(), f"{path}: badge for missing {target}"


# ---------------------------------------------------------------------------- the PTX check

PTX_ERROR = (
    "[222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION\n"
    "ptxas application ptx input, line 9; fatal   : Unsupported .version 8.5; "
    "current version is '8.4'"
)


def _raise(exc):
    def launch():
        raise exc

    return launch


def test_ptx_check_is_none_without_a_gpu(monkeypatch):
    monkeypatch.setattr(backend, "MODE", "simulator")
    launch = _raise(AssertionError("must not launch"))
    monkeypatch.setattr(backend, "_launch_trivial_kernel", launch)
    assert backend.ptx_check() is None


def test_ptx_check_explains_an_unsupported_ptx_version(monkeypatch):
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(backend, "_DRIVER_CUDA_VERSION", 12040)
    monkeypatch.setattr(backend, "_launch_trivial_kernel", _raise(RuntimeError(PTX_ERROR)))
    message = backend.ptx_check()
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in message
    assert "CUDA 12.4" in message
    assert 'pip install "numba-cuda[cu12]"' in message
    assert "restart" in message


def test_ptx_check_suggests_the_driver_major_version(monkeypatch):
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(backend, "_DRIVER_CUDA_VERSION", 13000)
    monkeypatch.setattr(backend, "_launch_trivial_kernel", _raise(RuntimeError(PTX_ERROR)))
    assert 'numba-cuda[cu13]' in backend.ptx_check()


def test_ptx_check_reports_other_failures_plainly(monkeypatch):
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(backend, "_launch_trivial_kernel", _raise(RuntimeError("out of memory")))
    message = backend.ptx_check()
    assert "out of memory" in message and "numba-cuda[" not in message


def test_ptx_check_is_none_when_the_launch_works(monkeypatch):
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(backend, "_launch_trivial_kernel", lambda: None)
    assert backend.ptx_check() is None


def test_setup_warns_with_the_fix(monkeypatch):
    monkeypatch.setattr(style, "setup_notebook", lambda: None)
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(backend, "_launch_trivial_kernel", _raise(RuntimeError(PTX_ERROR)))
    with pytest.warns(backend.BackendWarning, match="numba-cuda"):
        notebook.setup()


def test_setup_is_silent_in_the_simulator(monkeypatch, recwarn):
    monkeypatch.setattr(style, "setup_notebook", lambda: None)
    monkeypatch.setattr(backend, "MODE", "simulator")
    notebook.setup()
    assert not [w for w in recwarn if issubclass(w.category, backend.BackendWarning)]
